"""Searching launcher settings with the sweep runner: a planner-bounded space, a coarse grid, then
bisection around the best, then a second measurement of the winner.

1. Plan: the capacity planner (tgi_toolkit.planner) turns the model, the hardware and the
   workload's lengths into max_input_tokens / max_total_tokens for the workload, the KV capacity
   the server will infer (max_batch_total_tokens) and how many requests fit at once.
2. Space: each knob gets an ordered ladder of candidate values bounded by what can matter:
   max_batch_size 1 .. the workload's concurrency (capped by the requests that fit);
   cuda_memory_fraction for a ladder of KV capacities (below); max_batch_prefill_tokens from one
   prompt in one forward (max_input_tokens) up to every concurrent prompt in one prefill. Beyond those
   bounds a setting changes nothing, or does not fit. waiting_served_ratio and max_waiting_tokens have
   short default ladders, only where the server uses them (prefill chunking off: PREFILL_CHUNKING=0);
   any other field (dtype, quantize, ...) is searched over the values given in `space`.
3. Coarse round: up to `levels` values per knob (ends included); when their product exceeds the
   round's budget, a spread subset chosen by farthest-point sampling from the planner's own
   recommendation.
4. Refinement rounds: around the best configuration so far (the closest, when none meets the
   objectives), each knob is bisected toward its nearest tried values on either side.
5. Confirmation: the winner is measured again with other prompts (seed + 1); the result says
   whether it still meets the objectives.
Every configuration runs through `Sweep` into one folder, so an interrupted tuning resumes.

The KV knob. TGI 3 ignores a given --max-batch-total-tokens on flash models (it logs that the flag is
deprecated and uses the capacity its warm-up infers from free memory, docs/tgi-rules.md L2 step 5), the
embedded engine likewise, and vLLM has no such flag (config/vllm_args.py), so max_batch_total_tokens is
no knob: asking for it is an error. The KV capacity is moved by the memory it is given,
--cuda-memory-fraction. The ladder keeps the question "how many KV tokens": capacities from one request
(max_total_tokens, the router's floor) to min(capacity at the base's fraction, concurrency x tokens per
request) in steps of doubling requests, each turned into the smallest fraction (4 significant digits,
rounded up) whose capacity reaches it (`KvSizing.fraction_for`), by the server's own arithmetic:

- embedded engine: capacity = floor(floor(TGI_TOOLKIT_KV_CACHE_GIB x 2^30 x fraction) / (KV bytes per
  token x block size)) x block size (config.scheduling.embedded_kv_bytes and kv_capacity_tokens, what
  the engine runs), so fraction ~= tokens x KV bytes per token / (GiB x 2^30). SmolLM2-135M in
  float32 holds 46,080 B a token: 80 tokens need 3,686,400 B of the default 2 GiB, fraction 0.001717.
- tgi / tgi-docker: the planner's warm-up formula, free memory - (1 - fraction x 0.90) x total in
  blocks plus the warm-up batch's blocks; it has no closed inverse worth keeping (the prefill
  activations and the launcher's VRAM cap move with it), so the fraction is found by bisection on it.
- vllm: the same knob is --gpu-memory-utilization (to_vllm_args passes it on); the planner with
  vLLM's rule (no 0.90 wiggle room, 16-token blocks), from vLLM's default 0.9 when the base sets none.
The top rung is the base's own fraction (TGI's default 1.0): the tuner never gives the server more
memory than the shared settings allow.
"""

from __future__ import annotations

import inspect
import itertools
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from tgi_toolkit.bench import schema as S
from tgi_toolkit.sweep.spec import Sweep, Workload, as_base, make_config
from tgi_toolkit.tune.select import MEETS, Objectives, TuneResult, choose, config_row, rank_configs

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.planner import Plan
    from tgi_toolkit.sweep.runner import Executor

KV_KNOB = "cuda_memory_fraction"
DEFAULT_KNOBS = ("max_batch_size", KV_KNOB, "max_batch_prefill_tokens")
SCHEDULER_LADDERS: dict[str, list[float | int]] = {"waiting_served_ratio": [0.0, 0.3, 1.2, 3.0],
                                                  "max_waiting_tokens": [1, 5, 20, 50]}
