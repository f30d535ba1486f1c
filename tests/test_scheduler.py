"""The scheduler, driven step by step with a stand-in model runner (no torch).

The first part is TGI's older non-chunking path (PREFILL_CHUNKING=0), the second TGI 3's chunked
path, checked forward by forward against the worked example of the TGI 3 scheduling notes (section 9,
restated in docs/tgi-rules.md) and its variants.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tgi_toolkit.router import (
    SEGMENT_TOKENS,
    Entry,
    Forward,
    Queue,
    Scheduler,
    SchedulerConfig,
    make_allocator,
    segment,
)
from tgi_toolkit.router.blocks import RadixAllocator


class Ticks:
    """A clock that moves one second per forward and stands still between them: a request a test queues
    between two steps was queued by the instant the last forward ended, as if it arrived during it."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t


@dataclass
class Recorder:
    """Stands in for the model: records each forward, finishes entries after their max_new_tokens."""

    calls: list[tuple[str, list[int]]] = field(default_factory=list)
    forwards: list[Forward] = field(default_factory=list)
    released: list[int] = field(default_factory=list)
    clock: Ticks = field(default_factory=Ticks)

    def forward(self, forward: Forward) -> None:
        self.clock.t += 1.0
        self.forwards.append(forward)
        self.calls.append((forward.rpc, [row.entry.id for row in forward.rows]))
        for row in forward.rows:
            limit = row.entry.max_total_new_tokens or row.entry.max_new_tokens  # the request's, not the segment's
            if row.emits and row.entry.generated + 1 >= limit:
                row.entry.finished = True

    def release(self, entry: Entry) -> None:
        self.released.append(entry.id)

    def tokens(self, i: int = -1) -> int:
        return self.forwards[i].tokens


# The older path: no chunking, no prefix cache, block size 1 (so a request holds input + max_new - 1
# blocks of the allocator's max_batch_total_tokens - 1: block 0 is reserved).
def unchunked(**kw) -> SchedulerConfig:
    return SchedulerConfig(**{"chunking": False, "prefix_caching": False, **kw})


def make(config: SchedulerConfig, backend: Recorder | None = None) -> tuple[Queue, Scheduler, Recorder]:
    backend = backend or Recorder()
    sched = Scheduler(config, backend, clock=backend.clock)
    return sched.queue, sched, backend


_next_token = iter(range(10_000, 10**9))


def add(queue: Queue, input_length: int, max_new_tokens: int, ids: list[int] | None = None) -> Entry:
    """Queue a request; its prompt ids are unique unless given, so no two prompts share a prefix."""
    entry = Entry(input_ids=ids if ids is not None else [next(_next_token) for _ in range(input_length)],
                  max_new_tokens=max_new_tokens)
    queue.append(entry)
    return entry


LIMITS = unchunked(max_batch_prefill_tokens=1000, max_batch_total_tokens=10_000,
                   waiting_served_ratio=0.3, max_waiting_tokens=20)


def test_idle_scheduler_prefills_everything_that_fits_then_decodes():
    queue, sched, rec = make(LIMITS)
    a, b = add(queue, 10, 3), add(queue, 10, 3)
    assert sched.step()
    assert rec.calls == [("prefill", [a.id, b.id])]
    assert sched.step()
    assert rec.calls[-1] == ("decode", [a.id, b.id])
    assert sched.waiting_tokens == 2
    assert sched.step()  # third token: both finish and are released
    assert sched.running == [] and sorted(rec.released) == [a.id, b.id]
    assert not sched.step()


