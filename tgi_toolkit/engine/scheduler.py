"""TGI's continuous-batching scheduler: a FIFO queue and the loop that grows the running batch.

The rules are TGI's router (non-chunking path, see shared/reference/TGI.md):
- idle: take a batch with no minimum size, prefill it, set `waiting_tokens = 1`;
- running: before each decode step try to add waiting requests, with
  `min_size = floor(running * waiting_served_ratio)` unless `waiting_tokens >= max_waiting_tokens`
  (then no minimum), `max_size = max_batch_size - running` and the token budget left after the
  running requests' reservations; a new batch is prefilled alone, joins, and resets
  `waiting_tokens`; then one decode step for everyone and `waiting_tokens += 1`;
- a request reserves `input_length + max_new_tokens` tokens; the queue stops at the first
  request that does not fit (FIFO, nothing skipped), and gives everything back when fewer than
  `min_size` fit;
- after every prefill or decode, finished requests and requests whose client went away leave
  the batch and free their reservation.

The model side is behind `Backend`, so tests drive this module with a stand-in.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Entry:
    """A validated request, from the queue to its last token."""

    input_ids: list[int]
    max_new_tokens: int
    request: Any = None  # the engine's own per-request state (sampling, stopping, output sink)
    id: int = 0
    queued_at: float = field(default_factory=time.perf_counter)
    batched_at: float | None = None
    cancelled: bool = False  # the client went away
    finished: bool = False

    @property
    def input_length(self) -> int:
        return len(self.input_ids)

    @property
    def reserved_tokens(self) -> int:
        return self.input_length + self.max_new_tokens


@dataclass(frozen=True)
class BatchingLimits:
    max_batch_prefill_tokens: int
    max_batch_total_tokens: int
    waiting_served_ratio: float = 0.3
    max_waiting_tokens: int = 20
    max_batch_size: int | None = None


class Backend(Protocol):
    """What the scheduler asks of the model side."""

    def prefill(self, entries: list[Entry]) -> None:
        """Run the prompts, emit each entry's first token, set `finished` where it stops."""

    def decode(self, entries: list[Entry]) -> None:
        """One token for every running entry; set `finished` where it stops."""

    def release(self, entry: Entry) -> None:
        """Free the entry's KV cache."""


class Observer(Protocol):
    """Metrics hooks; every method is optional to implement (see `NullObserver`)."""

    def dropped(self, entry: Entry) -> None: ...
    def queued(self, size: int) -> None: ...
    def batch_state(self, size: int, max_tokens: int, queue_size: int) -> None: ...
    def forward(self, method: str, size: int, seconds: float) -> None: ...
    def next_batch(self, size: int) -> None: ...


class NullObserver:
    def dropped(self, entry: Entry) -> None:
        pass

    def queued(self, size: int) -> None:
        pass

    def batch_state(self, size: int, max_tokens: int, queue_size: int) -> None:
        pass

    def forward(self, method: str, size: int, seconds: float) -> None:
        pass

    def next_batch(self, size: int) -> None:
        pass