LADDER_KNOBS = (*DEFAULT_KNOBS, *SCHEDULER_LADDERS)
# Fields a server never acts on, whatever the backend: searching them measures one configuration many times.
IGNORED_KNOBS = {
    "max_batch_total_tokens": "TGI 3 ignores a given --max-batch-total-tokens on flash models (\"deprecated\" "
                              "warning; the KV capacity is inferred from the memory after warm-up, "
                              "docs/tgi-rules.md L2), the embedded engine likewise, and vLLM has no such flag; "
                              "tune cuda_memory_fraction (the KV memory) instead",
}
CHUNKING_IGNORES = ("waiting_served_ratio", "max_waiting_tokens")
TUNABLE_SCENARIOS = ("concurrency", "rate", "batch")


@dataclass
class Demand:
    """What a workload asks of the server: the longest prompt and output, and requests in flight."""

    prompt_tokens: int
    output_tokens: int
    concurrency: int


@dataclass
class Knob:
    """One searched field: its ordered candidate values and why those."""

    name: str
    values: list[Any]
    source: str

    def index(self, value: Any) -> int:
        """Position of `value` on the ladder (the nearest one for a number between two rungs)."""
        if value in self.values:
            return self.values.index(value)
        if isinstance(value, (int, float)) and all(isinstance(v, (int, float)) for v in self.values):
            return min(range(len(self.values)), key=lambda i: (abs(self.values[i] - value), i))
        raise ValueError(f"{self.name}={value!r} is not one of the candidates {self.values}")

    def to_dict(self) -> dict[str, Any]:
        return {"values": self.values, "source": self.source}


def _default(scenario: str, name: str) -> Any:
    from tgi_toolkit.bench.api import SCENARIO_FUNCTIONS

    return inspect.signature(SCENARIO_FUNCTIONS[scenario]).parameters[name].default


def _top(value: Any) -> int:
    return int(max(value)) if isinstance(value, (list, tuple)) else int(value)


def workload_demand(workload: Workload) -> Demand:
    """The demand of a concurrency, rate or batch workload (the bench's defaults where it sets none)."""
    scenario, params = workload.scenario, workload.params

    def get(name: str) -> Any:
        return params[name] if name in params else _default(scenario, name)

    if scenario == "concurrency":
        return Demand(_top(get("prompt_tokens")), _top(get("max_new_tokens")), _top(get("users")))
    if scenario == "rate":
        in_flight = get("max_concurrency") or get("requests")  # open loop: at most every request at once
        return Demand(_top(get("prompt_tokens")), _top(get("max_new_tokens")), int(in_flight))
    if scenario == "batch":
        return Demand(int(get("sequence_length")), int(get("decode_length")), _top(get("batch_sizes")))
    raise ValueError(f"workload: {scenario!r} cannot be tuned for ({scenario} sends one request at a time, so "
                     f"batching settings change nothing); use one of {', '.join(TUNABLE_SCENARIOS)}")


def model_config_path(config: LauncherConfig) -> Path:
    """config.json of the model the server would load, found the way the embedded engine finds it."""
    from tgi_toolkit.config.model_files import ModelNotFoundError, converted_model_dir, resolve_model

    try:
        path = converted_model_dir(resolve_model(config.model_id, config.revision)) / "config.json"
    except ModelNotFoundError as exc:
        raise ValueError(f"model_config: cannot find {config.model_id!r} locally to plan its capacity ({exc}); "
                         "pass model_config= (a config.json, a model directory or a dict)") from None
    return path


VLLM_DEFAULT_MEMORY = 0.9  # vLLM's --gpu-memory-utilization default; to_vllm_args leaves TGI's 1.0 out


def _plan_kwargs(base: LauncherConfig, demand: Demand) -> dict[str, Any]:
    return dict(dtype=base.dtype, quantize=base.quantize, memory_fraction=base.cuda_memory_fraction,
                prompt_tokens=demand.prompt_tokens, output_tokens=demand.output_tokens,
                max_input_tokens=base.max_input_tokens or base.max_input_length,
                max_total_tokens=base.max_total_tokens, max_batch_prefill_tokens=base.max_batch_prefill_tokens,
                model_id=base.model_id)