def test_blocks_reserve_input_plus_max_new_tokens_minus_one_and_stop_at_first_misfit():
    # 100 tokens of KV = blocks 1..99 (block 0 reserved): 99 free.
    limits = unchunked(max_batch_prefill_tokens=1000, max_batch_total_tokens=100)
    queue, sched, rec = make(limits)
    a = add(queue, 20, 20)  # 20 + 20 - 1 = 39 blocks
    b = add(queue, 20, 30)  # 49 -> 88
    c = add(queue, 5, 10)  # 14 -> 102 > 99: no room
    d = add(queue, 1, 1)  # 1 block would fit, but FIFO never skips c (head-of-line blocking)
    sched.step()
    assert rec.calls[0] == ("prefill", [a.id, b.id])
    assert [e.id for e in queue._entries] == [c.id, d.id]
    assert sched.max_tokens == 88 and sched.allocator.free_count == 11


def test_prefill_budget_limits_the_new_batch():
    limits = unchunked(max_batch_prefill_tokens=25, max_batch_total_tokens=10_000)
    queue, sched, rec = make(limits)
    a, b, c = add(queue, 10, 5), add(queue, 10, 5), add(queue, 10, 5)
    sched.step()
    assert rec.calls[0] == ("prefill", [a.id, b.id])
    sched.step()  # running=2: min_size floor(2*0.3)=0, c joins (prefilled alone) before the decode
    assert rec.calls[1:] == [("prefill", [c.id]), ("decode", [a.id, b.id, c.id])]


def test_max_batch_size_caps_running_batch():
    limits = unchunked(max_batch_prefill_tokens=1000, max_batch_total_tokens=10_000, max_batch_size=2)
    queue, sched, rec = make(limits)
    a, b, c = add(queue, 4, 5), add(queue, 4, 5), add(queue, 4, 5)
    sched.step()
    sched.step()
    assert rec.calls == [("prefill", [a.id, b.id]), ("decode", [a.id, b.id])]
    assert len(queue) == 1 and queue._entries[0] is c


def test_waiting_served_ratio_sets_min_size_until_max_waiting_tokens_forces_it():
    limits = unchunked(max_batch_prefill_tokens=1000, max_batch_total_tokens=10_000,
                       waiting_served_ratio=1.0, max_waiting_tokens=4)
    queue, sched, rec = make(limits)
    running = [add(queue, 4, 50) for _ in range(3)]
    sched.step()  # prefill the 3
    late = add(queue, 4, 50)  # 1 waiting < floor(3 * 1.0): must wait
    for _ in range(2):
        sched.step()
    assert all(call[0] == "decode" for call in rec.calls[1:])
    assert sched.waiting_tokens == 3
    sched.step()  # waiting_tokens 3 < 4: still no join
    assert rec.calls[-1] == ("decode", [e.id for e in running])
    sched.step()  # waiting_tokens reached 4: min_size None, the late request joins
    assert rec.calls[-2:] == [("prefill", [late.id]), ("decode", [e.id for e in running] + [late.id])]
    assert sched.waiting_tokens == 2


def two_prefilled_joining_at_two() -> tuple[Queue, Scheduler, Recorder, list[Entry]]:
    """The older path with two requests just prefilled and min_size floor(2 * 1.0) = 2 for a while."""
    limits = unchunked(max_batch_prefill_tokens=1000, max_batch_total_tokens=10_000,
                       waiting_served_ratio=1.0, max_waiting_tokens=100)
    queue, sched, rec = make(limits)
    first = [add(queue, 4, 50) for _ in range(2)]
    sched.step()
    return queue, sched, rec, first


def test_enough_waiting_requests_join_before_max_waiting_tokens():
    queue, sched, rec, first = two_prefilled_joining_at_two()
    joiners = [add(queue, 4, 50) for _ in range(2)]  # 2 waiting >= floor(2 * 1.0)
    sched.step()
    assert rec.calls[1] == ("prefill", [e.id for e in joiners])
    assert rec.calls[2] == ("decode", [e.id for e in first + joiners])


