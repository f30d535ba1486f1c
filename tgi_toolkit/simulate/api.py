"""The simulator's Python API: bench's scenario functions, on a virtual clock.

    from tgi_toolkit.simulate import run_concurrency, roofline

    res = run_concurrency("cost.json", users=[1, 8, 32], prompt_tokens=512, max_new_tokens=128)
    res = run_concurrency(roofline("H100", "config.json"), users=[10], prompt_tokens=1024,
                          max_new_tokens=128, config=["--max-batch-prefill-tokens", "8192"])

The first argument is the cost model (a CostModel, a cost.json path or its dict, or a SimTarget);
scenario parameters are bench's (tgi_toolkit.bench.api): the same scenario dataclasses (tgi_toolkit.scenarios),
with the same defaults and checks; `play_scenario(cost_model, scenario)` takes one directly. Options:
config (launcher settings: a LauncherConfig, a dict, or launcher flags), attention / prefix_caching /
chunking (the scheduling mode; default from ATTENTION, PREFIX_CACHING, PREFILL_CHUNKING, then the cost
model's server), server (the server profile whose scheduling rules apply; "vllm-v1" takes vLLM's, with `config`
a dict of vLLM settings or `vllm serve` flags: tgi_toolkit.simulate.target.VLLM_FLAGS),
output (a results folder), seed, prefix_tokens, slo_ttft_s, slo_tpot_s,
scrape_interval, command; bench's client-only options (progress, resume, tokenizer, api, sampling,
ignore_eos, request_timeout, dataset) are accepted and have no effect.
Every function returns bench's `Results`, marked simulated (tgi_toolkit.simulate.record).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tgi_toolkit import schema as S
from tgi_toolkit.bench.api import spread_lengths
from tgi_toolkit.bench.errors import BenchError, check_positive_ints
from tgi_toolkit.bench.results import Results
from tgi_toolkit.costs.load import CostModelSource
from tgi_toolkit.scenarios.base import Scenario, split, wrapper_signature
from tgi_toolkit.scenarios.kinds import (
    BatchScenario,
    ConcurrencyScenario,
    IngestionScenario,
    RateScenario,
    scenario_class,
)
from tgi_toolkit.scenarios.plans import DecodeStallScenario, MultiTurn, SharedPrefix
from tgi_toolkit.simulate.events import Simulator
from tgi_toolkit.simulate.record import SimRun
from tgi_toolkit.simulate.target import SimTarget, make_target
from tgi_toolkit.simulate.workloads import (
    Point,
    TokenPrompts,
    batch_points,
    concurrency_points,
    decode_stall_points,
    ingestion_points,
    multi_turn_points,
    rate_points,
    shared_prefix_points,
)

_TARGET_OPTIONS = ("config", "attention", "prefix_caching", "chunking", "server")
# The run's options a simulation uses, and bench's options it takes and ignores (tune.simulated reads both).
RUN_OPTIONS = ("output", "seed", "prefix_tokens", "slo_ttft_s", "slo_tpot_s", "scrape_interval", "command",
               "on_point", "light")
IGNORED_OPTIONS = ("progress", "resume", "tokenizer", "api", "api_key", "sampling", "ignore_eos", "request_timeout",
                   "dataset")


def _count(name: str, value: int, minimum: int) -> int:
    return check_positive_ints(name, [value], minimum=minimum)[0]


def _split(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    unknown = set(options) - {*_TARGET_OPTIONS, *RUN_OPTIONS, *IGNORED_OPTIONS}
    if unknown:
        raise BenchError(sorted(unknown)[0], "is not an option",
                         ", ".join(sorted({*_TARGET_OPTIONS, *RUN_OPTIONS, *IGNORED_OPTIONS})))
    target = {k: options[k] for k in _TARGET_OPTIONS if k in options}
    run = {k: options[k] for k in RUN_OPTIONS if k in options}
    return target, run


def play_points(target: SimTarget, scenario: str, workload: dict[str, Any],
                make_points: Callable[[TokenPrompts], list[Point]], run_options: dict[str, Any]) -> Results:
    """The points `make_points` builds from the run's prompts, played in order on one simulated server and
    recorded as one run of `scenario` (its `workload` in the provenance): what every scenario here comes down to,
    and what advise.workload plays for a dataset's lengths. `run_options`: this module's RUN_OPTIONS."""
    seed = int(run_options.get("seed", 0))
    prefix = _count("prefix_tokens", int(run_options.get("prefix_tokens", 0)), 0)
    interval = float(run_options.get("scrape_interval", S.SCRAPE_INTERVAL))
    if not interval > 0:
        raise BenchError("scrape_interval", f"{interval!r}", "numbers of seconds > 0")
    for name in ("slo_ttft_s", "slo_tpot_s"):
        value = run_options.get(name)
        if value is not None and not value > 0:
            raise BenchError(name, f"{value!r} is not a positive number of seconds", "numbers > 0, or None")
    workload = {**workload, "seed": seed, "prefix_tokens": prefix, "simulated": True}
    run = SimRun(target, scenario, workload, output=run_options.get("output"),
                 slo_ttft_s=run_options.get("slo_ttft_s"), slo_tpot_s=run_options.get("slo_tpot_s"),
                 command=run_options.get("command"), light=bool(run_options.get("light")))
    points: list[Point] = make_points(TokenPrompts(seed, prefix))
    # one server for the whole run: its clock and prefix cache carry from point to point
    sim = Simulator(target.scheduler, target.cost, scrape_interval=interval, seed=seed)
    on_point = run_options.get("on_point")
    try:
        for point in points:
            started = sim.clock.t
            first_sample = len(sim.samples)
            hit, lookup = sim.observer.hit_tokens, sim.observer.lookup_tokens
            for phase in point.phases:
                sim.run(phase.driver, phase.requests)
            if point.finish is not None:
                point.finish(point, sim.observer.hit_tokens - hit, sim.observer.lookup_tokens - lookup)
            row = run.save_point(point, sim, sim.samples[first_sample:], started)
            if on_point is not None:
                on_point(row)
    except BaseException as exc:
        run.finish(exc)
        raise
    run.finish()
    if run.light:
        return run  # type: ignore[return-value]  # point_rows / request_rows, for the tuner and fits
    return run.results()


def default_ingestion_lengths(target: SimTarget, count: int = 8) -> list[int]:
    """bench's default: `count` lengths from 32 tokens to 90 % of what the server takes."""
    top = int(0.9 * min(target.max_input_tokens or 4096, (target.max_total_tokens or 4097) - 1))
    if not target.scheduler.chunking:
        top = min(top, target.scheduler.max_batch_prefill_tokens)
    return spread_lengths(32, max(top, 33), count)