def _gpu_plan(model: Any, gpu: str | int, base: LauncherConfig, backend: str, common: Mapping[str, Any],
              **kwargs: Any) -> Plan:
    from tgi_toolkit.planner import plan

    vllm = dict(wiggle_room=1.0, block_size=16) if backend == "vllm" else {}  # the planner's vLLM rule
    return plan(model, gpu, kv_cache_dtype=base.kv_cache_dtype, num_shard=base.num_shard or 1,
                **{**common, **vllm, **kwargs})


def plan_for(base: LauncherConfig, backend: str, demand: Demand, *, model_config: Any = None,
             gpu: str | int | None = None, env: Mapping[str, str] | None = None) -> Plan:
    """The capacity plan for `base` serving `demand`: the CPU engine's, or a GPU's for other backends.

    `env`: the server's environment (TGI_TOOLKIT_KV_CACHE_GIB, ATTENTION, ...; None: this process's).
    """
    from tgi_toolkit.planner import plan_embedded

    model = model_config if model_config is not None else model_config_path(base)
    common = _plan_kwargs(base, demand)
    if backend == "embedded":
        result = plan_embedded(model, env=env, **common)
    elif gpu is None:
        raise ValueError(f"gpu: planning backend {backend!r} needs the GPU (a card such as 'A100-80GB', or a "
                         "memory size such as '24GiB')")
    else:
        if backend == "vllm" and base.cuda_memory_fraction == 1.0:
            common["memory_fraction"] = VLLM_DEFAULT_MEMORY
        result = _gpu_plan(model, gpu, base, backend, common)
    if not result.fits:
        raise ValueError("the capacity plan does not fit, so there is nothing to tune: "
                         + "; ".join(result.warnings + result.suggestions))
    return result


def _round_up(value: float, digits: int = 4) -> float:
    """`value` rounded up to `digits` significant digits (so a fraction shown in a label still reaches its target)."""
    exponent = math.floor(math.log10(value)) - (digits - 1)
    return round(math.ceil(value / 10**exponent - 1e-9) * 10**exponent, -exponent)


@dataclass
class KvSizing:
    """The server's KV capacity (the max_batch_total_tokens it infers) as a function of --cuda-memory-fraction.

    `capacity(fraction, prefill)` is the server's arithmetic (module docstring); `default_prefill(fraction)`
    the launcher's max_batch_prefill_tokens when none is given (None where TGI's router rules do not apply:
    vLLM); `top` the largest fraction a candidate may take; `chunking` whether the server chunks prefills
    (None: not a TGI question, vLLM).
    """

    backend: str
    top: float
    chunking: bool | None
    capacity: Callable[[float, int | None], int]
    default_prefill: Callable[[float], int | None]
    rule: str
    _seen: dict[tuple[float, int | None], int] = field(default_factory=dict, repr=False)

    def tokens(self, fraction: float, prefill: int | None = None) -> int:
        key = (float(fraction), prefill)
        if key not in self._seen:
            self._seen[key] = int(self.capacity(float(fraction), prefill))
        return self._seen[key]

    def fraction_for(self, tokens: int) -> float:
        """The smallest fraction (4 significant digits, rounded up) whose capacity reaches `tokens`; at most `top`."""
        if self.tokens(self.top) <= tokens:
            return self.top
        low, high = 0.0, self.top
        for _ in range(60):  # capacity never falls as the fraction grows: bisection
            middle = (low + high) / 2
            if middle <= 0:
                break
            low, high = (low, middle) if self.tokens(middle) >= tokens else (middle, high)
        fraction = _round_up(high)
        while self.tokens(fraction) < tokens:  # rounding to the digits shown must not lose a block
            fraction = _round_up(fraction * (1 + 1e-4))
        return min(fraction, self.top)


def _chunking(base: LauncherConfig, backend: str, env: Mapping[str, str]) -> bool | None:
    from tgi_toolkit.config import ConfigError

    try:
        return base.chunking(env, backend="tgi" if backend == "tgi-docker" else backend)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


