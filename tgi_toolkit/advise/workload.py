"""One simulated load on one candidate: bench's rate (or concurrency) scenario on the simulator, a point row back.

Fixed lengths run `simulate.run_rate` / `run_concurrency` as they are; a dataset of lengths runs the same
scenario with each request's lengths drawn (seeded) from the dataset, through the simulator's own runner
(`simulate.api.play_points`), so the rows, statistics and results folder are the same either way.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from tgi_toolkit import schema as S
from tgi_toolkit.advise.traffic import Traffic
from tgi_toolkit.costs.linear import CostModel
from tgi_toolkit.tune.select import Objectives

MAX_REQUESTS = 1500


def requests_at(traffic: Traffic, load: float, objectives: Objectives) -> int:
    """Requests simulated at an open-loop `load`: at least `traffic.requests`, and enough to keep arriving for
    twice the slowest request the objectives allow (TTFT + output x TPOT, 10 s at least), so a queue that grows
    has time to show (a short burst would let a fast server absorb any rate: 10 % over capacity for 10 s adds a
    second of queueing). At most MAX_REQUESTS."""
    allowed = (objectives.ttft_s or 0.0) + traffic.mean_output_tokens * (objectives.tpot_s or 0.0)
    window = max(10.0, 2 * allowed)
    return int(min(MAX_REQUESTS, max(traffic.requests, math.ceil(load * window))))


def _slo(objectives: Objectives) -> dict[str, float]:
    return {k: v for k, v in (("slo_ttft_s", objectives.ttft_s), ("slo_tpot_s", objectives.tpot_s)) if v is not None}


def _mixed(cost: Any, traffic: Traffic, load: float, options: dict[str, Any]) -> Any:
    from tgi_toolkit.scenarios.shapes import arrival_offsets
    from tgi_toolkit.simulate.api import play_points
    from tgi_toolkit.simulate.drivers import ClosedLoop, OpenLoop, SimRequest
    from tgi_toolkit.simulate.target import make_target
    from tgi_toolkit.simulate.workloads import Phase, Point

    target = make_target(cost, config=options.pop("config", None))
    seed = int(options.get("seed", 0))
    rng = np.random.default_rng(seed)
    pairs = [traffic.lengths[i] for i in rng.integers(0, len(traffic.lengths), size=traffic.requests)]
    for prompt, output in set(pairs):
        target.check_lengths(prompt, output)
    prompt_mid, output_mid = (int(np.median([p[i] for p in pairs])) for i in (0, 1))
    scenario = "concurrency" if traffic.closed_loop else "rate"

    def points(prompts: Any) -> list[Point]:
        reqs = [SimRequest(prompts.prompts(p, 1)[0], o, tag=(0, False, i)) for i, (p, o) in enumerate(pairs)]
        if traffic.closed_loop:
            columns = {S.USERS: int(load)}
            driver: Any = ClosedLoop(reqs, int(load))
            point_id = f"users={int(load)},dataset={Path(traffic.dataset or 'lengths').name}"
        else:
            columns = {S.RATE_RPS: load, S.ARRIVAL: traffic.arrival}
            driver = OpenLoop(reqs, arrival_offsets(len(reqs), load, traffic.arrival, seed))
            point_id = f"rate={load:g},arrival={traffic.arrival},dataset={Path(traffic.dataset or 'lengths').name}"
        return [Point(point_id, {**columns, S.PROMPT_TOKENS: prompt_mid, S.MAX_NEW_TOKENS: output_mid},
                      [Phase(driver, reqs)], send_lag_s=[0.0] * len(reqs))]

    workload = {"dataset": traffic.dataset, "requests": traffic.requests, "load": load,
                "lengths": "per request, drawn from the dataset"}
    return play_points(target, scenario, workload, points, options)


def simulate_load(cost: CostModel, traffic: Traffic, load: float, objectives: Objectives, *, config: Any = None,
                  output: str | Path | None = None, seed: int = 0) -> dict[str, Any]:
    """The point row of `traffic` at `load` (requests/s, or users) on `cost` with launcher `config`; with
    `output`, the run is also written there as a results folder (marked simulated)."""
    from tgi_toolkit.simulate.api import run_concurrency, run_rate

    options: dict[str, Any] = {"config": config, "seed": seed, **_slo(objectives)}
    if output is not None:
        options["output"] = str(output)
    else:
        options["light"] = True
    if traffic.lengths:
        count = traffic.requests if traffic.closed_loop else requests_at(traffic, load, objectives)
        run = _mixed(cost, replace(traffic, requests=count), load, options)
    elif traffic.closed_loop:
        users = int(load)
        run = run_concurrency(cost, users=[users], prompt_tokens=traffic.prompt_tokens,
                              max_new_tokens=traffic.max_new_tokens, requests=max(traffic.requests, 4 * users),
                              **options)
    else:
        run = run_rate(cost, rates=[load], arrival=traffic.arrival, prompt_tokens=traffic.prompt_tokens,
                       max_new_tokens=traffic.max_new_tokens, requests=requests_at(traffic, load, objectives),
                       **options)
    if output is not None:
        return dict(run.points.iloc[-1])
    return run.point_rows[-1]