def test_min_size_not_met_puts_everything_back_in_order():
    queue, sched, _ = make(unchunked(max_batch_prefill_tokens=100, max_batch_total_tokens=10))
    a, b = add(queue, 4, 4), add(queue, 4, 4)
    assert queue.next_batch(min_size=3, max_size=None, prefill_budget=100, token_budget=100) is None
    # 9 free blocks hold a (4 + 4 - 1 = 7) but not b too: fewer than min_size 2, so both go back,
    # and a's blocks with them
    assert queue.next_batch(min_size=2, max_size=None, prefill_budget=100, token_budget=10) is None
    assert list(queue._entries) == [a, b] and sched.allocator.free_count == 9


def test_cancelled_waiting_entries_are_dropped_and_running_ones_freed():
    queue, sched, rec = make(LIMITS)
    a, b = add(queue, 4, 10), add(queue, 4, 10)
    sched.step()
    gone = add(queue, 4, 10)
    gone.cancelled = True  # client disconnected while queued
    b.cancelled = True  # client disconnected mid-stream
    sched.step()
    assert rec.calls[-1] == ("decode", [a.id, b.id])
    assert b.id in rec.released and [e.id for e in sched.running] == [a.id]
    assert gone.id not in [i for call in rec.calls for i in call[1]]
    assert len(queue) == 0
    assert sched.max_tokens == a.reserved_tokens


def test_finished_entries_free_budget_for_waiting_ones():
    limits = unchunked(max_batch_prefill_tokens=1000, max_batch_total_tokens=30,
                       waiting_served_ratio=0.0)
    queue, sched, rec = make(limits)
    a = add(queue, 10, 2)  # 11 of the 29 free blocks
    b = add(queue, 10, 10)  # 19 -> 30 > 29: waits
    sched.step()
    assert rec.calls == [("prefill", [a.id])]
    sched.step()  # b does not fit yet; a decodes its 2nd token and finishes
    assert rec.calls[-1] == ("decode", [a.id]) and a.id in rec.released
    sched.step()  # idle again: b is prefilled
    assert rec.calls[-1] == ("prefill", [b.id])


@pytest.mark.parametrize("prefill_budget,token_budget,max_size", [(0, 10, None), (10, 0, None), (10, 10, 0)])
def test_no_capacity_returns_nothing(prefill_budget, token_budget, max_size):
    queue, _, _ = make(LIMITS)
    add(queue, 1, 1)
    assert queue.next_batch(None, max_size, prefill_budget, token_budget) is None
    assert len(queue) == 1


def test_queue_reports_its_length_on_append_and_when_entries_leave_it():
    sizes: list[int] = []

    class Sizes:
        def queued(self, size: int) -> None:
            sizes.append(size)

        def __getattr__(self, name):  # every other hook: nothing
            return lambda *args: None

    rec = Recorder()
    scheduler = Scheduler(unchunked(max_batch_prefill_tokens=20, max_batch_total_tokens=10_000), rec,
                          observer=Sizes(), clock=rec.clock)  # the three arrive at one instant
    queue = scheduler.queue
    first, second, third = add(queue, 10, 5), add(queue, 10, 5), add(queue, 10, 5)
    assert sizes == [1, 2, 3]  # at once, before any step
    second.cancelled = True
    scheduler.step()  # prefill budget 20: the first and the third (the cancelled second is dropped)
    assert sizes[-1] == 0 and first.batched_at is not None and third.batched_at is not None


# -- TGI 3: chunked prefill, blocks, prefix cache -------------------------------------------------------
# Section 9's settings: flashinfer (block size 1), max_batch_prefill_tokens 2048, plenty of blocks,
# max_new_tokens large enough that nothing finishes during the example.
TGI3 = SchedulerConfig(max_batch_prefill_tokens=2048, max_batch_total_tokens=200_000)


def running_abcd(config: SchedulerConfig = TGI3) -> tuple[Queue, Scheduler, Recorder, list[Entry]]:
    """A, B, C, D admitted from idle, then one step later in pure decode, the queue empty."""
    queue, sched, rec = make(config)
    abcd = [add(queue, 10, 500) for _ in range(4)]
    sched.step()  # from idle: one Prefill forward, no Decode (B2)
    sched.step()  # inner loop, nothing queued: a Decode forward
    assert rec.calls == [("prefill", [e.id for e in abcd]), ("decode", [e.id for e in abcd])]
    assert sched.current_tokens == 4
    rec.calls.clear()
    rec.forwards.clear()
    return queue, sched, rec, abcd