def _points(scenario: Scenario, seed: int) -> Any:
    """What the simulated clients send for this scenario, from the run's prompts (simulate.workloads)."""
    if isinstance(scenario, BatchScenario):
        return lambda p: batch_points(p, scenario)
    if isinstance(scenario, ConcurrencyScenario):
        return lambda p: concurrency_points(p, scenario, seed)
    if isinstance(scenario, RateScenario):
        return lambda p: rate_points(p, scenario, seed)
    if isinstance(scenario, IngestionScenario):
        return lambda p: ingestion_points(p, scenario)
    if isinstance(scenario, SharedPrefix):
        return lambda p: shared_prefix_points(scenario)
    if isinstance(scenario, MultiTurn):
        return lambda p: multi_turn_points(scenario)
    assert isinstance(scenario, DecodeStallScenario)
    return lambda p: decode_stall_points(scenario)


def play_scenario(cost_model: CostModelSource | SimTarget, scenario: Scenario, **options: Any) -> Results:
    """One scenario (a tgi_toolkit.scenarios dataclass) on the simulated server: checked against its limits,
    then run on the virtual clock; the options as in this module's docstring."""
    topts, ropts = _split(options)
    target = make_target(cost_model, **topts)
    if isinstance(scenario, IngestionScenario):
        scenario = scenario.with_lengths(default_ingestion_lengths(target))
    scenario.check(target)
    return play_points(target, scenario.name, scenario.workload(), _points(scenario, int(ropts.get("seed", 0))), ropts)


def _wrapper(cls: type[Scenario], what: str) -> Any:
    """The public `run_<scenario>`: keywords -> the scenario object -> `play_scenario` (bench's parameters and
    defaults)."""

    def run(cost_model: CostModelSource | SimTarget, **params: Any) -> Results:
        scenario, options = split(cls, params)
        return play_scenario(cost_model, scenario, **options)

    run.__signature__ = wrapper_signature(cls, "cost_model")  # type: ignore[attr-defined]
    run.__doc__ = what
    return run


run_batch = _wrapper(BatchScenario, "bench.run_batch, simulated: B prompts at once, `warmups` + `runs` times per "
                                    "batch size.")
run_concurrency = _wrapper(ConcurrencyScenario, """bench.run_concurrency, simulated: N closed-loop users for each N
    and (prompt, output) pair, started over bench's ramp (`ramp_up`: "auto", a request a user sent together first
    and their mean duration; 0: all at once).""")
run_rate = _wrapper(RateScenario, "bench.run_rate, simulated: constant or seeded Poisson arrivals (the same send "
                                  "times as bench's).")
measure_ingestion = _wrapper(IngestionScenario, "bench.measure_ingestion, simulated: one request at a time, one new "
                                                "token; `.ingestion()` fits it.")
run_shared_prefix = _wrapper(SharedPrefix, """bench.run_shared_prefix, simulated: groups sharing a prefix;
    the point's prefix_cache_hit_rate is the scheduler's own count (hit / looked-up prompt tokens).""")
run_multi_turn = _wrapper(MultiTurn, """bench.run_multi_turn, simulated: each turn resends the history (the
    last answer is recomputed, as TGI never caches generated tokens).""")
run_decode_stall = _wrapper(DecodeStallScenario, """bench.run_decode_stall, simulated: the running streams' largest
    inter-token gap while a long prompt joins (chunked: one mixed forward; unchunked: the whole prefill alone).""")


SCENARIO_FUNCTIONS = {"batch": run_batch, "concurrency": run_concurrency, "rate": run_rate,
                      "ingestion": measure_ingestion, "shared_prefix": run_shared_prefix,
                      "multi_turn": run_multi_turn, "decode_stall": run_decode_stall}


def run_scenario(scenario: str, cost_model: CostModelSource | SimTarget, **params: Any) -> Results:
    """Any scenario's `run_<scenario>` by name (`shared-prefix` or `shared_prefix`)."""
    spec, options = split(scenario_class(scenario), params)
    return play_scenario(cost_model, spec, **options)


def kv_capacity_tokens(cost_model: CostModelSource | SimTarget, **options: Any) -> float:
    """The KV capacity in tokens the simulated server has (bench.kv_capacity_tokens's counterpart)."""
    topts, _ = _split(options)
    value = make_target(cost_model, **topts).scheduler.max_batch_total_tokens
    return float(value) if value else math.nan
