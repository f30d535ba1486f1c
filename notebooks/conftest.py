"""`pytest --nbval-lax notebooks/` (part of `make test` through pyproject's testpaths and addopts) runs
every notebook with its own defaults. Each starts a kernel and most start a server: mark them slow
so that the quick loop (`pytest -m "not slow"`) leaves them out."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.slow)