def rows(forward: Forward) -> list[tuple[int, int]]:
    return [(row.entry.id, row.length) for row in forward.rows]


def test_worked_example_admission_with_a_chunk_then_whole_requests():
    queue, sched, rec, abcd = running_abcd()
    r1, r2, r3 = add(queue, 3000, 500), add(queue, 500, 500), add(queue, 500, 500)
    decoding = [(e.id, 1) for e in abcd]
    # Iteration k: budget 2048 - 4 = 2044; R1 (3000) becomes a partial entry of 2044; R2, R3 wait.
    sched.step()
    assert [f.rpc for f in rec.forwards] == ["prefill", "decode"]  # two forwards, no poll between
    assert rows(rec.forwards[0]) == decoding + [(r1.id, 2044)] and rec.tokens(0) == 2048
    # The shard sizes R1's next chunk: budget 2048 - (5 - 1) = 2044, remaining 956.
    assert rows(rec.forwards[1]) == decoding + [(r1.id, 956)] and rec.tokens(1) == 960
    assert [r.emits for r in rec.forwards[0].rows] == [True] * 4 + [False]
    assert r1.generated == 1 and [e.id for e in queue._entries] == [r2.id, r3.id]
    # Iteration k+1: budget 2048 - 5 = 2043 admits R2 and R3 whole: 5 + 500 + 500 = 1005, then 7.
    sched.step()
    assert rows(rec.forwards[2]) == [(e.id, 1) for e in abcd + [r1]] + [(r2.id, 500), (r3.id, 500)]
    assert rec.tokens(2) == 1005 and all(row.emits for row in rec.forwards[2].rows)
    assert rec.calls[3] == ("decode", [e.id for e in abcd + [r1, r2, r3]]) and rec.tokens(3) == 7
    # Iteration k+2: nothing queued, one Decode of 7.
    sched.step()
    assert len(rec.forwards) == 5 and rec.calls[4][0] == "decode" and rec.tokens(4) == 7


def test_cold_start_polls_the_queue_right_after_the_first_prefill():
    queue, sched, rec = make(TGI3)
    r1, r2, r3 = add(queue, 3000, 500), add(queue, 500, 500), add(queue, 500, 500)
    sched.step()
    assert rows(rec.forwards[0]) == [(r1.id, 2048)]
    # No Decode first: budget 2048 - 952 (R1's next chunk, min(952, 2048 - 0)) = 1096 >= 1000.
    sched.step()
    assert rows(rec.forwards[1]) == [(r1.id, 952), (r2.id, 500), (r3.id, 500)] and rec.tokens(1) == 1952
    assert rec.forwards[1].rpc == "prefill" and all(row.emits for row in rec.forwards[1].rows)
    assert rec.calls[2] == ("decode", [r1.id, r2.id, r3.id]) and rec.tokens(2) == 3


def test_a_request_queued_after_a_forward_ended_waits_for_the_next_poll():
    # B8: TGI polls its queue microseconds after a forward; the engine's bookkeeping takes milliseconds.
    # A request that reached the queue 2 ms after the Decode ended missed TGI's poll: one Decode of A-D
    # first, and it joins at the poll after that one.
    queue, sched, rec, abcd = running_abcd()
    rec.clock.t += 0.002
    late = add(queue, 100, 10)
    sched.step()
    assert rec.calls == [("decode", [e.id for e in abcd])] and late.batched_at is None
    sched.step()
    assert rows(rec.forwards[1]) == [(e.id, 1) for e in abcd] + [(late.id, 100)]
    assert rec.calls[2] == ("decode", [e.id for e in abcd + [late]])


