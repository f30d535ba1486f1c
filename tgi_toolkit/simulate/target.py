"""What a simulation stands for: a cost model, the scheduler's settings and the server's limits.

The scheduler's settings come from, first to last:
- launcher flags (a LauncherConfig): max_batch_prefill_tokens, max_batch_size, waiting_served_ratio,
  max_waiting_tokens, max_input_tokens, max_total_tokens;
- the scheduling mode as TGI reads it from the environment (ATTENTION, PREFIX_CACHING, PREFILL_CHUNKING),
  or the `attention` / `prefix_caching` / `chunking` arguments;
- the cost model's server: a calibrated model remembers the limits and mode of the server it was
  profiled on (its /info and the KV capacity TGI's warm-up found); a roofline model derives them
  from the GPU's memory and the model's shape;
- TGI 3's CUDA defaults (flashinfer, block size 1, prefix caching and chunking on).

`max_batch_total_tokens` is the KV capacity of the cost model's server: TGI 3 ignores a user's value
for flash models (it warns and uses what warm-up found, docs/tgi-rules.md L2), so a flag only applies
where the cost model knows no capacity.

A vLLM V1 server (`server="vllm-v1"`, or a roofline model of that profile) is scheduled by vLLM's rules instead
(tgi_toolkit.router.vllm_v1, docs/vllm-rules.md), with `vllm serve`'s own settings (VLLM_FLAGS, as a dict or as
flags); its KV capacity is the one its log states (`kv_capacity_tokens`) when given, else vLLM's memory arithmetic on
the roofline's card, else the calibrated server's. TGI's settings are refused for it, naming vLLM's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tgi_toolkit.bench.errors import BenchError
from tgi_toolkit.config.errors import ConfigError
from tgi_toolkit.config.scheduling_mode import BLOCK_SIZES, resolve_mode
from tgi_toolkit.costs.linear import CostModel
from tgi_toolkit.costs.load import CostModelSource, load_cost_model
from tgi_toolkit.costs.server_profiles import DEFAULT_SERVER, SERVERS
from tgi_toolkit.router import SchedulerConfig
from tgi_toolkit.router.vllm_v1 import DEFAULT_BLOCK_SIZE, DEFAULT_GPU_MEMORY_UTILIZATION, VllmConfig, serve_defaults

DEFAULT_PREFILL_TOKENS = 4096  # the launcher's default_optimal when its FLOPs formula cannot run (L1)


def _bool_env(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return "1" if value else "0"


@dataclass
class SimTarget:
    cost: CostModel
    scheduler: SchedulerConfig | VllmConfig
    launcher: Any = None  # LauncherConfig or None
    model_id: str = ""
    max_input_tokens: int | None = None
    max_total_tokens: int | None = None
    attention: str = "flashinfer"
    server: Mapping[str, Any] | None = None

    def check_lengths(self, prompt: int, new: int, field: str = "prompt_tokens") -> None:
        if self.max_input_tokens is not None and prompt > self.max_input_tokens:
            raise BenchError(field, f"{prompt} is over the server's max_input_tokens {self.max_input_tokens}",
                             f"1 to {self.max_input_tokens}")
        if self.max_total_tokens is not None and prompt + new > self.max_total_tokens:
            limit = self.max_total_tokens
            raise BenchError("max_new_tokens", f"{prompt} + {new} is over the server's max_total_tokens {limit}",
                             f"prompt + output <= {limit}")
        if not self.scheduler.chunking and prompt > self.scheduler.max_batch_prefill_tokens:
            raise BenchError(field, f"{prompt} is over max_batch_prefill_tokens "
                                    f"{self.scheduler.max_batch_prefill_tokens}: without prefill chunking TGI "
                                    "refuses such prompts", f"1 to {self.scheduler.max_batch_prefill_tokens}, "
                                                            "or chunking on")

    def info(self) -> dict[str, Any]:
        sc = self.scheduler
        if isinstance(sc, VllmConfig):
            return {"model_id": self.model_id, "max_model_len": sc.max_model_len,
                    "kv_capacity_tokens": sc.kv_capacity_tokens,
                    "max_num_batched_tokens": sc.max_num_batched_tokens, "max_num_seqs": sc.max_num_seqs,
                    "block_size": sc.block_size, "enable_prefix_caching": sc.enable_prefix_caching,
                    "router": "tgi_toolkit.simulate (vLLM V1)"}
        return {"model_id": self.model_id, "max_input_tokens": self.max_input_tokens,
                "max_total_tokens": self.max_total_tokens, "max_batch_total_tokens": sc.max_batch_total_tokens,
                "max_batch_prefill_tokens": sc.max_batch_prefill_tokens, "max_batch_size": sc.max_batch_size,
                "waiting_served_ratio": sc.waiting_served_ratio, "max_waiting_tokens": sc.max_waiting_tokens,
                "router": "tgi_toolkit.simulate"}

    def config_label(self) -> str:
        """How results name a configuration without launcher flags: TGI's defaults, or vLLM's settings."""
        sc = self.scheduler
        if not isinstance(sc, VllmConfig):
            return "default"
        return (f"vLLM V1 max_num_seqs={sc.max_num_seqs} max_num_batched_tokens={sc.max_num_batched_tokens} "
                f"kv_capacity_tokens={sc.kv_capacity_tokens}"
                + ("" if sc.enable_prefix_caching else " no-prefix-caching"))

    def facts(self) -> dict[str, Any]:
        return {"max_batch_total_tokens": self.scheduler.max_batch_total_tokens, "attention": self.attention,
                "block_size": self.scheduler.block_size, "prefix_caching": self.scheduler.prefix_caching,
                "chunking": self.scheduler.chunking}

    def hardware(self) -> dict[str, Any]:
        """The hardware simulated (the cost model's), not the machine the simulation ran on."""
        hw = getattr(self.cost, "hardware", None)
        if callable(hw):
            return hw()
        return dict((self.cost.describe().get("source") or {}).get("hardware") or {})


def _cost_server(cost: CostModel) -> dict[str, Any]:
    get = getattr(cost, "server_defaults", None)
    if callable(get):
        return dict(get())
    return dict((cost.describe().get("source") or {}).get("server") or {})


def _launcher(config: Any) -> Any:
    if config is None:
        return None
    from tgi_toolkit.config import LauncherConfig

    if isinstance(config, LauncherConfig):
        return config
    if isinstance(config, Mapping):
        return LauncherConfig(**dict(config))
    if isinstance(config, (list, tuple)):
        return LauncherConfig.from_cli([str(a) for a in config if a != "--"], environ={})
    raise BenchError("config", f"a {type(config).__name__} is not a launcher configuration",
                     "a LauncherConfig, a dict of its fields, or a list of launcher flags")


def make_target(cost_model: CostModelSource | SimTarget, config: Any = None, *, attention: str | None = None,
                prefix_caching: bool | None = None, chunking: bool | None = None,
                environ: Mapping[str, str] | None = None, server: str | None = None) -> SimTarget:
    """A SimTarget from a cost model (object, JSON path or dict) and launcher settings (module docstring);
    `server` (a server_profiles.SERVERS profile) picks the scheduling rules, by default the roofline model's
    server's."""
    if isinstance(cost_model, SimTarget):
        return cost_model
    cost = cost_model if hasattr(cost_model, "seconds") else load_cost_model(cost_model)
    server = server or getattr(cost, "server", None) or DEFAULT_SERVER
    if server not in SERVERS:
        raise BenchError("server", f"{server!r} is not a server profile", ", ".join(SERVERS))
    if server == VLLM_V1:
        return vllm_target(cost, config, {"attention": attention, "prefix_caching": prefix_caching,
                                          "chunking": chunking})
    launcher = _launcher(config)
    env = os.environ if environ is None else environ
    fraction = getattr(launcher, "cuda_memory_fraction", None)
    if fraction is not None and getattr(cost, "memory_fraction", fraction) != fraction:
        import dataclasses

        # the roofline's server at this --cuda-memory-fraction: the KV capacity TGI's warm-up would find
        cost = dataclasses.replace(cost, memory_fraction=float(fraction), _cache={})
    server = _cost_server(cost)
    profiled = server.get("cuda_memory_fraction")
    if fraction is not None and profiled and fraction != profiled and server.get("max_batch_total_tokens"):
        # a calibrated server's KV memory is its fraction of the same budget (TGI: free memory x fraction;
        # the embedded engine: TGI_TOOLKIT_KV_CACHE_GIB x fraction)
        server["max_batch_total_tokens"] = int(server["max_batch_total_tokens"] * fraction / profiled)

    # The mode as TGI resolves it from its environment; what the cost model's server ran with fills
    # the variables the environment leaves unset, and explicit arguments win over both.
    mode_env = {k: str(v) for k, v in (("ATTENTION", server.get("attention")),
                                        ("PREFIX_CACHING", _bool_env(server.get("prefix_caching"))),
                                        ("PREFILL_CHUNKING", _bool_env(server.get("chunking")))) if v is not None}
    mode_env.update({k: env[k] for k in ("ATTENTION", "PREFIX_CACHING", "PREFILL_CHUNKING") if k in env})
    for key, value in (("ATTENTION", attention), ("PREFIX_CACHING", _bool_env(prefix_caching)),
                       ("PREFILL_CHUNKING", _bool_env(chunking))):
        if value is not None:
            mode_env[key] = str(value)
    if mode_env.get("ATTENTION") == "paged":
        mode_env["PREFIX_CACHING"] = "0"  # TGI's launcher turns it off with paged attention (F1.4)
    speculate = int(getattr(launcher, "speculate", None) or 0)
    try:
        mode = resolve_mode(mode_env, speculate=speculate)
    except ConfigError as exc:
        raise BenchError("scheduling mode", str(exc), "ATTENTION flashinfer|flashdecoding|paged, "
                                                      "PREFIX_CACHING and PREFILL_CHUNKING 0 or 1") from None
    attention, prefix, chunk = mode.attention, mode.prefix_caching, mode.chunking

    def pick(name: str, default: Any) -> Any:
        value = getattr(launcher, name, None) if launcher is not None else None
        if value is None:
            value = server.get(name)
        return default if value is None else value

    capacity = server.get("max_batch_total_tokens") or pick("max_batch_total_tokens", None)
    if capacity is None:
        raise BenchError("max_batch_total_tokens", "the cost model knows no KV capacity and none was given",
                         "--max-batch-total-tokens N after `--`, or a cost model with one")
    max_total = pick("max_total_tokens", None)
    max_input = pick("max_input_tokens", None)
    if max_total is None:
        max_total = int(capacity) if chunk else None
    if max_input is None and max_total is not None:
        max_input = int(max_total) - 1
    prefill = pick("max_batch_prefill_tokens", None)
    if prefill is None:
        prefill = DEFAULT_PREFILL_TOKENS if chunk else (max_input or DEFAULT_PREFILL_TOKENS - 50) + 50
    scheduler = SchedulerConfig(
        max_batch_prefill_tokens=int(prefill), max_batch_total_tokens=int(capacity),
        waiting_served_ratio=float(pick("waiting_served_ratio", 0.3)),
        max_waiting_tokens=int(pick("max_waiting_tokens", 20)),
        max_batch_size=pick("max_batch_size", None), block_size=mode.block_size,
        prefix_caching=prefix, chunking=chunk, speculate=speculate)
    model_id = str(server.get("model_id") or getattr(launcher, "model_id", None) or "")
    return SimTarget(cost, scheduler, launcher, model_id, int(max_input) if max_input else None,
                     int(max_total) if max_total else None, attention, server)


def describe_mode(target: SimTarget) -> str:
    sc = target.scheduler
    if isinstance(sc, VllmConfig):
        return (f"vLLM V1 (block size {sc.block_size}), prefix caching {'on' if sc.enable_prefix_caching else 'off'}; "
                f"max_num_batched_tokens {sc.max_num_batched_tokens}, max_num_seqs {sc.max_num_seqs}, "
                f"max_model_len {sc.max_model_len}, KV cache {sc.kv_capacity_tokens} tokens")
    return (f"{target.attention} (block size {sc.block_size}), prefix caching {'on' if sc.prefix_caching else 'off'}, "
            f"chunking {'on' if sc.chunking else 'off'}; max_batch_prefill_tokens {sc.max_batch_prefill_tokens}, "
            f"max_batch_total_tokens {sc.max_batch_total_tokens}")


# -- vLLM V1 -------------------------------------------------------------------------------------------------------
VLLM_V1 = "vllm-v1"  # the server profile scheduled by vLLM V1's rules; every other profile by TGI's
# The settings a vLLM V1 server takes here: `vllm serve`'s own flags, and the KV capacity its log states
# ("GPU KV cache size: N tokens"), which takes precedence over the memory arithmetic.
VLLM_FLAGS: dict[str, type] = {"max_num_batched_tokens": int, "max_num_seqs": int, "gpu_memory_utilization": float,
                               "block_size": int, "enable_prefix_caching": bool, "max_model_len": int,
                               "scheduler_reserve_full_isl": bool, "kv_capacity_tokens": int}
_SWITCHES = ("enable_prefix_caching", "scheduler_reserve_full_isl")  # --NAME / --no-NAME, as vLLM's
# The simulator's own TGI mode flags, and what stands for them on a vLLM server.
_TGI_MODE = {"attention": "vLLM picks its attention backend itself; its KV block size is --block-size",
             "prefix_caching": "vLLM's is --enable-prefix-caching / --no-enable-prefix-caching",
             "chunking": "vLLM V1 always chunks prompts within --max-num-batched-tokens"}


def _vllm_refusal(name: str) -> BenchError:
    from tgi_toolkit.config.launcher import OPTIONS
    from tgi_toolkit.config.vllm_args import vllm_equivalent

    flag = "--" + name.replace("_", "-")
    allowed = ", ".join("--" + k.replace("_", "-") for k in VLLM_FLAGS)
    if name in OPTIONS:
        return BenchError(flag, f"is TGI's launcher flag, not vLLM's: {vllm_equivalent(name)}", allowed)
    return BenchError(flag, "is not a vLLM setting the simulator models", allowed)


def vllm_options(config: Any) -> dict[str, Any]:
    """vLLM V1 settings from a dict of VLLM_FLAGS names or a list of their flags (`--max-num-seqs 64`,
    `--block-size=32`, `--enable-prefix-caching`, `--no-enable-prefix-caching`); anything else is refused,
    a TGI launcher flag with vLLM's equivalent named."""
    if config is None:
        return {}
    if isinstance(config, Mapping):
        given = [(str(k), v) for k, v in config.items()]
    elif isinstance(config, (list, tuple)):
        given, args = [], [str(a) for a in config if a != "--"]
        while args:
            arg = args.pop(0)
            if not arg.startswith("--"):
                raise BenchError("vLLM flags", f"{arg!r} is not a flag", "--name value")
            name, eq, value = arg[2:].partition("=")
            name = name.replace("-", "_")
            if name.removeprefix("no_") in _SWITCHES and not eq:
                given.append((name.removeprefix("no_"), not name.startswith("no_")))
                continue
            if not eq:
                if not args or name not in VLLM_FLAGS:
                    raise _vllm_refusal(name) if name not in VLLM_FLAGS else \
                        BenchError("--" + arg[2:], "needs a value", "--name value")
                value = args.pop(0)
            given.append((name, value))
    else:
        raise BenchError("config", f"a {type(config).__name__} is not a vLLM configuration",
                         "a dict of vLLM settings, or a list of `vllm serve` flags")
    out: dict[str, Any] = {}
    for name, value in given:
        kind = VLLM_FLAGS.get(name)
        if kind is None:
            raise _vllm_refusal(name)
        flag = "--" + name.replace("_", "-")
        if kind is bool:
            out[name] = {"true": True, "1": True, "false": False, "0": False}.get(str(value).lower())
            if out[name] is None:
                raise BenchError(flag, f"{value!r} is not true or false", "true or false")
            continue
        try:
            out[name] = kind(value)
        except (TypeError, ValueError):
            raise BenchError(flag, f"{value!r} is not a {kind.__name__}", f"a {kind.__name__}") from None
        fraction = name == "gpu_memory_utilization"
        if not out[name] > 0 or (fraction and out[name] > 1):
            raise BenchError(flag, f"{value!r} is out of range", "a fraction in (0, 1]" if fraction else "a number > 0")
    return out


def vllm_target(cost: CostModel, config: Any, tgi_mode: Mapping[str, Any]) -> SimTarget:
    """A vLLM V1 server: vLLM's scheduler with `vllm serve`'s defaults and the settings given (module docstring)."""
    for key, value in tgi_mode.items():
        if value is not None:
            raise BenchError("--" + key.replace("_", "-"), f"is TGI's scheduling mode, not vLLM's: {_TGI_MODE[key]}",
                             ", ".join("--" + k.replace("_", "-") for k in VLLM_FLAGS))
    opts = vllm_options(config)
    server = _cost_server(cost)
    # a GPU model (roofline, measured kernels, or one carried to another card) knows the card and the model's shape
    gpu_model = next((c for c in (cost, getattr(cost, "target", None)) if hasattr(c, "vllm_kv_cache")), None)
    card = getattr(gpu_model, "gpu", "")
    memory = int(((gpu_model.hardware().get("gpus") or [{}])[0]).get("memory_bytes") or 0) if gpu_model else 0
    batched, seqs = serve_defaults(memory, card)
    batched, seqs = opts.get("max_num_batched_tokens", batched), opts.get("max_num_seqs", seqs)
    block_size = opts.get("block_size", DEFAULT_BLOCK_SIZE)
    tokens = opts.get("kv_capacity_tokens")
    if tokens is None and gpu_model is not None:
        tokens = gpu_model.vllm_kv_cache(
            gpu_memory_utilization=opts.get("gpu_memory_utilization", DEFAULT_GPU_MEMORY_UTILIZATION),
            max_num_batched_tokens=batched, max_num_seqs=seqs, block_size=block_size).kv_capacity_tokens
    elif tokens is None and "gpu_memory_utilization" in opts:
        raise BenchError("--gpu-memory-utilization", "sizes the KV cache from a GPU's memory, and this cost model "
                                                     "has no GPU", "--kv-capacity-tokens N, or --gpu and --model")
    if tokens is None:
        tokens = server.get("max_batch_total_tokens")  # what the profiled server reported
    if not tokens:
        raise BenchError("--kv-capacity-tokens", "the cost model knows no KV capacity and none was given",
                         "--kv-capacity-tokens N after `--` (vLLM's log: \"GPU KV cache size: N tokens\")")
    blocks = int(tokens) // block_size
    shape = getattr(gpu_model, "shape", None)
    max_len = opts.get("max_model_len") or getattr(shape, "max_position_embeddings", None) or \
        server.get("max_total_tokens") or blocks * block_size
    if -(-int(max_len) // block_size) > blocks:
        raise BenchError("--max-model-len", f"{max_len} tokens need {-(-int(max_len) // block_size)} blocks of "
                                            f"{block_size}; the KV cache holds {blocks}: vLLM refuses to start",
                         f"--max-model-len <= {blocks * block_size}")
    if int(batched) < int(seqs):
        raise BenchError("--max-num-batched-tokens", f"{batched} is below --max-num-seqs {seqs}: vLLM refuses to start",
                         f"--max-num-batched-tokens >= {seqs}, or a smaller --max-num-seqs")
    scheduler = VllmConfig(num_gpu_blocks=blocks, max_num_batched_tokens=int(batched), max_num_seqs=int(seqs),
                           max_model_len=int(max_len), block_size=int(block_size),
                           enable_prefix_caching=bool(opts.get("enable_prefix_caching", True)),
                           scheduler_reserve_full_isl=bool(opts.get("scheduler_reserve_full_isl", True)))
    model_id = str(server.get("model_id") or "")
    return SimTarget(cost, scheduler, None, model_id, int(max_len) - 1, int(max_len), "vllm", server)


__all__: Sequence[str] = ("SimTarget", "make_target", "describe_mode", "BLOCK_SIZES", "VLLM_FLAGS", "vllm_options",
                          "vllm_target")
