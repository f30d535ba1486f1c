"""The forward trace's CPU split: the seconds the compute thread ran in each forward (`cpu_s`) and the seconds the
front end's thread ran beside it (`frontend_cpu_s`, one process and one GIL): read from each thread's own CPU clock,
so they hold on a busy machine. Each test burns a known amount of one thread's CPU (timed by that thread's own clock)
inside a forward and finds it on that forward's line, and not on the next."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_engine_device import TINY
from tgi_toolkit.engine.backend import ModelBackend
from tgi_toolkit.engine.events import Delivery
from tgi_toolkit.engine.infer import Engine
from tgi_toolkit.engine.metrics import Metrics
from tgi_toolkit.engine.model import load_random
from tgi_toolkit.engine.runner import LlamaRunner
from tgi_toolkit.engine.sampling import SamplingParams
from tgi_toolkit.engine.validation import ValidRequest
from tgi_toolkit.router import SchedulerConfig

BURN_S = 0.05
pytestmark = pytest.mark.skipif(not hasattr(time, "pthread_getcpuclockid"), reason="no per-thread CPU clock here")


def burn(seconds: float) -> float:
    """Run Python on this thread until its own CPU clock has advanced `seconds`; the seconds it advanced."""
    began = time.thread_time()
    while time.thread_time() - began < seconds:
        sum(range(1000))
    return time.thread_time() - began


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in a thread of its own, as the engine's front end's."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def on_loop(loop: asyncio.AbstractEventLoop, fn) -> float:
    """fn() run on the loop's thread; its result, once it has returned."""
    return asyncio.run_coroutine_threadsafe(_call(fn), loop).result(10)


async def _call(fn):
    return fn()


def test_delivery_reads_the_bound_loops_thread_not_the_callers(loop):
    delivery = Delivery()
    assert delivery.frontend_cpu_s() is None  # nothing bound: unknown, not zero
    on_loop(loop, lambda: delivery.bind(asyncio.get_running_loop()))
    assert delivery.loop is loop

    before = delivery.frontend_cpu_s()
    burned = on_loop(loop, lambda: burn(BURN_S))
    assert burned <= delivery.frontend_cpu_s() - before < burned + 0.03  # the loop's own burn, and little else

    before = delivery.frontend_cpu_s()
    burn(BURN_S)  # the caller's CPU is not the loop's: the loop slept meanwhile
    assert delivery.frontend_cpu_s() - before < BURN_S / 2


@pytest.mark.parametrize("kernel", ["as it is", "reads it on"])
def test_a_loop_whose_thread_has_ended_reads_as_unknown(kernel: str, monkeypatch: pytest.MonkeyPatch):
    """A forward must not fail, nor read another thread's seconds, because the thread of the loop it last streamed
    through is gone. Once the kernel has reaped a thread its clock raises EINVAL, but `join` returns a moment before
    that, and a new thread may take the ended one's id: then the clock reads on (as it did in CI), which no test can
    arrange at will, so the second case makes it read on."""
    delivery = Delivery()

    def serve_once() -> None:
        loop = asyncio.new_event_loop()
        loop.run_until_complete(_call(lambda: delivery.bind(asyncio.get_running_loop())))
        loop.close()

    thread = threading.Thread(target=serve_once)
    thread.start()
    thread.join()
    if kernel == "reads it on":
        monkeypatch.setattr(time, "clock_gettime", lambda clock: 1.25)
    assert delivery.loop is not None and delivery.frontend_cpu_s() is None


def test_each_forward_line_carries_the_compute_threads_and_the_front_ends_cpu_seconds(loop, tmp_path: Path):
    """Three requests of 6 tokens, one new token each, run as three forwards (one prompt each: max batch size 1).
    In the first the front end burns BURN_S of its CPU, in the second the compute thread does; the third has
    neither. Before the loop is bound (a backend driven without a front end) the front end's seconds are null."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    loaded = load_random(str(config), dtype="float32")
    backend = ModelBackend(LlamaRunner(loaded.model, max_rows=4, max_positions=64), loaded.tokenizer,
                           loaded.eos_token_ids)
    trace = tmp_path / "forwards.jsonl"
    engine = Engine(backend, SchedulerConfig(max_batch_prefill_tokens=64, max_batch_total_tokens=200,
                                             max_batch_size=1, prefix_caching=False),
                    Metrics(trace=open(trace, "a", buffering=1), split=backend.split))  # noqa: SIM115 (as the engine)

    burned: dict[int, float] = {}
    forward = backend.runner.forward

    def forward_burning(*args, **kwargs):
        n = len(burned)
        if n == 0:  # the front end, while this forward runs
            burned[n] = on_loop(loop, lambda: burn(BURN_S))
        elif n == 1:
            burned[n] = burn(BURN_S)  # the compute thread itself
        else:
            burned[n] = 0.0
        return forward(*args, **kwargs)

    requests = [ValidRequest(f"r{i}", [5 + i, 6, 7, 8, 9, 10], 1, SamplingParams(), ignore_eos=True)
                for i in range(4)]

    engine.submit(requests[0], lambda event: None)
    assert engine.scheduler.step()  # no loop bound yet
    assert not engine.scheduler.step()  # idle: the next poll takes what arrives from now on
    on_loop(loop, lambda: backend.deliver.bind(asyncio.get_running_loop()))
    backend.runner.forward = forward_burning
    for req in requests[1:]:
        engine.submit(req, lambda event: None)
    while engine.scheduler.step():
        pass

    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [line["rows"] for line in lines] == [1, 1, 1, 1] and len(burned) == 3
    unbound, front, compute, neither = lines
    assert unbound["frontend_cpu_s"] is None and unbound["cpu_s"] > 0
    assert burned[0] <= front["frontend_cpu_s"] < burned[0] + 0.03
    assert front["frontend_cpu_s"] <= front["seconds"]
    assert compute["cpu_s"] >= burned[1] and compute["frontend_cpu_s"] < BURN_S / 2
    assert neither["frontend_cpu_s"] < BURN_S / 2 and 0 < neither["cpu_s"] < BURN_S
    # the compute thread waited on the front end's burn rather than running it
    assert front["cpu_s"] < front["frontend_cpu_s"]
