"""TGI 3's router: the queue's admission rules and the batching loop, for both of TGI's paths.

Held against TGI's v3 backend (`backend.rs` batching_task, `queue.rs` next_batch) and the shard's
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
- Q4: the scan is FIFO and stops at the first entry that does not fit. An entry first allocates
  `input + max_new_tokens + speculate - 1` tokens of blocks (a failed allocation stops the scan:
  head-of-line blocking); only its uncached tokens count against the prefill budget; the last one
  admitted may be partial (a chunk of `budget - tokens so far`); an entry with no budget left goes
  back with its blocks released.
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

The model side is behind `Backend` and time behind `Clock`: the engine passes its model and
`time.perf_counter`; tests pass a stand-in; the simulator passes a cost model and a virtual clock.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tgi_toolkit.router.blocks import Allocation, RadixAllocator, SimpleAllocator

__all__ = ["Backend", "Clock", "Entry", "Forward", "MonotonicClock", "Observer", "Queue", "Row", "SEGMENT_TOKENS",
           "Scheduler", "SchedulerConfig", "WALL", "make_allocator", "segment"]

log = logging.getLogger(__name__)


class Clock(Protocol):
    def now(self) -> float: ...


class MonotonicClock:
    def now(self) -> float:
        return time.perf_counter()


WALL = MonotonicClock()


@dataclass(eq=False)
class Entry:
    """A validated request (one segment of it), from the queue to its last token."""

    input_ids: list[int]
    max_new_tokens: int
    request: Any = None  # the engine's own per-request state (sampling, stopping, output sink)
    lookup: bool = True  # False for decoder_input_details requests: no prefix-cache lookup or insert
    id: int = 0
    queued_at: float = 0.0
    batched_at: float | None = None
    cancelled: bool = False  # the client went away
    finished: bool = False
    failed: bool = False  # a forward it was in raised: its KV is not to be trusted
    allocation: Allocation | None = None
    prefix_len: int = 0  # prompt tokens whose KV came from the prefix cache at admission
    cache_len: int = 0  # prompt (and generated) tokens whose KV is present
    chunk: int = 0  # tokens this entry computes in the next forward
    generated: int = 0  # tokens emitted
    # L5/L6: a request asking for more than SEGMENT_TOKENS new tokens runs as segments of at most
    # that many; `max_total_new_tokens` is what is left of the whole request when this segment starts.
    max_total_new_tokens: int | None = None
    output_ids: list[int] = field(default_factory=list)  # the backend appends each token it chooses

    @property
    def input_length(self) -> int:
        return len(self.input_ids)

    @property
    def prefilling(self) -> bool:
        return self.cache_len < self.input_length

    @property
    def reserved_tokens(self) -> int:
        """Tokens of KV the entry holds: its blocks times the block size, or input + max_new_tokens."""
        if self.allocation is not None:
            return len(self.allocation.slots)
        return self.input_length + self.max_new_tokens


@dataclass
class Row:
    """One entry's share of a forward: `length` tokens at positions `start...`."""

    entry: Entry
    start: int
    length: int
    emits: bool  # a decoding row, or the final chunk of a prompt: the forward yields its next token

    @property
    def prompt(self) -> bool:
        return self.start < self.entry.input_length


@dataclass
class Forward:
    rpc: str  # TGI's RPC, as metrics label it: "prefill" or "decode" (a Decode can still carry a chunk, S8)
    rows: list[Row]

    @property
    def tokens(self) -> int:
        return sum(row.length for row in self.rows)

    @property
    def prefilling(self) -> bool:
        return any(row.prompt for row in self.rows)

    @property
    def entries(self) -> list[Entry]:
        return [row.entry for row in self.rows]


@dataclass(frozen=True)
class SchedulerConfig:
    max_batch_prefill_tokens: int
    max_batch_total_tokens: int
    waiting_served_ratio: float = 0.3
    max_waiting_tokens: int = 20
    max_batch_size: int | None = None
    block_size: int = 1
    prefix_caching: bool = True
    chunking: bool = True
    speculate: int = 0


# L5: TGI's DEFAULT_GENERATION_LENGTH, the most new tokens one queue entry reserves.
SEGMENT_TOKENS = 1024


