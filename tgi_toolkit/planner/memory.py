"""Bytes a served model needs: its weights, its KV cache per token and its prefill activations.

The arithmetic every capacity plan sums (tgi_toolkit.planner.capacity), and the number formats its steps print.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tgi_toolkit.planner.dtypes import canonical_dtype, dtype_bytes, kv_dtype_bytes, quant_scheme
from tgi_toolkit.planner.gpus import GiB
from tgi_toolkit.planner.shape import ModelConfigSource, ModelShape


def num(value: float) -> str:
    """A count as the plan's steps print it: whole, with thousands separators."""
    return f"{int(value):,}"


def gib(value: float) -> str:
    """Bytes as the plan's steps print them: GiB with two decimals."""
    return f"{value / GiB:,.2f} GiB"


def weight_bytes(shape: ModelShape, dtype: str, quantize: str | None = None) -> tuple[int, str]:
    """Bytes of all weights, and the sentence that shows the sum."""
    scheme = quant_scheme(quantize, shape.quantization_config)
    parts = shape.parameter_breakdown()
    total = sum(parts.values())
    act = dtype_bytes(dtype)
    if scheme is None:
        return total * act, f"{num(total)} parameters x {act} B ({canonical_dtype(dtype)}) = {gib(total * act)}"
    packed = parts["attention"] + parts["mlp"]
    rest = total - packed
    bits = scheme.bits_per_weight(shape.hidden_size)
    nbytes = math.ceil(packed * bits / 8) + rest * act
    return nbytes, (f"{num(packed)} linear weights x {bits:.3f} bits ({scheme.name}: {scheme.note}) "
                    f"+ {num(rest)} embeddings/norms/biases x {act} B = {gib(nbytes)}")


def kv_heads_per_shard(shape: ModelShape, num_shard: int) -> int:
    # TGI splits KV heads across shards; with fewer heads than shards each shard keeps a copy of one.
    return max(1, shape.num_kv_heads // num_shard)


def kv_bytes_per_token(shape: ModelShape, dtype: str, kv_cache_dtype: str | None = None, num_shard: int = 1) -> int:
    """2 (K and V) x layers x KV heads on one shard x head dim x bytes per element."""
    return 2 * shape.num_layers * kv_heads_per_shard(shape, num_shard) * shape.head_dim * \
        kv_dtype_bytes(kv_cache_dtype, dtype)


def kv_capacity_tokens(model_config: ModelShape | ModelConfigSource, kv_cache_bytes: int, *, dtype: str = "bfloat16",
                       kv_cache_dtype: str | None = None, num_shard: int = 1, block_size: int = 1) -> int:
    """Tokens a KV space of `kv_cache_bytes` holds, in whole blocks of `block_size` tokens.

    vLLM reports exactly this as "GPU KV cache size: N tokens" (its CPU backend: VLLM_CPU_KVCACHE_SPACE
    bytes, block size 128; on GPUs the space left after profiling, block size 16).
    """
    shape = model_config if isinstance(model_config, ModelShape) else ModelShape.from_config(model_config)
    per_block = kv_bytes_per_token(shape, dtype, kv_cache_dtype, num_shard) * block_size
    return int(kv_cache_bytes) // per_block * block_size


def activation_bytes_per_token(shape: ModelShape, dtype: str, num_shard: int = 1) -> int:
    act = dtype_bytes(dtype)
    if shape.num_experts:
        inner = shape.experts_per_token * shape.expert_intermediate_size + shape.shared_intermediate_size
    else:
        inner = shape.intermediate_size
    mlp = (3 if shape.gated_mlp else 2) * inner
    width = 4 * shape.hidden_size + (shape.q_dim + 2 * shape.kv_dim + mlp) // num_shard
    return act * width


# -- vLLM V1's KV pool (docs/vllm-rules.md, M1-M4) --------------------------------------------------------------
# What vLLM's memory profile measures and this arithmetic can only assume: memory outside torch that its engine adds
# (NCCL, cuBLAS workspaces, attention backends' buffers) and the CUDA graphs it captures. Both are overridable.
VLLM_NON_TORCH_BYTES = GiB // 2
VLLM_CUDA_GRAPH_BYTES = GiB // 2


@dataclass(frozen=True)
class VllmKvCache:
    """vLLM V1's KV pool on one GPU, term by term, as its worker sizes it (M1-M4)."""

    requested_bytes: int  # ceil(total memory x gpu_memory_utilization)
    weight_bytes: int
    activation_bytes: int  # the profile run's transient peak at max_num_batched_tokens
    non_torch_bytes: int
    cuda_graph_bytes: int
    block_bytes: int  # one block of block_size tokens over every layer
    block_size: int

    @property
    def kv_bytes(self) -> int:
        return max(0, self.requested_bytes - self.weight_bytes - self.activation_bytes - self.non_torch_bytes
                   - self.cuda_graph_bytes)

    @property
    def num_blocks(self) -> int:
        return self.kv_bytes // self.block_bytes

    @property
    def kv_capacity_tokens(self) -> int:
        """What vLLM logs as "GPU KV cache size: N tokens" (max_model_len a multiple of block_size)."""
        return self.num_blocks * self.block_size


def vllm_kv_cache(model_config: ModelShape | ModelConfigSource, gpu_memory_bytes: int, *,
                  gpu_memory_utilization: float = 0.9, max_num_batched_tokens: int = 2048, max_num_seqs: int = 256,
                  dtype: str = "bfloat16", quantize: str | None = None, kv_cache_dtype: str | None = None,
                  num_shard: int = 1, block_size: int = 16, non_torch_bytes: int = VLLM_NON_TORCH_BYTES,
                  cuda_graph_bytes: int = VLLM_CUDA_GRAPH_BYTES) -> VllmKvCache:
    """The KV pool vLLM V1 finds at start-up on one GPU of `gpu_memory_bytes` (per shard with `num_shard`).

    M1: it may use ceil(total x gpu_memory_utilization); M2: less what its profile run consumed (the weights, the
    memory outside torch) and that run's transient peak (activations of max_num_batched_tokens tokens, and the
    sampler's float32 logits for up to max_num_seqs rows); M3: less the CUDA graphs' estimate; M4: in whole blocks
    of `block_size` tokens over every layer.
    """
    shape = model_config if isinstance(model_config, ModelShape) else ModelShape.from_config(model_config)
    weights, _ = weight_bytes(shape, dtype, quantize)
    rows = min(max_num_seqs, max_num_batched_tokens)
    activation = activation_bytes_per_token(shape, dtype, num_shard) * max_num_batched_tokens + \
        rows * shape.vocab_size * 4
    return VllmKvCache(requested_bytes=math.ceil(gpu_memory_bytes * gpu_memory_utilization),
                       weight_bytes=-(-weights // num_shard), activation_bytes=activation,
                       non_torch_bytes=int(non_torch_bytes), cuda_graph_bytes=int(cuda_graph_bytes),
                       block_bytes=kv_bytes_per_token(shape, dtype, kv_cache_dtype, num_shard) * block_size,
                       block_size=block_size)
