"""The launcher's default max_batch_prefill_tokens (docs/tgi-rules.md section 6 L1): from the card's fp16 FLOPS,
the model's FLOPs per token and the launcher's VRAM estimate; the planner and the engine start from it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tgi_toolkit.config.scheduling_mode import model_head_dim

LAUNCHER_WIGGLE_ROOM = 0.95  # the launcher's default TGI_WIGGLE_ROOM, used by its VRAM estimate (L1)

# -- section 6 L1: the launcher's default max_batch_prefill_tokens ---------------------------------------
# fp16 dense FLOPS per card, the launcher's `ComputeType::f16_flop` (keyed by the planner's card names).
GPU_FP16_FLOPS: Mapping[str, int] = {
    "RTX-4090": 82 * 10**12, "T4": 65 * 10**12, "L4": 121 * 10**12, "L40": 181 * 10**12, "L40S": 363 * 10**12,
    "A10G": 125 * 10**12, "A40": 149 * 10**12, "A100-80GB": 312 * 10**12, "A100-80GB-PCIe": 312 * 10**12,
    "A100-40GB": 312 * 10**12,
    "H100-80GB": 900 * 10**12, "H100-NVL": 900 * 10**12, "H200": 989 * 10**12,
}
_DEFAULT_OPTIMAL = {"qwen2_vl": 10_000, "qwen2_5_vl": 10_000, "gemma3": 8000}


def _int(cfg: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = cfg.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _launcher_shape(model_config: Mapping[str, Any]) -> tuple[int, int, int, int, int, int] | None:
    """(heads, kv_heads, head_dim, hidden, intermediate, layers) as the launcher reads them; None if one is missing."""
    shape = (_int(model_config, "num_attention_heads"),
             _int(model_config, "num_key_value_heads", "num_attention_heads"), model_head_dim(model_config),
             _int(model_config, "hidden_size", "n_embd"),
             _int(model_config, "intermediate_size"), _int(model_config, "num_hidden_layers"))
    return None if None in shape else shape  # type: ignore[return-value]


def model_flops_per_token(model_config: Mapping[str, Any]) -> int | None:
    """The launcher's `Config::flop`: layers x (2 hidden head_dim (3 heads + 2 kv_heads) + 6 hidden inter (k + shared)).

    k is num_experts_per_tok (1 when absent), shared n_shared_experts (0). None for a VLM or when a
    field is missing, as in the launcher.
    """
    if model_config.get("vision_config") is not None:
        return None
    shape = _launcher_shape(model_config)
    if shape is None:
        return None
    heads, kv_heads, head_dim, hidden, inter, layers = shape
    experts = (_int(model_config, "num_experts_per_tok") or 1) + (_int(model_config, "n_shared_experts") or 0)
    attention = 2 * heads * head_dim * hidden * 3 + 2 * kv_heads * head_dim * hidden * 2  # q, attn, o + k, v
    mlp = 2 * 3 * hidden * inter * experts
    return (attention + mlp) * layers  # type: ignore[operator]


def launcher_vram_tokens(model_config: Mapping[str, Any], gpu_memory_bytes: int, *, num_shard: int = 1,
                         cuda_memory_fraction: float = 1.0, wiggle_room: float = LAUNCHER_WIGGLE_ROOM) -> int | None:
    """The launcher's `vram_maximum`: tokens the VRAM left after its rough model size allows, or None.

    available = memory x num_shard x fraction x 0.95 (in f32, as the launcher computes it);
    model = 2 B x (layers x (3 inter experts hidden + (heads + 2 kv) head_dim + heads head_dim hidden)
    + 2 vocab hidden); per token = KV (kv_heads x 2 x head_dim x 2 B x layers) + (inter + inter/2) x experts
    x 2 B x 3. None for a checkpoint quantized in its config.json, a missing field, or weights above memory.
    """
    import numpy as np

    if model_config.get("quantization_config") is not None:
        return None
    shape = _launcher_shape(model_config)
    vocab = _int(model_config, "vocab_size")
    if shape is None or vocab is None:
        return None
    heads, kv_heads, head_dim, hidden, inter, layers = shape
    experts = _int(model_config, "num_local_experts") or 1
    layer = 3 * inter * experts * hidden + (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden  # type: ignore
    model = (layer * layers + 2 * vocab * hidden) * 2  # type: ignore[operator]
    per_token = kv_heads * 2 * head_dim * 2 * layers + (inter + inter // 2) * experts * 2 * 3  # type: ignore
    with np.errstate(over="ignore"):
        available = int(np.float32(gpu_memory_bytes * num_shard) * np.float32(cuda_memory_fraction)
                        * np.float32(wiggle_room))
    if available < model:
        return None
    return (available - model) // per_token


def launcher_max_batch_prefill_tokens(model_config: Mapping[str, Any] | None, *, gpu_fp16_flops: int | None,
                                      gpu_memory_bytes: int | None = None, num_shard: int = 1,
                                      cuda_memory_fraction: float = 1.0) -> tuple[int, list[str]]:
    """The launcher's default `max_batch_prefill_tokens` (L1), and the sentences that show how.

    compute_optimal = floor(fp16 FLOPS x num_shard / model FLOPs per token), used when > 100 (unknown
    card, VLM or missing field: unused); else 10000 for qwen2_vl/qwen2_5_vl, 8000 for gemma3, 4096
    otherwise; capped at max_position_embeddings (or max_seq_len, n_positions) and at the VRAM estimate.
    """
    steps: list[str] = []
    cfg = model_config or {}
    default = _DEFAULT_OPTIMAL.get(str(cfg.get("model_type")), 4096) if model_config is not None else 4096
    flops = model_flops_per_token(cfg) if model_config is not None else None
    value = default
    if gpu_fp16_flops is None:
        steps.append(f"card not in the launcher's FLOPS table: default {default:,}")
    elif flops is None:
        steps.append(f"model FLOPs per token unknown (VLM or missing field): default {default:,}")
    else:
        optimal = gpu_fp16_flops * num_shard // flops
        shards = f" x {num_shard} shards" if num_shard > 1 else ""
        if optimal > 100:
            value = optimal
            steps.append(f"compute_optimal = floor({gpu_fp16_flops / 1e12:g} TFLOPS{shards} / {flops:,} FLOPs "
                         f"per token) = {optimal:,}")
        else:
            steps.append(f"compute_optimal {optimal} <= 100 is ignored: default {default:,}")
    mpe = _int(cfg, "max_position_embeddings", "max_seq_len", "n_positions")
    if mpe is not None and mpe < value:
        steps.append(f"capped at max_position_embeddings {mpe:,}")
        value = mpe
    if gpu_memory_bytes is not None and model_config is not None:
        vram = launcher_vram_tokens(cfg, gpu_memory_bytes, num_shard=num_shard,
                                    cuda_memory_fraction=cuda_memory_fraction)
        if vram is not None and vram < value:
            steps.append(f"capped at the launcher's VRAM estimate {vram:,} tokens")
            value = vram
    return value, steps
