"""The capacity plan's record (`Plan`): every number of a plan, and the launcher flags, config and text it renders.

Built by tgi_toolkit.planner.capacity; kept apart so that what a plan holds reads apart from how it is computed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tgi_toolkit.planner.memory import _n

TGI_DEFAULT_MAX_CONCURRENT_REQUESTS = 128


@dataclass
class Plan:
    """Every number of a capacity plan; `explain()` shows how each was reached."""

    model: str
    architecture: str
    gpu: str
    gpu_memory_bytes: int
    dtype: str
    quantize: str | None
    kv_cache_dtype: str | None
    num_shard: int
    memory_fraction: float
    wiggle_room: float
    block_size: int
    parameters: int
    active_parameters: int
    parameter_breakdown: dict[str, int]
    weight_bytes: int
    weight_bytes_per_shard: int
    kv_heads_per_shard: int
    kv_bytes_per_token: int  # on one shard; each shard holds its heads' share of every token
    usable_bytes: int
    overhead_bytes: int
    activation_bytes: int
    kv_budget_bytes: int
    max_batch_total_tokens: int
    sliding_window: int | None
    prompt_tokens: int | None
    output_tokens: int | None
    tokens_per_request: int  # KV tokens one request reserves (window-capped, block-padded)
    concurrent_users: int
    max_input_tokens: int
    max_total_tokens: int
    max_batch_prefill_tokens: int
    max_batch_size: int | None
    cuda_graphs: list[int]
    fits: bool
    steps: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)
    server: str = "tgi"

    # -- outputs ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def launcher_args(self) -> list[str]:
        """The recommended `text-generation-launcher` flags."""
        args = []
        if self.quantize:
            args += ["--quantize", self.quantize]
        if self._dtype_flag():
            args += ["--dtype", self.dtype]
        if self.kv_cache_dtype:
            args += ["--kv-cache-dtype", self.kv_cache_dtype]
        if self.num_shard > 1:
            args += ["--num-shard", str(self.num_shard)]
        if self.memory_fraction != 1.0:
            args += ["--cuda-memory-fraction", f"{self.memory_fraction:g}"]
        args += ["--max-input-tokens", str(self.max_input_tokens),
                 "--max-total-tokens", str(self.max_total_tokens),
                 "--max-batch-prefill-tokens", str(self.max_batch_prefill_tokens)]
        # No --max-batch-total-tokens: TGI 3 (and the embedded engine) ignore it on flash models and warn.
        if self.max_batch_size:
            args += ["--max-batch-size", str(self.max_batch_size)]
            if self.max_batch_size > TGI_DEFAULT_MAX_CONCURRENT_REQUESTS:
                args += ["--max-concurrent-requests", str(self.max_batch_size)]
        if self.server == "tgi":
            args += ["--cuda-graphs", ",".join(map(str, self.cuda_graphs)) if self.cuda_graphs else "0"]
        return args

    def _dtype_flag(self) -> bool:
        # The launcher refuses --dtype with quantizations other than bitsandbytes, and takes no float32.
        if self.quantize and not self.quantize.startswith("bitsandbytes"):
            return False
        return self.dtype in ("float16", "bfloat16")

    def command_line(self, model_id: str | None = None) -> str:
        program = "tgi-toolkit serve" if self.server == "embedded" else "text-generation-launcher"
        model = model_id or self.model
        head = [program] + (["--model-id", model] if model else [])
        return " ".join(head + self.launcher_args())

    def to_launcher_config(self, model_id: str | None = None, **overrides: Any) -> Any:
        """A `tgi_toolkit.config.LauncherConfig` holding the recommended settings."""
        from tgi_toolkit.config import LauncherConfig

        if not self.fits:
            raise ValueError("this plan does not fit (see its warnings and suggestions); there is nothing to launch")
        values: dict[str, Any] = dict(
            max_input_tokens=self.max_input_tokens, max_total_tokens=self.max_total_tokens,
            max_batch_prefill_tokens=self.max_batch_prefill_tokens,
            max_batch_size=self.max_batch_size,
            quantize=self.quantize, num_shard=self.num_shard if self.num_shard > 1 else None,
            cuda_memory_fraction=self.memory_fraction,
        )
        if self.server == "tgi":
            values["cuda_graphs"] = list(self.cuda_graphs) or [0]
        if self.kv_cache_dtype:
            values["kv_cache_dtype"] = self.kv_cache_dtype
        if self._dtype_flag():
            values["dtype"] = self.dtype
        if self.max_batch_size and self.max_batch_size > TGI_DEFAULT_MAX_CONCURRENT_REQUESTS:
            values["max_concurrent_requests"] = self.max_batch_size
        model = model_id or self.model
        if model:
            values["model_id"] = model
        values.update(overrides)
        return LauncherConfig(**values)

    def explain(self) -> str:
        title = f"Capacity plan: {self.model or self.architecture} on {self.gpu}"
        if self.num_shard > 1:
            title += f" x {self.num_shard} shards"
        lines = [f"## {title}", ""]
        lines += [f"{i}. {step}" for i, step in enumerate(self.steps, 1)]
        lines += ["", "### Recommended launcher settings", ""]
        recs = [("max-input-tokens", self.max_input_tokens), ("max-total-tokens", self.max_total_tokens),
                ("max-batch-prefill-tokens", self.max_batch_prefill_tokens),
                ("max-batch-size", self.max_batch_size)]
        lines += [f"- `--{k}` {_n(v) if v is not None else '(unset)'}" for k, v in recs]
        lines.append(f"- max_batch_total_tokens {_n(self.max_batch_total_tokens)}: what the server will infer "
                     "(`--max-batch-total-tokens` is ignored by TGI 3, so it is not passed)")
        if self.server == "tgi":
            lines.append(f"- `--cuda-graphs` {','.join(map(str, self.cuda_graphs)) or '0 (off)'}")
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
