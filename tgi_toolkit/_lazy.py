"""Lazy re-exports: a package names what it offers without importing it until it is used.

Importing torch, pandas or aiohttp costs seconds; the CLI, the notebooks' first cell and modules
that only need a schema constant should not pay for what they never touch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` serving `names` (attribute -> module). A module name starting with
    '.' is relative to `package` (".results" is `package.results`)."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module, package), name)

    return __getattr__
