"""The ramp that starts closed-loop users out of step, and the phase check that reads their arrivals."""

from __future__ import annotations

import math

import pytest

from tgi_toolkit import schema as S
from tgi_toolkit.bench import phase, run_concurrency
from tgi_toolkit.bench.errors import BenchError


def test_ramp_starts_user_i_at_i_over_n_of_the_ramp():
    # guidellm's rampup_duration: 4 streams over 2 s start at 0, 0.5, 1.0 and 1.5 s
    assert phase.ramp_offsets(4, 2.0) == [0.0, 0.5, 1.0, 1.5]
    assert phase.ramp_offsets(3, 0.9) == pytest.approx([0.0, 0.3, 0.6])
    assert phase.ramp_offsets(1, 5.0) == [0.0]
    assert phase.ramp_offsets(4, 0.0) == [0.0] * 4  # no ramp: everyone at once


def test_synchronised_share_by_hand():
    # sends at 0, 0.01, 1.0, 1.5, 3.0 s with a 50 ms decode step: only 0 and 0.01 are within a step of
    # another send -> 2 of 5
    assert phase.synchronised_share([0.0, 0.01, 1.0, 1.5, 3.0], 0.05) == pytest.approx(0.4)
    # four users in lockstep for three waves, 1 s apart, each wave within 2 ms: every send is close to one
    waves = [w + 0.0005 * u for w in (0.0, 1.0, 2.0) for u in range(4)]
    assert phase.synchronised_share(waves, 0.05) == 1.0
    # the same users spread a quarter of a second apart: none is
    spread = [w + 0.25 * u for w in (0.0, 1.0, 2.0) for u in range(4)]
    assert phase.synchronised_share(spread, 0.05) == 0.0
    assert phase.synchronised_share([0.0, 0.05], 0.05) == 1.0  # exactly one step apart counts
    assert math.isnan(phase.synchronised_share([1.0], 0.05))
    assert math.isnan(phase.synchronised_share([0.0, 1.0], math.nan))


def test_chance_share_and_the_lockstep_rule_by_hand():
    # 5 sends over 3 s: a rate of 4/3 per second; within +-50 ms of another by chance: 1 - exp(-2 * 4/3 * 0.05)
    # = 1 - exp(-0.13333) = 0.12483
    chance = phase.chance_share([0.0, 0.01, 1.0, 1.5, 3.0], 0.05)
    assert chance == pytest.approx(0.12483, abs=1e-5)
    # 0.4 synchronised against 0.125 by chance: (0.4 - 0.125) / (1 - 0.125) = 0.314 of the way: not lockstep
    assert not phase.is_lockstep(0.4, chance)
    # the three waves of four: 11 gaps over 2.0015 s, 1 - exp(-2 * 5.496 * 0.05) = 0.4228; all synchronised
    waves = [w + 0.0005 * u for w in (0.0, 1.0, 2.0) for u in range(4)]
    assert phase.chance_share(waves, 0.05) == pytest.approx(0.4228, abs=1e-4)
    assert phase.is_lockstep(1.0, phase.chance_share(waves, 0.05))
    # 0.75 against 0.5 by chance is exactly half way: not over it; 0.8 is
    assert not phase.is_lockstep(0.75, 0.5) and phase.is_lockstep(0.8, 0.5)
    # all sent at once (no rate): more than half synchronised is lockstep
    assert math.isnan(phase.chance_share([0.0, 0.0, 0.0], 0.05)) and phase.is_lockstep(1.0, math.nan)
    assert not phase.is_lockstep(math.nan, 0.3)  # one user: nothing to be in step with
    columns = phase.phase_columns(waves, 0.05, 0.0)
    assert columns[S.LOCKSTEP] and columns[S.ARRIVAL_SYNC_SHARE] == 1.0 and columns[S.RAMP_UP_S] == 0.0


def test_ramp_up_values():
    assert phase.check_ramp("auto") == "auto" and phase.check_ramp(" AUTO ") == "auto"
    assert phase.check_ramp(0) == 0.0 and phase.check_ramp("2.5") == 2.5
    for bad in (-1, "soon", math.inf, math.nan, None, True):
        with pytest.raises(BenchError, match=r"ramp_up: .* is not allowed \(allowed: \"auto\""):
            phase.check_ramp(bad)


@pytest.mark.slow
def test_users_started_together_stay_in_lockstep_and_a_ramp_spreads_them(engine_url):
    """Four users with equal requests on the real engine: all started at once, every wave arrives
    together and the point is flagged; with the default ramp (one cycle at the load: the mean duration of
    a request a user, sent together first) they arrive apart and it is not."""
    common = dict(users=[4], prompt_tokens=32, max_new_tokens=12, requests=12, progress=False)
    together = run_concurrency(engine_url, ramp_up=0, **common)
    point = together.points.iloc[0]
    assert point[S.RAMP_UP_S] == 0.0
    assert point[S.ARRIVAL_SYNC_SHARE] > 0.75 and bool(point[S.LOCKSTEP]), point[[S.ARRIVAL_SYNC_SHARE,
                                                                                S.ARRIVAL_SYNC_CHANCE]]
    assert not together.requests[S.WARMUP].any()  # no ramp: every request measured
    together_share = point[S.ARRIVAL_SYNC_SHARE]

    ramped = run_concurrency(engine_url, **common)  # ramp_up="auto"
    point = ramped.points.iloc[0]
    req = ramped.requests
    warm = req[req[S.WARMUP]].sort_values([S.SENT_S, S.REQUEST_INDEX])
    probes = warm.iloc[:4]
    assert probes[S.SENT_S].max() - probes[S.SENT_S].min() < 0.05  # sent together
    assert point[S.RAMP_UP_S] == pytest.approx(probes[S.E2E_S].mean(), rel=1e-6)  # their mean duration
    assert ramped.runs[0]["workload"]["ramp_up"] == "auto"
    assert ramped.runs[0]["ramp_up_s"] == {point[S.POINT_ID]: point[S.RAMP_UP_S]}
    measured = req[~req[S.WARMUP]]
    assert len(measured) == 12 and point[S.REQUESTS] == 12
    # the ramp starts when the last probe has ended; each user's first request was sent in it
    ramp_start = (probes[S.SENT_S] + probes[S.E2E_S]).max()
    ramp_sends = warm[S.SENT_S].iloc[4:]
    assert len(ramp_sends) >= 4 and (ramp_sends >= ramp_start - 0.05).all()
    assert (ramp_sends < ramp_start + point[S.RAMP_UP_S] + 0.05).all()
    # each user's first request i/4 of the ramp after the first one's. On a busy machine a request alone ends
    # sooner than the four probes did together, so a user's second request may fall between those starts:
    # each start is looked for among the ramp's sends, not taken as the next one
    starts = (ramp_sends - ramp_sends.iloc[0]).tolist()
    for i in range(4):
        due = i * point[S.RAMP_UP_S] / 4
        assert any(abs(t - due) <= 0.15 for t in starts), (i, due, starts)
    # not flagged, and fewer arrivals in step than when the users started together (how few depends on how
    # busy the machine is: 0.5 against a chance of 0.27 was seen beside a CPU burner)
    assert not bool(point[S.LOCKSTEP]) and point[S.ARRIVAL_SYNC_SHARE] < together_share, point[
        [S.ARRIVAL_SYNC_SHARE, S.ARRIVAL_SYNC_CHANCE]]
