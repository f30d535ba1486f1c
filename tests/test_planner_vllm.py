"""vLLM V1's KV pool (tgi_toolkit.planner.memory.vllm_kv_cache), against arithmetic worked by hand from vLLM 0.32.0's
gpu worker (docs/vllm-rules.md M1-M4)."""

from __future__ import annotations

from pathlib import Path

from tgi_toolkit.planner.memory import vllm_kv_cache

LLAMA3 = Path(__file__).parent / "data" / "configs" / "llama-3-8b.json"
GiB = 2**30


def test_llama3_8b_on_80_gib_at_vllm_serve_defaults_for_a_large_card():
    # Llama-3-8B: 8,030,261,248 parameters (published) x 2 B = 16,060,522,496 B of weights.
    # Activations: 2 B x (4 x 4096 + 4096 + 2 x 1024 + 3 x 14336) = 131,072 B a token x 8192 tokens = 1 GiB,
    # plus the sampler's float32 logits: min(1024 seqs, 8192) rows x 128,256 x 4 B = 525,336,576 B.
    # Requested: ceil(80 GiB x 0.9) = 77,309,411,328 B; less weights, activations, 0.5 GiB outside torch and
    # 0.5 GiB of CUDA graphs: 58,576,068,608 B. A block: 16 tokens x 32 layers x 8 heads x 128 x 2 x 2 B
    # = 2,097,152 B, so 27,931 blocks (516,096 B left over): 446,896 tokens.
    kv = vllm_kv_cache(LLAMA3, 80 * GiB, gpu_memory_utilization=0.9, max_num_batched_tokens=8192, max_num_seqs=1024)
    assert kv.requested_bytes == 77_309_411_328
    assert kv.weight_bytes == 16_060_522_496
    assert kv.activation_bytes == 1_073_741_824 + 525_336_576
    assert kv.kv_bytes == 58_576_068_608
    assert kv.block_bytes == 2_097_152
    assert kv.num_blocks == 27_931 and kv.kv_capacity_tokens == 446_896


def test_a_smaller_utilization_and_no_graphs_move_the_pool_by_their_bytes():
    # At 0.5: ceil(40 GiB) = 42,949,672,960 B; the same 16,060,522,496 + 1,599,078,400 + 536,870,912 B, no
    # graphs (--enforce-eager): 24,753,201,152 B = 11,803 blocks (516,096 B left): 188,848 tokens.
    kv = vllm_kv_cache(LLAMA3, 80 * GiB, gpu_memory_utilization=0.5, max_num_batched_tokens=8192,
                       max_num_seqs=1024, cuda_graph_bytes=0)
    assert kv.kv_bytes == 24_753_201_152
    assert kv.kv_capacity_tokens == 11_803 * 16 == 188_848


def test_weights_larger_than_the_budget_leave_no_pool():
    kv = vllm_kv_cache(LLAMA3, 16 * GiB, gpu_memory_utilization=0.9)
    assert kv.kv_bytes == 0 and kv.kv_capacity_tokens == 0
