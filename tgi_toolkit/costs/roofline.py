"""The roofline cost model: a forward's time from the GPU's datasheet, the model's shape and the server.

    t = max(compute, memory) + interconnect + host

- compute = weight FLOPs / (peak x matmul_efficiency) + attention FLOPs / (peak x attention_efficiency), where
  peak is the card's achievable dense FLOP/s (hardware.achievable: a published GEMM microbenchmark, else the
  datasheet x the fraction measured NVIDIA cards reach),
  weight FLOPs = 2 x (active parameters outside the embeddings and lm_head) x tokens
                 + 2 x lm_head parameters x emitting rows (logits only for a row's last token),
  attention FLOPs = 4 x layers x query heads x head dim x query-key pairs (QK^T and PV);
- memory = (weight bytes + KV bytes read) / (bandwidth x bandwidth_efficiency), bandwidth the card's achievable
  one (a published copy benchmark, else the datasheet x the typical fraction), the KV of every row's
  whole context, so decode is memory-bound and a long prefill compute-bound;
- with `num_shard` N, compute and memory are divided by N and each layer adds two all-reduces of
  tokens x hidden activations: 2 x layers x (allreduce_latency_s + 2 (N-1)/N x bytes / (link x link_efficiency));
- host = forward_overhead_s + row_overhead_s x rows + host_token_s x tokens: the server's own loop (a
  `server_profiles.ServerProfile`), serial with the GPU, neither scaled by the datasheet nor divided by N.

The kernel factors are shared by every GPU and server; the host terms belong to the server generation. Both are
fitted to published figures by benchmarks/gpu_accuracy.py, leaving one publication out at a time to measure
the error (tgi_toolkit.costs.uncertainty); the fit over all figures is data/reference/gpu_fit.json, read here.
The datasheets and the microbenchmarks, with their sources, are in tgi_toolkit.costs.hardware.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tgi_toolkit.costs.features import Shape
from tgi_toolkit.costs.hardware import GPU_SPECS, GpuSpec, achievable
from tgi_toolkit.costs.server_profiles import DEFAULT_SERVER, HOST_HELP, server_profile
from tgi_toolkit.planner.gpus import KNOWN_GPUS, resolve_gpu
from tgi_toolkit.planner.shape import ModelConfigSource, ModelShape

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.planner import Plan

# Kernel factors, as fractions of what the card reaches in a microbenchmark (hardware.achievable), and their
# physical range: no serving kernel beats a tuned GEMM or a copy loop, and none that a serving stack ships falls
# below these floors (decode kernels stream weights at 50-100 % of a copy's bandwidth; serving GEMMs reach
# 35-100 % of a tuned one; an all-reduce moves its bytes at 30-90 % of the link).
KERNEL_BOUNDS = {"matmul_efficiency": (0.35, 1.0), "attention_efficiency": (0.15, 1.0),
                 "bandwidth_efficiency": (0.5, 1.0), "quantized_bandwidth_efficiency": (0.3, 1.0),
                 "link_efficiency": (0.3, 0.9)}
# The starting point of the fit, and the model's factors where no fit file is found.
KERNEL_PRIOR = {"matmul_efficiency": 0.7, "attention_efficiency": 0.5, "bandwidth_efficiency": 0.85,
                "quantized_bandwidth_efficiency": 0.7, "link_efficiency": 0.6}
EFFICIENCY_HELP = {
    "matmul_efficiency": "fraction of the card's achievable dense FLOP/s (a tuned GEMM's) the weight matmuls reach",
    "attention_efficiency": "fraction of the card's achievable dense FLOP/s attention reaches (flash-attention)",
    "bandwidth_efficiency": "fraction of the card's achievable memory bandwidth (a copy loop's) a forward's reads "
                            "reach",
    "quantized_bandwidth_efficiency": "the same for 4-bit weights (AWQ, GPTQ, Marlin), relative to 16-bit",
    "link_efficiency": "fraction of the interconnect's bandwidth an all-reduce reaches",
    **HOST_HELP,
}
FRONTEND_TERMS = ("frontend_s", "frontend_stalls_forwards")  # costs.linear.CostModel's, none fitted
INT4 = ("awq", "gptq", "marlin", "compressed-tensors")


def fitted_factors() -> dict[str, float]:
    """The kernel factors of the fit over every published figure (gpu_fit.json), else the prior."""
    from tgi_toolkit.costs.uncertainty import load_fit

    return {**KERNEL_PRIOR, **(load_fit().get("factors") or {})}


def fitted_host(server: str) -> dict[str, float]:
    """The server's fitted host terms (gpu_fit.json), else its profile's prior."""
    from tgi_toolkit.costs.uncertainty import load_fit

    profile = server_profile(server)
    return {**profile.host(), **((load_fit().get("servers") or {}).get(server) or {})}


# config.json fields of the published cards' models (their Hugging Face repositories), so the
# comparison with data/reference needs no download.
PUBLISHED_MODELS: dict[str, dict[str, Any]] = {
    "codellama/CodeLlama-7b-Instruct-hf": {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
        "num_hidden_layers": 32, "num_key_value_heads": 32, "max_position_embeddings": 16384,
        "vocab_size": 32016, "tie_word_embeddings": False, "hidden_act": "silu", "rms_norm_eps": 1e-05,
        "_name_or_path": "codellama/CodeLlama-7b-Instruct-hf"},
    "microsoft/Phi-3-vision-128k-instruct": {
        "model_type": "phi3_v", "hidden_size": 3072, "intermediate_size": 8192, "num_attention_heads": 32,
        "num_hidden_layers": 32, "num_key_value_heads": 32, "max_position_embeddings": 131072,
        "vocab_size": 32064, "tie_word_embeddings": False, "hidden_act": "silu", "rms_norm_eps": 1e-05,
        "_name_or_path": "microsoft/Phi-3-vision-128k-instruct"},
}


def fit_provenance() -> str:
    from tgi_toolkit.costs.uncertainty import FIT_FILE, load_fit

    fit = load_fit()
    if not fit:
        return "the prior factors (no " + FIT_FILE + " found)"
    return f"{FIT_FILE}: {fit.get('figures')} published figures, corpus sha256 {str(fit.get('corpus_sha256'))[:12]}"


def gpu_spec(gpu: str) -> tuple[str, GpuSpec]:
    card = resolve_gpu(gpu)
    if card.name not in GPU_SPECS:
        raise ValueError(f"gpu {gpu!r} has no datasheet figures here; use one of {', '.join(GPU_SPECS)}")
    return card.name, GPU_SPECS[card.name]


@dataclass
class RooflineCostModel:
    """A forward's seconds on `num_shard` x `gpu` serving `model` with `server`'s loop. Factors left as None
    take the fit's (kernel factors: `fitted_factors`; host terms: the server's, `fitted_host`)."""

    gpu: str
    model: dict[str, Any]  # config.json fields
    num_shard: int = 1
    dtype: str = "bfloat16"
    quantize: str | None = None
    memory_fraction: float = 1.0
    server: str = DEFAULT_SERVER
    matmul_efficiency: float | None = None
    attention_efficiency: float | None = None
    bandwidth_efficiency: float | None = None
    quantized_bandwidth_efficiency: float | None = None
    link_efficiency: float | None = None
    forward_overhead_s: float | None = None
    allreduce_latency_s: float | None = None
    row_overhead_s: float | None = None
    host_token_s: float | None = None
    request_overhead_s: float | None = None
    frontend_s: float = 0.0  # no figure publishes a front end's or a forward's spread: none assumed
    frontend_stalls_forwards: bool = False  # a front end in the engine's process (the embedded engine's own host)
    jitter_cv: float = 0.0
    name: str = ""
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        from tgi_toolkit.planner.memory import kv_bytes_per_token, weight_bytes

        self.gpu, self.spec = gpu_spec(self.gpu)
        self.reach = achievable(self.gpu)
        if self.num_shard < 1:
            raise ValueError(f"num_shard must be >= 1; got {self.num_shard}")
        self.profile = server_profile(self.server)
        defaults = {**fitted_factors(), **fitted_host(self.server)}
        for key in EFFICIENCY_HELP:
            if getattr(self, key) is None:
                setattr(self, key, float(defaults[key]))
        shape = ModelShape.from_config(self.model)
        self.shape = shape
        parts = shape.parameter_breakdown()
        self.lm_head_params = parts["lm_head"] or parts["embeddings"]
        embed = parts["embeddings"] + parts["position_embeddings"]
        self.body_params = shape.active_parameters() - embed - parts["lm_head"]
        self.weight_bytes, _ = weight_bytes(shape, self.dtype, self.quantize)
        self.kv_token_bytes = kv_bytes_per_token(shape, self.dtype, num_shard=1)
        self.attn_flops_per_pair = 4 * shape.num_layers * shape.num_heads * shape.head_dim
        if not self.name:
            model = shape.name.rsplit("/", 1)[-1] or shape.model_type
            shards = f" x{self.num_shard}" if self.num_shard > 1 else ""
            quant = f" ({self.quantize})" if self.quantize else ""
            self.name = f"roofline {model} on {self.gpu}{shards}{quant}, {self.profile.label}"

    def kernel_seconds(self, s: Shape) -> float:
        """The GPU's part of a forward: what a datasheet ratio rescales to another card."""
        n = self.num_shard
        peak = self.reach.tflops * 1e12 * n
        if self.quantize == "fp8" and KNOWN_GPUS[self.gpu].fp8:
            peak *= 2
        emitting = s.rows  # an upper bound: rows mid-prefill skip the lm_head; small next to the body
        matmul = 2 * (self.body_params * s.tokens + self.lm_head_params * emitting)
        compute = matmul / (peak * self.matmul_efficiency) + \
            self.attn_flops_per_pair * s.pairs / (peak * self.attention_efficiency)
        bandwidth = self.reach.bandwidth_gbs * 1e9 * n * self.bandwidth_efficiency
        weights = self.weight_bytes / (bandwidth * (self.quantized_bandwidth_efficiency
                                                    if self.quantize in INT4 else 1.0))
        memory = weights + self.kv_token_bytes * s.context / bandwidth
        t = max(compute, memory)
        if n > 1:
            payload = s.tokens * self.shape.hidden_size * 2
            t += 2 * self.shape.num_layers * (self.allreduce_latency_s + 2 * (n - 1) / n * payload
                                              / (self.spec.link_gbs * 1e9 * self.link_efficiency))
        return t

    def host_seconds(self, s: Shape) -> float:
        """The server's loop: one CPU thread whatever the GPU and however many shards."""
        return self.forward_overhead_s + self.row_overhead_s * s.rows + self.host_token_s * s.tokens

    def seconds(self, s: Shape) -> float:
        return self.kernel_seconds(s) + self.host_seconds(s)

    # -- the server it stands for ---------------------------------------------------------------
    def plan(self) -> Plan:
        if "plan" not in self._cache:
            from tgi_toolkit.planner import plan

            self._cache["plan"] = plan(self.model, self.gpu, dtype=self.dtype, quantize=self.quantize,
                                       num_shard=self.num_shard, memory_fraction=self.memory_fraction,
                                       _suggest=False)
        return self._cache["plan"]

    def server_defaults(self) -> dict[str, Any]:
        """What the server would find on this card: the KV capacity after warm-up (the capacity planner), the
        launcher's FLOPs-based max_batch_prefill_tokens (L1), max_total_tokens = min(KV capacity, the model's
        context) with chunking (L3), and the server profile's batching rule (chunking or not), which
        ATTENTION / PREFIX_CACHING / PREFILL_CHUNKING in the environment still override."""
        from tgi_toolkit.config.prefill_default import GPU_FP16_FLOPS, launcher_max_batch_prefill_tokens
        from tgi_toolkit.config.scheduling import default_max_input_tokens, default_max_total_tokens

        capacity = int(self.plan().capacity.kv_capacity_tokens)
        prefill, _ = launcher_max_batch_prefill_tokens(
            self.model, gpu_fp16_flops=GPU_FP16_FLOPS.get(self.gpu),
            gpu_memory_bytes=KNOWN_GPUS[self.gpu].memory_bytes, num_shard=self.num_shard,
            cuda_memory_fraction=self.memory_fraction)
        total = default_max_total_tokens(chunking=True, kv_capacity_tokens=capacity,
                                         max_position_embeddings=self.shape.max_position_embeddings)
        out = {"max_batch_total_tokens": capacity, "max_batch_prefill_tokens": int(prefill),
               "max_total_tokens": int(total), "max_input_tokens": int(default_max_input_tokens(total)),
               "model_id": self.shape.name, "chunking": self.profile.chunking}
        if self.profile.waiting_served_ratio is not None:
            out["waiting_served_ratio"] = self.profile.waiting_served_ratio
        return out

    def vllm_kv_cache(self, **settings: Any) -> Any:
        """The KV pool vLLM V1 finds on this card with these settings (planner.memory.vllm_kv_cache's keywords:
        gpu_memory_utilization, max_num_batched_tokens, max_num_seqs, block_size, ...)."""
        from tgi_toolkit.planner.memory import vllm_kv_cache

        return vllm_kv_cache(self.shape, KNOWN_GPUS[self.gpu].memory_bytes, dtype=self.dtype, quantize=self.quantize,
                             num_shard=self.num_shard, **settings)

    def hardware(self) -> dict[str, Any]:
        return {"gpus": [{"name": self.gpu, "memory_bytes": KNOWN_GPUS[self.gpu].memory_bytes}] * self.num_shard,
                "simulated": True, "datasheet": asdict(self.spec), "achievable": asdict(self.reach)}

    def describe(self) -> dict[str, Any]:
        return {"kind": "roofline", "name": self.name, "gpu": self.gpu, "datasheet": asdict(self.spec),
                "achievable": asdict(self.reach),
                "model": self.shape.name or self.shape.model_type, "num_shard": self.num_shard, "dtype": self.dtype,
                "quantize": self.quantize, "server": self.server, "server_label": self.profile.label,
                **{k: getattr(self, k) for k in EFFICIENCY_HELP},
                **{k: getattr(self, k) for k in FRONTEND_TERMS},
                "source": {"fitted_to": fit_provenance()}}

    def to_dict(self) -> dict[str, Any]:
        out = self.describe()
        out["model"] = self.model
        out["efficiency_help"] = EFFICIENCY_HELP
        out["memory_fraction"] = self.memory_fraction
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RooflineCostModel:
        keys = ("gpu", "model", "num_shard", "dtype", "quantize", "memory_fraction", "server", "name",
                *EFFICIENCY_HELP, *FRONTEND_TERMS)
        return cls(**{k: data[k] for k in keys if k in data})

    def save(self, path: Any) -> Any:
        import json
        from pathlib import Path

        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path


