"""Sizing a tuning: the workload's demand, the capacity plan for it, and how the server's KV capacity follows
--cuda-memory-fraction (`KvSizing`), the numbers that bound the search space (tgi_toolkit.tune.space).

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

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tgi_toolkit.sweep.spec import Workload

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.planner import Plan
    from tgi_toolkit.planner.shape import ModelConfigSource

TUNABLE_SCENARIOS = ("concurrency", "rate", "batch")


@dataclass
class Demand:
    """What a workload asks of the server: the longest prompt and output, and requests in flight."""

    prompt_tokens: int
    output_tokens: int
    concurrency: int


def _default(scenario: str, name: str) -> Any:
    from tgi_toolkit.scenarios.kinds import scenario_class

    return scenario_class(scenario).default(name)


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
    from tgi_toolkit.models.files import ModelNotFoundError, converted_model_dir, resolve_model

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


def plan_for(base: LauncherConfig, backend: str, demand: Demand, *, model_config: ModelConfigSource | None = None,
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


def kv_sizing(base: LauncherConfig, backend: str, demand: Demand, plan: Plan, *,
              model_config: ModelConfigSource | None = None, gpu: str | int | None = None,
              env: Mapping[str, str] | None = None) -> KvSizing:
    """How `backend`'s KV capacity follows --cuda-memory-fraction for `base` (module docstring, "The KV knob").

    `env`: the server's environment, read now (TGI_TOOLKIT_KV_CACHE_GIB, PREFILL_CHUNKING, ...; None: this
    process's).
    """
    from tgi_toolkit.config.prefill_default import GPU_FP16_FLOPS, launcher_max_batch_prefill_tokens
    from tgi_toolkit.config.scheduling import embedded_kv_bytes, kv_capacity_tokens
    from tgi_toolkit.planner.shape import load_config

    model = model_config if model_config is not None else model_config_path(base)
    config = load_config(model)
    env = dict(os.environ if env is None else env)
    chunking = _chunking(base, backend, env)
    if backend == "embedded":
        per_block, block = plan.model.kv_bytes_per_token * plan.hardware.block_size, plan.hardware.block_size
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
                         **given).capacity.kv_capacity_tokens

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


def tuned_base(base: LauncherConfig, plan: Plan) -> LauncherConfig:
    """The base with the request limits the plan derived from the workload (where the base sets none)."""
    update: dict[str, Any] = {}
    if base.max_input_tokens is None and base.max_input_length is None:
        update["max_input_tokens"] = plan.limits.max_input_tokens
    if base.max_total_tokens is None:
        update["max_total_tokens"] = plan.limits.max_total_tokens
    return type(base)(**{**base.model_dump(exclude_unset=True), **update})
