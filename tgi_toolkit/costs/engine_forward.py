"""How the toolkit's embedded engine's forward on a card differs from a serving framework's, counted from its code:
what `costs.measured`'s `engine=True` prices. Its elementwise ops run unfused (`engine_elementwise_bytes`); a forward's
prompt chunks attend in one SDPA call, causal where all are new prompts of one length (`one_prompt_call`), else
masked and padded to the longest (`padded_prompts`), as a fused framework's varlen kernel takes them in one; its decode
steps at `--compile-sizes` rows replay layers inductor compiled (`compiled_layers`, from profile-gpu's table; a size
any projection lacks is priced from `gemm_perf`, as the engine runs a size eagerly whose compile failed); and its
eager forwards are issued from Python one torch call at a time (`EngineCalls`), which the card's host may take longer
to issue than the card takes to run: the card runs each kernel as the host issues it, so an eager forward takes the
longer of the two, while a decode step replays a CUDA graph after a few calls, with the card idle meanwhile."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tgi_toolkit.costs.features import Shape


class LayerShape(Protocol):
    """What the elementwise rule reads of a model's shape (planner.shape.ModelShape has it)."""

    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    gated_mlp: bool


# The engine's host time around its forwards, as host terms in place of a server profile's: its loop between two
# forwards and its Python inside one outside the runner and the token choice (each row's text and event, the
# hand-over to the front end streaming the last step's), served on a 2-core CPU at 1-64 decode rows
# (benchmarks/engine_host_rows.py, 2026-11-29: 0.236 ms at one row, 1.975 at 64); and its front end's intake of a
# request, which holds up the forward it falls in (one process, one GIL): the first prompt's forward of a batch of
# 64 took 0.86 ms a request longer than alone (medians over the 6 runs of two measurements that afternoon; 0.37-1.12
# a run; 0.75 at batch 8 and 32). The card's own host measures all three at 1-64 rows in the probe's trace
# (decode_gap_ms, decode_host_ms, first_prompt_ms). And a request's path outside its forward, in place of the server
# profile's 5 ms (TGI's Rust router): bench's batch-1 time to first token less the forward and the loop's gap, 2.47-2.67
# ms (median 2.62) over three runs on the same CPU (2026-11-30); the H200's trace of 2026-11-29 read 2.9-3.2 there
ENGINE_LOOP = {"forward_overhead_s": 2.1e-4, "row_overhead_s": 2.8e-5, "host_token_s": 0.0,
               "frontend_s": 8.6e-4, "frontend_stalls_forwards": True, "request_overhead_s": 2.6e-3}


def engine_elementwise_bytes(shape: LayerShape) -> float:
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


def padded_prompts(s: Shape) -> bool:
    """Whether the engine pads a forward's prompt chunks into one masked SDPA call (engine/attention.py `pad`): two
    or more chunks that are not new prompts of one length (`one_prompt_call`). Chunks so uneven that padding would
    pass attention.PAD_LIMIT take a call each, which the shape's sums cannot tell; they are read as padded."""
    if not s.prefilling:
        return False
    decode_rows = min(s.decode_rows, s.rows)
    prompts = s.rows - decode_rows
    return prompts > 1 and not one_prompt_call(prompts, s.tokens - decode_rows, s.context - s.decode_context,
                                               s.pairs - s.decode_context)


@dataclass(frozen=True)
class EngineCalls:
    """The torch functions the engine's forward calls from Python, as a rule of its shape counted from its code
    (engine.host_calls.count_calls runs it and solves for these; its test runs it again at other shapes). A
    prompt forward of one row makes `base` + `per_layer` x layers; each further row one more (`per_row`); prompt
    chunks padded into one call (`padded_prompts`) `padded` + `padded_layer` x layers more; decode rows beside
    prompts `beside_decode` + `beside_decode_layer` x layers more. A decode step makes `decode_step`: its layers
    run in TorchScript or a CUDA graph, not call by call."""

    base: int
    per_layer: int
    per_row: int
    padded: int
    padded_layer: int
    beside_decode: int
    beside_decode_layer: int
    decode_step: int

    def calls(self, s: Shape, layers: int) -> int:
        decode_rows = min(s.decode_rows, s.rows)
        if not s.prefilling or s.rows - decode_rows < 1:
            return self.decode_step
        n = self.base + self.per_layer * layers + self.per_row * (s.rows - 1)
        if padded_prompts(s):
            n += self.padded + self.padded_layer * layers
        if decode_rows > 0:
            n += self.beside_decode + self.beside_decode_layer * layers
        return n

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)