def roofline(gpu: str, model: ModelShape | ModelConfigSource, *, num_shard: int = 1, dtype: str = "bfloat16",
             quantize: str | None = None, memory_fraction: float = 1.0, server: str = DEFAULT_SERVER,
             frontend_s: float = 0.0, frontend_stalls_forwards: bool = False, **efficiency: float
             ) -> RooflineCostModel:
    """The roofline cost model of `model` (config.json path, model directory, dict, or a name in
    PUBLISHED_MODELS) on `num_shard` x `gpu` served by `server` (a server_profiles.SERVERS profile); `efficiency`
    overrides a fitted factor by name; the front end's terms are costs.linear.CostModel's."""
    from tgi_toolkit.planner.shape import load_config

    unknown = sorted(set(efficiency) - set(EFFICIENCY_HELP))
    if unknown:
        raise ValueError(f"{unknown[0]} is not an efficiency factor (allowed: {', '.join(EFFICIENCY_HELP)})")
    config = PUBLISHED_MODELS[model] if isinstance(model, str) and model in PUBLISHED_MODELS else load_config(model)
    return RooflineCostModel(gpu, config, num_shard=num_shard, dtype=dtype, quantize=quantize,
                             memory_fraction=memory_fraction, server=server, frontend_s=frontend_s,
                             frontend_stalls_forwards=frontend_stalls_forwards, **efficiency)
