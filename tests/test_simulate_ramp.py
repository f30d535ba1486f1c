"""The simulator's closed loop follows bench's ramp: timelines worked by hand with 1 s per forward and no
request overhead (so a time in seconds is a count of forwards), TGI 3's chunked scheduler (a prompt joins
the running decodes in one forward), and a request sent at t reaching the queue just after t (it misses the
poll of the forward that starts at t, test_simulate.py)."""

from __future__ import annotations

import logging

import pytest

from tgi_toolkit import schema as S
from tgi_toolkit.router import SchedulerConfig
from tgi_toolkit.simulate import run_concurrency
from tgi_toolkit.simulate.drivers import ClosedLoop, SimRequest
from tgi_toolkit.simulate.events import Simulator

from . import test_simulate
from .test_simulate import tgi3_default_mode  # noqa: F401  (autouse: the tests state their scheduling mode)

logging.getLogger("tgi_toolkit.router.scheduler").setLevel(logging.ERROR)
CONFIG = {"max_batch_total_tokens": 100_000, "max_batch_prefill_tokens": 2048}


class PerForward(test_simulate.PerForward):
    """test_simulate's 1 s per forward, with the empty `source` a SimTarget reads."""

    source: dict = {}


def _sent(requests: list[SimRequest]) -> list[float]:
    return [r.record.sent_ns / 1e9 for r in requests]


def test_a_ramp_starts_user_i_at_i_over_n_and_its_requests_are_extra():
    """2 users, a 4 s ramp, 4 measured requests of 10 + 3 tokens. User 0 sends ramp request x0 at 0 (prompt
    0-1, decodes 1-2, 2-3: ends at 3, before the ramp's end, so its next, x2, is a ramp request too). User 1
    sends x1 at 2 s (1/2 of the 4 s ramp); it misses the forward starting at 2, is prefilled
    3-4; x2 (sent 3) joins x1's decode 4-5; x1 ends at 6 and x2 at 7, after the ramp: measured m0 and m1 are
    sent then, and the two users go on one forward apart."""
    cost = PerForward()
    sim = Simulator(SchedulerConfig(**CONFIG), cost)
    measured = [SimRequest(list(range(100 * (i + 1), 100 * (i + 1) + 10)), 3, tag=(0, False, i)) for i in range(4)]
    made = iter(range(1000, 100_000, 100))

    def extra() -> SimRequest:
        start = next(made)
        return SimRequest(list(range(start, start + 10)), 3, tag=(0, True, start))

    sent = list(measured)
    loop = ClosedLoop(measured, 2, 4.0, extra, sent)
    sim.run(loop, sent)
    ramp = sent[4:]
    assert loop.ramp_s == 4.0 and len(ramp) == 3
    assert _sent(ramp) == pytest.approx([0, 2, 3])  # x0 (user 0), x1 (user 1, at 1/2 of 4 s), x2 (user 0)
    assert [r.record.token_ns[-1] / 1e9 for r in ramp] == pytest.approx([3, 6, 7])
    assert _sent(measured) == pytest.approx([6, 7, 10, 11])
    assert cost.tokens == [10, 1, 1, 10, 1 + 10, 1 + 1, 1, 10, 1 + 10, 1 + 1, 1, 10, 1 + 10, 1 + 1, 1]


