"""What the router asks of the world around it: the model side (`ModelSide`), time (`Clock`) and whoever
watches it (`Observer`). The engine passes its model and `time.perf_counter`; tests pass stand-ins; the
simulator passes a cost model and a virtual clock."""

from __future__ import annotations

import time
from typing import Protocol

from tgi_toolkit.router.batch import Entry, Forward


class Clock(Protocol):
    def now(self) -> float: ...


class MonotonicClock:
    def now(self) -> float:
        return time.perf_counter()


WALL = MonotonicClock()



class ModelSide(Protocol):
    """What the scheduler asks of the model side."""

    def forward(self, forward: Forward) -> None:
        """Compute every row; for each emitting row choose a token, and set `entry.finished` when it stops."""

    def release(self, entry: Entry) -> None:
        """Free the model side's state of an entry that left the batch."""


class Observer:
    """Metrics and timing hooks; every method is a no-op here, so observers override what they need."""

    def dropped(self, entry: Entry) -> None: ...
    def queued(self, size: int) -> None: ...
    def batch_state(self, size: int, max_tokens: int, queue_size: int) -> None: ...
    def forward(self, method: str, size: int, seconds: float, tokens: int = 0) -> None: ...
    def ran(self, forward: Forward, seconds: float) -> None: ...  # the forward itself, for a trace
    def next_batch(self, size: int) -> None: ...
    def concat(self, reason: str) -> None: ...
    def allocation(self, prefix_len: int, suffix_len: int) -> None: ...
    def prefix(self, lookup_tokens: int, hit_tokens: int) -> None: ...
    def computed(self, prompt_tokens: int) -> None: ...
    def emitted(self, entry: Entry, now: float) -> None: ...
    def failed(self, entries: list[Entry], error: BaseException) -> None: ...
    def preempted(self, entry: Entry) -> None: ...  # vLLM V1: a running request freed to be recomputed later


def record_forward(observer: Observer, forward: Forward, seconds: float, now: float) -> None:
    """What every scheduler does once a forward has run: report it, count the prompt tokens it computed, move
    each row's cache on and give each emitting row (not a cancelled one) its token at `now`."""
    rows = forward.rows
    observer.forward(forward.rpc, len(rows), seconds, forward.tokens)
    observer.ran(forward, seconds)
    prompt = sum(min(r.length, r.entry.input_length - r.start) for r in rows if r.prompt)
    if prompt:
        observer.computed(prompt)
    for row in rows:
        row.entry.cache_len += row.length
        if row.emits and not row.entry.cancelled:
            row.entry.generated += 1
            observer.emitted(row.entry, now)