def test_after_the_last_request_ends_later_ones_are_admitted_from_idle_one_arrival_at_a_time():
    queue, sched, rec = make(TGI3)
    a = add(queue, 10, 1)
    assert sched.step() and a.finished and sched.running == []
    rec.clock.t += 0.002  # sent when A's token arrived: after the forward ended
    b = add(queue, 10, 2)
    rec.clock.t += 0.001  # the front end's next request, 1 ms later, before the engine's loop polled
    c = add(queue, 10, 2)
    assert not sched.step()  # the poll at the instant A's forward ended found nothing (the engine then
    assert sched.step()      # waits on the queue's notify, which b's append set), and TGI's loop would
    # have woken when B arrived and polled before C did: B alone, then C joins it (B2, then B3)
    assert rec.calls == [("prefill", [a.id]), ("prefill", [b.id])]
    sched.step()
    assert rows(rec.forwards[2]) == [(b.id, 1), (c.id, 10)]


def test_from_idle_a_burst_spread_over_the_front_end_starts_with_its_first_request():
    # The same rule for a cold start: requests queued 1 ms apart (the front end handles one at a time)
    queue, sched, rec = make(TGI3)
    burst = []
    for _ in range(3):
        burst.append(add(queue, 10, 5))
        rec.clock.t += 0.001
    sched.step()
    assert rec.calls == [("prefill", [burst[0].id])]
    sched.step()
    assert rows(rec.forwards[1]) == [(burst[0].id, 1), (burst[1].id, 10), (burst[2].id, 10)]


def test_without_chunking_only_requests_queued_by_the_poll_count_toward_the_minimum_group():
    queue, sched, rec, first = two_prefilled_joining_at_two()
    early = add(queue, 4, 50)  # queued while the prefill ran
    rec.clock.t += 0.002
    late = add(queue, 4, 50)  # queued after it ended: 1 waiting < floor(2 * 1.0), no join yet
    sched.step()
    assert rec.calls[1:] == [("decode", [e.id for e in first])]
    sched.step()  # both count now: 2 >= 2
    assert rec.calls[2:] == [("prefill", [early.id, late.id]), ("decode", [e.id for e in first + [early, late]])]


def test_a_continued_segment_queues_as_its_forward_ended_whatever_the_bookkeeping_takes():
    class SlowRelease(Recorder):
        def release(self, entry: Entry) -> None:
            self.clock.t += 0.002
            super().release(entry)

    queue, sched, rec = make(TGI3, SlowRelease())
    entry = segment([next(_next_token) for _ in range(10)], SEGMENT_TOKENS + 2)
    queue.append(entry)
    while entry.generated < SEGMENT_TOKENS:
        sched.step()
    # L6: TGI queues the continuation before its next poll, so it is admitted at once, from idle
    assert sched.step()
    follow = sched.running[0]
    assert follow is not entry and follow.prefix_len == 10 and rows(rec.forwards[-1]) == [(follow.id, 1024)]


def test_flashdecoding_rounds_the_budget_up_to_a_block():
    config = SchedulerConfig(max_batch_prefill_tokens=2048, max_batch_total_tokens=256 * 2000, block_size=256)
    queue, sched, rec, abcd = running_abcd(config)
    r1, _r2, _r3 = add(queue, 3000, 500), add(queue, 500, 500), add(queue, 500, 500)
    sched.step()
    # 2044 rounds up to 2048: F1 = 4 + 2048 = 2052; the shard's next chunk min(952, 2044) = 952.
    assert rec.tokens(0) == 2052 and rows(rec.forwards[1])[-1] == (r1.id, 952) and rec.tokens(1) == 956
    sched.step()  # 2043 rounds up to 2048: R2 and R3 fit, 1005
    assert rec.tokens(2) == 1005


