"""The measured-kernel cost model: a forward's time as the sum of its operations, each read from kernel times
measured on the card inside a serving framework, plus the server profile's host time.

    t = layers x (QKV + O + gate/up + down GEMMs at the forward's tokens, or the MoE layer
                  + context attention over the prefill rows + generation attention over the decode rows
                  + two all-reduces of tokens x hidden at the TP degree + the elementwise ops)
        + the LM head at the emitting rows + host (the server profile's terms, serial with the GPU)

The kernel times come from NVIDIA's AIConfigurator operator database, or from a folder of the same tables that
`tgi-toolkit profile-gpu` measured on a user's own card (tgi_toolkit.costs.kernel_tables reads both and
interpolates them). Nothing here is fitted to published figures: the tables are the card's, the host terms the
server profile's.

What the tables lack is priced by the roofline (tgi_toolkit.costs.roofline): a card or framework the database has
not measured, int4 weights, a server that runs its forwards eagerly (the tables are CUDA-graph kernels), and
the elementwise ops (norms, rotary, activation, residual adds: memory-bound, a few per cent of a forward).
`priced_by()` says which source priced which operation, and every prediction carries it.

`engine=True` prices the toolkit's own embedded engine instead of a framework's fused kernels, by the rules
tgi_toolkit.costs.engine_forward counts from its code: its prompt chunks in one SDPA call (as a framework's; a padded
call's masked rectangle is priced as the causal pairs), its unfused elementwise ops,
its compiled decode layers at `compile_sizes` rows (profile-gpu's `compiled_gemm_perf`, else `gemm_perf`), and, with
`host_calls` and profile-gpu's `host_perf`, its host issuing its calls: an eager forward takes the longer of its
kernels and its calls, a decode step (a CUDA graph's replay) its kernels plus its few calls and the replay's launch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tgi_toolkit.costs.engine_forward import (
    EngineCalls,
    compiled_layers,
    engine_elementwise_bytes,
)
from tgi_toolkit.costs.features import Shape
from tgi_toolkit.costs.kernel_carry import carried_to
from tgi_toolkit.costs.kernel_tables import (
    Curve,
    KernelTables,
    Surface,
    attention_surface,
    comm_curve,
    moe_curve,
)
from tgi_toolkit.costs.roofline import EFFICIENCY_HELP, FRONTEND_TERMS, RooflineCostModel, gpu_spec
from tgi_toolkit.costs.server_profiles import server_profile

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.planner.shape import ModelConfigSource, ModelShape

# The planner's card names -> the database's system folders (what aiconfigurator-core measured; the A100-40GB
# and the PCIe boards have other memory and clocks, so they are not stood in for by the SXM tables).
SYSTEMS = {"A100-80GB": "a100_sxm", "H100-80GB": "h100_sxm", "H200": "h200_sxm", "L40S": "l40s",
           "B200": "b200_sxm"}
# Server profile -> the framework whose kernels it runs. TGI 2 and 3 run flash/paged attention and torch's
# GEMMs under CUDA graphs, as vLLM does, so vLLM's tables stand in for them (the provenance says so). The eager
# servers (TGI 1, vLLM before 0.2.7) launch every kernel from Python: the graph-captured tables would flatter
# them, and LMDeploy's TurboMind kernels are its own; the roofline prices those.
FRAMEWORKS = {"vllm-v1": "vllm", "vllm-v0.6": "vllm", "vllm-v0": "vllm", "tgi-3": "vllm", "tgi-2": "vllm",
              "sglang": "sglang", "tensorrt-llm": "trtllm"}
GRAPH_TOKENS = 512  # vLLM captures forwards of up to 512 tokens in CUDA graphs: their all-reduce is the graphed one
ELEMENTWISE_PASSES = 10  # hidden-sized reads and writes a layer's fused norms, rotary and residual adds make a token


@dataclass
class MeasuredCostModel(RooflineCostModel):
    """A forward's seconds from measured kernel times (module docstring). `tables` None reads the operator
    database for the card and the server's framework, at the version nearest `server_version`; a KernelTables
    (e.g. `KernelTables.from_dir`) prices from a user's own measurements. Host terms are the roofline's (the
    server profile's), so the two models differ only in how the GPU's part of a forward is priced."""

    tables: KernelTables | None = None
    server_version: str | None = None
    kernel_times: str | None = None  # a folder profile-gpu wrote, read when `tables` is None
    engine: bool = False  # the embedded engine's forward: its unfused ops, compiled decode layers, host calls
    compile_sizes: tuple[int, ...] = ()  # with `engine`: the decode rows whose layers run compiled (module docstring)
    host_calls: EngineCalls | None = None  # with `engine`: its calls from Python, priced at host_perf's seconds
    priced: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        gpu, _ = gpu_spec(self.gpu)
        self.fallback_reason = ""
        if self.tables is None and self.kernel_times:  # another card's are carried by the datasheets
            self.tables = carried_to(KernelTables.from_dir(self.kernel_times), gpu)
        if self.tables is None:
            system, framework = SYSTEMS.get(gpu), FRAMEWORKS.get(self.server)
            self.tables = (KernelTables.database(system, framework, self.server_version)
                           if system and framework else KernelTables({}, {}))
            if not system:
                self.fallback_reason = f"the operator database has no {gpu}"
            elif not framework:
                self.fallback_reason = f"no framework in the operator database runs {self.server}'s kernels"
        if self.tables.tables:
            # the host terms fitted beside the roofline's efficiencies absorbed its kernel errors: measured
            # kernels take the server profile's own priors, so nothing here is fitted to published figures
            for term, value in server_profile(self.server).host().items():
                if getattr(self, term) is None:
                    setattr(self, term, value)
        super().__post_init__()
        self._build()
        tables = "measured kernels" if self.priced_by()["measured"] else "roofline (no measured kernels)"
        model = self.shape.name.rsplit("/", 1)[-1] or self.shape.model_type
        shards = f" x{self.num_shard}" if self.num_shard > 1 else ""
        engine = " (the embedded engine's forward)" if self.engine else ""
        self.name = f"{tables}{engine}: {model} on {self.gpu}{shards}, {self.profile.label}"

    # -- building the model's curves once ---------------------------------------------------------
    def _build(self) -> None:
        s, n, t = self.shape, self.num_shard, self.tables.tables
        src = self.tables.sources
        self.priced = {}
        self.gemms: list[Curve] = []
        self.lm_head: Curve | None = None
        self.moe: Curve | None = None
        self.context: Surface | None = None
        self.generation: Surface | None = None
        self.allreduce_graph: Curve | None = None
        self.allreduce_eager: Curve | None = None
        self.compiled_layer: dict[int, float] = {}  # decode rows -> a layer's four compiled GEMMs, seconds
        self.call_s: float | None = None  # the host's seconds a torch call (engine with host_calls only)
        self.replay_s = 0.0
        dtype = "fp8" if self.quantize == "fp8" else "bfloat16" if not self.quantize else None
        q_out = s.num_heads * s.head_dim
        kv_out = 2 * s.num_kv_heads * s.head_dim
        projections = [((q_out + kv_out) // n, s.hidden_size), (s.hidden_size, q_out // n)]
        dense_mlp = not s.num_experts
        if dense_mlp:
            up = (2 if s.gated_mlp else 1) * s.intermediate_size
            projections += [(up // n, s.hidden_size), (s.hidden_size, s.intermediate_size // n)]
        if "gemm" in t and dtype is not None:
            try:
                notes = []
                grid = self.tables.gemm(dtype)
                for out_f, in_f in projections:
                    curve, note = grid.curve(max(out_f, 1), in_f)
                    self.gemms.append(curve)
                    notes.append(note)
                self.lm_head, _ = grid.curve(max(s.vocab_size // n, 1), s.hidden_size)
                scaled = [x for x in notes if x.startswith("scaled")]
                self.priced["gemm"] = src["gemm"] + (f" {dtype}" if dtype != "bfloat16" else "") + \
                    (f" ({len(scaled)} of {len(notes)} shapes scaled from the nearest measured)" if scaled else "")
                self.priced["lm_head"] = src["gemm"]
            except KeyError:
                self.gemms, self.lm_head = [], None
        if self.engine and dense_mlp and self.compile_sizes and "compiled_gemm" in t:
            self.compiled_layer = compiled_layers(t["compiled_gemm"], dtype, projections, self.compile_sizes)
            if self.compiled_layer:
                self.priced["compiled_gemm"] = f"{src['compiled_gemm']} (decode rows " \
                    f"{', '.join(map(str, self.compiled_layer))})"
        if self.engine and self.host_calls is not None and "host" in t:
            host = t["host"].groupby("op_name")["latency"].median() / 1e3
            if "torch_call" in host:
                self.call_s, self.replay_s = float(host["torch_call"]), float(host.get("graph_replay", 0.0))
                self.priced["host"] = f"{src['host']}: {self.call_s * 1e6:.2f} us a torch call x the engine's calls"
        if not dense_mlp and "moe" in t:
            self.moe, note = moe_curve(t["moe"], s, n, dtype)
            if self.moe is not None:
                self.priced["moe"] = f"{src['moe']} ({note})"
        heads, kv_heads = max(s.num_heads // n, 1), max(s.num_kv_heads // n, 1)
        if "context_attention" in t:
            self.context, note = attention_surface(t["context_attention"], heads, kv_heads, s.head_dim, "isl",
                                                   by="num_heads")
            self.priced["context_attention"] = src["context_attention"] + (" (heads scaled)" if note == "scaled"
                                                                           else "")
        if "generation_attention" in t:
            self.generation, note = attention_surface(t["generation_attention"], heads, kv_heads, s.head_dim, "step",
                                                      by="num_key_value_heads")
            self.priced["generation_attention"] = src["generation_attention"] + (" (heads scaled)"
                                                                                 if note == "scaled" else "")
        if n > 1:
            if "allreduce" in t:
                kernels = set(t["allreduce"]["kernel_source"])
                graph = next((k for k in kernels if "graph" in k.lower()), None)
                eager = next((k for k in kernels if "eager" in k.lower()), None)
                self.allreduce_graph = comm_curve(t["allreduce"], n, graph)
                self.allreduce_eager = comm_curve(t["allreduce"], n, eager) or self.allreduce_graph
                if self.allreduce_graph is not None:
                    self.priced["allreduce"] = src["allreduce"]
            if self.allreduce_graph is None and "nccl" in t:
                self.allreduce_graph = self.allreduce_eager = comm_curve(t["nccl"], n, None)
                if self.allreduce_graph is not None:
                    self.priced["allreduce"] = src["nccl"]
        self._layer_gemms = functools.lru_cache(maxsize=4096)(self._gemm_seconds)

    # -- pricing a forward ------------------------------------------------------------------------
    def _gemm_seconds(self, tokens: float) -> float:
        return sum(curve(tokens) for curve in self.gemms)

    def _op_roofline(self, flops: float, bytes_: float) -> float:
        """An operation the tables lack, on the roofline's fitted efficiencies (one card; shards split it)."""
        n = self.num_shard
        peak = self.reach.tflops * 1e12 * self.matmul_efficiency
        bandwidth = self.reach.bandwidth_gbs * 1e9 * self.bandwidth_efficiency
        return max(flops / n / peak, bytes_ / n / bandwidth)

    def kernel_seconds(self, s: Shape) -> float:
        if not self.gemms and self.context is None:
            return super().kernel_seconds(s)
        shape, layers = self.shape, self.shape.num_layers
        tokens = s.tokens
        decode_rows = s.rows if not s.prefilling else min(s.decode_rows, s.rows)
        decode_context = s.context if not s.prefilling else s.decode_context
        prefill_rows = s.rows - decode_rows
        # per layer
        if not s.prefilling and s.rows == tokens and tokens in self.compiled_layer:
            t = self.compiled_layer[tokens]  # a decode step replaying the graph of compiled layers
        else:
            t = self._layer_gemms(tokens) if self.gemms else self._body_roofline(tokens)
        if shape.num_experts and self.moe is not None:  # the experts from the MoE table, their router's GEMM beside
            t += self.moe(tokens) + self._op_roofline(2 * tokens * shape.hidden_size * shape.num_experts,
                                                      2 * shape.hidden_size * shape.num_experts)
        elif shape.num_experts:
            t += self._experts_roofline(tokens)
        if decode_rows > 0:
            t += self.generation(decode_rows, decode_context / decode_rows) if self.generation else \
                self._attention_roofline(decode_context, decode_context)
        if prefill_rows > 0:
            pairs = max(s.pairs - decode_context, 0.0)
            # a chunk after a cached prefix computes pairs = L x start + L (L + 1) / 2: priced as the prompt
            # length n whose causal pairs n (n + 1) / 2 are the same, which is what the flash kernel's work grows with
            isl = (math.sqrt(1 + 8 * pairs / prefill_rows) - 1) / 2
            if self.context is None:
                t += self._attention_roofline(s.context - decode_context, pairs)
            else:
                t += self.context(prefill_rows, isl)
        elementwise = engine_elementwise_bytes(shape) if self.engine else ELEMENTWISE_PASSES * shape.hidden_size * 2
        t += self._op_roofline(0.0, elementwise * tokens)
        if self.num_shard > 1:
            t += 2 * self._allreduce(tokens)
        t *= layers
        emitting = max(s.rows, 1.0)  # an upper bound, as the roofline's: rows mid-prompt skip the LM head
        if self.lm_head is not None:
            t += self.lm_head(emitting)
        else:
            t += self._op_roofline(2 * self.lm_head_params * emitting, self.lm_head_params * 2)
        return t

    def seconds(self, s: Shape) -> float:
        if self.call_s is None or self.host_calls is None:
            return super().seconds(s)
        kernels = self.kernel_seconds(s)
        issue = self.host_calls.calls(s, self.shape.num_layers) * self.call_s
        card = max(kernels, issue) if s.prefilling else kernels + issue + self.replay_s
        return card + self.host_seconds(s)

    def _body_roofline(self, tokens: float) -> float:
        per_layer = self.body_params / self.shape.num_layers
        bytes_ = self.weight_bytes / self.shape.num_layers
        return self._op_roofline(2 * per_layer * tokens, bytes_)

    def _experts_roofline(self, tokens: float) -> float:
        s = self.shape
        inter = s.expert_intermediate_size or s.intermediate_size
        per_expert = 3 * s.hidden_size * inter
        touched = min(s.num_experts, tokens * s.experts_per_token)
        return self._op_roofline(2 * per_expert * tokens * s.experts_per_token, 2 * per_expert * touched)

    def _attention_roofline(self, context: float, pairs: float) -> float:
        flops = self.attn_flops_per_pair / self.shape.num_layers * pairs
        bytes_ = self.kv_token_bytes / self.shape.num_layers * context
        return self._op_roofline(flops, bytes_)

    def _allreduce(self, tokens: float) -> float:
        payload = tokens * self.shape.hidden_size * 2
        curve = self.allreduce_graph if tokens <= GRAPH_TOKENS else self.allreduce_eager
        if curve is None:
            link = self.spec.link_gbs * 1e9 * self.link_efficiency
            n = self.num_shard
            return self.allreduce_latency_s + 2 * (n - 1) / n * payload / link
        return curve(payload)

    # -- what priced what ---------------------------------------------------------------------------
    def priced_by(self) -> dict[str, Any]:
        """Which source priced which operation: {"measured": {op: source}, "roofline": [ops], "why": ...}."""
        ops = ["gemm", "lm_head", "context_attention", "generation_attention"]
        if self.shape.num_experts:
            ops.append("moe")
        if self.compiled_layer:
            ops.append("compiled_gemm")
        if self.call_s is not None:
            ops.append("host")
        if self.num_shard > 1:
            ops.append("allreduce")
        measured = {op: self.priced[op] for op in ops if op in self.priced}
        roofline = [op for op in ops if op not in self.priced] + ["elementwise"]
        out: dict[str, Any] = {"measured": measured, "roofline": roofline}
        if self.engine and self.compile_sizes and not self.compiled_layer:
            out["compiled"] = (f"decode rows {', '.join(map(str, self.compile_sizes))} run compiled layers, priced "
                               "by gemm's times: no compiled_gemm_perf table measured them")
        if self.fallback_reason:
            out["why"] = self.fallback_reason
        elif self.quantize and self.quantize != "fp8" and "gemm" not in self.priced:
            out["why"] = f"the operator database has no {self.quantize} GEMMs"
        return out

    def provenance(self) -> str:
        """One line: 'measured: h100_sxm, vllm 0.24.0: gemm, attention; roofline: elementwise'."""
        p = self.priced_by()
        by_source: dict[str, list[str]] = {}
        for op, source in p["measured"].items():
            by_source.setdefault(source, []).append(op)
        parts = [f"measured: {src}: {', '.join(ops)}" for src, ops in by_source.items()]
        parts.append("roofline: " + ", ".join(p["roofline"]) + (f" ({p['why']})" if "why" in p else ""))
        return "; ".join(parts)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update({"kind": "measured", "name": self.name, "server_version": self.server_version,
                    "kernel_times": self.kernel_times, "engine": self.engine,
                    "compile_sizes": list(self.compile_sizes),
                    "host_calls": self.host_calls.to_dict() if self.host_calls else None,
                    "priced_by": self.priced_by(), "provenance": self.provenance()})
        out["source"] = {"kernel_times": self.provenance(),
                         "host_terms": f"{self.profile.label}'s profile priors ({self.server}), not fitted"
                         if self.priced else out.get("source", {}).get("fitted_to")}
        return out

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out.update(self.describe())
        out["model"] = self.model
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MeasuredCostModel:
        keys = ("gpu", "model", "num_shard", "dtype", "quantize", "memory_fraction", "server", *EFFICIENCY_HELP,
                *FRONTEND_TERMS)
        return cls(**{k: data[k] for k in keys if k in data}, server_version=data.get("server_version"),
                   kernel_times=data.get("kernel_times"), engine=bool(data.get("engine", False)),
                   compile_sizes=tuple(data.get("compile_sizes") or ()),
                   host_calls=EngineCalls(**data["host_calls"]) if data.get("host_calls") else None)


def covered(gpu: str, server: str) -> bool:
    """Whether the operator database measured `gpu`'s kernels inside `server`'s framework."""
    name, _ = gpu_spec(gpu)
    return name in SYSTEMS and server in FRAMEWORKS


COST_MODELS = ("auto", "measured", "roofline")


def gpu_cost_model(gpu: str, model: ModelShape | ModelConfigSource, *, cost_model: str = "auto",
                   kernel_times: str | Path | None = None, server_version: str | None = None, engine: bool = False,
                   compile_sizes: Sequence[int] = (), host_calls: EngineCalls | None = None, **roof: Any
                   ) -> RooflineCostModel:
    """The GPU cost model of `model` on `gpu` (the roofline's arguments, `roof`): `measured` prices from kernel
    times (the operator database, or `kernel_times`, a folder `profile-gpu` wrote), `roofline` from the
    datasheet, `auto` (the default) measured where the database covers the card and the server's framework,
    else the roofline; `engine` prices the embedded engine's own forward from measured kernels, its decode steps
    at `compile_sizes` rows with compiled layers, and with `host_calls` its host issuing its calls (module docstring;
    the roofline has no such variant). A ValueError names
    the field when the choice cannot be met."""
    from tgi_toolkit.costs.roofline import roofline

    if cost_model not in COST_MODELS:
        raise ValueError(f"cost_model: {cost_model!r} is not one of {', '.join(COST_MODELS)}")
    base = roofline(gpu, model, **roof)
    if cost_model == "roofline":
        if kernel_times:
            raise ValueError("kernel_times: measured kernel times need cost_model measured (or auto)")
        return base
    if kernel_times or covered(base.gpu, base.server):
        pass
    elif cost_model == "measured":
        name, _ = gpu_spec(gpu)
        raise ValueError(f"cost_model: the operator database has no kernel times for {name} served by "
                         f"{base.server} (it has {', '.join(SYSTEMS)} inside {', '.join(sorted(FRAMEWORKS))}); "
                         "measure your card with `tgi-toolkit profile-gpu` and pass kernel_times, or use roofline")
    else:
        return base
    keys = ("num_shard", "dtype", "quantize", "memory_fraction", "server")
    return MeasuredCostModel(base.gpu, base.model, **{k: getattr(base, k) for k in keys},
                             **{k: v for k, v in roof.items() if k not in keys},
                             kernel_times=str(kernel_times) if kernel_times else None, server_version=server_version,
                             engine=engine, compile_sizes=tuple(compile_sizes), host_calls=host_calls)