def kv_sizing(base: LauncherConfig, backend: str, demand: Demand, plan: Plan, *, model_config: Any = None,
              gpu: str | int | None = None, env: Mapping[str, str] | None = None) -> KvSizing:
    """How `backend`'s KV capacity follows --cuda-memory-fraction for `base` (module docstring, "The KV knob").

    `env`: the server's environment, read now (TGI_TOOLKIT_KV_CACHE_GIB, PREFILL_CHUNKING, ...; None: this
    process's).
    """
    from tgi_toolkit.config.scheduling import (
        GPU_FP16_FLOPS,
        embedded_kv_bytes,
        kv_capacity_tokens,
        launcher_max_batch_prefill_tokens,
    )
    from tgi_toolkit.planner.shape import load_config

    model = model_config if model_config is not None else model_config_path(base)
    config = load_config(model)
    env = dict(os.environ if env is None else env)
    chunking = _chunking(base, backend, env)
    if backend == "embedded":
        per_block, block = plan.kv_bytes_per_token * plan.block_size, plan.block_size
        prefill = launcher_max_batch_prefill_tokens(config, gpu_fp16_flops=None)[0]
        return KvSizing(backend, float(base.cuda_memory_fraction), chunking,
                        lambda f, _p: kv_capacity_tokens(embedded_kv_bytes(env, f), per_block, block),
                        lambda _f: prefill,
                        f"floor(floor(TGI_TOOLKIT_KV_CACHE_GIB x 2^30 x fraction) / {per_block:,} B per "
                        f"{block}-token block) x {block}")
    if gpu is None:
        raise ValueError(f"gpu: backend {backend!r} needs the GPU to size its KV cache")
    from tgi_toolkit.planner.gpus import resolve_gpu

    common = _plan_kwargs(base, demand)
    card = resolve_gpu(gpu)
    top = float(base.cuda_memory_fraction)
    if backend == "vllm" and top == 1.0:
        top = VLLM_DEFAULT_MEMORY

    def capacity(fraction: float, prefill: int | None) -> int:
        given = {"max_batch_prefill_tokens": prefill} if prefill is not None else {}
        return _gpu_plan(model, gpu, base, backend, common, memory_fraction=fraction, _suggest=False,
                         **given).max_batch_total_tokens

    def default_prefill(fraction: float) -> int | None:
        if backend == "vllm":
            return None
        return launcher_max_batch_prefill_tokens(config, gpu_fp16_flops=GPU_FP16_FLOPS.get(card.name),
                                                 gpu_memory_bytes=card.memory_bytes, num_shard=base.num_shard or 1,
                                                 cuda_memory_fraction=fraction)[0]

    rule = ("the planner's vLLM rule (gpu_memory_utilization x memory - weights - activations, 16-token blocks)"
            if backend == "vllm" else "TGI's warm-up: free - (1 - fraction x 0.90) x memory, in blocks, "
            "plus the warm-up batch's blocks (the planner)")
    return KvSizing(backend, top, chunking, capacity, default_prefill, rule)


def _doubling(unit: int, low: int, high: int) -> list[int]:
    """unit x 1, 2, 4, ... within [low, high], with both ends."""
    values = {low, high}
    step = unit
    while step <= high:
        if step >= low:
            values.add(step)
        step *= 2
    return sorted(values)


def check_knob(name: str, kv: KvSizing | None) -> None:
    """Refuse a field the server would not act on, in one line naming it and the knobs that have ladders."""
    allowed = f"knobs with a ladder: {', '.join(LADDER_KNOBS)}; any other launcher field with given values"
    if name in IGNORED_KNOBS:
        raise ValueError(f"knob {name!r}: {IGNORED_KNOBS[name]} ({allowed})")
    backend = kv.backend if kv is not None else None
    if backend == "vllm":
        from tgi_toolkit.config.vllm_args import NO_VLLM_EQUIVALENT

        if name in NO_VLLM_EQUIVALENT:
            raise ValueError(f"knob {name!r}: no vLLM counterpart ({NO_VLLM_EQUIVALENT[name]}); {allowed}")
    if name in CHUNKING_IGNORES and kv is not None and kv.chunking:
        raise ValueError(f"knob {name!r}: ignored with prefill chunking, TGI 3's default (\"Model supports prefill "
                         "chunking. `waiting_served_ratio` and `max_waiting_tokens` will be ignored.\"); set "
                         f"PREFILL_CHUNKING=0 to tune the older path; {allowed}")


