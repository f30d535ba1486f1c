"""/metrics follows the queue as requests arrive and leave it, before any scheduler step."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import in_process_api
from tgi_toolkit.engine.events import Delivery


class WordTokenizer:
    chat_template = None

    def __call__(self, text: str, add_special_tokens: bool = True, **_: object) -> dict[str, list[int]]:
        return {"input_ids": [len(word) for word in text.split()]}


class NoModel:
    """The scheduler is never started here: requests stay in the queue."""

    deliver = Delivery()

    def forward(self, forward) -> None:
        raise AssertionError("nothing is batched in this test")

    def release(self, entry) -> None:
        pass


def samples(text: str) -> dict[str, float]:
    return {s.name + str(sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def test_queue_size_changes_when_a_request_arrives_and_when_it_leaves():
    engine, api = in_process_api(NoModel(), WordTokenizer(), max_total_tokens=100)
    body = {"inputs": "a waiting request", "parameters": {"max_new_tokens": 4}}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://engine") as client:
        async def queue_size() -> float:
            return samples((await client.get("/metrics")).text)["tgi_queue_size[]"]

        assert await queue_size() == 0
        waiting = [asyncio.create_task(client.post("/generate", json=body)) for _ in range(2)]
        for _ in range(100):
            if await queue_size() == 2:
                break
            await asyncio.sleep(0.01)
        assert await queue_size() == 2  # counted on arrival: no step has run

        for task in waiting:  # the clients go away; TGI drops their entries when it next takes a batch
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        assert engine.scheduler.step() is False  # nothing left to batch
        after = samples((await client.get("/metrics")).text)
    assert after["tgi_queue_size[]"] == 0
    assert after["tgi_request_failure_total[('err', 'dropped')]"] == 2


def test_forward_trace_writes_each_forward_as_the_cost_models_price_it(tmp_path):
    """TGI_TOOLKIT_FORWARD_TRACE: one line per forward with its rows, tokens, context and attention pairs.
    A 10-token prompt under a 6-token prefill budget, 2 new tokens, chunked (TGI 3): worked by hand,
    chunk 0-5 (6 tokens, context 6, pairs 1+...+6 = 21), chunk 6-9 (4 tokens each seeing 6 cached ones and
    the chunk's own: 4x6 + 1+2+3+4 = 34 pairs, context 10), then a decode of token 10 (11 pairs, context 11)."""
    from tests.test_scheduler import Recorder, add
    from tgi_toolkit.costs.features import Shape
    from tgi_toolkit.engine.metrics import Metrics
    from tgi_toolkit.router import Scheduler, SchedulerConfig
    from tgi_toolkit.simulate.trace import read_trace

    path = tmp_path / "forwards.jsonl"
    metrics = Metrics(trace=open(path, "a", buffering=1))  # noqa: SIM115 (as the engine opens it)
    scheduler = Scheduler(SchedulerConfig(max_batch_prefill_tokens=6, max_batch_total_tokens=100), Recorder(),
                          observer=metrics)
    queue = scheduler.queue
    add(queue, 10, 2)
    while scheduler.step():
        pass
    samples, offset = read_trace(str(path))
    assert [s for s, _ in samples] == [Shape(1, 6, 6, 21, True), Shape(1, 4, 10, 34, True),
                                       Shape(1, 1, 11, 11, False)]
    assert all(seconds >= 0 for _, seconds in samples)
    assert offset == path.stat().st_size
    assert read_trace(str(path), offset) == ([], offset)  # nothing new since


def test_the_trace_writes_beside_each_forward_the_collectors_seconds_since_the_last(tmp_path):
    """A full pass of the garbage collector made inside the second of three forwards is written on its line: its
    seconds, within what the test timed around it, and never counted again on the next line."""
    import gc
    import json
    import time

    from tests.test_scheduler import Recorder, add
    from tgi_toolkit.engine.metrics import Metrics
    from tgi_toolkit.router import Scheduler, SchedulerConfig

    timed: list[float] = []

    class Collecting(Recorder):
        def forward(self, forward):
            if len(self.forwards) == 1:
                began = time.perf_counter()
                gc.collect()
                timed.append(time.perf_counter() - began)
            super().forward(forward)

    path = tmp_path / "forwards.jsonl"
    metrics = Metrics(trace=open(path, "a", buffering=1))  # noqa: SIM115 (as the engine opens it)
    scheduler = Scheduler(SchedulerConfig(max_batch_prefill_tokens=6, max_batch_total_tokens=100), Collecting(),
                          observer=metrics)
    add(scheduler.queue, 10, 2)
    while scheduler.step():
        pass
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 3 and all(line["gc_s"] >= 0 for line in lines)
    # the forced pass is on the second line, most of the time around it (a few automatic passes may join it), and
    # not on the third
    assert timed[0] / 2 < lines[1]["gc_s"] <= timed[0] + 0.01
    assert lines[2]["gc_s"] < lines[1]["gc_s"]


def test_a_graph_compiled_inside_a_forward_is_on_its_trace_line_and_warned_of(tmp_path, caplog):
    """torch.compile run inside the second of three forwards (a shape warm-up missed; here the prompt's last chunk,
    in a decode) compiles one graph: the second line says 1, the others 0, and the log says which forward paid it."""
    import json

    import torch

    from tests.test_scheduler import Recorder, add
    from tgi_toolkit.engine.metrics import Metrics
    from tgi_toolkit.router import Scheduler, SchedulerConfig

    class Compiling(Recorder):
        def forward(self, forward):
            if len(self.forwards) == 1:
                torch.compile(lambda x: x * 2 + 1, backend="eager")(torch.ones(3))
            super().forward(forward)

    torch.compile(lambda x: x - 1, backend="eager")(torch.ones(2))  # before the Metrics: start-up's, not counted
    path = tmp_path / "forwards.jsonl"
    metrics = Metrics(trace=open(path, "a", buffering=1))  # noqa: SIM115 (as the engine opens it)
    scheduler = Scheduler(SchedulerConfig(max_batch_prefill_tokens=6, max_batch_total_tokens=100), Compiling(),
                          observer=metrics)
    add(scheduler.queue, 10, 2)
    with caplog.at_level("WARNING", logger="tgi_toolkit.engine"):
        while scheduler.step():
            pass
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["compiles"] for line in lines] == [0, 1, 0]
    warned = [r.getMessage() for r in caplog.records if "torch.compile" in r.getMessage()]
    assert len(warned) == 1 and "decode forward of 1 rows and 4 tokens compiled 1 graph(s)" in warned[0]


