"""A server the toolkit starts ends with the process that started it, even one killed with SIGKILL (a notebook
kernel, papermill's timeout, a sweep's driver), where no `finally`, atexit or signal handler runs.

On Linux each server runs with PR_SET_PDEATHSIG: the kernel sends it SIGTERM when its parent dies, and it stops
as it does for `Server.stop()` (TGI's launcher stops its shards, the docker client its container). Run as a
script, this file is the small launcher that sets that signal and then execs the server's command: same pid,
same process group, nothing of the launcher left. The kernel ties the signal to the *thread* that forked the
child, not to the process, so a server started from a short-lived thread (the app's start thread, a thread
pool) would get SIGTERM when that thread ends: `spawn` forks every server from one daemon thread that lives as
long as the process. The embedded engine also watches its parent itself (tgi_toolkit.engine.lifeline), which
holds on every system.

This file imports nothing outside the standard library: the launcher runs it by path with `python -I -S`.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PDEATHSIG_SUPPORTED = sys.platform.startswith("linux")

_jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] | None = None
_jobs_lock = threading.Lock()


def launcher_argv(argv: list[str], parent_pid: int) -> list[str]:
    """`argv` run through this file's launcher: SIGTERM to it when `parent_pid` (the forking thread) ends."""
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), str(parent_pid), "--", *argv]


def spawn(argv: list[str], **popen: Any) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(argv, **popen)`; on Linux through the launcher, forked by the spawner thread."""
    if not (PDEATHSIG_SUPPORTED and sys.executable):
        return subprocess.Popen(argv, **popen)
    wrapped = launcher_argv(argv, os.getpid())
    future: Future[subprocess.Popen[bytes]] = Future()
    _spawner().put((lambda: subprocess.Popen(wrapped, **popen), future))
    try:
        return future.result()
    except BaseException:
        future.add_done_callback(_kill_unclaimed)  # interrupted while it forked: nobody will stop it
        raise


def _kill_unclaimed(future: Future[subprocess.Popen[bytes]]) -> None:
    if future.exception() is None:
        proc = future.result()
        proc.kill()
        proc.wait()


def _spawner() -> queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]]:
    global _jobs
    with _jobs_lock:
        if _jobs is None:
            jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
            threading.Thread(target=_serve_jobs, args=(jobs,), name="tgi-toolkit-spawner", daemon=True).start()
            _jobs = jobs
        return _jobs


def _serve_jobs(jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]]) -> None:
    while True:
        job, future = jobs.get()
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(job())
        except BaseException as exc:  # handed to the caller, which raises it
            future.set_exception(exc)


def _forget_spawner() -> None:
    global _jobs
    _jobs = None  # a forked child has no spawner thread: the next spawn starts its own


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_spawner)


def _launch(args: list[str]) -> None:
    """The launcher: `PARENT_PID -- COMMAND...`: set the parent-death signal, then become COMMAND."""
    import ctypes
    import signal

    parent, command = int(args[0]), args[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        print(f"tgi-toolkit: prctl(PR_SET_PDEATHSIG) failed ({os.strerror(ctypes.get_errno())}): this server "
              f"will not stop by itself when pid {parent} dies", file=sys.stderr, flush=True)
    if os.getppid() != parent:  # it died before the signal was set: nobody would send it now
        print(f"tgi-toolkit: pid {parent}, which started this server, is gone: not starting it", file=sys.stderr,
              flush=True)
        sys.exit(1)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"tgi-toolkit: cannot run {command[0]}: {exc}", file=sys.stderr, flush=True)
        sys.exit(127)


if __name__ == "__main__":
    _launch(sys.argv[1:])