def build_space(base: LauncherConfig, demand: Demand, plan: Plan, knobs: Sequence[str] = DEFAULT_KNOBS,
                given: Mapping[str, Sequence[Any]] | None = None, kv: KvSizing | None = None) -> dict[str, Knob]:
    """Candidate ladders for `knobs` (plus every field in `given`), bounded by the plan and the workload.

    `kv` (from `kv_sizing`) turns the KV ladder into cuda_memory_fraction values and says which
    scheduler fields the server ignores; without it only the other ladders can be built.
    """
    given = {k: list(v) for k, v in (given or {}).items()}
    for name in [*knobs, *given]:
        check_knob(name, kv)
    users = max(1, min(demand.concurrency, plan.concurrent_users))
    why_users = (f"the workload's {demand.concurrency} requests in flight"
                 + (f", capped at the {plan.concurrent_users} that fit" if plan.concurrent_users < demand.concurrency
                    else ""))
    per_request = plan.tokens_per_request
    total_high = max(plan.max_total_tokens, min(plan.max_batch_total_tokens, users * per_request))
    prefill_low = plan.max_input_tokens
    derived: dict[str, tuple[list[Any], str]] = {
        "max_batch_size": (_doubling(1, 1, users), f"1 to {users}: {why_users}"),
        "max_batch_prefill_tokens": (
            _doubling(demand.prompt_tokens, prefill_low, max(prefill_low, min(users * demand.prompt_tokens,
                                                                              total_high))),
            f"{prefill_low} (one prompt in one forward: max_input_tokens; with chunking a smaller budget is "
            f"allowed and cuts a prompt in chunks, give it in `space`) to every concurrent prompt in one prefill, "
            f"at most {total_high}"),
    }
    if kv is not None:
        tokens = _doubling(per_request, plan.max_total_tokens, total_high)
        fractions = [kv.fraction_for(t) for t in tokens]
        pairs = ", ".join(f"{f:g} -> {kv.tokens(f):,}" for f in dict.fromkeys(fractions))
        derived[KV_KNOB] = (sorted(set(fractions)), (
            f"KV capacities {tokens[0]} (one request: max_total_tokens) to {total_high} = min(KV capacity "
            f"{plan.max_batch_total_tokens}, {users} x {per_request} tokens per request), as the smallest fraction "
            f"giving each (capacity = {kv.rule}): {pairs} tokens"))
    space: dict[str, Knob] = {}
    for name in [*knobs, *(k for k in given if k not in knobs)]:
        if name in given:
            values = given[name]
            if not values:
                raise ValueError(f"space: {name!r} has no values")
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                values = sorted(set(values))
            space[name] = Knob(name, values, "given")
        elif name in derived:
            space[name] = Knob(name, *derived[name])
        elif name == KV_KNOB:
            raise ValueError(f"space: the {KV_KNOB} ladder needs kv=kv_sizing(...) (how the KV capacity follows it)")
        elif name in SCHEDULER_LADDERS:
            space[name] = Knob(name, list(SCHEDULER_LADDERS[name]), "default ladder (around TGI's default)")
        else:
            raise ValueError(f"space: no ladder is known for {name!r}; give its values, e.g. space={{{name!r}: [...]}}")
    return space


def tuned_base(base: LauncherConfig, plan: Plan) -> LauncherConfig:
    """The base with the request limits the plan derived from the workload (where the base sets none)."""
    update: dict[str, Any] = {}
    if base.max_input_tokens is None and base.max_input_length is None:
        update["max_input_tokens"] = plan.max_input_tokens
    if base.max_total_tokens is None:
        update["max_total_tokens"] = plan.max_total_tokens
    return type(base)(**{**base.model_dump(exclude_unset=True), **update})


