"""The capacity plan's record (`Plan`): its numbers in four groups (the model and its memory, the hardware, the
recommended limits, the capacity), and the launcher flags, config, flat record and text it renders.

Built by tgi_toolkit.planner.capacity; kept apart so that what a plan holds reads apart from how it is computed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from tgi_toolkit.planner.memory import kv_bytes_per_token, kv_heads_per_shard, num, weight_bytes
from tgi_toolkit.planner.shape import ModelShape

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.config import LauncherConfig

TGI_DEFAULT_MAX_CONCURRENT_REQUESTS = 128


@dataclass(frozen=True)
class ModelMemory:
    """The model as served: its shape's counts and the bytes its weights and KV cache take on one shard."""

    name: str  # the model id (the record's `model`)
    architecture: str
    dtype: str
    quantize: str | None
    kv_cache_dtype: str | None
    parameters: int
    active_parameters: int
    parameter_breakdown: dict[str, int]
    sliding_window: int | None
    weight_bytes: int
    weight_bytes_per_shard: int
    kv_heads_per_shard: int
    kv_bytes_per_token: int  # on one shard; each shard holds its heads' share of every token

    @classmethod
    def of(cls, shape: ModelShape, name: str, *, dtype: str, quantize: str | None, kv_cache_dtype: str | None,
           num_shard: int) -> tuple[ModelMemory, str]:
        """The model's counts and bytes on one shard, and the sentence that shows the weights' sum."""
        weights, weights_note = weight_bytes(shape, dtype, quantize)
        return cls(
            name=name, architecture=shape.model_type, dtype=dtype, quantize=quantize, kv_cache_dtype=kv_cache_dtype,
            parameters=shape.parameters(), active_parameters=shape.active_parameters(),
            parameter_breakdown=shape.parameter_breakdown(), sliding_window=shape.sliding_window,
            weight_bytes=weights, weight_bytes_per_shard=-(-weights // num_shard),
            kv_heads_per_shard=kv_heads_per_shard(shape, num_shard),
            kv_bytes_per_token=kv_bytes_per_token(shape, dtype, kv_cache_dtype, num_shard)), weights_note


@dataclass(frozen=True)
class Hardware:
    """The server and card it runs on, and how that card's memory is shared out before the KV cache."""

    server: str  # "tgi" or "embedded": which launcher the plan's flags are for
    gpu: str
    gpu_memory_bytes: int
    num_shard: int
    memory_fraction: float
    wiggle_room: float
    block_size: int
    usable_bytes: int
    overhead_bytes: int
    activation_bytes: int
    kv_budget_bytes: int


@dataclass(frozen=True)
class LauncherLimits:
    """The request limits and batching flags the plan recommends to the launcher."""

    max_input_tokens: int
    max_total_tokens: int
    max_batch_prefill_tokens: int
    max_batch_size: int | None
    cuda_graphs: tuple[int, ...]


@dataclass(frozen=True)
class Capacity:
    """The KV cache in tokens, and the requests of the workload it holds at once."""

    kv_capacity_tokens: int  # what TGI's router logs as "Setting max batch total tokens to N"
    prompt_tokens: int | None
    output_tokens: int | None
    tokens_per_request: int  # KV tokens one request reserves (window-capped, block-padded)
    concurrent_users: int


# The record's keys in their order (to_dict, `tgi-toolkit plan --json`): flat, as before the fields were grouped.
RECORD_KEYS = (
    "model", "architecture", "gpu", "gpu_memory_bytes", "dtype", "quantize", "kv_cache_dtype", "num_shard",
    "memory_fraction", "wiggle_room", "block_size", "parameters", "active_parameters", "parameter_breakdown",
    "weight_bytes", "weight_bytes_per_shard", "kv_heads_per_shard", "kv_bytes_per_token", "usable_bytes",
    "overhead_bytes", "activation_bytes", "kv_budget_bytes", "kv_capacity_tokens", "sliding_window",
    "prompt_tokens", "output_tokens", "tokens_per_request", "concurrent_users", "max_input_tokens",
    "max_total_tokens", "max_batch_prefill_tokens", "max_batch_size", "cuda_graphs", "fits", "steps", "warnings",
    "suggestions", "server",
)


@dataclass(frozen=True)
class Plan:
    """A capacity plan, complete when built: the model and its memory, the card, the recommended limits and the
    capacity that follows, with the steps that reached them; `explain()` shows each step."""

    model: ModelMemory
    hardware: Hardware
    limits: LauncherLimits
    capacity: Capacity
    fits: bool  # the weights, one request's KV cache and max_total_tokens all fit: the flags can be launched
    steps: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    suggestions: tuple[str, ...] = ()

    # -- outputs ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The plan as one flat record (RECORD_KEYS), what `tgi-toolkit plan --json` prints."""
        flat: dict[str, Any] = {}
        for group in (self.model, self.hardware, self.limits, self.capacity):
            flat.update(asdict(group))
        flat["model"] = flat.pop("name")
        flat["cuda_graphs"] = list(self.limits.cuda_graphs)
        flat["fits"] = self.fits
        flat.update(steps=list(self.steps), warnings=list(self.warnings), suggestions=list(self.suggestions))
        return {key: flat[key] for key in RECORD_KEYS}

    def launcher_args(self) -> list[str]:
        """The recommended `text-generation-launcher` flags."""
        model, hardware, limits = self.model, self.hardware, self.limits
        args = []
        if model.quantize:
            args += ["--quantize", model.quantize]
        if self._dtype_flag():
            args += ["--dtype", model.dtype]
        if model.kv_cache_dtype:
            args += ["--kv-cache-dtype", model.kv_cache_dtype]
        if hardware.num_shard > 1:
            args += ["--num-shard", str(hardware.num_shard)]
        if hardware.memory_fraction != 1.0:
            args += ["--cuda-memory-fraction", f"{hardware.memory_fraction:g}"]
        args += ["--max-input-tokens", str(limits.max_input_tokens),
                 "--max-total-tokens", str(limits.max_total_tokens),
                 "--max-batch-prefill-tokens", str(limits.max_batch_prefill_tokens)]
        # No --max-batch-total-tokens: TGI 3 (and the embedded engine) ignore it on flash models and warn.
        if limits.max_batch_size:
            args += ["--max-batch-size", str(limits.max_batch_size)]
            if limits.max_batch_size > TGI_DEFAULT_MAX_CONCURRENT_REQUESTS:
                args += ["--max-concurrent-requests", str(limits.max_batch_size)]
        if hardware.server == "tgi":
            args += ["--cuda-graphs", ",".join(map(str, limits.cuda_graphs)) if limits.cuda_graphs else "0"]
        return args

    def _dtype_flag(self) -> bool:
        # The launcher refuses --dtype with quantizations other than bitsandbytes, and takes no float32.
        if self.model.quantize and not self.model.quantize.startswith("bitsandbytes"):
            return False
        return self.model.dtype in ("float16", "bfloat16")

    def command_line(self, model_id: str | None = None) -> str:
        program = "tgi-toolkit serve" if self.hardware.server == "embedded" else "text-generation-launcher"
        model = model_id or self.model.name
        head = [program] + (["--model-id", model] if model else [])
        return " ".join(head + self.launcher_args())

    def to_launcher_config(self, model_id: str | None = None, **overrides: Any) -> LauncherConfig:
        """A `tgi_toolkit.config.LauncherConfig` holding the recommended settings."""
        from tgi_toolkit.config import LauncherConfig

        if not self.fits:
            raise ValueError("this plan does not fit (see its warnings and suggestions); there is nothing to launch")
        hardware, limits = self.hardware, self.limits
        values: dict[str, Any] = dict(
            max_input_tokens=limits.max_input_tokens, max_total_tokens=limits.max_total_tokens,
            max_batch_prefill_tokens=limits.max_batch_prefill_tokens,
            max_batch_size=limits.max_batch_size,
            quantize=self.model.quantize, num_shard=hardware.num_shard if hardware.num_shard > 1 else None,
            cuda_memory_fraction=hardware.memory_fraction,
        )
        if hardware.server == "tgi":
            values["cuda_graphs"] = list(limits.cuda_graphs) or [0]
        if self.model.kv_cache_dtype:
            values["kv_cache_dtype"] = self.model.kv_cache_dtype
        if self._dtype_flag():
            values["dtype"] = self.model.dtype
        if limits.max_batch_size and limits.max_batch_size > TGI_DEFAULT_MAX_CONCURRENT_REQUESTS:
            values["max_concurrent_requests"] = limits.max_batch_size
        model = model_id or self.model.name
        if model:
            values["model_id"] = model
        values.update(overrides)
        return LauncherConfig(**values)

    def explain(self) -> str:
        hardware, limits = self.hardware, self.limits
        title = f"Capacity plan: {self.model.name or self.model.architecture} on {hardware.gpu}"
        if hardware.num_shard > 1:
            title += f" x {hardware.num_shard} shards"
        lines = [f"## {title}", ""]
        lines += [f"{i}. {step}" for i, step in enumerate(self.steps, 1)]
        lines += ["", "### Recommended launcher settings", ""]
        recs = [("max-input-tokens", limits.max_input_tokens), ("max-total-tokens", limits.max_total_tokens),
                ("max-batch-prefill-tokens", limits.max_batch_prefill_tokens),
                ("max-batch-size", limits.max_batch_size)]
        lines += [f"- `--{k}` {num(v) if v is not None else '(unset)'}" for k, v in recs]
        lines.append(f"- max_batch_total_tokens {num(self.capacity.kv_capacity_tokens)}: what the server will infer "
                     "(`--max-batch-total-tokens` is ignored by TGI 3, so it is not passed)")
        if hardware.server == "tgi":
            lines.append(f"- `--cuda-graphs` {','.join(map(str, limits.cuda_graphs)) or '0 (off)'}")
        lines += ["", "```", self.command_line(), "```"]
        if self.warnings:
            lines += ["", "### Warnings", ""] + [f"- {w}" for w in self.warnings]
        if self.suggestions:
            lines += ["", "### What would fit", ""] + [f"- {s}" for s in self.suggestions]
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        return self.explain()

    def __str__(self) -> str:
        return self.explain()
