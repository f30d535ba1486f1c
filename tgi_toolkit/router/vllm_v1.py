"""vLLM V1's scheduler in Python, beside TGI's: one token budget a step, hashed KV blocks, recompute preemption.

The rules are those of vLLM 0.32.0 (`vllm/v1/core/sched/scheduler.py` Scheduler.schedule, `kv_cache_manager.py`
allocate_slots, `block_pool.py`); docs/vllm-rules.md states them and the comments below name them (V = step,
K = KV blocks, P = preemption, C = prefix cache). Nothing of vLLM's code is reproduced.

- V1: each step has one budget, `max_num_batched_tokens`, shared by every row: decodes and prefill chunks alike.
- V2: running requests first, in running order; each asks for all its missing tokens (one when decoding, the
  rest of its prompt when prefilling), cut to what the budget has left (chunked prefill).
- V3: then waiting requests, first come first served, while budget is left and fewer than `max_num_seqs` run;
  none at all in a step that preempted. A request that cannot get its blocks stops the scan (no skipping).
- K1: blocks of `block_size` tokens from a pool of `num_gpu_blocks`, block 0 held back (vLLM's null block).
- K2: a waiting request is admitted only if the blocks for its whole sequence are free, counting its cache hits
  that sit in the free queue (`scheduler_reserve_full_isl`, on by default since vLLM PR #37307, 2026-03; off,
  as in earlier releases, only its first chunk's blocks must be free).
- P1: a running request that cannot get a block preempts the LAST running request (the most recently
  admitted), again until it fits or it preempted itself; the victim frees its blocks, goes to the FRONT of
  the waiting queue and, when admitted again, recomputes its prompt and generated tokens (less cache hits).
- C1: full blocks only are cached, keyed by a hash chained on the parent block's hash and the block's tokens
  (generated tokens too), as soon as they are scheduled; a hit is the longest run of cached blocks from the
  start, at most `num_tokens - 1` tokens. Freed cached blocks join the free queue's end (unhashed ones its
  front), a request's last block first, so least recently freed blocks (a request's tail before its head) are
  evicted first.

tests/test_router_vllm_v1.py replays random workloads through this and through vLLM's own Scheduler class
(tools/vllm_v1_replay.py): every step and every preemption agree. The model side is the router's `ModelSide`
and time its `Clock` (router/hooks.py), as for TGI's `Scheduler`.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass

from tgi_toolkit.router.batch import Entry, Forward, Row
from tgi_toolkit.router.hooks import WALL, Clock, ModelSide, Observer, record_forward

# `vllm serve`'s defaults (vllm/engine/arg_utils.py get_batch_defaults, config/cache.py).
DEFAULT_BLOCK_SIZE = 16
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


@dataclass(frozen=True)
class VllmConfig:
    """vLLM V1's scheduling settings, under vLLM's own names."""

    num_gpu_blocks: int  # the KV pool in blocks, the null block included (vLLM logs num_gpu_blocks x block_size)
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    max_model_len: int | None = None
    block_size: int = DEFAULT_BLOCK_SIZE
    enable_prefix_caching: bool = True
    scheduler_reserve_full_isl: bool = True

    def __post_init__(self) -> None:
        for name in ("num_gpu_blocks", "max_num_batched_tokens", "max_num_seqs", "block_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}")
        if self.max_num_batched_tokens < self.max_num_seqs:  # vLLM refuses to start (config/scheduler.py)
            raise ValueError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs "
                             f"({self.max_num_seqs})")

    @property
    def kv_capacity_tokens(self) -> int:
        """What vLLM logs as "GPU KV cache size: N tokens"."""
        return self.num_gpu_blocks * self.block_size

    # The simulator's shared code (results, advice) reads these TGI names of the same concepts.
    @property
    def max_batch_total_tokens(self) -> int:
        return self.kv_capacity_tokens

    @property
    def chunking(self) -> bool:
        return True

    @property
    def prefix_caching(self) -> bool:
        return self.enable_prefix_caching


def serve_defaults(gpu_memory_bytes: int = 0, gpu_name: str = "") -> tuple[int, int]:
    """`vllm serve`'s (max_num_batched_tokens, max_num_seqs) on a GPU: larger on cards of 70 GiB or more
    (except A100s) and of 160 GiB or more (vllm/engine/arg_utils.py get_batch_defaults, OpenAI server)."""
    if gpu_memory_bytes >= 160 * 2**30:
        return 16384, 1024
    if gpu_memory_bytes >= 70 * 2**30 and "a100" not in gpu_name.lower():
        return 8192, 1024
    return 2048, 256


class BlockPool:
    """K1, C1: free blocks in eviction order, reference counts and the hash -> block map."""

    def __init__(self, num_blocks: int, block_size: int, caching: bool) -> None:
        self.num_blocks, self.block_size, self.caching = num_blocks, block_size, caching
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks))  # block 0: the null block
        self.refs = [0] * num_blocks
        self.hash_of: dict[int, int] = {}
        self.cached: dict[int, dict[int, None]] = {}  # hash -> the blocks holding it, first cached first

    @property
    def used(self) -> int:
        return self.num_blocks - 1 - len(self.free)

    def hits(self, hashes: list[int], max_tokens: int) -> list[int]:
        """C1: the longest run of cached blocks from the start, within `max_tokens`."""
        blocks = []
        for h in hashes[: max_tokens // self.block_size] if self.caching else ():
            holders = self.cached.get(h)
            if not holders:
                break
            blocks.append(next(iter(holders)))
        return blocks

    def touch(self, blocks: list[int]) -> None:
        for block in blocks:
            if self.refs[block] == 0:
                del self.free[block]
            self.refs[block] += 1

    def take(self, n: int) -> list[int]:
        """New blocks from the front of the free queue; a cached one loses its hash (eviction)."""
        out = []
        for _ in range(n):
            block, _ = self.free.popitem(last=False)
            h = self.hash_of.pop(block, None)
            if h is not None:
                holders = self.cached[h]
                del holders[block]
                if not holders:
                    del self.cached[h]
            self.refs[block] = 1
            out.append(block)
        return out

    def release(self, blocks: list[int]) -> None:
        """C1: blocks in eviction order; unhashed ones are reused first, hashed ones join the end."""
        for block in blocks:
            self.refs[block] -= 1
            if self.refs[block] == 0:
                self.free[block] = None
                if block not in self.hash_of:
                    self.free.move_to_end(block, last=False)

    def cache(self, block: int, h: int) -> None:
        if self.caching and block not in self.hash_of:
            self.hash_of[block] = h
            self.cached.setdefault(h, {})[block] = None  # two requests may compute the same block: both serve hits


class Waiting:
    """V3: the waiting queue, first come first served; a preempted request goes back to its front (P1)."""

    def __init__(self, observer: Observer, clock: Clock) -> None:
        self.entries: deque[Entry] = deque()
        self.observer, self.clock = observer, clock
        self._ids = 0

    def __len__(self) -> int:
        return len(self.entries)

    def append(self, entry: Entry) -> None:
        self._ids += 1
        entry.id = self._ids
        if not entry.queued_at:
            entry.queued_at = self.clock.now()
        self.entries.append(entry)
        self.observer.queued(len(self.entries))

    def waiting(self) -> list[Entry]:
        return list(self.entries)


class VllmScheduler:
    """vLLM V1's engine loop: `step()` schedules one step and runs it as one forward."""

    def __init__(self, config: VllmConfig, backend: ModelSide, *, observer: Observer | None = None,
                 clock: Clock | None = None) -> None:
        self.config, self.backend = config, backend
        self.observer = observer or Observer()
        self.clock = clock or WALL
        self.queue = Waiting(self.observer, self.clock)
        self.pool = BlockPool(config.num_gpu_blocks, config.block_size, config.enable_prefix_caching)
        self.running: list[Entry] = []
        self.blocks: dict[Entry, list[int]] = {}
        self.hashes: dict[Entry, list[int]] = {}
        self.registered: dict[Entry, int] = {}  # how many of a request's first blocks C1 has cached already
        self.preemptions = 0
        self.preempted: set[Entry] = set()  # requests preempted at least once: vLLM counts their lookups apart
        self.last_step: list[tuple[Entry, int]] = []  # (request, tokens) of the last step, for tests and traces

    # -- a request's tokens and block hashes ------------------------------------------------------------------
    @staticmethod
    def num_tokens(entry: Entry) -> int:
        return entry.input_length + entry.generated

    @staticmethod
    def _tokens(entry: Entry, start: int, end: int) -> tuple[int, ...]:
        """The request's tokens start..end-1: its prompt, then what it generated (sliced, not token by token: a
        simulation hashes every full block of every request)."""
        prompt = len(entry.input_ids)
        if end <= prompt:
            return tuple(entry.input_ids[start:end])
        first, last = max(start - prompt, 0), end - prompt
        out = entry.output_ids[first:last]
        # a backend that records no ids: a stand-in of this request's for each token it has not recorded
        missing = [-(entry.id * 1_000_000_000 + k) - 1 for k in range(first + len(out), last)]
        return (*entry.input_ids[start:prompt], *out, *missing)

    def _hashes(self, entry: Entry) -> list[int]:
        """C1: one hash per full block of the request's tokens, each chained on its parent's."""
        hashes = self.hashes.setdefault(entry, [])
        bs = self.config.block_size
        while (len(hashes) + 1) * bs <= self.num_tokens(entry):
            start = len(hashes) * bs
            parent = hashes[-1] if hashes else None
            hashes.append(hash((parent, self._tokens(entry, start, start + bs))))
        return hashes

    def _cache_full_blocks(self, entry: Entry, upto: int) -> None:
        """C1: blocks become cached once scheduled full, up to the tokens the request has."""
        full = min(upto, self.num_tokens(entry)) // self.config.block_size
        done = self.registered.get(entry, 0)
        if not self.config.enable_prefix_caching or full <= done:
            return
        hashes, blocks = self._hashes(entry), self.blocks[entry]
        for i in range(done, full):
            self.pool.cache(blocks[i], hashes[i])
        self.registered[entry] = full

    # -- KV blocks -----------------------------------------------------------------------------------------
    def _grow(self, entry: Entry, tokens: int) -> bool:
        """K1: blocks for `tokens` more tokens of a running request, or False when too few are free."""
        held = self.blocks[entry]
        need = max(0, math.ceil((entry.cache_len + tokens) / self.config.block_size) - len(held))
        if need > len(self.pool.free):
            return False
        held += self.pool.take(need)
        self._cache_full_blocks(entry, entry.cache_len + tokens)
        return True

    def _admit(self, entry: Entry, budget: int) -> int:
        """K2, C1: a waiting request's cache hits and first chunk; the chunk's tokens, or 0 when it must wait."""
        bs = self.config.block_size
        total = self.num_tokens(entry)
        if self.config.max_model_len is not None:
            total = min(total, self.config.max_model_len)
        hits = self.pool.hits(self._hashes(entry), total - 1)
        computed = len(hits) * bs
        chunk = min(total - computed, budget)
        idle_hits = sum(1 for b in hits if self.pool.refs[b] == 0)  # in the free queue: touching takes them out
        needed = total if self.config.scheduler_reserve_full_isl else computed + chunk
        if math.ceil(needed / bs) - len(hits) + idle_hits > len(self.pool.free):
            return 0
        self.pool.touch(hits)
        self.blocks[entry] = hits + self.pool.take(math.ceil((computed + chunk) / bs) - len(hits))
        self.registered[entry] = len(hits)
        entry.prefix_len = entry.cache_len = computed
        self._cache_full_blocks(entry, computed + chunk)
        if self.config.enable_prefix_caching and entry not in self.preempted:  # as vLLM's prefix-cache hit rate
            self.observer.prefix(total, computed)
        return chunk

    def _free(self, entry: Entry) -> None:
        """C1: a request's blocks back to the pool, its last block first."""
        self.pool.release(list(reversed(self.blocks.pop(entry, []))))
        self.registered.pop(entry, None)

    def _preempt(self, entry: Entry) -> None:
        """P1: free everything, forget what was computed, and wait at the front of the queue."""
        self._free(entry)
        entry.cache_len = entry.prefix_len = 0
        self.preemptions += 1
        self.preempted.add(entry)
        self.queue.entries.appendleft(entry)
        self.observer.preempted(entry)
        self.observer.queued(len(self.queue))

    # -- the step -------------------------------------------------------------------------------------------
    def step(self) -> bool:
        """One engine step; False when there was nothing it could do."""
        config = self.config
        budget = config.max_num_batched_tokens  # V1
        scheduled: list[tuple[Entry, int]] = []
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:  # V2
            entry = self.running[i]
            tokens = min(self.num_tokens(entry) - entry.cache_len, budget)
            if config.max_model_len is not None:
                tokens = min(tokens, config.max_model_len - 1 - entry.cache_len)
            if tokens <= 0:
                i += 1
                continue
            while not self._grow(entry, tokens):  # P1
                victim = self.running.pop()
                self._preempt(victim)
                preempted = True
                if victim is entry:
                    break
            if entry not in self.blocks:
                break
            scheduled.append((entry, tokens))
            budget -= tokens
            i += 1
        admitted = 0
        waiting = self.queue.entries
        while not preempted and waiting and budget > 0 and len(self.running) < config.max_num_seqs:  # V3
            entry = waiting[0]
            if entry.cancelled:
                waiting.popleft()
                self.observer.dropped(entry)
                continue
            tokens = self._admit(entry, budget)
            if not tokens:
                break
            waiting.popleft()
            if entry.batched_at is None:
                entry.batched_at = self.clock.now()
            self.running.append(entry)
            scheduled.append((entry, tokens))
            budget -= tokens
            admitted += 1
        if admitted:
            self.observer.queued(len(waiting))
            self.observer.next_batch(admitted)
        self.last_step = scheduled
        if not scheduled:
            self._publish()
            return preempted
        self._forward(scheduled)
        return True

    def _forward(self, scheduled: list[tuple[Entry, int]]) -> None:
        rows = [Row(e, e.cache_len, n, e.cache_len + n >= self.num_tokens(e)) for e, n in scheduled]
        forward = Forward("prefill" if any(r.length > 1 or r.prompt for r in rows) else "decode", rows)
        started = self.clock.now()
        self.backend.forward(forward)
        now = self.clock.now()
        record_forward(self.observer, forward, now - started, now)
        kept = []
        for entry in self.running:
            limit = self.config.max_model_len
            if entry.finished or entry.cancelled or entry.generated >= entry.max_new_tokens or \
                    (limit is not None and self.num_tokens(entry) >= limit):
                entry.finished = True
                self.backend.release(entry)
                self._free(entry)
                self.hashes.pop(entry, None)
                self.preempted.discard(entry)
            else:
                kept.append(entry)
        self.running = kept
        self._publish()

    def _publish(self) -> None:
        self.observer.batch_state(len(self.running), self.pool.used * self.config.block_size, len(self.queue))