def repair(candidate: dict[str, Any], base: LauncherConfig, kv: KvSizing | None = None) -> dict[str, Any]:
    """Keep a combination within TGI 3's router rules (docs/tgi-rules.md L4), as the server will check them.

    - max_batch_prefill_tokens <= max_batch_total_tokens, the capacity the server infers from the
      candidate's KV memory (`kv`): a larger budget, given or the launcher's default (its FLOPs formula,
      4096 where the card is unknown, capped at the context), is lowered to the capacity.
    - max_input_tokens <= max_batch_prefill_tokens only without prefill chunking: there a smaller
      budget is raised to one prompt; with chunking (TGI 3's default) a prompt longer than the budget
      is cut in chunks, so nothing is required.
    Without `kv` (or on vLLM, which has neither rule) the candidate is returned as it is.
    """
    out = dict(candidate)
    if kv is None or kv.backend == "vllm":
        return out
    fraction = out.get(KV_KNOB, base.cuda_memory_fraction)
    prefill = out.get("max_batch_prefill_tokens", base.max_batch_prefill_tokens)
    capacity = kv.tokens(fraction, prefill)
    budget = prefill if prefill is not None else kv.default_prefill(fraction)
    if budget is not None and budget > capacity:
        out["max_batch_prefill_tokens"] = budget = capacity
    prompt = base.max_input_tokens or base.max_input_length
    if kv.chunking is False and prompt is not None and budget is not None and budget < prompt:
        out["max_batch_prefill_tokens"] = prompt  # may now exceed a tiny capacity: the server refuses it, as TGI
    return out


def _spread(n: int, levels: int) -> list[int]:
    if n <= levels:
        return list(range(n))
    return sorted({round(i * (n - 1) / (levels - 1)) for i in range(levels)})


