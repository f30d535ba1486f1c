"""TGI 3's batching loop, for both of TGI's paths.

Held against TGI's v3 backend (`backend.rs` batching_task) and the shard's
chunk sizing (`flash_causal_lm.py`); docs/tgi-rules.md states the rules this module follows, by
the names used in the comments below (B = batching loop, Q = queue, S = shard, N = non-chunking).

Chunked prefill (the default, TGI 3 with flashinfer or flashdecoding attention):
- B2: from idle, take a group with `max_size = max_batch_size` and the full budgets; run it as one
  Prefill forward; go straight to the inner loop (no Decode first, so the queue is polled at once).
- B3: each inner iteration asks the queue once, with no size limits and a prefill budget of
  `max_batch_prefill_tokens - current_tokens` (the tokens already in the next forward). A group
  that comes back runs in ONE forward together with the running batch (each decoding row adds one
  token, counted `tgi_batch_concat{reason="chunking"}`); then, always, a Decode forward, with no
  queue poll between the two.
- Q4: the queue's scan (router/queue.py) admits the group.
- S5: after a forward that computed prompt tokens, the next chunk of every still-prefilling row is
  `max(1, min(remaining, budget))`, the budget starting at `max_batch_prefill_tokens - (rows - 1)`
  and handed out from the last row to the first.
- B1/B5: `max_batch_size` caps only a batch started from idle; `waiting_served_ratio` and
  `max_waiting_tokens` are ignored.
- B8: a poll admits only entries queued by its instant, which is TGI's: the instant the last forward
  ended (the router polls microseconds later), or from idle the instant the first waiting entry
  arrived (the router wakes on it). The engine's Python bookkeeping between forwards (about 1.4 ms
  for each request that ended, 26 ms once for 18) would otherwise let closed-loop users' next
  requests, sent when their last tokens arrived, win a race TGI never runs, or pile up for one poll.

Without chunking (`PREFILL_CHUNKING=0`, paged attention, speculation: TGI's older path, N1-N4):
`min_size = floor(running * waiting_served_ratio)` until `waiting_tokens >= max_waiting_tokens`,
`max_size = max_batch_size - running`; a new group is prefilled alone while the running batch
waits, then joins it for the Decode (`tgi_batch_concat` reason `backpressure` or `wait_exceeded`).

The model side is behind `ModelSide` and time behind `Clock` (router/hooks.py).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable

from tgi_toolkit.router.batch import SEGMENT_TOKENS, Entry, Forward, Row
from tgi_toolkit.router.config import SchedulerConfig
from tgi_toolkit.router.hooks import Clock, ModelSide, Observer, record_forward
from tgi_toolkit.router.queue import Queue

log = logging.getLogger(__name__)


class Scheduler:
    """The batching loop. `step()` does one iteration of TGI's loop; `run()` loops until `stop()`."""

    def __init__(self, config: SchedulerConfig, backend: ModelSide, *, observer: Observer | None = None,
                 clock: Clock | None = None,
                 on_failure: Callable[[list[Entry], BaseException], None] | None = None) -> None:
        self.config = config
        self.backend = backend
        self.observer = observer or Observer()
        self.queue = Queue(config, self.observer, clock)
        self.clock, self.allocator = self.queue.clock, self.queue.allocator
        self.on_failure = on_failure  # told which entries a failed forward (or a dying loop) ended
        self.running: list[Entry] = []  # TGI's cached batch, in row order
        self.waiting_tokens = 0
        self._stop = threading.Event()
        self._ended: float | None = None  # B8: when the last forward ended, until the next poll

    # -- the batch's numbers ----------------------------------------------------------------
    @property
    def max_tokens(self) -> int:
        """S7: blocks times block size over the batch (shared prefix blocks counted per request)."""
        return sum(entry.reserved_tokens for entry in self.running)

    @property
    def current_tokens(self) -> int:
        """S6: tokens in the next forward (the rows when the batch is pure decode)."""
        return sum(entry.chunk for entry in self.running)

    # -- the loop ----------------------------------------------------------------------------
    def step(self) -> bool:
        """One iteration of TGI's batching loop; False when there was nothing to do."""
        config = self.config
        arrived_by, self._ended = self._ended, None  # B8: only the first poll after a forward is held to its end
        if not self.running:  # B2
            if arrived_by is None:  # B8: idle, TGI's loop wakes when the first request arrives
                arrived_by = self.queue.first_arrival()
            group = self.queue.next_batch(None, config.max_batch_size, config.max_batch_prefill_tokens,
                                          config.max_batch_total_tokens, arrived_by)
            if not group:
                if self.queue.unfit is not None:
                    self._refuse(*self.queue.unfit)
                self._publish()
                return False
            self.running = group
            self._forward("prefill", group)
            self.waiting_tokens = 1
            return True

        self._publish()  # B3.1
        token_budget = max(0, config.max_batch_total_tokens - self.max_tokens)
        if config.chunking:
            prefill_budget = max(0, config.max_batch_prefill_tokens - self.current_tokens)
            min_size = max_size = None
        else:  # N1, N2
            prefill_budget = config.max_batch_prefill_tokens
            size = len(self.running)
            min_size = None
            if self.waiting_tokens < config.max_waiting_tokens:
                min_size = math.floor(size * config.waiting_served_ratio)
            max_size = None if config.max_batch_size is None else max(config.max_batch_size - size, 0)
        group = self.queue.next_batch(min_size, max_size, prefill_budget, token_budget, arrived_by)
        if group:
            if config.chunking:  # B3.5: one forward over [running, new]
                self.observer.concat("chunking")
                self.running = self.running + group
                self._forward("prefill", self.running)
                if not self.running:
                    return True
            else:  # N4: the new group alone, then it joins for the Decode
                self.observer.concat("backpressure" if min_size is not None else "wait_exceeded")
                running = self.running
                self.running = group
                self._forward("prefill", group)
                self.running = running + self.running
            self.waiting_tokens = 1
        if self.running:  # B3.6: always a Decode next
            self._forward("decode", self.running)
            self.waiting_tokens += 1
        return True

    def _forward(self, rpc: str, entries: list[Entry]) -> None:
        rows = [Row(e, e.cache_len, e.chunk, e.cache_len + e.chunk >= e.input_length) for e in entries]
        forward = Forward(rpc, rows)
        started = self.clock.now()
        try:
            self.backend.forward(forward)
        except Exception as exc:  # B6: an error discards the whole batch; the engine goes on
            log.exception("forward failed; its %d requests end with an error", len(entries))
            for entry in self.running:
                entry.finished = entry.failed = True
            self._failed(list(self.running), exc)
            self._filter()
            return
        now = self._ended = self.clock.now()
        record_forward(self.observer, forward, now - started, now)
        self._next_chunks(rows, forward.prefilling)
        self._filter()

    def _next_chunks(self, rows: list[Row], prefilling: bool) -> None:
        """S5: the shard sizes every row's next input, walking from the last row to the first."""
        budget = self.config.max_batch_prefill_tokens - (len(rows) - 1)
        for row in reversed(rows):
            entry = row.entry
            remaining = entry.input_length - entry.cache_len
            if prefilling and remaining > 0:
                entry.chunk = max(1, min(remaining, budget))
                budget -= entry.chunk
            else:
                entry.chunk = 1

    def _filter(self) -> None:
        """B6: finished entries, and entries whose client left, leave the batch and free their blocks."""
        kept = []
        for entry in self.running:
            if entry.finished or entry.cancelled:
                if entry.cancelled and not entry.finished:
                    self.observer.dropped(entry)
                self._release(entry)
            elif entry.generated >= entry.max_new_tokens and self._continues(entry):
                self._release(entry)
                self.queue.append(self._continuation(entry))
            else:
                kept.append(entry)
        self.running = kept
        self._publish()

    @staticmethod
    def _continues(entry: Entry) -> bool:
        return entry.max_total_new_tokens is not None and entry.max_total_new_tokens > entry.generated

    def _continuation(self, entry: Entry) -> Entry:
        """L6: the segment's tokens join the prompt and the request queues again, at the back."""
        ids = entry.output_ids[-entry.generated:] if len(entry.output_ids) >= entry.generated else \
            [-entry.id] * entry.generated  # a backend that records no ids (a simulator): unique stand-ins
        left = entry.max_total_new_tokens - entry.generated
        queued_at = self._ended if self._ended is not None else self.clock.now()  # as its forward ended (B8)
        return Entry(entry.input_ids + ids, min(left, SEGMENT_TOKENS), request=entry.request,
                     lookup=entry.lookup, max_total_new_tokens=left, queued_at=queued_at)

    def _release(self, entry: Entry) -> None:
        self.backend.release(entry)
        if entry.allocation is not None:
            # Only prompt tokens whose KV was computed (and not by a failed forward) may be cached.
            computed = 0 if entry.failed else min(entry.cache_len, entry.input_length)
            self.allocator.free(entry.allocation, computed)

    def _publish(self) -> None:
        self.observer.batch_state(len(self.running), self.max_tokens, len(self.queue))

    def abort_all(self, error: BaseException) -> list[Entry]:
        """End every running and queued entry (the compute side is going away); return them."""
        entries = self.running + self.queue.drain()
        for entry in entries:
            entry.finished = entry.failed = True
        for entry in self.running:
            self._release(entry)
        self.running = []
        self._failed(entries, error)
        return entries

    def _refuse(self, entry: Entry, why: str) -> None:
        """End an entry that no batch can ever hold: nothing runs, so nothing will free what it lacks, and
        leaving it at the head would stall every request behind it (a server that hangs, silently)."""
        if not self.queue.remove(entry):
            return
        error = RuntimeError(f"request cannot be scheduled: {why}")
        log.error("%s", error)
        entry.finished = entry.failed = True
        self._failed([entry], error)

    def _failed(self, entries: list[Entry], error: BaseException) -> None:
        self.observer.failed(entries, error)
        if self.on_failure is not None:
            self.on_failure(entries, error)

    def run(self, idle_wait: float = 0.05) -> None:
        while not self._stop.is_set():
            if not self.step():
                self.queue.notify.wait(idle_wait)
                self.queue.notify.clear()

    def stop(self) -> None:
        self._stop.set()
        self.queue.notify.set()