def segment(input_ids: list[int], max_new_tokens: int, **kwargs: Any) -> Entry:
    """The first queue entry of a request: its segment reserves at most SEGMENT_TOKENS new tokens."""
    return Entry(input_ids, min(max_new_tokens, SEGMENT_TOKENS), max_total_new_tokens=max_new_tokens, **kwargs)


class Backend(Protocol):
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


def make_allocator(config: SchedulerConfig) -> SimpleAllocator:
    cls = RadixAllocator if config.prefix_caching else SimpleAllocator
    return cls(config.max_batch_total_tokens, config.block_size)


class Queue:
    """FIFO of waiting entries, safe to append to from other threads (Q1-Q7).

    Its length goes to the observer whenever it changes (as TGI's queue updates `tgi_queue_size`
    on append and on each batch taken), not only after a step.
    """

    def __init__(self, observer: Observer | None = None, clock: Clock | None = None,
                 allocator: SimpleAllocator | None = None, config: SchedulerConfig | None = None) -> None:
        self._entries: deque[Entry] = deque()
        self._lock = threading.Lock()
        self._ids = 0
        self.observer = observer or Observer()
        self.clock = clock or WALL
        self.allocator = allocator
        self.config = config
        self.notify = threading.Event()
        # The head entry the last scan could not admit into an empty group, and why: with nothing running,
        # nothing will ever free blocks or budget for it.
        self.unfit: tuple[Entry, str] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def waiting(self) -> list[Entry]:
        with self._lock:
            return list(self._entries)

    def append(self, entry: Entry) -> None:
        with self._lock:
            self._ids += 1
            entry.id = self._ids
            if not entry.queued_at:
                entry.queued_at = self.clock.now()
            self._entries.append(entry)
            self.observer.queued(len(self._entries))
        self.notify.set()

    def first_arrival(self) -> float | None:
        """When the first waiting entry (whose client is still there) was queued."""
        with self._lock:
            return next((entry.queued_at for entry in self._entries if not entry.cancelled), None)

    def remove(self, entry: Entry) -> bool:
        with self._lock:
            try:
                self._entries.remove(entry)
            except ValueError:
                return False
            self.observer.queued(len(self._entries))
            return True

    def drain(self) -> list[Entry]:
        """Take every waiting entry (the engine failing them all when its compute side died)."""
        with self._lock:
            entries = list(self._entries)
            self._entries.clear()
            self.observer.queued(0)
        return entries

    def next_batch(self, min_size: int | None, max_size: int | None, prefill_budget: int,
                   token_budget: int, arrived_by: float | None = None) -> list[Entry] | None:
        """Q2-Q5: the group to admit, or None; with `arrived_by` (B8), only from the entries queued by then."""
        self.unfit = None
        if prefill_budget <= 0 or token_budget <= 0 or max_size == 0:
            return None
        config, allocator = self.config, self.allocator
        assert config is not None and allocator is not None, "Scheduler binds the queue to its config"
        bs = config.block_size
        budget = math.ceil(prefill_budget / bs) * bs  # Q3
        with self._lock:
            # entries queue in the order they arrive: those queued by `arrived_by` are a prefix of the queue
            arrived = self._entries if arrived_by is None else \
                itertools.takewhile(lambda entry: entry.queued_at <= arrived_by, self._entries)
            need = max(min_size or 0, 1)  # one entry at least, and N1's minimum group
            if sum(1 for _ in itertools.islice(arrived, need)) < need:
                return None
            batch = self._take(max_size, budget, config, allocator, arrived_by)
            if batch and min_size is not None and len(batch) < min_size:
                for entry in batch:
                    self._unadmit(entry)
                self._entries.extendleft(reversed(batch))
                batch = []
            self.observer.queued(len(self._entries))
        if not batch:
            return None
        now = self.clock.now()
        lookups = hits = 0
        for entry in batch:
            entry.batched_at = now  # Q6: a chunked request's queue time ends at its first chunk
            if entry.allocation is not None and entry.allocation.lookup is not None:
                lookups += entry.input_length
                hits += entry.prefix_len
        self.observer.next_batch(len(batch))
        if lookups:
            self.observer.prefix(lookups, hits)
        return batch

    def _take(self, max_size: int | None, budget: int, config: SchedulerConfig,
              allocator: SimpleAllocator, arrived_by: float | None) -> list[Entry]:
        """Q4: pop from the front while entries fit (the caller holds the lock)."""
        batch: list[Entry] = []
        prefill_tokens = 0
        while self._entries:
            if arrived_by is not None and self._entries[0].queued_at > arrived_by:
                break  # B8: this one, and every one behind it, came after the poll's instant
            entry = self._entries.popleft()
            if entry.cancelled:
                self.observer.dropped(entry)
                continue
            lookup = entry.input_ids if (config.prefix_caching and entry.lookup) else None
            tokens = entry.input_length + entry.max_new_tokens + config.speculate - 1
            allocation = allocator.allocate(tokens, lookup)
            prefix = allocation.prefix_len if allocation is not None else 0
            self.observer.allocation(prefix, tokens - prefix)  # TGI logs every attempt
            if allocation is None:  # head-of-line blocking: later, smaller entries are not tried
                self._entries.appendleft(entry)
                if not batch:
                    capacity = (allocator.n_blocks - 1) * config.block_size  # block 0 is reserved
                    free = allocator.free_count * config.block_size
                    self.unfit = (entry, f"it needs {tokens} tokens of KV cache (input + max_new_tokens - 1); "
                                         f"the cache holds {capacity} (max_batch_total_tokens less block 0) and "
                                         f"{free} are free with nothing running")
                break
            prefix_len = min(prefix, entry.input_length - 1)  # a full hit still computes one token
            postfix = entry.input_length - prefix_len
            if prefill_tokens + postfix > budget:
                chunk = budget - prefill_tokens
                if config.chunking and chunk > 0:
                    self._admit(entry, allocation, prefix_len, chunk)
                    batch.append(entry)
                    break
                allocator.free(allocation)
                self._entries.appendleft(entry)
                if not batch:
                    self.unfit = (entry, f"its {postfix} prompt tokens exceed max_batch_prefill_tokens "
                                         f"({budget}) and prefill chunking is off")
                break
            prefill_tokens += postfix
            self._admit(entry, allocation, prefix_len, postfix)
            batch.append(entry)
            if max_size is not None and len(batch) == max_size:
                break
        return batch

    @staticmethod
    def _admit(entry: Entry, allocation: Allocation, prefix_len: int, chunk: int) -> None:
        entry.allocation = allocation
        entry.prefix_len = entry.cache_len = prefix_len
        entry.chunk = chunk

    def _unadmit(self, entry: Entry) -> None:
        assert self.allocator is not None and entry.allocation is not None
        self.allocator.free(entry.allocation)
        entry.allocation = None
        entry.prefix_len = entry.cache_len = entry.chunk = 0


class Scheduler:
    """The batching loop. `step()` does one iteration of TGI's loop; `run()` loops until `stop()`."""

    def __init__(self, queue: Queue, backend: Backend, config: SchedulerConfig,
                 observer: Observer | None = None, clock: Clock | None = None,
                 allocator: SimpleAllocator | None = None,
                 on_failure: Callable[[list[Entry], BaseException], None] | None = None) -> None:
        self.queue = queue
        self.on_failure = on_failure  # told which entries a failed forward (or a dying loop) ended
        self.backend = backend
        self.config = config
        self.observer = observer or queue.observer
        self.clock = clock or queue.clock
        self.allocator = allocator or make_allocator(config)
        queue.allocator, queue.config, queue.clock = self.allocator, config, self.clock
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
        self.observer.forward(rpc, len(rows), now - started, forward.tokens)
        self.observer.ran(forward, now - started)
        prompt_tokens = sum(min(r.length, r.entry.input_length - r.start) for r in rows if r.prompt)
        if prompt_tokens:
            self.observer.computed(prompt_tokens)
        for row in rows:
            row.entry.cache_len += row.length
            if row.emits and not row.entry.cancelled:
                row.entry.generated += 1
                self.observer.emitted(row.entry, now)
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
