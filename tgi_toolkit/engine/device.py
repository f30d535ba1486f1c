"""Where the engine computes: `--device`, what the device offers (fp8), and the KV memory a CUDA card leaves free.

The runner, its caches, attention and sampling create every tensor on the model's device, so one code path runs on
a CPU and on a CUDA card; this module holds the few decisions that differ: which device, which dtype by default,
whether fp8 matmuls exist, and, on CUDA, the KV cache sized from the memory free after the weights are loaded,
as TGI's warm-up sizes it (docs/tgi-rules.md L2), instead of the CPU's fixed TGI_TOOLKIT_KV_CACHE_GIB.
"""

from __future__ import annotations

from typing import Any

# Which device, and whether it has fp8, are configuration facts (profile-gpu, below the engine, asks them too)
from tgi_toolkit.config.embedded import DEVICES, cuda_available, has_fp8, resolve_device

__all__ = ["DEVICES", "activation_bytes", "cuda_available", "cuda_kv_bytes", "default_dtype_name", "describe",
           "has_fp8", "resolve_device"]

def default_dtype_name(device: str) -> str:
    """bfloat16 on a CUDA card (as TGI); on a CPU, bfloat16 only where it computes in it natively, else float32
    (without native bf16, bf16 weights are converted on every product: prefill ran 5x slower on an AVX2 CPU)."""
    from tgi_toolkit.config.embedded import cpu_has_bf16

    return "bfloat16" if device == "cuda" or cpu_has_bf16() else "float32"


def activation_bytes(config: Any, tokens: int, emitting_rows: int, dtype_bytes: int) -> int:
    """A generous bound on the memory a forward of `tokens` tokens takes beyond weights and KV: each layer's
    hidden state, fused q/k/v and gate/up outputs (twice, for the temporaries beside them), and float32 logits
    of the emitting rows (twice: log-softmax and the copies sampling makes). TGI measures this by running its
    warm-up batch; the engine reserves it before the KV cache takes the rest."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    per_token = 3 * config.hidden_size + (heads + 2 * kv_heads) * head_dim + 2 * config.intermediate_size
    return 2 * tokens * per_token * dtype_bytes + 2 * emitting_rows * config.vocab_size * 4


def cuda_kv_bytes(memory_fraction: float, reserve_bytes: int) -> int:
    """KV bytes on the current CUDA card as TGI's warm-up finds them: the memory free now (weights loaded) less
    the activations' reserve, less (1 - fraction x TGI_WIGGLE_ROOM) of the card's total
    (`config.scheduling.warmup_kv_bytes`): the slack left for the allocator and the CUDA graphs' pool."""
    import torch

    from tgi_toolkit.config.scheduling import warmup_kv_bytes

    free, total = torch.cuda.mem_get_info()
    return warmup_kv_bytes(max(0, free - reserve_bytes), total, memory_fraction)


def describe(device: str) -> str:
    """The device in words, for the start-up log and /info: the card's name on CUDA."""
    import torch

    if device == "cuda":
        return f"cuda ({torch.cuda.get_device_name()})"
    return "cpu"
