"""A server the toolkit starts never outlives the process that started it, even one killed with SIGKILL (issue 43).

Each test runs a real parent process: a small Python script that starts a server through the toolkit's API,
prints its pid and port, and waits. The test kills that parent with SIGKILL (no `finally`, no atexit, no
handler runs), then polls until the server and everything it started are gone and its port is free.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import pytest

from tests.standins.fixtures import no_leftover_processes, standins, tagged_processes  # noqa: F401
from tgi_toolkit.config.embedded import PARENT_PID_ENV
from tgi_toolkit.engine.lifeline import watch_parent
from tgi_toolkit.server.ports import port_is_free

GONE_WITHIN_S = 60  # a bound for a busy machine; a server that outlives its parent never goes

# The parent: starts the server from a thread that then ends (as the app's start thread does: the kernel's
# parent-death signal follows the forking thread, so this must not stop the server), then waits to be killed.
PARENT = """
import json, sys, threading, time
from tgi_toolkit.config import LauncherConfig
from tgi_toolkit.server import Server

server = Server(LauncherConfig(**json.loads(sys.argv[2])), backend=sys.argv[1], startup_progress=False,
                health_timeout=float(sys.argv[3]))
starter = threading.Thread(target=server.start)
starter.start()
starter.join()
print(json.dumps({"pid": server.pid, "port": server.port}), flush=True)
time.sleep(3600)
"""


@contextmanager
def parent_process(script: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *args], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def started_server(parent: subprocess.Popen[str]) -> tuple[psutil.Process, int]:
    line = parent.stdout.readline()
    assert line, f"the parent exited with {parent.wait()} before its server was healthy"
    started = json.loads(line)
    return psutil.Process(started["pid"]), started["port"]


def alive(proc: psutil.Process) -> bool:
    return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE


def wait_gone(procs: list[psutil.Process], timeout: float = GONE_WITHIN_S) -> list[psutil.Process]:
    """The processes still alive after `timeout` seconds (empty as soon as all are gone)."""
    deadline = time.monotonic() + timeout
    left = procs
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if alive(p)]
    return left


@pytest.mark.usefixtures("standins")
@pytest.mark.parametrize("backend", ["tgi", "tgi-docker", "vllm"])
def test_a_server_ends_when_its_parent_is_killed_with_sigkill(backend, no_leftover_processes):  # noqa: F811
    config = {"model_id": "org/standin-model", "max_total_tokens": 512, "max_input_tokens": 256}
    with parent_process(PARENT, backend, json.dumps(config), "30") as parent:
        server, port = started_server(parent)
        time.sleep(0.5)
        assert alive(server) and not port_is_free("127.0.0.1", port)  # the starting thread's end: no stop
        family = {p.pid: p for p in tagged_processes(no_leftover_processes)}  # launcher + shard; client + container
        assert server.pid in family and len(family) >= (1 if backend == "vllm" else 2)
        family = list(family.values())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert not wait_gone(family), "the server outlived its parent"
        assert port_is_free("127.0.0.1", port)


# -- the engine's own watch, alone (no parent-death signal: the child is started with plain Popen) ------------
WATCHED = """
import os, signal, sys, time
from tgi_toolkit.engine.lifeline import watch_parent
if sys.argv[1] == "ignore-sigterm":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
assert watch_parent(poll_s=0.1, grace_s=1.0) is not None
print("watching", flush=True)
time.sleep(3600)
"""
PARENT_OF_WATCHED = """
import json, os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, sys.argv[3]: str(os.getpid())})
assert child.stdout.readline() == "watching\\n"
print(json.dumps({"pid": child.pid, "port": 0}), flush=True)
child.wait()
"""


@pytest.mark.parametrize("mode", ["stops-on-sigterm", "ignore-sigterm"])
def test_the_engine_watch_ends_the_process_when_its_parent_dies(mode):
    # ignore-sigterm: a shutdown that does not end the process is cut short after the grace period
    with parent_process(PARENT_OF_WATCHED, WATCHED, mode, PARENT_PID_ENV) as parent:
        child, _ = started_server(parent)
        time.sleep(0.5)
        assert alive(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert not wait_gone([child]), "the watched process outlived its parent"


def test_an_engine_started_by_hand_is_not_watched():
    assert watch_parent({}) is None
    assert watch_parent({PARENT_PID_ENV: "not-a-pid"}) is None
    assert watch_parent({PARENT_PID_ENV: str(os.getpid())}) is None  # inherited: a live process, not the parent


@pytest.mark.slow
def test_the_embedded_engine_ends_when_its_notebook_kernel_is_killed():
    # The real engine and model, started as a notebook does; the kernel killed as papermill's timeout does.
    config = {"max_input_tokens": 100, "max_total_tokens": 200, "max_batch_prefill_tokens": 256,
              "max_concurrent_requests": 2}
    with parent_process(PARENT, "embedded", json.dumps(config), "300") as parent:
        server, port = started_server(parent)
        assert "tgi_toolkit.engine" in " ".join(server.cmdline())
        time.sleep(0.5)
        assert alive(server)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert not wait_gone([server]), "the engine outlived its parent"
        assert port_is_free("127.0.0.1", port)
