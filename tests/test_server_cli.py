"""`tgi-toolkit launch`: foreground server from launcher flags; Ctrl-C stops it and all it started."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import httpx
import psutil
import pytest

from tests.standins.fixtures import no_leftover_processes, standins  # noqa: F401

pytestmark = pytest.mark.usefixtures("standins")


def _foreground_job() -> None:
    # A terminal's foreground job takes Ctrl-C. A suite run as a background job without job control (`make
    # test &` in a script) ignores SIGINT, and children inherit that: the launcher would never see it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def launch(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    # Its own session, like a shell job: the test plays the terminal and sends Ctrl-C to the group.
    return subprocess.Popen([sys.executable, "-m", "tgi_toolkit.cli", "launch", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})},
                            start_new_session=True, preexec_fn=_foreground_job)


def read_until(proc: subprocess.Popen, pattern: str, timeout: float = 30) -> tuple[re.Match, list[str]]:
    seen = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line.rstrip("\n"))
        if match := re.search(pattern, line):
            return match, seen
    raise AssertionError(f"{pattern!r} not printed; output:\n" + "\n".join(seen))


def test_launch_serves_until_ctrl_c_then_stops_everything():
    proc = launch("--backend", "tgi", "--model-id", "org/m", "--max-total-tokens", "512", "--grace", "2")
    try:
        match, seen = read_until(proc, r"Serving at (http://127\.0\.0\.1:\d+)")
        url = match.group(1)
        assert any("Connected" in line for line in seen)  # the server's log is echoed
        assert httpx.get(url + "/health").status_code == 200
        assert httpx.get(url + "/info").json()["max_total_tokens"] == 512
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rest = proc.stdout.read()
    assert "stopping" in rest and "Shutting down shards" in rest
    with pytest.raises(httpx.HTTPError):
        httpx.get(url + "/health", timeout=1)


def test_launch_stops_on_sigterm_too():
    proc = launch("--backend", "vllm", "--model-id", "org/m", "--quiet")
    try:
        read_until(proc, r"Serving at http://")
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_launch_reports_a_crash_at_start_and_exits_nonzero():
    proc = launch("--backend", "tgi", "--quiet", env={"TGI_TOOLKIT_STANDIN": "crash"})
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "exited during start-up" in out and "Error: ShardCannotStart" in out


def test_launch_exits_with_the_server_when_it_dies():
    proc = launch("--backend", "tgi", "--quiet")
    try:
        read_until(proc, r"Serving at http://")
        launcher = next(p for p in psutil.Process(proc.pid).children() if "tgi" in " ".join(p.cmdline()))
        os.kill(launcher.pid, signal.SIGKILL)
        assert proc.wait(10) == 1  # -9 is not a clean exit
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "server exited with code -9" in proc.stdout.read()


def test_launch_help_lists_its_options_and_the_launcher_flags():
    done = subprocess.run([sys.executable, "-m", "tgi_toolkit.cli", "launch", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0
    assert "--backend" in done.stdout and "--grace" in done.stdout
    assert "--max-total-tokens" in done.stdout


def test_launch_refuses_a_bad_config():
    done = subprocess.run([sys.executable, "-m", "tgi_toolkit.cli", "launch", "--backend", "tgi",
                           "--max-input-tokens", "2048", "--max-total-tokens", "1024"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "max_input_tokens" in done.stderr
