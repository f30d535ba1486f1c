"""One decoder layer of a decode step, as two pure functions around attention, and their compiled form.

A decode step is 30 layers of the same few dozen small ops on `[rows, hidden]` inputs; run eagerly each
op is a kernel launch and a pass over memory. `layer_in` (RMSNorm, the fused q/k/v matmul, RoPE) and
`layer_out` (output projection, residual, RMSNorm, gate/up matmul, SwiGLU, down matmul, residual)
take the layer's weights as arguments, so one compiled graph serves every layer, and
`torch.compile` (inductor) fuses each run of elementwise ops into one kernel between the matmuls,
which stay oneDNN's (AMX in bfloat16). Attention and the KV cache writes stay eager between the two
(their shape changes every step as the context grows).

`CompiledDecode` compiles both with the batch dimension dynamic and warms them at start-up at the
`--cuda-graphs` batch sizes (inductor specialises a size of 1; the others share one graph), as TGI
warms its CUDA graphs' batch-size buckets: every later batch size reuses those graphs, so no request
pays a compile. The eager step runs the same two functions uncompiled.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from tgi_toolkit.engine.packed import HALF, packed_linear

log = logging.getLogger("tgi_toolkit.engine")

# A linear layer's tensors: (weight, None, bias) for a plain layer, (int8 weight, per-channel scale, bias)
# for `--quantize eetq`; or the layer itself where no tensor form runs it (bitsandbytes; eager only).
Weight = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None] | torch.nn.Module


def project(x: torch.Tensor, w: Weight) -> torch.Tensor:
    """`x @ W.T (+ bias)` for decode rows: one oneDNN call on a packed weight; else, in half precision,
    `(W @ x.T).T`, which streams the weight rows once (one row computed as two to take the same kernel);
    float32 keeps `F.linear` (MKL's GEMV). Measured in docs/engine.md, "The decode step's speed"."""
    if isinstance(w, torch.nn.Module):
        return w(x)
    weight, scale, bias = w
    if weight.is_mkldnn:  # packed by engine.packed: one oneDNN call
        return packed_linear(x, weight, bias)
    if scale is not None:
        y = torch._weight_int8pack_mm(x.to(torch.bfloat16), weight, scale).to(x.dtype)
    elif x.dtype not in HALF:
        return F.linear(x, weight, bias)
    elif x.shape[0] == 1:
        y = torch.mm(weight, torch.cat([x, x]).T)[:, :1].T
    else:
        y = torch.mm(weight, x.T).T
    return y if bias is None else y + bias


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """As transformers' LlamaRMSNorm: normalise in float32, round to the model dtype, then scale (the
    same rounding as transformers gives the same logits in bfloat16)."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return weight * F.rms_norm(x.float(), (x.shape[-1],), None, eps).to(x.dtype)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def layer_in(h: torch.Tensor, norm: torch.Tensor, qkv: Weight, cos: torch.Tensor, sin: torch.Tensor,
             eps: float, heads: int, kv_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries `[rows, kv_heads, heads/kv_heads, head_dim]` (grouped: the query heads that share a key
    head are that head's query positions, so SDPA needs no copied keys), keys and values
    `[rows, kv_heads, head_dim]`, RoPE applied."""
    b, head_dim = h.shape[0], cos.shape[-1]
    x = project(rms(h, norm, eps), qkv)
    split = (heads + kv_heads) * head_dim
    qk = rope(x[:, :split].reshape(b, heads + kv_heads, head_dim), cos, sin)
    q = qk[:, :heads].reshape(b, kv_heads, heads // kv_heads, head_dim).contiguous()
    return q, qk[:, heads:], x[:, split:].reshape(b, kv_heads, head_dim)


def layer_out(h: torch.Tensor, attn: torch.Tensor, o: Weight, norm: torch.Tensor, gate_up: Weight,
              down: Weight, eps: float) -> torch.Tensor:
    h = h + project(attn, o)
    x = project(rms(h, norm, eps), gate_up)
    inter = x.shape[-1] // 2
    return h + project(F.silu(x[:, :inter]) * x[:, inter:], down)


def weight_of(module: torch.nn.Module, packed: bool = True) -> Weight:
    """What `project` takes for a runner's linear layer: its tensors (the oneDNN-packed weight where it has one,
    unless `packed` is False), or the module where only its own forward runs it (bitsandbytes)."""
    from tgi_toolkit.engine.quantization import Int8PerChannelLinear

    if isinstance(module, Int8PerChannelLinear):
        return (module.qweight, module.scale, module.bias)
    if type(module) is torch.nn.Linear or getattr(module, "plain_linear", False):
        held = getattr(module, "packed", None) if packed else None
        return (module.weight if held is None else held, None, module.bias)
    return module


class CompiledDecode:
    """`layer_in` and `layer_out` compiled by inductor, warmed for the given row counts."""

    def __init__(self) -> None:
        self.layer_in = torch.compile(layer_in, dynamic=True, fullgraph=True)
        self.layer_out = torch.compile(layer_out, dynamic=True, fullgraph=True)

    def warm(self, runner: Any, rows: Sequence[int]) -> float:
        """Run a decode step at each row count (compiling on the first); returns the seconds taken."""
        started = time.perf_counter()
        held = list(runner.cache.seqs)
        if held:
            raise RuntimeError("warm the compiled decode step before any sequence runs")
        for n in sorted(set(rows)):
            seqs = [runner.cache.add(1) for _ in range(n)]
            runner.decode([0] * n)
            for seq in seqs:
                runner.release(seq)
        seconds = time.perf_counter() - started
        log.info("Decode step compiled and warmed for %s rows in %.1f s", ", ".join(map(str, sorted(set(rows)))),
                 seconds)
        return seconds