def finished_request(queue: Queue, sched: Scheduler, ids: list[int]) -> None:
    """Run a one-token request with these prompt ids to completion, so its prompt enters the cache."""
    entry = add(queue, len(ids), 1, ids=ids)
    while not entry.finished:
        sched.step()
    sched.step()


def test_a_repeated_prompt_is_admitted_whole_computing_one_token():
    queue, sched, rec = make(TGI3)
    prompt = [next(_next_token) for _ in range(3000)]
    finished_request(queue, sched, prompt)
    assert sched.allocator.trie.cached_blocks() == 3000
    [add(queue, 10, 500) for _ in range(4)]
    sched.step()
    sched.step()
    rec.forwards.clear()
    r1, _r2, _r3 = add(queue, 3000, 500, ids=list(prompt)), add(queue, 500, 500), add(queue, 500, 500)
    sched.step()
    # prefix 3000 = input length -> 2999, postfix 1; R2 and R3 fit the same scan: 4 + 1 + 500 + 500.
    assert r1.prefix_len == 2999 and rec.tokens(0) == 1005 and rows(rec.forwards[0])[4] == (r1.id, 1)
    assert all(row.emits for row in rec.forwards[0].rows) and rec.tokens(1) == 7


def test_a_shared_prefix_is_not_computed_again():
    queue, sched, rec = make(TGI3)
    shared = [next(_next_token) for _ in range(400)]
    finished_request(queue, sched, shared + [next(_next_token) for _ in range(50)])
    abcd = [add(queue, 10, 500) for _ in range(4)]
    sched.step()
    sched.step()
    rec.forwards.clear()
    r1, r2 = add(queue, 3000, 500), add(queue, 500, 500)
    r3 = add(queue, 500, 500, ids=shared + [next(_next_token) for _ in range(100)])
    sched.step()
    sched.step()
    # As the main example, but R3's postfix is 100: F3 = 5 + 500 + 100 = 605.
    assert r3.prefix_len == 400 and rows(rec.forwards[2])[-1] == (r3.id, 100) and rec.tokens(2) == 605
    assert [e.id for e in sched.running] == [e.id for e in abcd + [r1, r2, r3]]


def test_chunking_off_prefills_the_new_group_alone():
    config = SchedulerConfig(max_batch_prefill_tokens=2048, max_batch_total_tokens=200_000, chunking=False)
    queue, sched, rec, abcd = running_abcd(config)
    r2, r3 = add(queue, 500, 500), add(queue, 500, 500)
    sched.step()  # min_size floor(4 x 0.3) = 1 <= 2 queued: [R2, R3] alone, A-D get no token
    assert rows(rec.forwards[0]) == [(r2.id, 500), (r3.id, 500)] and rec.tokens(0) == 1000
    assert rec.calls[1] == ("decode", [e.id for e in abcd + [r2, r3]]) and rec.tokens(1) == 6


def test_max_batch_size_caps_only_a_batch_started_from_idle():
    config = SchedulerConfig(max_batch_prefill_tokens=2048, max_batch_total_tokens=200_000, max_batch_size=2)
    queue, sched, rec = make(config)
    a, b, c = add(queue, 10, 50), add(queue, 10, 50), add(queue, 10, 50)
    sched.step()
    assert rec.calls[0] == ("prefill", [a.id, b.id])
    sched.step()  # the inner loop's admission has no size cap: c joins the running two
    assert rec.calls[1] == ("prefill", [a.id, b.id, c.id]) and len(sched.running) == 3


def test_head_of_line_blocking_when_blocks_run_out():
    # 100 tokens: 99 free blocks. a holds 60 + 10 - 1 = 69; b needs 40 + 10 - 1 = 49 > 30 left.
    queue, sched, rec = make(SchedulerConfig(max_batch_prefill_tokens=2048, max_batch_total_tokens=100))
    a, b, c = add(queue, 60, 10), add(queue, 40, 10), add(queue, 5, 2)
    sched.step()
    assert rec.calls[0] == ("prefill", [a.id]) and sched.allocator.free_count == 30
    sched.step()  # c (6 blocks) would fit, but b is first in line: nothing joins
    assert rec.calls[1] == ("decode", [a.id]) and [e.id for e in queue._entries] == [b.id, c.id]
    assert sched.max_tokens == 69


