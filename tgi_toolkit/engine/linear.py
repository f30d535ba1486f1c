"""The engine's linear layers: `SkinnyLinear`, a `torch.nn.Linear` fast for the few-row inputs of decode steps
(`linear`), multiplying with the weight packed in oneDNN's layout where it has one.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tgi_toolkit.engine.packed import HALF, pack, packed_linear

SKINNY_ROWS = 16


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear`, fast for the few-row inputs of decode steps: in half precision `(W @ x.T).T`, which streams
    the weight rows once (one row computed as two, to take the same kernel); float32 keeps `F.linear` (MKL's
    GEMV is faster there). Measured in docs/engine.md, "The decode step's speed"."""
    rows = x.shape[0]
    if x.dim() != 2 or rows > SKINNY_ROWS or x.dtype not in HALF or x.device.type != "cpu":
        return F.linear(x, weight, bias)
    xt = x.T if rows > 1 else torch.cat([x, x]).T
    y = torch.mm(weight, xt).T[:rows].contiguous()
    return y if bias is None else y + bias


class SkinnyLinear(torch.nn.Linear):
    plain_linear = True  # the decode step reads its tensors (decode_step.weight_of)
    packed: torch.Tensor | None = None  # the weight in oneDNN's layout (engine.packed), where it has one

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None and x.dim() == 2:
            return packed_linear(x, self.packed, self.bias)
        return linear(x, self.weight, self.bias)

    @classmethod
    def from_weight(cls, weight: torch.Tensor, bias: torch.Tensor | None = None) -> SkinnyLinear:
        """A layer holding these tensors (no copy where they are contiguous), packed where it can be."""
        layer = cls(weight.shape[1], weight.shape[0], bias=bias is not None, dtype=weight.dtype, device="meta")
        layer.weight = torch.nn.Parameter(weight.contiguous(), requires_grad=False)
        if bias is not None:
            layer.bias = torch.nn.Parameter(bias.contiguous(), requires_grad=False)
        layer.packed = pack(layer.weight)
        return layer
