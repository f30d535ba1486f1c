"""How the toolkit's embedded engine's forward on a card differs from a serving framework's, counted from its code:
what `costs.measured`'s `engine=True` prices. Its elementwise ops run unfused (`engine_elementwise_bytes`); new prompts
of one length attend in one SDPA call and any other prompt chunk in one of its own (`one_prompt_call`); its decode
steps at `--compile-sizes` rows replay layers inductor compiled (`compiled_layers`, from profile-gpu's table)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def engine_elementwise_bytes(shape: Any) -> float:
    """Bytes a token's elementwise ops read and write in one layer of the embedded engine, which runs them unfused
    (engine/decode_step.py layer_in/layer_out, engine/attention.py attend), counted from its code for bf16
    activations with H hidden, Q = heads x head_dim, K = KV heads x head_dim, I intermediate, in bf16 elements
    read plus written (2 bytes each; a float32 value counts 2):
    - each of the two RMSNorms: to float32 (read H, write 2H), rms_norm (2H, 2H), back (2H, H), times the weight
      (H, H): 12H, 24H in the two;
    - RoPE on the queries and keys (R = Q + K wide): x cos (2R), the negated half (R), the cat (2R), x sin (2R),
      the sum (3R): 10R, and the token's cos and sin rows (head_dim d each): 2d; the grouped queries made
      contiguous: 2Q;
    - the keys and values into the sequence's cache row (2 x 2K), and into the prefix cache's pool (a gather
      then a scatter, 2 x 4K): 12K; the chunk's attention output copied into the forward's buffer: 2Q (SDPA's
      output transposed back is a view);
    - the two residual adds (3H each): 6H; SwiGLU: silu (2I) and the product (3I): 5I (an ungated MLP's
      activation 2I).
    In all 30H + 14Q + 22K + 5I + 2d: 67H for Llama-3.1-8B, against the 10H of fused kernels
    (costs.measured ELEMENTWISE_PASSES).
    tests/test_costs_measured.py counts the same bytes in the engine's own forward on a CPU."""
    h, q = shape.hidden_size, shape.num_heads * shape.head_dim
    k = shape.num_kv_heads * shape.head_dim
    elements = 30 * h + 14 * q + 22 * k + (5 if shape.gated_mlp else 2) * shape.intermediate_size + 2 * shape.head_dim
    return 2.0 * elements


def compiled_layers(table: Any, dtype: str | None, projections: list[tuple[int, int]], sizes: Sequence[int]
                    ) -> dict[int, float]:
    """Seconds of a decoder layer's projections (`projections`' (n, k), one shard's) compiled at each of `sizes`
    rows, from profile-gpu's `compiled_gemm_perf` rows of `dtype` measured at exactly that shape; a size any
    projection lacks is left out (priced from gemm_perf, as the engine runs a size eagerly whose compile failed)."""
    rows = table[table["gemm_dtype"] == dtype] if dtype else table.iloc[0:0]
    times = {(int(m), int(n), int(k)): float(ms) for m, n, k, ms in zip(rows["m"], rows["n"], rows["k"],
                                                                         rows["latency"], strict=True)}
    out = {}
    for m in sizes:
        found = [times.get((m, n, k)) for n, k in projections]
        if all(ms is not None for ms in found):
            out[m] = sum(found) / 1e3
    return out


def one_prompt_call(rows: float, tokens: float, context: float, pairs: float) -> bool:
    """Whether the embedded engine attends a forward's prompt chunks (`rows` of them, `tokens` tokens over `context`
    positions with `pairs` causal query-key pairs) in one SDPA call: where every chunk is a new prompt and all are
    of one length (engine/attention.py `plan`). Read from the shape: new prompts have no cached positions (context
    = tokens), and R new prompts of T tokens in all have R n (n + 1) / 2 pairs at n = T / R when all are n long,
    more otherwise."""
    if rows < 1 or context != tokens:
        return False
    n = tokens / rows
    return math.isclose(pairs, rows * n * (n + 1) / 2, rel_tol=1e-9)
