"""`pytest notebooks/` (part of `make test` through pyproject's testpaths and addopts: nbval, comparing
outputs) runs every notebook with its own defaults. Each starts a kernel and most start a server: mark
them slow so that the quick loop (`pytest -m "not slow"`) leaves them out. They run with HF_HUB_OFFLINE=1,
as on a GPU host without internet. This file sits at the top of the checkout, not in notebooks/, so
that JupyterLab's file browser (`make lab`) shows the notebooks alone."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tgi_toolkit.engine.cli import passive_omp_wait

HERE = Path(__file__).resolve().parent / "notebooks"

# torch in pytest's own process (the runner, model, compile and probe tests) waits as the engine's processes do:
# passively, unless a wait variable is set. Spinning OpenMP threads took the cores a busy machine's other work
# needed: tests/test_engine_chunked.py beside two CPU burners had run 4 of its 7 tests at 400 s spinning, and took
# 64 s passive (20 s quiet, where passive costs about 5 %). Set before any test module imports torch.
passive_omp_wait()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.slow)


def _is_notebook(item: pytest.Item) -> bool:
    return HERE in Path(str(item.fspath)).resolve().parents


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    # Set before nbval's set-up of the notebook starts its kernel, which inherits this environment.
    previous = os.environ.get("HF_HUB_OFFLINE")
    if _is_notebook(item):
        os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if _is_notebook(item):
            if previous is None:
                os.environ.pop("HF_HUB_OFFLINE", None)
            else:
                os.environ["HF_HUB_OFFLINE"] = previous
