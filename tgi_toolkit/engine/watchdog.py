"""Where a long forward is: the compute thread's Python stack, logged while a forward runs past a threshold
(TGI_TOOLKIT_STALL_MS). The forward trace says how long a forward took and how its seconds split (runner, token
choice, collector, compiles); this says what its thread was doing meanwhile, which no kernel timing shows: on the
H200 of 2026-11-28 one prefill forward of the users' ramp took about 1 s with the card idle and the front end
answering, and nothing recorded where it was."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from types import FrameType

log = logging.getLogger("tgi_toolkit.engine")

# How many of the innermost frames a log line names, and how many lines one forward may log.
FRAMES = 10
MOST_PER_FORWARD = 10


class StallWatch:
    """A daemon thread that looks at the forward in progress every half threshold, and logs the running thread's
    stack each time that forward has run another threshold (at most `MOST_PER_FORWARD` times). The forward's
    side costs two attribute writes (`begin`, `end`): no lock, no wake-up, so it can stay on while measuring."""

    def __init__(self, threshold_s: float) -> None:
        if not threshold_s > 0:
            raise ValueError(f"threshold_s must be positive, got {threshold_s}")
        self.threshold_s = threshold_s
        self.logged = 0  # lines logged, over the process's life
        # (forward number, what it is, its thread, when it began); None between forwards. Written by the forward's
        # thread alone, read by the watch: one reference assignment, atomic under the GIL.
        self._current: tuple[int, str, int, float] | None = None
        self._count = 0
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="stall-watch", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop watching (the engine's watch lasts as long as its process; a test's does not)."""
        self._closed.set()
        self._thread.join()

    def begin(self, what: str) -> None:
        self._count += 1
        self._current = (self._count, what, threading.get_ident(), time.perf_counter())

    def end(self) -> None:
        self._current = None

    def _loop(self) -> None:
        seen, reported = 0, 0  # the forward last looked at, and how many thresholds of it were logged
        while not self._closed.wait(self.threshold_s / 2):
            current = self._current
            if current is None:
                continue
            number, what, thread, began = current
            if number != seen:
                seen, reported = number, 0
            ran = time.perf_counter() - began
            if ran < (reported + 1) * self.threshold_s or reported >= MOST_PER_FORWARD:
                continue
            reported = int(ran / self.threshold_s)
            frame = sys._current_frames().get(thread)
            if frame is None or self._current is not current:
                continue
            self.logged += 1
            log.warning("A forward (%s) has run %.0f ms; its thread is in: %s", what, ran * 1e3, where(frame))


def where(frame: FrameType) -> str:
    """The innermost `FRAMES` frames of a stack, innermost first: `file:line function`, joined by ' <- '."""
    stack = traceback.extract_stack(frame)[-FRAMES:]
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(stack))


def from_environment(name: str) -> StallWatch | None:
    """The watch the variable `name` asks for (milliseconds, a positive number), or None where it is unset or
    empty; any other value is a ValueError naming the variable and what it takes."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        ms = float(value)
    except ValueError:
        ms = float("nan")
    if not ms > 0:
        raise ValueError(f"{name}: {value!r} is not a number of milliseconds above 0 (e.g. 300); unset it to "
                         "log no stalls")
    return StallWatch(ms / 1e3)
