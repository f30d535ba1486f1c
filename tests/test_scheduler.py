"""The scheduler, driven step by step with a stand-in model runner (no torch)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tgi_toolkit.engine.scheduler import BatchingLimits, Entry, Queue, Scheduler


@dataclass
class Recorder:
    """Stands in for the model: records each forward, finishes entries after their max_new_tokens."""

    calls: list[tuple[str, list[int]]] = field(default_factory=list)
    generated: dict[int, int] = field(default_factory=dict)
    released: list[int] = field(default_factory=list)

    def _token(self, entries: list[Entry]) -> None:
        for e in entries:
            self.generated[e.id] = self.generated.get(e.id, 0) + 1
            if self.generated[e.id] >= e.max_new_tokens:
                e.finished = True

    def prefill(self, entries: list[Entry]) -> None:
        self.calls.append(("prefill", [e.id for e in entries]))
        self._token(entries)

    def decode(self, entries: list[Entry]) -> None:
        self.calls.append(("decode", [e.id for e in entries]))
        self._token(entries)

    def release(self, entry: Entry) -> None:
        self.released.append(entry.id)


def make(limits: BatchingLimits) -> tuple[Queue, Scheduler, Recorder]:
    queue = Queue()
    backend = Recorder()
    return queue, Scheduler(queue, backend, limits), backend


def add(queue: Queue, input_length: int, max_new_tokens: int) -> Entry:
    entry = Entry(input_ids=[1] * input_length, max_new_tokens=max_new_tokens)
    queue.append(entry)
    return entry


LIMITS = BatchingLimits(max_batch_prefill_tokens=1000, max_batch_total_tokens=10_000,
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


def test_token_budget_reserves_input_plus_max_new_tokens_and_stops_at_first_misfit():
    limits = BatchingLimits(max_batch_prefill_tokens=1000, max_batch_total_tokens=100)
    queue, sched, rec = make(limits)
    a = add(queue, 20, 20)  # 40
    b = add(queue, 20, 30)  # 50 -> 90
    c = add(queue, 5, 10)  # 15 -> 105: over budget
    d = add(queue, 1, 1)  # would fit, but FIFO never skips c
    sched.step()
    assert rec.calls[0] == ("prefill", [a.id, b.id])
    assert [e.id for e in queue._entries] == [c.id, d.id]
    assert sched.reserved_tokens == 90


def test_prefill_budget_limits_the_new_batch():
    limits = BatchingLimits(max_batch_prefill_tokens=25, max_batch_total_tokens=10_000)
    queue, sched, rec = make(limits)
    a, b, c = add(queue, 10, 5), add(queue, 10, 5), add(queue, 10, 5)
    sched.step()
    assert rec.calls[0] == ("prefill", [a.id, b.id])
    sched.step()  # running=2: min_size floor(2*0.3)=0, c joins (prefilled alone) before the decode
    assert rec.calls[1:] == [("prefill", [c.id]), ("decode", [a.id, b.id, c.id])]


def test_max_batch_size_caps_running_batch():
    limits = BatchingLimits(max_batch_prefill_tokens=1000, max_batch_total_tokens=10_000, max_batch_size=2)
    queue, sched, rec = make(limits)
    a, b, c = add(queue, 4, 5), add(queue, 4, 5), add(queue, 4, 5)
    sched.step()
    sched.step()
    assert rec.calls == [("prefill", [a.id, b.id]), ("decode", [a.id, b.id])]
    assert len(queue) == 1 and queue._entries[0] is c


def test_waiting_served_ratio_sets_min_size_until_max_waiting_tokens_forces_it():
    limits = BatchingLimits(max_batch_prefill_tokens=1000, max_batch_total_tokens=10_000,
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


def test_enough_waiting_requests_join_before_max_waiting_tokens():
    limits = BatchingLimits(max_batch_prefill_tokens=1000, max_batch_total_tokens=10_000,
                            waiting_served_ratio=1.0, max_waiting_tokens=100)
    queue, sched, rec = make(limits)
    first = [add(queue, 4, 50) for _ in range(2)]
    sched.step()
    joiners = [add(queue, 4, 50) for _ in range(2)]  # 2 waiting >= floor(2 * 1.0)
    sched.step()
    assert rec.calls[1] == ("prefill", [e.id for e in joiners])
    assert rec.calls[2] == ("decode", [e.id for e in first + joiners])


def test_min_size_not_met_puts_everything_back_in_order():
    queue = Queue()
    a, b = add(queue, 4, 4), add(queue, 4, 4)
    assert queue.next_batch(min_size=3, max_size=None, prefill_budget=100, token_budget=100) is None
    # fits only 1 of 2 under the token budget: fewer than min_size 2, so both go back
    assert queue.next_batch(min_size=2, max_size=None, prefill_budget=100, token_budget=10) is None
    assert list(queue._entries) == [a, b]


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
    assert sched.reserved_tokens == a.reserved_tokens


def test_finished_entries_free_budget_for_waiting_ones():
    limits = BatchingLimits(max_batch_prefill_tokens=1000, max_batch_total_tokens=30,
                            waiting_served_ratio=0.0)
    queue, sched, rec = make(limits)
    a = add(queue, 10, 2)  # 12
    b = add(queue, 10, 10)  # 20 -> 32 > 30: waits
    sched.step()
    assert rec.calls == [("prefill", [a.id])]
    sched.step()  # b does not fit yet; a decodes its 2nd token and finishes
    assert rec.calls[-1] == ("decode", [a.id]) and a.id in rec.released
    sched.step()  # idle again: b is prefilled
    assert rec.calls[-1] == ("prefill", [b.id])


@pytest.mark.parametrize("prefill_budget,token_budget,max_size", [(0, 10, None), (10, 0, None), (10, 10, 0)])
def test_no_capacity_returns_nothing(prefill_budget, token_budget, max_size):
    queue = Queue()
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

    queue = Queue(Sizes())
    scheduler = Scheduler(queue, Recorder(), BatchingLimits(max_batch_prefill_tokens=20, max_batch_total_tokens=10_000))
    first, second, third = add(queue, 10, 5), add(queue, 10, 5), add(queue, 10, 5)
    assert sizes == [1, 2, 3]  # at once, before any step
    second.cancelled = True
    scheduler.step()  # prefill budget 20: the first and the third (the cancelled second is dropped)
    assert sizes[-1] == 0 and first.batched_at and third.batched_at