def test_a_client_leaving_mid_chunk_frees_its_blocks_and_caches_only_what_was_computed():
    queue, sched, rec = make(TGI3)
    r1 = add(queue, 5000, 500)
    sched.step()  # first chunk: 2048
    r1.cancelled = True  # the client goes away; the router sees it after the next forward (B6)
    sched.step()  # second chunk: 2048 more, then the entry is dropped before its third
    assert sched.running == [] and r1.id in rec.released and rec.tokens(-1) == 2048
    # Its 4096 computed prompt tokens stay cached (TGI would insert all 5000, KV never computed included);
    # every other block is free again: 199,999 - 4096.
    assert sched.allocator.trie.cached_blocks() == 4096
    assert sched.allocator.free_count == 199_999 - 4096


def test_reservation_caps_max_new_tokens_at_1024_and_the_rest_continues_as_a_new_entry():
    queue, sched, rec = make(TGI3)
    entry = segment([next(_next_token) for _ in range(10)], 1030)
    queue.append(entry)
    sched.step()
    assert len(entry.allocation.slots) == 10 + 1024 - 1  # input + min(1030, 1024) + 0 - 1
    while entry.generated < SEGMENT_TOKENS:
        sched.step()
    # The segment ended at 1024 tokens: it left, and its prompt + 1024 tokens queued again at the back.
    assert entry not in sched.running and len(queue) == 1
    follow = queue._entries[0]
    assert follow.input_length == 10 + 1024 and follow.max_new_tokens == 6
    sched.step()  # its 10 prompt tokens come from the cache; the generated ones are computed again
    assert follow.prefix_len == 10 and rows(rec.forwards[-1]) == [(follow.id, 1024)]


def test_eviction_takes_least_recently_used_unreferenced_leaves_and_trims_tails():
    alloc = RadixAllocator(12, block_size=1)  # 11 free blocks
    old, mid = alloc.allocate(4, [1, 2, 3, 4]), alloc.allocate(4, [5, 6, 7, 8])
    alloc.free(old, computed=4)
    alloc.free(mid, computed=4)
    assert alloc.free_count == 3 and alloc.trie.evictable_leaves() == [[1, 2, 3, 4], [5, 6, 7, 8]]
    alloc.allocate(1, [1, 2, 3, 9])  # looks [1, 2, 3] up: touched, so [5..8] is now the oldest
    assert alloc.trie.evictable_leaves()[0] == [5, 6, 7, 8]
    # Needs 6 blocks with 2 free (one went to the lookup's own block): evicts [5..8] whole (4), then...
    big = alloc.allocate(6, [20, 21, 22, 23, 24, 25])
    assert big is not None and alloc.trie.cached_blocks() == 4
    assert [20, 21] not in alloc.trie.evictable_leaves()


def test_block_aligned_hits_with_block_size_16():
    alloc = RadixAllocator(16 * 20, block_size=16)
    prompt = list(range(1, 41))  # 40 tokens: 2 whole blocks + 8
    first = alloc.allocate(40 + 5 - 1, prompt)
    alloc.free(first, computed=40)
    assert alloc.trie.cached_blocks() == 2  # 32 tokens; the partial third block is not cached
    again = alloc.allocate(44, prompt)
    assert again.prefix_len == 32 and again.blocks[:2] == first.blocks[:2]


