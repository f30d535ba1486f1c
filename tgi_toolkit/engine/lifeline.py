"""The engine ends when the process that started it is gone, even one killed with SIGKILL.

tgi_toolkit.server starts the engine with TGI_TOOLKIT_PARENT_PID, its own pid. When the engine's parent pid is
no longer that one (the parent died and the engine was re-parented), the engine shuts down as on SIGTERM, and
exits at once if that has not ended it `grace_s` later. On Linux the kernel's parent-death signal
(tgi_toolkit.server.lifeline) does the same sooner; this watch holds on every system. An engine started by
hand (`tgi-toolkit serve`, `nohup`) has no such variable and is never watched.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Mapping

from tgi_toolkit.config.embedded import PARENT_PID_ENV

log = logging.getLogger(__name__)


def watch_parent(environ: Mapping[str, str] = os.environ, poll_s: float = 0.5,
                 grace_s: float = 10.0) -> threading.Thread | None:
    """Start the watch (a daemon thread) when `environ` names the parent; None when it names none."""
    raw = environ.get(PARENT_PID_ENV, "")
    if not raw.isdigit():
        return None
    parent = int(raw)
    if os.getppid() != parent and _alive(parent):
        return None  # the variable came from further up (it was inherited): this process is not its child
    thread = threading.Thread(target=_watch, args=(parent, poll_s, grace_s), name="parent-watch", daemon=True)
    thread.start()
    return thread


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch(parent: int, poll_s: float, grace_s: float) -> None:
    while os.getppid() == parent:
        time.sleep(poll_s)
    with contextlib.suppress(Exception):  # its stdout was a pipe to the parent, gone now
        log.warning("Shutting down: pid %d, which started this server, is gone", parent)
    os.kill(os.getpid(), signal.SIGTERM)  # the clean path: uvicorn's shutdown, the engine's stop
    time.sleep(grace_s)
    os._exit(1)
