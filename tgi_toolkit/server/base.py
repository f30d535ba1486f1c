"""What every backend shares: the error type, the backend interface, what a started server answers to
(`ServerHandle`, the interface the benchmark and the calibration take), and one managed process.

A `ManagedProcess` runs a command in its own process group (so a Ctrl-C in a notebook or terminal
does not reach it, and one signal reaches everything it started), tied to this process's life (lifeline.py:
it gets SIGTERM when this process dies, however it dies), copies its merged stdout and
stderr line by line to a log file, an in-memory tail and an optional callback, and stops it:
SIGTERM to the group, SIGKILL after a grace period, then the same for any descendant that lives in
a group of its own (TGI's launcher puts each shard and the router in their own group).
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import psutil

from tgi_toolkit.config.embedded import PARENT_PID_ENV
from tgi_toolkit.server.capacity_log import ANSI, log_number
from tgi_toolkit.server.lifeline import spawn

if TYPE_CHECKING:
    import httpx

    from tgi_toolkit.config.launcher import LauncherConfig

TAIL_LINES = 30  # log lines an error carries
# Bounded, not wait(): SIGTERM's handler (server.py) may stop a server on a main thread it interrupted inside
# Popen.poll or wait, which holds the lock an unbounded wait() takes: that wait would be on itself, forever.
REAP_WITHIN_S = 10.0


class ServerHandle(Protocol):
    """A started server as the benchmark, the simulator's calibration and the planner's comparison use it (`Server` is
    one): where it answers, which backend runs it, the launcher settings it was given, its process and what its
    start-up log said (`facts`: the KV capacity, limits)."""

    backend: str
    config: Any  # the LauncherConfig it was started with (None for a server the toolkit did not start)
    facts: dict[str, Any]

    @property
    def url(self) -> str: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def running(self) -> bool: ...


class ServerError(RuntimeError):
    """A server that could not start, crashed, or never became healthy.

    `exit_code` is the process's exit status (None while it runs or for an attached server;
    negative: killed by that signal), `log_tail` its last log lines, `log_path` the full log.
    """

    def __init__(self, message: str, *, exit_code: int | None = None, log_tail: Iterable[str] = (),
                 log_path: Path | None = None) -> None:
        self.message = message
        self.exit_code = exit_code
        self.log_tail = list(log_tail)
        self.log_path = log_path
        super().__init__(message)

    def __str__(self) -> str:
        parts = [self.message]
        if self.exit_code is not None:
            parts.append(f"exit code: {self.exit_code}")
        if self.log_path is not None:
            parts.append(f"log: {self.log_path}")
        if self.log_tail:
            parts.append(f"last {len(self.log_tail)} log lines:\n" + "\n".join(self.log_tail))
        return "\n".join(parts)


class Backend:
    """How one kind of server is started, checked and asked about itself.

    Subclasses set `name` and override `command`; the rest has TGI's behaviour by default.
    """

    name = "base"
    executable: str | None = None  # must be on PATH for `command` to run
    health_path = "/health"
    default_health_timeout = 600.0  # a first start may download weights
    # fact name -> log line pattern; the first group is the value (a count with or without separators, a decimal).
    # What a server says of its KV capacity is matched with capacity_log's patterns, which the planner reads too.
    fact_patterns: dict[str, re.Pattern[str]] = {}
    ready_pattern: re.Pattern[str] | None = None  # the line saying the server answers

    def command(self, config: LauncherConfig, host: str, port: int, env: dict[str, str]) -> list[str]:
        raise NotImplementedError

    def info(self, client: httpx.Client) -> dict[str, Any]:
        """The server's /info as a dict (TGI's keys)."""
        response = client.get("/info")
        response.raise_for_status()
        return response.json()

    def before_stop(self, grace: float) -> None:
        """Stop what the process group does not hold (a Docker container); called before SIGTERM."""

    def parse_line(self, line: str, facts: dict[str, Any]) -> None:
        line = ANSI.sub("", line)
        for name, pattern in self.fact_patterns.items():
            match = pattern.search(line)
            if match:
                facts[name] = log_number(match.group(1))
        if "args_line" not in facts and (start := line.find("Args {")) >= 0:
            facts["args_line"] = line[start:]
        if self.ready_pattern is not None and self.ready_pattern.search(line):
            facts["ready"] = True


class ManagedProcess:
    """One command in its own process group, its output copied to a file, a tail and a callback."""

    def __init__(self, argv: list[str], *, env: dict[str, str], log_path: Path,
                 on_line: Callable[[str], None] | None = None, tail_lines: int = 5000) -> None:
        self.argv = argv
        self.log_path = log_path
        self._on_line = on_line
        self._tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._tail_lock = threading.Lock()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab", buffering=0)  # noqa: SIM115 - closed by the reader thread
        try:
            # It ends with this process, even a SIGKILLed one (lifeline): the kernel's parent-death signal,
            # and the pid the embedded engine watches.
            self.popen = spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               env={**env, PARENT_PID_ENV: str(os.getpid())}, start_new_session=True)
        except BaseException:
            self._log.close()
            raise
        self.pgid = self.popen.pid  # start_new_session: the child leads its own group
        self.stopped = False
        # Every descendant seen so far: one that left the tree (its parent died) is still ours to stop.
        self._known: dict[int, psutil.Process] = {}
        self.track()
        self._reader = threading.Thread(target=self._read, name=f"log-reader-{self.popen.pid}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def _read(self) -> None:
        assert self.popen.stdout is not None
        try:
            for raw in iter(self.popen.stdout.readline, b""):
                self._log.write(raw)
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                with self._tail_lock:
                    self._tail.append(line)
                if self._on_line is not None:
                    # A failing callback must not stop the copy to the log (or block the pipe).
                    with contextlib.suppress(Exception):
                        self._on_line(line)
        finally:
            self._log.close()
            self.popen.stdout.close()

    def tail(self, n: int | None = None) -> list[str]:
        with self._tail_lock:
            lines = list(self._tail)
        return lines if n is None else lines[-n:] if n > 0 else []

    def wait_output(self, timeout: float) -> None:
        """Wait until the output is fully read (every writer closed its end) or `timeout` passes."""
        self._reader.join(timeout)

    def track(self) -> None:
        """Remember the current descendants (whatever their process group); call it now and then."""
        if not self.alive():
            return
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.popen.pid)
            for proc in root.children(recursive=True):
                self._known.setdefault(proc.pid, proc)

    def stop(self, grace: float) -> int | None:
        """SIGTERM the group; SIGKILL what is left after `grace` s; reap; return the exit code (None: not reaped)."""
        if self.stopped:
            return self.popen.returncode
        self.stopped = True
        deadline = time.monotonic() + max(grace, 0.0)
        self.track()
        if self.alive():
            _signal_group(self.pgid, signal.SIGTERM)
        # Descendants in groups of their own are the main process's job while it lives
        # (TGI's launcher stops its shards); only those it leaves behind get our signals. When it
        # is already dead (crashed, or SIGKILLed) nobody else will tell its orphans to stop, so
        # they get SIGTERM from us at once and the rest of the grace period to exit cleanly.
        orphans_told = False
        while time.monotonic() < deadline:
            if self.alive():
                self.track()
            else:
                orphans = _live(self._known.values())
                if not orphans:
                    break
                if not orphans_told:
                    for proc in orphans:
                        with contextlib.suppress(psutil.Error):
                            proc.terminate()
                    orphans_told = True
            time.sleep(0.05)
        if self.alive():
            _signal_group(self.pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(REAP_WITHIN_S)
        _signal_group(self.pgid, signal.SIGKILL)  # stragglers that stayed in the group
        survivors = _live(self._known.values())
        for proc in survivors:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        # Not our children, so no wait(): poll until each is gone or a zombie its new parent will reap.
        until = time.monotonic() + 5
        while survivors and time.monotonic() < until:
            time.sleep(0.02)
            survivors = _live(survivors)
        self.wait_output(5)
        return self.popen.returncode


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _live(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    out = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
    return out
