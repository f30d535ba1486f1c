"""tgi_toolkit: configure, launch, benchmark and sweep text-generation servers.

The heavy parts (torch, the engine) are imported lazily so that `import tgi_toolkit` stays cheap
for the CLI, the notebooks and the Space.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "LauncherConfig": "tgi_toolkit.config",
    "ConfigError": "tgi_toolkit.config",
    "Server": "tgi_toolkit.server",
}

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.config import ConfigError, LauncherConfig
    from tgi_toolkit.server import Server


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tgi_toolkit' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = ["ConfigError", "LauncherConfig", "Server", "__version__"]