def test_auto_ramp_is_one_cycle_at_the_load_and_spreads_the_users():
    """"auto": a request a user sent together first. p0 (sent 0): prompt 0-1, decodes 1-2, 2-3, ends at 3;
    p1 (sent 0, misses the poll at 0): prompt with p0's decode 1-2, decodes 2-3, 3-4, ends at 4. The ramp is
    their mean duration, 3.5 s, from 4: user 0 at 4, user 1 1.75 s later (5.75). x0: prompt 4-5, decodes 5-6,
    6-7, ends at 7, before the ramp's end (7.5), so user 0's next, x2 (sent 7), is a ramp request too; x1
    joins at the poll at 6, ends at 9; x2 joins at 8, ends at 11. Measured from then on: m0 sent 9, m1 11, m2
    13, m3 15, each joining the other user's decode: every TTFT is 2 s, the users stay 2 s apart, and no send
    is within a decode step (1 s) of another."""
    cost = PerForward()
    res = run_concurrency(cost, users=[2], prompt_tokens=10, max_new_tokens=3, requests=4, config=CONFIG)
    point = res.points.iloc[0]
    req = res.requests.sort_values([S.SENT_S, S.REQUEST_INDEX])
    warm = req[req[S.WARMUP]]
    measured = req[~req[S.WARMUP]]
    assert warm[S.SENT_S].tolist() == pytest.approx([0, 0, 4, 5.75, 7])  # the two probes, then the ramp's
    assert warm[S.REQUEST_INDEX].tolist() == [0, 1, 2, 3, 4]
    assert warm[S.E2E_S].tolist()[:2] == pytest.approx([3, 4]) and point[S.RAMP_UP_S] == pytest.approx(3.5)
    assert measured[S.SENT_S].tolist() == pytest.approx([9, 11, 13, 15])
    assert measured[S.TTFT_S].tolist() == pytest.approx([2, 2, 2, 2])
    assert cost.tokens == [10, 11, 2, 1, 10, 1, 11, 1, 11, 1, 11, 1, 11, 1, 11, 1, 11, 1, 1]
    assert point[S.REQUESTS] == 4 and point[S.OUTPUT_THROUGHPUT] == pytest.approx(12 / 10)  # sent 9, last token 19
    assert point[S.ARRIVAL_SYNC_SHARE] == 0.0 and not bool(point[S.LOCKSTEP])


def test_without_a_ramp_the_users_start_together_and_are_flagged():
    """ramp_up=0: both users send at 0 s (the timeline of test_closed_loop_users_send_when_their_last_request_ends
    in test_simulate.py: sends at 0, 0, 3, 4); 0 and 0, 3 and 4 are within one decode step (1 s) of each
    other: every arrival synchronised."""
    res = run_concurrency(PerForward(), users=[2], prompt_tokens=10, max_new_tokens=3, requests=4, ramp_up=0,
                          config=CONFIG)
    point = res.points.iloc[0]
    assert res.requests[S.SENT_S].tolist() == pytest.approx([0, 0, 3, 4]) and not res.requests[S.WARMUP].any()
    assert point[S.RAMP_UP_S] == 0.0 and point[S.ARRIVAL_SYNC_SHARE] == 1.0 and bool(point[S.LOCKSTEP])


def test_one_user_gets_no_ramp_and_a_bad_ramp_is_refused():
    from tgi_toolkit.bench.errors import BenchError

    res = run_concurrency(PerForward(), users=[1], prompt_tokens=10, max_new_tokens=3, requests=2, config=CONFIG)
    assert res.points[S.RAMP_UP_S].iloc[0] == 0.0 and len(res.requests) == 2  # no probe, nothing extra
    with pytest.raises(BenchError, match="ramp_up"):
        run_concurrency(PerForward(), users=[2], ramp_up="slowly", config=CONFIG)


def test_the_flag_is_shown_like_client_bound_and_the_cli_takes_ramp_up():
    from tgi_toolkit.bench import cli as bench_cli
    from tgi_toolkit.report_sections import _conditions
    from tgi_toolkit.simulate.cli import _bench_args

    res = run_concurrency(PerForward(), users=[2], prompt_tokens=10, max_new_tokens=3, requests=4, ramp_up=0,
                          config=CONFIG)
    summary = bench_cli.summary(res, "concurrency")
    assert "note: 1 point(s) lockstep: the users sent in step" in summary and "--ramp-up" in summary
    from tgi_toolkit.plots.labels import short_labels

    section = _conditions(res, short_labels(res.points[S.CONFIG_LABEL]))
    assert section is not None and "lockstep (the users sent in step" in section.tables[0][1][0][3]
    spread = run_concurrency(PerForward(), users=[2], prompt_tokens=10, max_new_tokens=3, requests=4, config=CONFIG)
    assert "lockstep" not in bench_cli.summary(spread, "concurrency") and _conditions(spread, {}) is None
    args = _bench_args("concurrency", ["--ramp-up", "2.5", "-u", "4"])
    assert bench_cli.scenario_params(args)["ramp_up"] == "2.5"
    assert bench_cli.scenario_params(_bench_args("concurrency", []))["ramp_up"] == "auto"
