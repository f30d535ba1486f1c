"""Which deployments to consider: GPU kind x GPUs per replica (tensor parallel) x quantization, each checked by
the capacity planner before anything is simulated; those that cannot run are kept with the reason.

A candidate is refused when
- the card has no datasheet figures for the roofline (costs.roofline.GPU_SPECS);
- it cannot run the quantization: fp8 needs FP8 tensor cores (Ada, Hopper), which the roofline's fp8 peak assumes;
- the attention heads do not split over the shards (TGI refuses the sharding at start-up);
- the planner says it does not fit (the weights, or one request's KV cache, or max_total_tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.costs.linear import CostModel
    from tgi_toolkit.planner.shape import ModelConfigSource, ModelShape

DEFAULT_GPUS = ("A10G", "L4", "A100-80GB", "H100")
DEFAULT_SHARDS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Candidate:
    """One replica's hardware: `num_shard` x `gpu` with `quantize`; `cost` is a given cost model (e.g. the
    embedded engine's calibrated profile) instead of the roofline; `memory_fraction` the KV memory it may use."""

    gpu: str
    num_shard: int = 1
    quantize: str | None = None
    cost: CostModel | None = None
    memory_fraction: float = 1.0
    label: str = ""
    pricing: str = "auto"  # without `cost`: measured kernel times, roofline, or auto (measured where covered)

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        shards = f" x{self.num_shard}" if self.num_shard > 1 else ""
        quant = f" {self.quantize}" if self.quantize else ""
        kv = f" (KV memory {self.memory_fraction:g})" if self.memory_fraction != 1.0 else ""
        return f"{self.gpu}{shards}{quant}{kv}"

    @property
    def backend(self) -> str:
        """The server the launcher settings are checked for: the embedded engine, or TGI on a GPU."""
        return "embedded" if self.gpu == "embedded" else "tgi"


@dataclass(frozen=True)
class Refusal:
    candidate: Candidate
    reason: str


def quantizations(values: Sequence[str | None]) -> list[str | None]:
    """--quantize values, 'none' meaning the model's dtype; ValueError naming the allowed ones."""
    from tgi_toolkit.planner.dtypes import QUANT_SCHEMES

    out: list[str | None] = []
    for value in values:
        name = None if value in (None, "", "none") else str(value).lower()
        if name is not None and name not in QUANT_SCHEMES:
            raise ValueError(f"quantize {value!r} is not known (allowed: none, {', '.join(QUANT_SCHEMES)})")
        if name not in out:
            out.append(name)
    return out


def gpu_kinds(values: Sequence[str]) -> list[str]:
    """Card names resolved as the planner resolves them; ValueError naming the cards with datasheet figures."""
    from tgi_toolkit.costs.roofline import GPU_SPECS
    from tgi_toolkit.planner.gpus import resolve_gpu

    out = []
    for value in values:
        try:
            name = resolve_gpu(value).name
        except ValueError:
            name = str(value)
        if name not in GPU_SPECS:
            raise ValueError(f"gpus: {value!r} has no datasheet figures for the simulator "
                             f"(allowed: {', '.join(GPU_SPECS)})")
        if name not in out:
            out.append(name)
    return out


def refusal(model: ModelShape | ModelConfigSource, candidate: Candidate, prompt_tokens: int,
            output_tokens: int) -> str | None:
    """Why `candidate` cannot serve `model` with these lengths, or None when the planner says it fits."""
    from tgi_toolkit.planner import plan
    from tgi_toolkit.planner.gpus import KNOWN_GPUS
    from tgi_toolkit.planner.shape import ModelShape

    card = KNOWN_GPUS[candidate.gpu]
    if candidate.quantize == "fp8" and not card.fp8:
        return f"{card.name} has no FP8 tensor cores (fp8 needs Ada or Hopper)"
    shape = model if isinstance(model, ModelShape) else ModelShape.from_config(model)
    if shape.num_heads % candidate.num_shard:
        return (f"{shape.num_heads} attention heads do not split over {candidate.num_shard} shards "
                "(TGI refuses the sharding)")
    try:
        result = plan(shape, card.name, dtype="bfloat16" if card.bf16 else "float16", quantize=candidate.quantize,
                      num_shard=candidate.num_shard, memory_fraction=candidate.memory_fraction,
                      prompt_tokens=prompt_tokens, output_tokens=output_tokens, _suggest=False)
    except ValueError as exc:
        return str(exc)
    if not result.fits:
        return result.warnings[0] if result.warnings else "the capacity planner says it does not fit"
    return None


def enumerate_candidates(model: ModelShape | ModelConfigSource, gpus: Sequence[str], shards: Sequence[int],
                         quantize: Sequence[str | None], prompt_tokens: int,
                         output_tokens: int) -> tuple[list[Candidate], list[Refusal]]:
    """Every GPU kind x shard count x quantization, split into those that fit and those refused (with why)."""
    from tgi_toolkit.planner.shape import ModelShape

    shape = model if isinstance(model, ModelShape) else ModelShape.from_config(model)
    bad = [n for n in shards if isinstance(n, bool) or not isinstance(n, int) or n < 1]
    if bad or not shards:
        raise ValueError(f"shards must be integers >= 1 (e.g. 1,2,4,8); got {list(shards)!r}")
    kept, refused = [], []
    for gpu in gpu_kinds(gpus):
        for n in sorted(set(shards)):
            for q in quantizations(quantize):
                candidate = Candidate(gpu, n, q)
                why = refusal(shape, candidate, prompt_tokens, output_tokens)
                (refused.append(Refusal(candidate, why)) if why else kept.append(candidate))
    return kept, refused
