"""Shared fixtures: one real embedded-engine process for the whole session, and a helper to start more."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

# Small limits keep the session engine's warm-up and tests quick on a 2-core CPU.
ENGINE_ARGS = ["--max-input-tokens", "1000", "--max-total-tokens", "1200", "--max-batch-prefill-tokens", "2048",
               "--max-concurrent-requests", "64"]


def in_process_api(model: object, tokenizer: object, *, max_total_tokens: int = 1000) -> tuple[object, object]:
    """The engine and its HTTP app in this process, over a stand-in model and tokenizer (no server process):
    a prefill budget of 100 tokens, 1,000 KV tokens, prompts of up to 50 tokens, 8 concurrent requests."""
    from tgi_toolkit.engine.api import Api, ServerInfo
    from tgi_toolkit.engine.infer import Engine
    from tgi_toolkit.engine.metrics import Metrics
    from tgi_toolkit.engine.validation import RequestLimits
    from tgi_toolkit.router import SchedulerConfig

    metrics = Metrics()
    engine = Engine(model, SchedulerConfig(max_batch_prefill_tokens=100, max_batch_total_tokens=1000), metrics)
    api = Api(engine, tokenizer, RequestLimits(max_input_tokens=50, max_total_tokens=max_total_tokens),
              ServerInfo(model_id="m", model_sha=None, max_concurrent_requests=8, max_client_batch_size=1,
                         validation_workers=1), metrics)
    return engine, api


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EngineProcess:
    def __init__(self, proc: subprocess.Popen, url: str, log_path: Path) -> None:
        self.proc, self.url, self.log_path = proc, url, log_path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.contextmanager
def engine_process(*args: str, env: dict[str, str] | None = None, timeout: float = 180.0,
                   tmp: Path | None = None) -> Iterator[EngineProcess]:
    """Start `python -m tgi_toolkit.engine` on a free port; stop it (SIGTERM) afterwards. It is tied to this
    process as Server ties its servers (lifeline's parent-death signal, the pid the engine watches): a pytest
    killed with SIGKILL, where no `finally` runs, leaves no engine behind."""
    from tgi_toolkit.config.embedded import PARENT_PID_ENV
    from tgi_toolkit.server.lifeline import spawn

    port = free_port()
    log_dir = tmp or Path(os.environ.get("TMPDIR", "/tmp"))
    log_path = log_dir / f"engine-{port}.log"
    with open(log_path, "wb") as log:
        proc = spawn([sys.executable, "-m", "tgi_toolkit.engine", "--port", str(port), *args],
                     stdout=log, stderr=subprocess.STDOUT,
                     env={**os.environ, **(env or {}), PARENT_PID_ENV: str(os.getpid())}, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    handle = EngineProcess(proc, url, log_path)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"engine exited with {proc.returncode}:\n{handle.log()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"engine not healthy after {timeout}s:\n{handle.log()[-3000:]}")
            time.sleep(0.2)
        yield handle
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="session")
def engine() -> Iterator[EngineProcess]:
    with engine_process(*ENGINE_ARGS) as handle:
        yield handle


@pytest.fixture(scope="session")
def engine_url(engine: EngineProcess) -> str:
    return engine.url


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every Server.start() call of this process: the LauncherConfig each server was started with."""
    from tgi_toolkit.server import Server

    started: list = []
    real = Server.start

    def counting(self):  # Server.start, counted
        started.append(self.config)
        return real(self)

    monkeypatch.setattr(Server, "start", counting)
    return started
