"""Fixtures for the server tests: stand-in executables on PATH, and no process left behind.

Import them into a test module (`from tests.standins.fixtures import ...`) to use them there;
`no_leftover_processes` is autouse in every module that imports it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

STANDINS = Path(__file__).resolve().parent


def tagged_processes(tag: str) -> list[psutil.Process]:
    """Live processes whose environment carries TGI_TOOLKIT_STANDIN_TAG=tag, wherever they sit in the tree."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("TGI_TOOLKIT_STANDIN_TAG") == tag and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


@pytest.fixture(autouse=True)
def no_leftover_processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """After the test, no child of ours and no process started by the test (even re-parented) is alive.

    Every process a test starts inherits a unique TGI_TOOLKIT_STANDIN_TAG, so one that escaped the
    process tree (a TGI shard orphaned by a SIGKILLed launcher, a Docker container) is still found.
    """
    tag = uuid.uuid4().hex
    monkeypatch.setenv("TGI_TOOLKIT_STANDIN_TAG", tag)
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    yield tag
    leftovers = {p.pid: p for p in me.children(recursive=True) if p.pid not in before}
    leftovers.update((p.pid, p) for p in tagged_processes(tag))
    described = [f"{p.pid} {' '.join(_cmdline(p))}" for p in leftovers.values()]
    for proc in leftovers.values():  # clean up for the next test, then fail this one
        with contextlib.suppress(psutil.Error):
            proc.kill()
    assert not described, "processes left behind:\n" + "\n".join(described)


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return ["?"]


@pytest.fixture
def standins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Stand-in `text-generation-launcher`, `docker` and `vllm` first on PATH (a machine with GPUs)."""
    monkeypatch.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("TGI_TOOLKIT_STANDIN_PYTHON", sys.executable)
    monkeypatch.setenv("TGI_TOOLKIT_STANDIN_DOCKER_STATE", str(tmp_path / "docker-state"))
    monkeypatch.setenv("TGI_TOOLKIT_STANDIN_DOCKER_GPUS", "1")  # the daemon has the NVIDIA runtime
    monkeypatch.setenv("TGI_TOOLKIT_STANDIN_DELAY", "0.2")
    # TGI_TOOLKIT_VLLM (`make test` sets it for the real vLLM's tests) would bypass the stand-in `vllm` on PATH.
    for var in ("TGI_TOOLKIT_STANDIN", "TGI_TOOLKIT_VLLM", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    return STANDINS
