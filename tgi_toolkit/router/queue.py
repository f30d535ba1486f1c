"""TGI 3's queue: which waiting entries the next forward admits (rules Q2-Q6 of docs/tgi-rules.md).

Held against TGI's v3 backend (`queue.rs` next_batch):
- Q4: the scan is FIFO and stops at the first entry that does not fit. An entry first allocates
  `input + max_new_tokens + speculate - 1` tokens of blocks (a failed allocation stops the scan:
  head-of-line blocking); only its uncached tokens count against the prefill budget; the last one
  admitted may be partial (a chunk of `budget - tokens so far`); an entry with no budget left goes
  back with its blocks released.
- B8: a poll may admit only the entries queued by an instant (the scheduler says which, and why).
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import deque

from tgi_toolkit.router.batch import Entry
from tgi_toolkit.router.blocks import Allocation, SimpleAllocator
from tgi_toolkit.router.config import SchedulerConfig, make_allocator
from tgi_toolkit.router.hooks import WALL, Clock, Observer


class Queue:
    """FIFO of waiting entries, safe to append to from other threads (Q1-Q7).

    Its length goes to the observer whenever it changes (as TGI's queue updates `tgi_queue_size`
    on append and on each batch taken), not only after a step.
    """

    def __init__(self, config: SchedulerConfig, observer: Observer | None = None, clock: Clock | None = None,
                 allocator: SimpleAllocator | None = None) -> None:
        self._entries: deque[Entry] = deque()
        self._lock = threading.Lock()
        self._ids = 0
        self.config = config
        self.observer = observer or Observer()
        self.clock = clock or WALL
        self.allocator = allocator or make_allocator(config)
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
        assert entry.allocation is not None
        self.allocator.free(entry.allocation)
        entry.allocation = None
        entry.prefix_len = entry.cache_len = entry.chunk = 0