def test_a_forward_trace_the_engine_cannot_write_is_a_one_line_error(tmp_path):
    from tgi_toolkit.engine.serve import UnsupportedSetting, _open_trace

    assert _open_trace(None) is None and _open_trace("") is None
    with pytest.raises(UnsupportedSetting, match=r"TGI_TOOLKIT_FORWARD_TRACE: cannot write '.*missing/t.jsonl' \("):
        _open_trace(str(tmp_path / "missing" / "t.jsonl"))


def test_a_pace_the_engine_cannot_read_is_a_one_line_error(tmp_path):
    from tgi_toolkit.engine.serve import UnsupportedSetting, _pace

    assert _pace(None) is None and _pace("") is None
    with pytest.raises(UnsupportedSetting, match=r"TGI_TOOLKIT_PACE: '.*nothing.json' is not a cost model .*no file"):
        _pace(str(tmp_path / "nothing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "linear", "forward_s": -1}')
    with pytest.raises(UnsupportedSetting, match=r"TGI_TOOLKIT_PACE: .* forward_s must be a number of seconds >= 0"):
        _pace(str(bad))
    # a GPU's roofline prices a card, not this engine: the pace reads a profile of the engine itself
    gpu = tmp_path / "gpu.json"
    gpu.write_text('{"kind": "roofline", "gpu": "H100"}')
    with pytest.raises(UnsupportedSetting, match=r"TGI_TOOLKIT_PACE: .* kind 'roofline' is not a linear profile"):
        _pace(str(gpu))
    good = tmp_path / "good.json"
    good.write_text('{"kind": "linear", "forward_s": 0.05, "token_s": 0.001}')

    # a forward of one 10-token prompt row: 50 ms + 10 x 1 ms, by the profile's own terms
    assert _pace(str(good))(SimpleNamespace(rows=[SimpleNamespace(start=0, length=10)], prefilling=True)) == \
        pytest.approx(0.060)
