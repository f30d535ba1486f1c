"""What a request yields: its token events, its final `Finish` and its generation error. The backend makes them,
the engine streams them, the API renders them; kept apart so those share them without importing one another."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Token:
    id: int
    text: str
    logprob: float | None
    special: bool


@dataclass
class Finish:
    reason: str  # "length" | "eos_token" | "stop_sequence"
    generated_text: str
    generated_tokens: int
    seed: int | None
    input_length: int
    queued: float  # seconds in the queue
    inference: float  # seconds from batching to the last token
    prefill: list[Token] = field(default_factory=list)
    tokens: list[Token] = field(default_factory=list)
    top_tokens: list[list[Token]] = field(default_factory=list)
    logprob_sum: float = 0.0


@dataclass
class Event:
    index: int
    token: Token
    top_tokens: list[Token]
    finish: Finish | None = None


class GenerationError(RuntimeError):
    """The model failed mid-request (TGI's 424 `generation`)."""


class Delivery:
    """How one forward's token events reach their requests: together, in one `call_soon_threadsafe` on the
    event loop that streams them (`loop`, bound by the engine when a request first streams), or at once
    while there is none (tests driving the backend directly). Each wake-up of the loop takes a core
    from the matmul threads, so one per forward rather than one per token."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        # the loop thread's CPU clock and that thread, where the platform has per-thread clocks
        self._clock: tuple[int, threading.Thread] | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Stream through `loop`, the running loop of the calling thread (the front end's)."""
        if loop is not self.loop:
            getclock = getattr(time, "pthread_getcpuclockid", None)  # Linux and most Unixes, not macOS
            self._clock = (getclock(threading.get_ident()), threading.current_thread()) if getclock else None
            self.loop = loop

    def frontend_cpu_s(self) -> float | None:
        """The CPU seconds the front end's thread has run so far (None where none is bound or the platform cannot
        tell): over a forward, how long the front end's Python, which shares the compute thread's GIL, ran beside
        it."""
        if self._clock is None:
            return None
        clock, thread = self._clock
        try:
            seconds = time.clock_gettime(clock)
        except OSError:  # the loop's thread has ended (a loop bound in a thread that is gone): unknown, not an error
            return None
        # An ended thread's clock may still read (join returns before the kernel reaps it; a new thread may take its
        # id), so the thread must be alive after the read.
        return seconds if thread.is_alive() else None

    def __call__(self, events: list[tuple[Callable[[Any], None], Any]]) -> None:
        if events and self.loop is not None:
            self.loop.call_soon_threadsafe(_run_all, events)
        else:
            _run_all(events)


def _run_all(events: list[tuple[Callable[[Any], None], Any]]) -> None:
    for emit, event in events:
        emit(event)