class Queue:
    """FIFO of waiting entries, safe to append to from other threads.

    Its length goes to the observer whenever it changes (as TGI's queue updates `tgi_queue_size`
    on append and on each batch taken), not only after a step: a request that arrives during a
    long prefill is counted at once.
    """

    def __init__(self, observer: Observer | None = None) -> None:
        self._entries: deque[Entry] = deque()
        self._lock = threading.Lock()
        self._ids = 0
        self.observer = observer or NullObserver()
        self.notify = threading.Event()

    def __len__(self) -> int:
        return len(self._entries)

    def append(self, entry: Entry) -> None:
        with self._lock:
            self._ids += 1
            entry.id = self._ids
            self._entries.append(entry)
            self.observer.queued(len(self._entries))
        self.notify.set()

    def next_batch(self, min_size: int | None, max_size: int | None, prefill_budget: int,
                   token_budget: int) -> list[Entry] | None:
        if prefill_budget <= 0 or token_budget <= 0 or max_size == 0:
            return None
        with self._lock:
            if not self._entries or (min_size is not None and len(self._entries) < min_size):
                return None
            batch = self._take(max_size, prefill_budget, token_budget)
            if batch and min_size is not None and len(batch) < min_size:
                self._entries.extendleft(reversed(batch))
                batch = []
            self.observer.queued(len(self._entries))
        if not batch:
            return None
        now = time.perf_counter()
        for entry in batch:
            entry.batched_at = now
        self.observer.next_batch(len(batch))
        return batch

    def _take(self, max_size: int | None, prefill_budget: int, token_budget: int) -> list[Entry]:
        """Pop from the front while entries fit (the caller holds the lock); cancelled ones are dropped."""
        batch: list[Entry] = []
        prefill_tokens = reserved = 0
        while self._entries:
            entry = self._entries.popleft()
            if entry.cancelled:
                self.observer.dropped(entry)
                continue
            if (prefill_tokens + entry.input_length > prefill_budget
                    or reserved + entry.reserved_tokens > token_budget):
                self._entries.appendleft(entry)
                break
            prefill_tokens += entry.input_length
            reserved += entry.reserved_tokens
            batch.append(entry)
            if max_size is not None and len(batch) == max_size:
                break
        return batch


class Scheduler:
    """The batching loop. `step()` does one iteration; `run()` loops until `stop()`."""

    def __init__(self, queue: Queue, backend: Backend, limits: BatchingLimits,
                 observer: Observer | None = None) -> None:
        self.queue = queue
        self.backend = backend
        self.limits = limits
        self.observer = observer or queue.observer
        self.running: list[Entry] = []
        self.waiting_tokens = 0
        self._stop = threading.Event()

    @property
    def reserved_tokens(self) -> int:
        return sum(entry.reserved_tokens for entry in self.running)

    def step(self) -> bool:
        """One scheduling iteration; False when there was nothing to do."""
        limits = self.limits
        if not self.running:
            batch = self.queue.next_batch(None, limits.max_batch_size, limits.max_batch_prefill_tokens,
                                          limits.max_batch_total_tokens)
            if not batch:
                self._publish()
                return False
            self._prefill(batch)
            self.waiting_tokens = 1
            return True

        size = len(self.running)
        if self.waiting_tokens >= limits.max_waiting_tokens:
            min_size = None
        else:
            min_size = math.floor(size * limits.waiting_served_ratio)
        max_size = None if limits.max_batch_size is None else max(limits.max_batch_size - size, 0)
        token_budget = max(limits.max_batch_total_tokens - self.reserved_tokens, 0)
        batch = self.queue.next_batch(min_size, max_size, limits.max_batch_prefill_tokens, token_budget)
        if batch:
            self._prefill(batch)
            self.waiting_tokens = 1
        if self.running:
            self._forward("decode", self.running)
            self.waiting_tokens += 1
        return True

    def _prefill(self, batch: list[Entry]) -> None:
        self._forward("prefill", batch)
        self.running.extend(batch)
        self._filter()

    def _forward(self, method: str, entries: list[Entry]) -> None:
        started = time.perf_counter()
        if method == "prefill":
            self.backend.prefill(entries)
        else:
            self.backend.decode(entries)
        self.observer.forward(method, len(entries), time.perf_counter() - started)
        if method == "decode":
            self._filter()

    def _filter(self) -> None:
        kept = []
        for entry in self.running:
            if entry.finished or entry.cancelled:
                if entry.cancelled and not entry.finished:
                    self.observer.dropped(entry)
                self.backend.release(entry)
            else:
                kept.append(entry)
        self.running = kept
        self._publish()

    def _publish(self) -> None:
        self.observer.batch_state(len(self.running), self.reserved_tokens, len(self.queue))

    def run(self, idle_wait: float = 0.05) -> None:
        while not self._stop.is_set():
            if not self.step():
                self.queue.notify.wait(idle_wait)
                self.queue.notify.clear()

    def stop(self) -> None:
        self._stop.set()
        self.queue.notify.set()
