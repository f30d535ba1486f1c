"""Workloads as benchmark tools generate them (issue 40, 5): length distributions of prompts and outputs, a pool of
prompts cycled, and a rate schedule of stages, the same in the harness and the simulator (tgi_toolkit.scenarios).
Tolerances are worked out by hand from each distribution's mean and spread, never from the code's own formula."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from tgi_toolkit import schema as S
from tgi_toolkit.bench.errors import BenchError
from tgi_toolkit.scenarios import ConcurrencyScenario, RateScenario
from tgi_toolkit.scenarios.shapes import LengthDistribution, Lengths, Stage, stage_offsets
from tgi_toolkit.simulate import run_concurrency, run_rate

from .test_simulate import (
    PerForward,
    tgi3_default_mode,  # noqa: F401  (autouse: the tests state their scheduling mode)
)

CONFIG = {"max_batch_total_tokens": 100_000, "max_batch_prefill_tokens": 2048}
N = 2000


def draw(text: str, mean: int, seed: int = 1) -> list[int]:
    return LengthDistribution.of(text, "prompt_lengths").sample(mean, N, random.Random(seed))


def test_uniform_lengths_cover_mean_plus_or_minus_spread_evenly():
    lengths = draw("uniform:10", 100)
    # 21 equally likely values 90..110: mean 100, sd sqrt((21^2 - 1) / 12) = 6.06, so the sample mean's standard
    # error is 6.06 / sqrt(2000) = 0.135 (4 of them: 0.54); each value ~ Binomial(2000, 1/21): 95.2 +/- 9.5
    assert min(lengths) == 90 and max(lengths) == 110
    assert abs(statistics.fmean(lengths) - 100) < 0.54
    assert all(95.2 - 5 * 9.5 < lengths.count(v) < 95.2 + 5 * 9.5 for v in range(90, 111))


def test_normal_lengths_have_the_mean_and_spread_asked():
    lengths = draw("normal:20", 100)
    # sd 20: standard error of the mean 20 / sqrt(2000) = 0.447 (4x: 1.79), of the sd 20 / sqrt(2 * 2000) = 0.316
    # (4x: 1.26); clipped to [1, 100 + 3 * 20]: 0.13 % above, none below 1 in practice
    assert abs(statistics.fmean(lengths) - 100) < 1.79
    assert abs(statistics.stdev(lengths) - 20) < 1.26 + 0.5  # + rounding to whole tokens and the clip
    assert 1 <= min(lengths) and max(lengths) <= 160
    # within one sd: 68.3 % of 2000 = 1365 +/- 21 (binomial sd); rounding widens the band a little
    inside = sum(80 <= v <= 120 for v in lengths)
    assert 1365 - 4 * 21 < inside < 1365 + 4 * 21 + 40


def test_lognormal_lengths_have_the_mean_asked_and_their_median_below_it():
    lengths = draw("lognormal:50", 100)
    # sigma^2 = ln(1 + 50^2 / 100^2) = ln 1.25: median e^mu = 100 / sqrt(1.25) = 89.4; mean 100, less what the
    # clip at 100 + 3 * 50 = 250 takes: E[(X - 250)+] = 100 Phi(-1.704) - 250 Phi(-2.176) = 4.42 - 3.70 = 0.73,
    # so 99.3, with a standard error of 50 / sqrt(2000) = 1.12 (4x: 4.5)
    assert abs(statistics.fmean(lengths) - 99.3) < 4.5
    assert abs(statistics.median(lengths) - 89.4) < 4
    assert max(lengths) <= 250 and min(lengths) >= 1


def test_draws_are_seeded_and_clipped_to_valid_lengths():
    assert draw("normal:20", 100, seed=3) == draw("normal:20", 100, seed=3) != draw("normal:20", 100, seed=4)
    assert min(draw("normal:50", 10)) == 1  # 10 - 50 * 3 would be negative: at least one token
    assert draw("fixed", 7)[:3] == [7, 7, 7]
    assert LengthDistribution("uniform", 4).bounds(16) == (12, 20)
    assert LengthDistribution("normal", 4).bounds(16) == (1, 28)


def test_a_pool_cycles_exactly_n_distinct_prompts():
    lengths = Lengths.draw(32, 8, 10, pool=3, prompt_lengths=LengthDistribution("uniform", 4),
                           output_lengths=LengthDistribution(), seed=0, point_id="p")
    assert lengths.prompt_of == (0, 1, 2, 0, 1, 2, 0, 1, 2, 0) and len(lengths.prompts) == 3
    assert lengths.outputs == (8,) * 10
    plain = Lengths.draw(32, 8, 4, pool=None, prompt_lengths=LengthDistribution(),
                         output_lengths=LengthDistribution(), seed=0, point_id="p")
    assert plain == Lengths((32, 32, 32, 32), (0, 1, 2, 3), (8, 8, 8, 8))  # a plain point: every prompt new


def test_two_stages_of_constant_arrivals_by_hand():
    # 2/s for 1.5 s: 0, 0.5, 1.0; then from 1.5 s, 4/s for 1 s: 1.5, 1.75, 2.0, 2.25
    assert stage_offsets([Stage(2, 1.5), Stage(4, 1)], "constant", 0) == [0, 0.5, 1.0, 1.5, 1.75, 2.0, 2.25]
    poisson = stage_offsets([Stage(5, 600), Stage(10, 600)], "poisson", 0)
    first = [t for t in poisson if t < 600]
    # Poisson counts: 3000 +/- sqrt(3000) = 55 in the first stage, 6000 +/- 77 in the second (4 sd)
    assert abs(len(first) - 3000) < 4 * 55 and abs(len(poisson) - len(first) - 6000) < 4 * 77
    assert poisson == sorted(poisson) and poisson[-1] < 1200


@pytest.mark.parametrize("build,message", [
    (lambda: RateScenario(stages=["5:600"], rates=[2]), "stages: a schedule of stages sets the rates"),
    (lambda: RateScenario(stages=["0:600"]), "stages: '0:600' is not a stage"),
    (lambda: RateScenario(prompt_lengths="gamma:3"), "prompt_lengths: 'gamma' is not a distribution"),
    (lambda: ConcurrencyScenario(output_lengths="normal"), "output_lengths: normal needs a spread > 0"),
    (lambda: ConcurrencyScenario(prompt_pool=0), "prompt_pool: 0 is not allowed"),
])
def test_bad_shapes_name_their_field(build, message):
    with pytest.raises(BenchError, match=message):
        build()


def test_the_longest_draw_is_checked_against_the_server_s_limits():
    from tgi_toolkit.bench.checks import LaunchLimits
    from tgi_toolkit.scenarios import check_scenario

    params = {"rates": [1], "prompt_tokens": 100, "max_new_tokens": 4, "prompt_lengths": "normal:10"}
    with pytest.raises(BenchError, match="prompt_lengths: 130 prompt"):  # 100 + 3 * 10 tokens, before a launch
        check_scenario("rate", params, LaunchLimits(200, 133))
    check_scenario("rate", params, LaunchLimits(200, 134))
    with pytest.raises(BenchError, match=r"130 \+ 4 is over the server's max_total_tokens 133"):
        run_rate(PerForward(), **params, config={**CONFIG, "max_input_tokens": 200, "max_total_tokens": 133})


def test_the_simulator_plays_the_drawn_lengths_and_the_stages():
    res = run_rate(PerForward(), stages=["2:1.5", "4:1"], arrival="constant", prompt_tokens=32, max_new_tokens=6,
                   prompt_lengths="uniform:4", output_lengths="uniform:2", seed=5, config=CONFIG)
    scenario = RateScenario(stages=["2:1.5", "4:1"], arrival="constant", prompt_tokens=32, max_new_tokens=6,
                            prompt_lengths="uniform:4", output_lengths="uniform:2")
    (point,) = scenario.points(5)
    planned = scenario.lengths(32, 6, 7, 5, point.point_id)
    requests = res.requests.sort_values(S.REQUEST_INDEX)
    assert list(requests[S.INPUT_TOKENS]) == [planned.prompts[p] for p in planned.prompt_of]
    assert list(requests[S.OUTPUT_TOKENS]) == list(planned.outputs)
    sent = list(requests[S.SENT_S] - requests[S.SENT_S].min())
    assert sent == pytest.approx([0, 0.5, 1.0, 1.5, 1.75, 2.0, 2.25], abs=1e-6)
    row = res.points.iloc[0]
    assert row[S.POINT_ID].startswith("stages=2x1.5s+4x1s,arrival=constant,prompt=32,output=6")
    assert row[S.RATE_RPS] == pytest.approx(7 / 2.5)


def test_the_simulator_s_prefix_cache_sees_the_pool_s_repeats():
    # one user, one request at a time: each of the 2 prompts is looked up 3 times; its 2nd and 3rd are found whole
    # and compute only their last token (docs/tgi-rules.md Q4.5): 4 x (32 - 1) hit tokens of 6 x 32 looked up
    res = run_concurrency(PerForward(), users=[1], prompt_tokens=32, max_new_tokens=3, requests=6, ramp_up=0,
                          prompt_pool=2, prefix_caching=True, config=CONFIG)
    row = res.points.iloc[0]
    assert row[S.PREFIX_LOOKUP_TOKENS] == 6 * 32 and row[S.PREFIX_HIT_TOKENS] == 4 * 31
    assert row[S.POINT_ID] == "users=1,prompt=32,output=3,prompt_pool=2"
    plain = run_concurrency(PerForward(), users=[1], prompt_tokens=32, max_new_tokens=3, requests=6, ramp_up=0,
                            prefix_caching=True, config=CONFIG)
    assert plain.points.iloc[0][S.POINT_ID] == "users=1,prompt=32,output=3"  # a plain point keeps its id
    assert math.isnan(plain.points.iloc[0][S.PREFIX_HIT_TOKENS])  # and its columns


@pytest.mark.slow
def test_the_harness_sends_the_shapes_to_the_engine(engine_url):
    from tgi_toolkit.bench import run_concurrency as bench_concurrency
    from tgi_toolkit.bench import run_rate as bench_rate

    # a pool of 2 prompts of 16 tokens, 6 requests one at a time: 4 repeats found whole, 15 tokens each
    res = bench_concurrency(engine_url, users=[1], prompt_tokens=16, max_new_tokens=2, requests=6, ramp_up=0,
                            prompt_pool=2, progress=False)
    row = res.points.iloc[0]
    assert row[S.PREFIX_LOOKUP_TOKENS] == 6 * 16
    # word-salad prompts may share their first word's tokens with earlier ones: a few more hits, never fewer
    assert 4 * 15 <= row[S.PREFIX_HIT_TOKENS] <= 4 * 15 + 2 * 4
    # two stages (4/s for 0.5 s, then 8/s for 0.5 s: 2 + 4 requests), lengths drawn around 16 and 3 tokens
    res = bench_rate(engine_url, stages=["4:0.5", "8:0.5"], arrival="constant", prompt_tokens=16, max_new_tokens=3,
                     prompt_lengths="uniform:3", output_lengths="uniform:1", seed=2, progress=False)
    scenario = RateScenario(stages=["4:0.5", "8:0.5"], arrival="constant", prompt_tokens=16, max_new_tokens=3,
                            prompt_lengths="uniform:3", output_lengths="uniform:1")
    (point,) = scenario.points(2)
    planned = scenario.lengths(16, 3, 6, 2, point.point_id)
    requests = res.requests.sort_values(S.REQUEST_INDEX)
    assert list(requests[S.INPUT_TOKENS]) == [planned.prompts[p] for p in planned.prompt_of]  # token-exact
    assert list(requests[S.OUTPUT_TOKENS]) == list(planned.outputs)
    sent = list(requests[S.SENT_S] - requests[S.SENT_S].iloc[0])
    # never before its planned time (a busy machine may send late; no speed is asserted)
    assert all(s >= t - 0.005 for s, t in zip(sent, [0, 0.25, 0.5, 0.625, 0.75, 0.875], strict=True))


def test_the_command_line_takes_the_shapes_and_records_a_plain_run_as_before():
    from tgi_toolkit.bench.cli import command_line, scenario_params

    from .test_scenarios import parsed

    args = parsed(["rate", "--stage", "2:1.5", "--stage", "4:1", "--prompt-pool", "2", "--prompt-lengths", "normal:8",
                   "--arrival", "constant"])
    assert RateScenario(**scenario_params(args)) == RateScenario(
        stages=[Stage(2, 1.5), Stage(4, 1)], prompt_pool=2, prompt_lengths=LengthDistribution("normal", 8),
        arrival="constant")
    plain = command_line(parsed(["rate", "--rate", "2"]))
    assert not any(word in flag for flag in plain for word in ("lengths", "pool", "stage", "burstiness"))


def test_burstiness_draws_gamma_gaps_with_the_rate_s_mean():
    from tgi_toolkit.scenarios.shapes import arrival_offsets

    offsets = arrival_offsets(N, 10.0, "poisson", 0, burstiness=4)
    gaps = [b - a for a, b in zip(offsets, offsets[1:], strict=False)]
    # gamma of shape 4, mean 1/10: sd 0.1 / sqrt(4) = 0.05; standard error of the mean 0.05 / sqrt(1999) = 0.0011
    # (4x: 0.0045); of the sd, with the gamma's excess kurtosis 6/4: 0.05 / 2 * sqrt(3.5 / 1999) = 0.00105 (4x: 0.0042)
    assert abs(statistics.fmean(gaps) - 0.1) < 0.0045 and abs(statistics.stdev(gaps) - 0.05) < 0.0042
    # shape 1 is the exponential: sd = mean = 0.1; its excess kurtosis 6 gives the sd a standard error of
    # 0.1 / 2 * sqrt(8 / 1999) = 0.0032 (4x: 0.0127)
    one = arrival_offsets(N, 10.0, "poisson", 0, burstiness=1)
    assert abs(statistics.stdev([b - a for a, b in zip(one, one[1:], strict=False)]) - 0.1) < 0.0127
    res = run_rate(PerForward(), rates=[10], requests=5, burstiness=4, seed=3, config=CONFIG)
    sent = sorted(res.requests[S.SENT_S] - res.requests[S.SENT_S].min())
    assert sent == pytest.approx(arrival_offsets(5, 10.0, "poisson", 3, burstiness=4), abs=1e-6)
    assert res.points.iloc[0][S.POINT_ID] == "rate=10,arrival=poisson,prompt=128,output=128,burstiness=4.0"
    with pytest.raises(BenchError, match="burstiness: 4.0 is not allowed with constant arrivals"):
        RateScenario(arrival="constant", burstiness=4)
