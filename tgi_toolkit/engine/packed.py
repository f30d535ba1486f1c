"""Half-precision weights in oneDNN's blocked layout, packed once when the runner is built.

Given a plain bfloat16 weight, every `torch.mm` lets oneDNN re-lay it into its blocked format first; a decode
step multiplies a few rows by the whole weight, so that copy costs as much as the product itself. Packed once
(`torch.ops.mkldnn._reorder_linear_weight`, the layout inductor's CPU freezing gives a linear layer), a product
is one oneDNN call with bit-identical results. float32 keeps MKL's path, which needs no packing.
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger("tgi_toolkit.engine")

HALF = (torch.bfloat16, torch.float16)
ROWS_HINT = 16  # the batch size oneDNN picks the layout for; any row count runs on it


def _supported(dtype: torch.dtype) -> bool:
    if not torch.backends.mkldnn.is_available():
        return False
    ops = torch.ops.mkldnn
    return bool(ops._is_mkldnn_bf16_supported() if dtype == torch.bfloat16 else ops._is_mkldnn_fp16_supported())


def pack(weight: torch.Tensor) -> torch.Tensor | None:
    """`weight` ([out, in]) packed for oneDNN, or None where it cannot be (float32, no oneDNN support for the
    dtype on this CPU, not a CPU tensor): its callers then multiply the plain weight."""
    if weight.dtype not in HALF or weight.dim() != 2 or weight.device.type != "cpu" or not _supported(weight.dtype):
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), ROWS_HINT)
    except RuntimeError as exc:  # an oneDNN build without this path: the plain weight still works
        log.debug("oneDNN weight packing unavailable (%s)", exc)
        return None


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`x @ W.T (+ bias)` for 2-D `x`, W packed by `pack` (TorchScript compiles it: `decode_step`)."""
    no_scalars: list[int | float | complex | None] = []  # typed, as the op's schema needs under TorchScript
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", no_scalars, "")