def test_a_partial_prefix_hit_pins_only_what_it_reuses_so_a_one_request_cache_still_serves_it():
    # 20 tokens: 19 free blocks, one request of 16 + 4 reserves 19. After A ends its 16 prompt tokens are
    # cached and 3 blocks are free. B shares only A's first token: it reuses 1 block and needs 18 more, so
    # 15 of A's 16 must be evicted. TGI pins the whole matched node (all 16), leaving 3: B never fits.
    alloc = RadixAllocator(20)
    a_ids, b_ids = list(range(100, 116)), [100, *range(200, 215)]
    a = alloc.allocate(19, a_ids)
    alloc.free(a, computed=16)
    assert alloc.free_count == 3 and alloc.trie.cached_blocks() == 16
    b = alloc.allocate(19, b_ids)
    assert b is not None and b.prefix_len == 1 and b.blocks[0] == a.blocks[0]
    assert alloc.free_count == 0 and alloc.trie.cached_blocks() == 1  # A's 15 unshared tokens went
    alloc.free(b, computed=16)
    assert alloc.trie.cached_blocks() == 16 and alloc.free_count == 3  # B's 15 joined the shared token


def test_requests_sharing_a_first_token_run_one_after_another_in_a_one_request_cache():
    # The tuner's smallest cache (max_total_tokens 20 = max_batch_total_tokens): closed-loop users whose
    # prompts happen to start alike. Before, the second one waited forever behind a pinned node.
    queue, sched, rec = make(SchedulerConfig(max_batch_prefill_tokens=20, max_batch_total_tokens=20))
    a = add(queue, 16, 4, ids=list(range(100, 116)))
    for _ in range(4):
        sched.step()
    assert a.finished and sched.running == []
    b = add(queue, 16, 4, ids=[100, *range(200, 215)])
    assert sched.step()
    assert rows(rec.forwards[-1]) == [(b.id, 15)]  # its first token came from the cache
    for _ in range(3):
        sched.step()
    assert b.finished and not sched.step()


def test_a_request_no_empty_batch_can_hold_is_refused_with_the_reason_and_the_queue_moves_on():
    # 20 tokens hold 19: a request of 20 + 6 needs 25. Validation refuses such a request (max_total_tokens
    # above max_batch_total_tokens); if one ever reached the queue it must not stall those behind it.
    refused: list[tuple[list[int], str]] = []
    rec = Recorder()
    sched = Scheduler(SchedulerConfig(max_batch_prefill_tokens=20, max_batch_total_tokens=20), rec,
                      on_failure=lambda entries, error: refused.append(([e.id for e in entries], str(error))))
    queue = sched.queue
    big, small = add(queue, 20, 6), add(queue, 5, 2)
    assert not sched.step()  # nothing ran: the head was refused
    assert refused == [([big.id], "request cannot be scheduled: it needs 25 tokens of KV cache "
                                  "(input + max_new_tokens - 1); the cache holds 19 (max_batch_total_tokens "
                                  "less block 0) and 19 are free with nothing running")]
    assert big.failed and len(queue) == 1
    assert sched.step() and rec.calls == [("prefill", [small.id])]


def test_without_chunking_a_prompt_over_the_prefill_budget_is_refused_not_left_at_the_head():
    refused: list[str] = []
    sched = Scheduler(unchunked(max_batch_prefill_tokens=8, max_batch_total_tokens=100), Recorder(),
                      on_failure=lambda entries, error: refused.append(str(error)))
    queue = sched.queue
    add(queue, 10, 2)
    assert not sched.step() and len(queue) == 0
    assert refused == ["request cannot be scheduled: its 10 prompt tokens exceed max_batch_prefill_tokens (8) "
                       "and prefill chunking is off"]


def test_a_kv_store_of_config_slots_holds_every_slot_the_allocator_hands_out():
    # 1000 tokens in blocks of 16: 62 blocks (block 0 reserved), slots 0..991; the 61 usable blocks hold 976 tokens.
    config = SchedulerConfig(max_batch_prefill_tokens=64, max_batch_total_tokens=1000, block_size=16)
    allocation = make_allocator(config).allocate(976)
    assert config.slots == 992
    assert allocation is not None and max(allocation.slots) == 991 and min(allocation.slots) == 16
