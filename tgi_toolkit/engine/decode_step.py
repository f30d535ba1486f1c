"""One decoder layer of a decode step, as two pure functions around attention; the step's layers as TorchScript,
and their compiled form.

A decode step is 30 layers of the same few dozen small ops on `[rows, hidden]` inputs. `layer_in` (RMSNorm,
the fused q/k/v matmul, RoPE) and `layer_out` (output projection, residual, RMSNorm, gate/up matmul, SwiGLU,
down matmul, residual) take the layer's weights as arguments; `decode_layers` runs every layer with
`attention.one_token_attention` between the two.

By default the step runs `decode_layers` as TorchScript (`scripted_decode_layers`): the same kernels, called
without Python between them. With `--cuda-graphs`, `CompiledDecode` compiles `layer_in` and `layer_out` with
`torch.compile` (inductor fuses each run of elementwise ops into one kernel between the matmuls) with the batch
dimension dynamic, and warms them at start-up at those batch sizes (inductor specialises a size of 1; the others
share one graph), as TGI warms its CUDA graphs' batch-size buckets, so no request pays a compile; attention and
the KV cache writes stay eager between the two (their shape changes every step as the context grows). On a CUDA
card the same two functions compile inside the decode step's CUDA graphs at `--compile-sizes` (`graphs.py`), with
static shapes and coordinate-descent tuning (`CompiledDecode.layers`).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from tgi_toolkit.config.embedded import CUDA_COMPILE_OPTIONS
from tgi_toolkit.engine.attention import one_token_attention
from tgi_toolkit.engine.packed import packed_linear

log = logging.getLogger("tgi_toolkit.engine")

# A linear layer's tensors: (weight, None, bias) for a plain layer, (int8 weight, per-channel scale, bias)
# for `--quantize eetq`.
Tensors = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]
# Or the layer itself where no tensor form runs it (bitsandbytes): the Python step only.
Weight = Tensors | torch.nn.Module


def project(x: torch.Tensor, w: Tensors) -> torch.Tensor:
    """`x @ W.T (+ bias)` for decode rows: one oneDNN call on a packed weight; else, in half precision,
    `(W @ x.T).T`, which streams the weight rows once (one row computed as two to take the same kernel);
    float32 keeps `F.linear` (MKL's GEMV), and so does a CUDA tensor (cuBLAS). Measured in docs/engine.md, "The
    decode step's speed". Outside TorchScript `w` may also be a module (a `Weight`), run as itself."""
    if not isinstance(w, tuple):  # a module; TorchScript, which knows `w` a tuple, compiles no such branch
        return w(x)
    weight, scale, bias = w
    if weight.is_mkldnn:  # packed by engine.packed: one oneDNN call
        return packed_linear(x, weight, bias)
    if scale is not None:
        y = torch._weight_int8pack_mm(x.to(torch.bfloat16), weight, scale).to(x.dtype)
    elif (x.dtype != torch.bfloat16 and x.dtype != torch.float16) or x.device.type != "cpu":
        return F.linear(x, weight, bias)  # float32 (not in packed.HALF, as TorchScript can spell it), or a GPU's GEMM
    elif x.shape[0] == 1:
        y = torch.mm(weight, torch.cat([x, x]).T)[:, :1].T
    else:
        y = torch.mm(weight, x.T).T
    return y if bias is None else y + bias


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """As transformers' LlamaRMSNorm: normalise in float32, round to the model dtype, then scale (the
    same rounding as transformers gives the same logits in bfloat16)."""
    if x.dtype == torch.float32:
        return torch.rms_norm(x, [x.shape[-1]], weight, eps)
    return weight * torch.rms_norm(x.float(), [x.shape[-1]], None, eps).to(x.dtype)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def layer_in(h: torch.Tensor, norm: torch.Tensor, qkv: Tensors, cos: torch.Tensor, sin: torch.Tensor,
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


def layer_out(h: torch.Tensor, attn: torch.Tensor, o: Tensors, norm: torch.Tensor, gate_up: Tensors,
              down: Tensors, eps: float) -> torch.Tensor:
    h = h + project(attn, o)
    x = project(rms(h, norm, eps), gate_up)
    inter = x.shape[-1] // 2
    return h + project(F.silu(x[:, :inter]) * x[:, inter:], down)


def decode_layers(h: torch.Tensor, weights: list[Tensors], norms: list[torch.Tensor], cos: torch.Tensor,
                  sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor, span: int,
                  mask: torch.Tensor | None, eps: float, heads: int, kv_heads: int) -> torch.Tensor:
    """Every decoder layer of a decode step whose rows are cache rows 0..len(h)-1, row i's token at
    `positions[i]`: the hidden states after the last layer. `weights` holds each layer's q/k/v, o, gate/up and
    down, `norms` its two norms, in layer order; `span` and `mask` as `attention.OneTokenRows` has them."""
    rows = torch.arange(h.shape[0], device=h.device)
    for i in range(len(norms) // 2):
        q, k, v = layer_in(h, norms[2 * i], weights[4 * i], cos, sin, eps, heads, kv_heads)
        attn = one_token_attention(q, k, v, k_cache[i], v_cache[i], rows, positions, span, mask)
        h = layer_out(h, attn, weights[4 * i + 1], norms[2 * i + 1], weights[4 * i + 2], weights[4 * i + 3], eps)
    return h


_SCRIPTED: list[Any] = []  # decode_layers as TorchScript, built once per process (`scripted_decode_layers`)


def scripted_decode_layers() -> Any:
    """`decode_layers` compiled by TorchScript, or None where it cannot be (a torch without TorchScript).

    Why TorchScript, deprecated as it is: a one-row step runs ~700 small ops, and called from Python each one
    pays the binding's argument parsing; TorchScript's interpreter calls the same kernels without it, with
    bit-identical results, and compiles in well under a second (inductor takes minutes here and cannot take
    the oneDNN-packed weights). Measured in docs/engine.md, "The decode step's speed"."""
    if not _SCRIPTED:
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", category=DeprecationWarning)
                _SCRIPTED.append(torch.jit.script(decode_layers))
        except Exception as exc:  # the eager step serves the same tokens
            log.warning("Decode step not scripted (%s): running it from Python", exc)
            _SCRIPTED.append(None)
    return _SCRIPTED[0]


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
    """`layer_in` and `layer_out` compiled by inductor: on a CPU warmed for the given row counts (`warm`); on a CUDA
    card run inside the decode step's graphs (`layers`, `graphs.GraphDecode`)."""

    def __init__(self, device_type: str = "cpu") -> None:
        if device_type == "cuda":
            # cuBLAS's one-row GEMMs ran 1.3-3.5x the weight's read time on the H200 (docs/gpu-probe.md); why these
            # options: config.embedded
            options = dict(CUDA_COMPILE_OPTIONS)
            self.layer_in = torch.compile(layer_in, fullgraph=True, options=options)
            self.layer_out = torch.compile(layer_out, fullgraph=True, options=options)
        else:
            self.layer_in = torch.compile(layer_in, dynamic=True, fullgraph=True)
            self.layer_out = torch.compile(layer_out, dynamic=True, fullgraph=True)

    def layers(self, h: torch.Tensor, weights: list[Tensors], norms: list[torch.Tensor], cos: torch.Tensor,
               sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor, span: int,
               mask: torch.Tensor | None, eps: float, heads: int, kv_heads: int) -> torch.Tensor:
        """`decode_layers` with the compiled layer functions; attention and the cache writes run eagerly between
        them (as the CPU's compiled step runs them)."""
        rows = torch.arange(h.shape[0], device=h.device)
        for i in range(len(norms) // 2):
            q, k, v = self.layer_in(h, norms[2 * i], weights[4 * i], cos, sin, eps, heads, kv_heads)
            attn = one_token_attention(q, k, v, k_cache[i], v_cache[i], rows, positions, span, mask)
            h = self.layer_out(h, attn, weights[4 * i + 1], norms[2 * i + 1], weights[4 * i + 2],
                               weights[4 * i + 3], eps)
        return h

    def warm(self, runner: Any, rows: Sequence[int]) -> float:
        """Run a decode step at each row count (compiling on the first), and at 1 and 2 rows where the cache holds
        them; returns the seconds taken. Why 1 and 2: the compiled step runs every decode step, whatever its rows,
        and `dynamic=True` compiles one graph for a single row and one for all the others, so warmed at 1 row alone
        the first step of 2 rows compiled while serving (2.9 s on the 2-core CPU, paid by the requests in it)."""
        started = time.perf_counter()
        held = list(runner.cache.seqs)
        if held:
            raise RuntimeError("warm the compiled decode step before any sequence runs")
        rows = sorted(set(rows) | {n for n in (1, 2) if n <= runner.cache.max_rows})
        for n in rows:
            seqs = [runner.cache.add(1) for _ in range(n)]
            runner.decode([0] * n)
            for seq in seqs:
                runner.release(seq)
        seconds = time.perf_counter() - started
        log.info("Decode step compiled and warmed for %s rows in %.1f s", ", ".join(map(str, rows)),
                 seconds)
        return seconds
