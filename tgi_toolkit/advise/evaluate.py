"""One candidate, start to end: its cost model, TGI 3's default launcher settings, the knobs tuned in simulation,
the load one replica sustains, the replicas the traffic needs, and the latency predicted at that deployment.

The knobs (max_batch_prefill_tokens and the KV memory, --cuda-memory-fraction) are searched as `tune --simulate`
searches them, with the tuner's own pieces: its set-up (tune.setup.TuningSetup: the plan, the KV sizing and the
planner-bounded ladders), a spread subset of their combinations (coarse), the launcher's rules (repair) and the
simulated ranking (tune.simulated.simulate_configs). They are ranked at the first load the defaults could not
sustain: a setting that meets the objectives there raises the replica's capacity, and the capacity search runs
again for it.
With a dataset of lengths the knobs are ranked at its median lengths; the capacity search uses the dataset.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tgi_toolkit import schema as S
from tgi_toolkit.advise.candidates import Candidate
from tgi_toolkit.advise.capacity import Probes, band, meets, sustained
from tgi_toolkit.advise.traffic import Traffic
from tgi_toolkit.advise.workload import requests_at, simulate_load
from tgi_toolkit.costs.linear import CostModel
from tgi_toolkit.simulate.target import make_target
from tgi_toolkit.tune.select import MEETS, Objectives
from tgi_toolkit.tune.setup import TuningSetup

KNOBS = ("max_batch_prefill_tokens", "cuda_memory_fraction")
# One replica that carries twice the traffic costs what one carrying more would: the search stops there (the
# sustained load is then a lower bound), and such a candidate is not tuned (no setting can save a replica).
HEADROOM = 2.0
MAX_EXTRA = 2  # replicas added beyond the sustained load's count when the deployed point still misses
TUNE_BUDGET = 3  # knob combinations simulated per candidate (the defaults excluded)


@dataclass
class Evaluation:
    candidate: Candidate
    cost: CostModel
    launcher: Any  # the LauncherConfig to deploy (defaults + tuned knobs)
    overrides: dict[str, Any] = field(default_factory=dict)
    sustained: float | None = None  # requests/s (or users) one replica meets the objectives at
    lower_bound: bool = False  # the search stopped at HEADROOM x the traffic: it sustains at least that
    default_sustained: float | None = None  # the same with TGI 3's defaults, before tuning
    band: tuple[float, float] | None = None  # sustained if the predictions were off by their errors
    replicas: int | None = None
    load_per_replica: float | None = None
    row: dict[str, Any] = field(default_factory=dict)  # the deployed point (load per replica)
    run_id: str | None = None  # the deployed point's run in the results folder (with output)
    ttft: Any = None  # Uncertainty of the predicted TTFT
    tpot: Any = None
    note: str = ""
    simulations: int = 0
    seconds: float = 0.0


def cost_model(candidate: Candidate, model: dict[str, Any]) -> Any:
    if candidate.cost is not None:
        return candidate.cost
    from tgi_toolkit.costs.measured import gpu_cost_model
    from tgi_toolkit.planner.gpus import KNOWN_GPUS

    dtype = "bfloat16" if KNOWN_GPUS[candidate.gpu].bf16 else "float16"
    return gpu_cost_model(candidate.gpu, model, cost_model=candidate.pricing, num_shard=candidate.num_shard,
                          quantize=candidate.quantize, dtype=dtype, memory_fraction=candidate.memory_fraction)


def _workload(traffic: Traffic, load: float, objectives: Objectives) -> Any:
    from tgi_toolkit.sweep.spec import Workload

    prompt, output = traffic.prompt_tokens, traffic.max_new_tokens
    if traffic.lengths:
        prompt = sorted(p for p, _ in traffic.lengths)[len(traffic.lengths) // 2]
        output = sorted(o for _, o in traffic.lengths)[len(traffic.lengths) // 2]
    slo = {k: v for k, v in (("slo_ttft_s", objectives.ttft_s), ("slo_tpot_s", objectives.tpot_s)) if v}
    if traffic.closed_loop:
        return Workload("concurrency", users=[int(load)], prompt_tokens=prompt, max_new_tokens=output,
                        requests=max(traffic.requests, 4 * int(load)), **slo)
    return Workload("rate", rates=[load], arrival=traffic.arrival, prompt_tokens=prompt, max_new_tokens=output,
                    requests=requests_at(traffic, load, objectives), **slo)


def tuning_setup(candidate: Candidate, model: dict[str, Any], traffic: Traffic) -> TuningSetup:
    """The tuner's set-up for this hardware and traffic: TGI 3's defaults, with the request limits the planner
    derives from the longest lengths."""
    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.sweep.spec import Workload

    prompt, output = traffic.longest
    values: dict[str, Any] = {"cuda_memory_fraction": candidate.memory_fraction}
    if candidate.backend == "tgi":
        values.update(model_id=str(model.get("_name_or_path") or "model"),
                      num_shard=candidate.num_shard if candidate.num_shard > 1 else None, quantize=candidate.quantize)
    longest = Workload("rate", prompt_tokens=prompt, max_new_tokens=output, requests=traffic.requests)
    setup = TuningSetup.prepare(LauncherConfig(**values), candidate.backend, longest, model_config=model,
                                gpu=None if candidate.backend == "embedded" else candidate.gpu)
    fixed = setup.repair({})  # a small KV memory: the default prefill budget lowered to it, as TGI requires
    if fixed:
        shared = setup.base
        setup = replace(setup, base=type(shared)(**{**shared.model_dump(exclude_unset=True), **fixed}))
    return setup


def knob_candidates(setup: TuningSetup, cost: CostModel, budget: int = TUNE_BUDGET) -> list[dict[str, Any]]:
    """A spread of knob settings over the tuner's ladders, repaired to the launcher's rules; the defaults, and
    settings whose simulated server holds fewer than two requests (a large prefill budget's activations leave a
    small KV memory little; the ladder's one-request rung loses a token to the router's reserved block 0), are
    left out."""
    from tgi_toolkit.simulate.target import make_target
    from tgi_toolkit.sweep.spec import make_config
    from tgi_toolkit.tune.search import coarse

    space = setup.space(KNOBS)
    seed = {"max_batch_prefill_tokens": space["max_batch_prefill_tokens"].values[-1],
            "cuda_memory_fraction": setup.kv.top}
    default = setup.repair({})
    out: list[dict[str, Any]] = []
    for combo in coarse(space, 3, 2 * budget, seed):
        fixed = setup.repair(combo)
        if fixed in out or fixed == default or fixed.get("max_batch_prefill_tokens", 1) < 1:
            continue
        made = make_config(setup.base, fixed, backend=setup.backend)
        if made.valid and make_target(cost, config=made.config).scheduler.max_batch_total_tokens \
                >= 2 * setup.plan.capacity.tokens_per_request:
            out.append(fixed)
    return out[:budget]


def _tune(evaluation: Evaluation, setup: TuningSetup, traffic: Traffic, objectives: Objectives,
          at: float) -> dict[str, Any] | None:
    """The knob setting that meets the objectives at load `at` with the most goodput, or None."""
    from tgi_toolkit.sweep.spec import make_config
    from tgi_toolkit.tune.simulated import simulate_configs

    configs = knob_candidates(setup, evaluation.cost)
    if not configs:
        return None
    ranked = simulate_configs(setup.base, configs, _workload(traffic, at, objectives), evaluation.cost, objectives,
                              backend=setup.backend)
    evaluation.simulations += len(configs)
    meeting = ranked[ranked[MEETS].fillna(False).astype(bool)] if MEETS in ranked else ranked.iloc[:0]
    if meeting.empty:
        return None
    best = meeting.iloc[0]
    by_id = {make_config(setup.base, c, backend=setup.backend).config_id: c for c in configs}
    return by_id.get(best[S.CONFIG_ID])


def _uncertainties(cost: Any, rows: int) -> tuple[Any, Any]:
    from tgi_toolkit.costs.uncertainty import Uncertainty, uncertainty

    if hasattr(cost, "kernel_seconds"):  # the roofline: its regime's cross-validated error
        return uncertainty(cost, "ttft", rows=rows), uncertainty(cost, "tpot", rows=rows)
    note = "a calibrated profile of this machine: no held-out error (its fit check is in the cost model)"
    return (Uncertainty("calibrated", None, None, 0, False, note),
            Uncertainty("calibrated", None, None, 0, False, note))


def evaluate(candidate: Candidate, model: dict[str, Any], traffic: Traffic, objectives: Objectives, *,
             tune: bool = True, start: float | None = None, output: str | Path | None = None,
             seed: int = 0) -> Evaluation:
    """Everything the ranking needs about one candidate (module docstring)."""
    began = time.perf_counter()
    cost = cost_model(candidate, model)
    setup = tuning_setup(candidate, model, traffic)
    shared = setup.base
    result = Evaluation(candidate, cost, shared)

    def probes_for(config: Any) -> Probes:
        return Probes(lambda load: simulate_load(cost, traffic, load, objectives, config=config, seed=seed),
                      integer=traffic.closed_loop)

    probes = probes_for(shared)
    ceiling = HEADROOM * traffic.demand
    first = start or first_guess(cost, make_target(cost, config=shared).scheduler.max_batch_total_tokens,
                                 traffic, objectives)
    result.default_sustained = nominal = sustained(probes, objectives, first, ceiling=ceiling)
    if nominal is not None and tune and replicas(traffic.demand, nominal) > 1:
        above = min((x for x in probes.rows if x > nominal), default=nominal * 1.1)
        best = _tune(result, setup, traffic, objectives, above)
        if best:
            from tgi_toolkit.sweep.spec import make_config

            made = make_config(shared, best, backend=candidate.backend).config
            tuned = probes_for(made)
            found = sustained(tuned, objectives, above, ceiling=ceiling)
            result.simulations += len(tuned.rows)
            if found is not None and found > nominal:
                result.overrides, result.launcher, nominal, probes = best, made, found, tuned
    result.simulations += len(probes.rows)
    result.sustained = nominal
    if nominal is None:
        row = probes.rows[min(probes.rows)]
        result.note = (f"misses the objectives even at {min(probes.rows):g} {_unit(traffic)} per replica: "
                       f"TTFT {objectives.percentile} {row.get(S.stat_column('ttft', objectives.percentile)):.3g} s, "
                       f"TPOT {objectives.percentile} {row.get(S.stat_column('tpot', objectives.percentile)):.3g} s")
        result.seconds = time.perf_counter() - began
        return result
    result.lower_bound = nominal >= ceiling
    result.replicas = replicas(traffic.demand, nominal)
    while True:  # the deployment as it would run; a replica more if its own arrivals still miss the objectives
        result.load_per_replica = per_replica_load(traffic, result.replicas)
        last = result.replicas >= MAX_EXTRA + replicas(traffic.demand, nominal)
        result.row = simulate_load(cost, traffic, result.load_per_replica, objectives, config=result.launcher,
                                   output=output if last else None, seed=seed)
        result.simulations += 1
        if meets(result.row, objectives) or last:
            break
        result.replicas += 1
        result.note = "a replica added: the deployed load's own arrivals missed the objectives"
    if output is not None:
        saved = result.row if last else simulate_load(cost, traffic, result.load_per_replica, objectives,
                                                      config=result.launcher, output=output, seed=seed)
        result.run_id = saved.get(S.RUN_ID)  # the deployed point, in the results folder
    batch = result.row.get(S.SERVER_BATCH_SIZE_MAX)
    result.ttft, result.tpot = _uncertainties(cost, int(batch) if batch and batch == batch else 1)
    result.band = band(probes, objectives, (result.ttft.error, result.tpot.error), nominal, ceiling)
    result.seconds = time.perf_counter() - began
    return result


def first_guess(cost: CostModel, kv_capacity_tokens: int, traffic: Traffic, objectives: Objectives) -> float:
    """Where the capacity search starts: the load of the largest batch B whose forward meets the TPOT limit,
    priced by the cost model itself. In steady state each forward carries B decoding rows and the prompts of
    the requests that arrive meanwhile (B x prompt / output tokens), and the replica completes B requests every
    output x forward seconds. Only a starting point: the search simulates from it."""
    from tgi_toolkit.costs.features import Shape

    prompt, output = traffic.prompt_tokens, traffic.max_new_tokens
    if traffic.lengths:
        prompt = int(sum(p for p, _ in traffic.lengths) / len(traffic.lengths))
        output = int(traffic.mean_output_tokens)
    best = None
    batch = 1
    while batch * (prompt + output) <= max(kv_capacity_tokens, prompt + output) and batch <= 4096:
        new = batch * prompt / output
        step = cost.seconds(Shape(batch + 1, int(batch + new), int(batch * (prompt + output / 2) + new),
                                  batch * (prompt + output / 2) + new * prompt / 2, True, batch,
                                  batch * (prompt + output / 2)))
        if best is None or objectives.tpot_s is None or step <= objectives.tpot_s:
            best = (batch, step)
        batch *= 2
    batch, step = best  # type: ignore[misc]
    return float(batch) if traffic.closed_loop else batch / (output * step)


def _unit(traffic: Traffic) -> str:
    return "users" if traffic.closed_loop else "requests/s"


def replicas(demand: float, sustained_per_replica: float) -> int:
    """Replicas the traffic needs: the demand over what one replica sustains, rounded up (1e-9: float noise)."""
    if not sustained_per_replica > 0:
        raise ValueError(f"sustained load must be > 0; got {sustained_per_replica!r}")
    return max(1, math.ceil(demand / sustained_per_replica - 1e-9))


def per_replica_load(traffic: Traffic, count: int) -> float:
    """What each replica carries when the traffic is spread evenly (users: the busiest replica's)."""
    if traffic.closed_loop:
        return float(math.ceil(traffic.demand / count))
    return traffic.demand / count