def coarse(space: Mapping[str, Knob], levels: int, budget: int, seed: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Up to `levels` values per knob (both ends); over `budget` combinations, a spread subset by
    farthest-point sampling that starts at `seed` (the planner's recommendation)."""
    names = list(space)
    per_knob = [_spread(len(space[n].values), max(2, levels)) for n in names]
    grid = list(itertools.product(*per_knob))

    def position(point: Sequence[int]) -> list[float]:
        return [i / (len(space[n].values) - 1) if len(space[n].values) > 1 else 0.0 for n, i in zip(names, point,
                                                                                                     strict=True)]

    if len(grid) > budget:
        start = position([space[n].index(seed[n]) for n in names])
        chosen = [min(grid, key=lambda p: (math.dist(position(p), start), p))]
        while len(chosen) < budget:
            chosen.append(max((p for p in grid if p not in chosen),
                              key=lambda p: (min(math.dist(position(p), position(c)) for c in chosen), p)))
        grid = chosen
    return [{n: space[n].values[i] for n, i in zip(names, point, strict=True)} for point in grid]


def refine(space: Mapping[str, Knob], center: Mapping[str, Any], tried: Sequence[Mapping[str, Any]]
           ) -> list[dict[str, Any]]:
    """Bisect each knob between `center`'s value and the nearest tried values below and above it."""
    out: list[dict[str, Any]] = []
    for name, knob in space.items():
        if name not in center:
            continue
        here = knob.index(center[name])
        seen = sorted({knob.index(t[name]) for t in tried if name in t})
        below = max((i for i in seen if i < here), default=None)
        above = min((i for i in seen if i > here), default=None)
        for other in (below, above):
            if other is None:
                continue
            middle = (here + other) // 2 if other > here else (here + other + 1) // 2
            if middle not in (here, other):
                out.append({**center, name: knob.values[middle]})
    return out


def _label(overrides: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in overrides.items()) or "base"


def _entries(folder: Path, config_ids: set[str]) -> list[dict[str, Any]]:
    from tgi_toolkit.sweep.manifest import load_manifest

    return [e for e in load_manifest(folder).get("configs", []) if e["config_id"] in config_ids]


def _points(folder: Path, entries: Sequence[Mapping[str, Any]], workload: Workload) -> pd.DataFrame:
    """The points `workload` measured for these configurations (other runs in the folder are left out)."""
    from tgi_toolkit.bench.results import load_results

    run_ids = {e["workloads"][workload.key]["run_id"] for e in entries
               if e.get("workloads", {}).get(workload.key, {}).get("run_id")}
    points = load_results(folder).points
    return points[points[S.RUN_ID].isin(run_ids)].reset_index(drop=True)


def _confirm(folder: Path, base: LauncherConfig, backend: str, server: Mapping[str, Any], overrides: dict[str, Any],
             searched: Workload, again: Workload, objectives: Objectives, progress: bool) -> dict[str, Any]:
    """Measure one configuration again with `again` (other prompts); its best point against the objectives."""
    from tgi_toolkit.sweep.manifest import Manifest
    from tgi_toolkit.sweep.runner import ConfigJob, run_config

    made = make_config(base, overrides)
    manifest = Manifest(folder)
    entry = manifest.entry(made.config_id)
    if entry.get("workloads", {}).get(again.key, {}).get("status") != "complete":
        job = ConfigJob(made.config_id, made.label, made.config, backend, [searched, again], dict(server))
        entry = run_config(job, folder, entry, save=manifest.put, progress=progress)
    points = _points(folder, [entry], again)
    if points.empty:
        record = entry.get("workloads", {}).get(again.key, {})
        return {MEETS: False, "error": record.get("error") or entry.get("error")}
    row = rank_configs(points, objectives).iloc[0]
    keep = [MEETS, S.GOODPUT_RPS, S.OUTPUT_THROUGHPUT, S.POINT_ID, S.stat_column("ttft", objectives.percentile),
            S.stat_column("tpot", objectives.percentile), "error_rate", "violation"]
    return {k: (bool(row[k]) if k == MEETS else row[k]) for k in keep} | {"run_id": points[S.RUN_ID].iloc[0]}


def tune(base: LauncherConfig | Mapping[str, Any] | str | None, workload: Workload | Mapping[str, Any],
         objectives: Objectives | Mapping[str, Any], *, output: str | Path, backend: str = "embedded",
         knobs: Sequence[str] = DEFAULT_KNOBS, space: Mapping[str, Sequence[Any]] | None = None,
         model_config: Any = None, gpu: str | int | None = None, max_configs: int = 8, levels: int = 3,
         rounds: int = 2, confirm: int = 1, server: Mapping[str, Any] | None = None,
         executor: str | Executor = "local",
         resume: bool = True, progress: bool = True) -> TuneResult:
    """Search launcher settings for the most goodput under `objectives` on `workload`; save tune.json.

    base: settings every candidate shares (model, dtype, quantize, ...). workload: the traffic to
    tune for (concurrency, rate or batch). objectives: Objectives(ttft_s=, tpot_s=, percentile=).
    knobs: the fields searched with planner-bounded ladders; space: explicit values for any field
    (they replace the ladder). model_config / gpu: for the planner (default: the model's local
    config.json; gpu is needed for GPU backends). max_configs: configurations measured in all;
    levels: values per knob in the coarse round; rounds: coarse + refinement rounds; confirm: how
    many of the best to measure again until one still meets the objectives (0: none).
    Returns a TuneResult: .best, .closest, .table, .pareto, .to_launcher_config().
    """
    objectives = Objectives.of(objectives)
    if not objectives.limits():
        raise ValueError("objectives: give ttft_s and/or tpot_s (seconds at the percentile) to tune for")
    if max_configs < 1 or rounds < 1 or levels < 2:
        raise ValueError("max_configs and rounds must be >= 1, levels >= 2")
    base_config = as_base(base)
    workload = Workload.from_dict(workload)
    demand = workload_demand(workload)
    server = dict(server or {})
    # The server's environment, as the sweep gives it (KV space, scheduling mode): the arithmetic must be its.
    env = {**os.environ, **{str(k): str(v) for k, v in (server.get("env") or {}).items()}}
    plan = plan_for(base_config, backend, demand, model_config=model_config, gpu=gpu, env=env)
    shared = tuned_base(base_config, plan)
    kv = kv_sizing(shared, backend, demand, plan, model_config=model_config, gpu=gpu, env=env)
    knob_space = build_space(shared, demand, plan, knobs, space, kv=kv)
    slo = {k: v for k, v in (("slo_ttft_s", objectives.ttft_s), ("slo_tpot_s", objectives.tpot_s)) if v is not None}
    # The objectives define goodput: they win over any SLO the workload carried.
    searched = Workload(workload.scenario, name=workload.name, **{**workload.params, **slo})
    folder = Path(output).resolve()

    # The coarse round starts from what the planner would launch for this workload.
    recommended = {"max_batch_size": plan.max_batch_size, KV_KNOB: kv.top,
                   "max_batch_prefill_tokens": plan.max_batch_prefill_tokens}
    seed = {}
    for name, knob in knob_space.items():
        value = recommended.get(name)
        usable = value is not None and (value in knob.values or isinstance(value, (int, float)))
        seed[name] = value if usable else knob.values[-1]
    first_budget = max_configs if rounds == 1 else max(2, math.ceil(max_configs / 2))
    candidates = coarse(knob_space, levels, min(first_budget, max_configs), seed)
    tried: list[dict[str, Any]] = []
    history: list[dict[str, Any]] = []
    result: TuneResult | None = None
    for number in range(1, rounds + 1):
        new = []
        for candidate in candidates:
            fixed = repair(candidate, shared, kv)
            if fixed not in tried and fixed not in new:
                new.append(fixed)
        new = new[:max_configs - len(tried)]
        if not new:
            break
        tried += new
        kind = "coarse grid" if number == 1 else f"refinement around {history[-1]['center']}"
        Sweep(shared, workloads=[searched], configs=tried, backend=backend, server=server,
              name=f"tune round {number}").run(folder, resume=resume, progress=progress, executor=executor)
        ids = {make_config(shared, c).config_id for c in tried}
        entries = _entries(folder, ids)
        result = choose(_points(folder, entries, searched), objectives, configs=entries, knobs=list(knob_space))
        center = result.best or result.closest
        history.append({"round": number, "kind": kind, "configs": [_label(c) for c in new],
                        "center": center["label"] if center else None})
        if center is None:
            break
        candidates = refine(knob_space, {n: center["overrides"].get(n) for n in knob_space}, tried)
    if result is None:  # pragma: no cover - the coarse round always has a candidate
        raise ValueError("nothing to try: the search space is empty")

    if result.best is not None and confirm > 0:
        again = Workload(searched.scenario, name=searched.name,
                         **{**searched.params, "seed": int(searched.params.get("seed", 0)) + 1})
        meeting = [r for _, r in result.table.iterrows() if r[MEETS]][:confirm]
        confirmations = []
        for row in meeting:
            overrides = next(e["overrides"] for e in entries if e["config_id"] == row[S.CONFIG_ID])
            check = _confirm(folder, shared, backend, server, overrides, searched, again, objectives, progress)
            confirmations.append((row, check))
            if check[MEETS]:
                break
        row, check = next(((r, c) for r, c in confirmations if c[MEETS]), confirmations[0])
        if row[S.CONFIG_ID] != result.best[S.CONFIG_ID]:  # the first winner did not hold; the next one did
            result.best = config_row(result.table, row[S.CONFIG_ID], entries)
        result.best["confirmation"] = check
        history.append({"round": len(history) + 1, "kind": "confirmation (seed + 1)",
                        "configs": [r["label"] for r, _ in confirmations], "center": result.best["label"]})
        if S.CONFIG_ID in result.table:
            result.table["confirmed"] = result.table[S.CONFIG_ID].map(
                {r[S.CONFIG_ID]: c[MEETS] for r, c in confirmations})

    result.base = shared.to_dict(non_default_only=True, redact=True)
    result.base_config = shared
    result.backend = backend
    result.workload = searched.to_dict()
    result.space = {n: k.to_dict() for n, k in knob_space.items()}
    result.plan = {k: getattr(plan, k) for k in ("model", "gpu", "dtype", "quantize", "max_batch_total_tokens",
                                                 "concurrent_users", "tokens_per_request", "max_input_tokens",
                                                 "max_total_tokens", "max_batch_prefill_tokens", "max_batch_size")}
    result.plan["steps"] = list(plan.steps)
    result.rounds = history
    result.save(folder)
    return result

