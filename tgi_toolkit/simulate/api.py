"""The simulator's Python API: bench's scenario functions, on a virtual clock.

    from tgi_toolkit.simulate import run_concurrency, roofline

    res = run_concurrency("cost.json", users=[1, 8, 32], prompt_tokens=512, max_new_tokens=128)
    res = run_concurrency(roofline("H100", "config.json"), users=[10], prompt_tokens=1024,
                          max_new_tokens=128, config=["--max-batch-prefill-tokens", "8192"])

The first argument is the cost model (a CostModel, a cost.json path or its dict, or a SimTarget);
scenario parameters are bench's (tgi_toolkit.bench.api), with the same defaults and checks. Options:
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
from collections.abc import Sequence
from typing import Any

from tgi_toolkit.bench import schema as S
from tgi_toolkit.bench.api import spread_lengths
from tgi_toolkit.bench.checks import concurrency_workload, ingestion_workload, rate_workload
from tgi_toolkit.bench.errors import BenchError, check_positive_ints
from tgi_toolkit.bench.results import Results
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
_RUN_OPTIONS = ("output", "seed", "prefix_tokens", "slo_ttft_s", "slo_tpot_s", "scrape_interval", "command",
                "on_point", "light")
_IGNORED = ("progress", "resume", "tokenizer", "api", "api_key", "sampling", "ignore_eos", "request_timeout",
            "dataset")


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple, range)) else [value]


def _count(name: str, value: int, minimum: int) -> int:
    return check_positive_ints(name, [value], minimum=minimum)[0]


def _split(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    unknown = set(options) - {*_TARGET_OPTIONS, *_RUN_OPTIONS, *_IGNORED}
    if unknown:
        raise BenchError(sorted(unknown)[0], "is not an option",
                         ", ".join(sorted({*_TARGET_OPTIONS, *_RUN_OPTIONS, *_IGNORED})))
    target = {k: options[k] for k in _TARGET_OPTIONS if k in options}
    run = {k: options[k] for k in _RUN_OPTIONS if k in options}
    return target, run


def _grid(target: SimTarget, prompt_tokens: Any, max_new_tokens: Any) -> list[tuple[int, int]]:
    prompts = check_positive_ints("prompt_tokens", _listed(prompt_tokens))
    outputs = check_positive_ints("max_new_tokens", _listed(max_new_tokens))
    for p in prompts:
        for o in outputs:
            target.check_lengths(p, o)
    return [(p, o) for p in prompts for o in outputs]


def _simulate(target: SimTarget, scenario: str, workload: dict[str, Any], make_points: Any,
              run_options: dict[str, Any]) -> Results:
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


def run_batch(cost_model: Any, *, batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32), sequence_length: int = 10,
              decode_length: int = 8, runs: int = 10, warmups: int = 1, **options: Any) -> Results:
    """bench.run_batch, simulated: B prompts at once, `warmups` + `runs` times per batch size."""
    topts, ropts = _split(options)
    target = make_target(cost_model, **topts)
    sizes = check_positive_ints("batch_size", _listed(batch_sizes))
    _count("sequence_length", sequence_length, 1)
    _count("decode_length", decode_length, 1)
    _count("runs", runs, 1)
    _count("warmups", warmups, 0)
    target.check_lengths(sequence_length, decode_length, "sequence_length")
    workload = {"batch_sizes": sizes, "sequence_length": sequence_length, "decode_length": decode_length,
                "runs": runs, "warmups": warmups}
    return _simulate(target, "batch", workload,
                     lambda p: batch_points(p, sizes, sequence_length, decode_length, runs, warmups), ropts)


def run_concurrency(cost_model: Any, *, users: Sequence[int] = (1, 2, 4, 8, 16, 32),
                    prompt_tokens: Sequence[int] | int = 128, max_new_tokens: Sequence[int] | int = 128,
                    requests: int | None = None, warmup_requests: int = 0, ramp_up: float | str = "auto",
                    **options: Any) -> Results:
    """bench.run_concurrency, simulated: N closed-loop users for each N and (prompt, output) pair, started
    over bench's ramp (`ramp_up`: "auto", a request a user sent together first and their mean duration; 0: all
    at once)."""
    topts, ropts = _split(options)
    target = make_target(cost_model, **topts)
    workload = concurrency_workload(users, _grid(target, prompt_tokens, max_new_tokens), requests, warmup_requests,
                                    ramp_up)
    counts, grid, ramp = workload["users"], workload["grid"], workload["ramp_up"]
    return _simulate(target, "concurrency", workload,
                     lambda p: concurrency_points(p, counts, grid, requests, warmup_requests, ramp), ropts)


def run_rate(cost_model: Any, *, rates: Sequence[float] = (1.0, 2.0, 4.0), arrival: str = "poisson",
             prompt_tokens: Sequence[int] | int = 128, max_new_tokens: Sequence[int] | int = 128,
             requests: int = 64, max_concurrency: int | None = None, **options: Any) -> Results:
    """bench.run_rate, simulated: constant or seeded Poisson arrivals (the same send times as bench's)."""
    topts, ropts = _split(options)
    target = make_target(cost_model, **topts)
    workload = rate_workload(rates, arrival, _grid(target, prompt_tokens, max_new_tokens), requests, max_concurrency)
    rates, grid = workload["rates"], workload["grid"]
    seed = int(ropts.get("seed", 0))
    return _simulate(target, "rate", workload,
                     lambda p: rate_points(p, rates, arrival, grid, requests, seed, max_concurrency), ropts)


def default_ingestion_lengths(target: SimTarget, count: int = 8) -> list[int]:
    """bench's default: `count` lengths from 32 tokens to 90 % of what the server takes."""
    top = int(0.9 * min(target.max_input_tokens or 4096, (target.max_total_tokens or 4097) - 1))
    if not target.scheduler.chunking:
        top = min(top, target.scheduler.max_batch_prefill_tokens)
    return spread_lengths(32, max(top, 33), count)


def measure_ingestion(cost_model: Any, *, prompt_tokens: Sequence[int] | None = None, repeats: int = 3,
                      **options: Any) -> Results:
    """bench.measure_ingestion, simulated: one request at a time, one new token; `.ingestion()` fits it."""
    topts, ropts = _split(options)
    target = make_target(cost_model, **topts)
    workload = ingestion_workload(target, prompt_tokens, repeats, default_ingestion_lengths)
    lengths = workload["prompt_tokens"]
    return _simulate(target, "ingestion", workload, lambda p: ingestion_points(p, lengths, repeats), ropts)


def run_shared_prefix(cost_model: Any, *, groups: int = 4, requests_per_group: int = 4, prefix_tokens: int = 512,
                      suffix_tokens: int = 32, max_new_tokens: int = 16, users: int = 4, **options: Any) -> Results:
    """bench.run_shared_prefix, simulated: groups sharing a prefix; the point's prefix_cache_hit_rate is the
    scheduler's own count (hit / looked-up prompt tokens)."""
    from tgi_toolkit.bench.workloads import SharedPrefix

    topts, ropts = _split(options)
    target = make_target(cost_model, **topts)
    workload = SharedPrefix(groups=groups, requests_per_group=requests_per_group, prefix_tokens=prefix_tokens,
                            suffix_tokens=suffix_tokens, max_new_tokens=max_new_tokens, users=users)
    target.check_lengths(prefix_tokens + suffix_tokens, max_new_tokens)
    params = {"groups": groups, "requests_per_group": requests_per_group, "prefix_tokens": prefix_tokens,
              "suffix_tokens": suffix_tokens, "max_new_tokens": max_new_tokens, "users": users}
    return _simulate(target, "shared_prefix", params, lambda p: shared_prefix_points(workload), ropts)


def run_multi_turn(cost_model: Any, *, conversations: int = 4, turns: int = 4, user_tokens: int = 64,
                   max_new_tokens: int = 32, system_tokens: int = 0, users: int | None = None,
                   **options: Any) -> Results:
    """bench.run_multi_turn, simulated: each turn resends the history (the last answer is recomputed, as
    TGI never caches generated tokens)."""
    from tgi_toolkit.bench.workloads import MultiTurn

    topts, ropts = _split(options)
    target = make_target(cost_model, **topts)
    workload = MultiTurn(conversations=conversations, turns=turns, user_tokens=user_tokens,
                         max_new_tokens=max_new_tokens, system_tokens=system_tokens, users=users)
    target.check_lengths(workload.prompt_tokens(turns - 1), max_new_tokens)
    params = {"conversations": conversations, "turns": turns, "user_tokens": user_tokens,
              "max_new_tokens": max_new_tokens, "system_tokens": system_tokens, "users": users}
    return _simulate(target, "multi_turn", params, lambda p: multi_turn_points(workload), ropts)


def run_decode_stall(cost_model: Any, *, streams: int = 8, long_prompt: int = 2000, stream_prompt: int = 32,
                     stream_tokens: int = 128, long_max_new_tokens: int = 4, lead_tokens: int = 4, repeats: int = 3,
                     warmups: int = 1, **options: Any) -> Results:
    """bench.run_decode_stall, simulated: the running streams' largest inter-token gap while a long prompt
    joins (chunked: one mixed forward; unchunked: the whole prefill alone)."""
    from tgi_toolkit.bench.workloads import DecodeStall

    topts, ropts = _split(options)
    target = make_target(cost_model, **topts)
    workload = DecodeStall(streams=streams, stream_prompt_tokens=stream_prompt, stream_tokens=stream_tokens,
                           long_prompt_tokens=long_prompt, long_max_new_tokens=long_max_new_tokens,
                           lead_tokens=lead_tokens)
    target.check_lengths(long_prompt, long_max_new_tokens, "long_prompt")
    target.check_lengths(stream_prompt, stream_tokens, "stream_prompt")
    _count("repeats", repeats, 1)
    _count("warmups", warmups, 0)
    params = {"streams": streams, "long_prompt": long_prompt, "stream_prompt": stream_prompt,
              "stream_tokens": stream_tokens, "long_max_new_tokens": long_max_new_tokens, "lead_tokens": lead_tokens,
              "repeats": repeats, "warmups": warmups}
    return _simulate(target, "decode_stall", params, lambda p: decode_stall_points(workload, repeats, warmups), ropts)


SCENARIO_FUNCTIONS = {"batch": run_batch, "concurrency": run_concurrency, "rate": run_rate,
                      "ingestion": measure_ingestion, "shared_prefix": run_shared_prefix,
                      "multi_turn": run_multi_turn, "decode_stall": run_decode_stall}


def run_scenario(scenario: str, cost_model: Any, **params: Any) -> Results:
    """`run_batch`, `run_concurrency`, `run_rate` or `measure_ingestion` by name."""
    try:
        function = SCENARIO_FUNCTIONS[scenario.replace("-", "_")]
    except KeyError:
        raise BenchError("scenario", f"{scenario!r} is not known", ", ".join(SCENARIO_FUNCTIONS)) from None
    return function(cost_model, **params)


def kv_capacity(cost_model: Any, **options: Any) -> float:
    """The KV capacity in tokens the simulated server has (bench.kv_capacity's counterpart)."""
    topts, _ = _split(options)
    value = make_target(cost_model, **topts).scheduler.max_batch_total_tokens
    return float(value) if value else math.nan
