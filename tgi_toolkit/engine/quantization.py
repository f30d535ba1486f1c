"""`--quantize` on the embedded engine: TGI's method names, mapped to kernels that run here.

Picked by measurement on the 2-core CPU (benchmarks/quantization.py prints the figures):
- `bitsandbytes`: bitsandbytes' LLM.int8 (`Linear8bitLt`, outlier threshold 6.0, as TGI uses it);
- `bitsandbytes-nf4` / `bitsandbytes-fp4`: bitsandbytes' 4-bit `Linear4bit` with that data type;
- `eetq`: EETQ's scheme, int8 weights with one scale per output channel, on PyTorch's own
  int8 weight-only matmul (`aten::_weight_int8pack_mm`), the fastest 8-bit path at small batch;
- `fp8` (a CUDA card of compute capability 8.9 or above only): e4m3 weights with one scale per tensor,
  activations scaled per tensor as they come, multiplied by `torch._scaled_mm` on the fp8 tensor cores.
On CUDA the same names run bitsandbytes' GPU kernels. Checkpoint formats that need GPU kernels
(AWQ, GPTQ, Marlin, EXL2, compressed-tensors) and fp8 without fp8 hardware are refused with a
sentence, before the model loads. Embeddings, norms and the LM head stay unquantized, as in TGI.
"""

from __future__ import annotations

from typing import Any

import torch

from tgi_toolkit.config.embedded import BITSANDBYTES, SUPPORTED, quantize_refusal

__all__ = ["BITSANDBYTES", "SUPPORTED", "Fp8Linear", "Int8PerChannelLinear", "quantize_linear", "quantize_runner",
           "refusal"]

# Which methods run here is a configuration fact (the form and the planner show it without importing
# the engine); re-exported for the engine and its callers.
refusal = quantize_refusal


class Int8PerChannelLinear(torch.nn.Module):
    """EETQ-style weight-only int8: `y = x @ (q * scale).T`, with PyTorch's int8-weight kernel."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(dim=1).clamp(min=1e-8) / 127.0
        self.register_buffer("qweight", torch.round(weight / scale[:, None]).to(torch.int8))
        # The kernel takes activations and scales in bfloat16 (computes in float32 inside).
        self.register_buffer("scale", scale.to(torch.bfloat16))
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach(), requires_grad=False)
        self.out_dtype = linear.weight.dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = torch._weight_int8pack_mm(x.reshape(-1, shape[-1]).to(torch.bfloat16), self.qweight, self.scale)
        y = y.to(self.out_dtype).reshape(*shape[:-1], -1)
        return y if self.bias is None else y + self.bias


class Fp8Linear(torch.nn.Module):
    """fp8 (e4m3) weights with one scale per tensor; each input is scaled to e4m3 per tensor as it comes (TGI's
    fp8 for a checkpoint without calibrated scales), and `torch._scaled_mm` multiplies the two, out in the
    model's dtype. No host sync: a CUDA graph captures it."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach()
        top = torch.finfo(torch.float8_e4m3fn).max
        scale = weight.abs().amax().float().clamp(min=1e-12) / top
        self.register_buffer("qweight", (weight.float() / scale).clamp(-top, top).to(torch.float8_e4m3fn))
        self.register_buffer("scale", scale)
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach(), requires_grad=False)
        self.out_dtype = linear.weight.dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        top = torch.finfo(torch.float8_e4m3fn).max
        x_scale = flat.abs().amax().float().clamp(min=1e-12) / top
        xq = (flat.float() / x_scale).clamp(-top, top).to(torch.float8_e4m3fn)
        y = torch._scaled_mm(xq, self.qweight.t(), scale_a=x_scale, scale_b=self.scale, bias=self.bias,
                             out_dtype=self.out_dtype)
        return y.reshape(*shape[:-1], -1)


def _bitsandbytes(linear: torch.nn.Linear, method: str) -> torch.nn.Module:
    import bitsandbytes as bnb

    weight = linear.weight.detach().float()
    device = linear.weight.device
    if method == "bitsandbytes":
        module = bnb.nn.Linear8bitLt(linear.in_features, linear.out_features, bias=linear.bias is not None,
                                     has_fp16_weights=False, threshold=6.0)
        module.weight = bnb.nn.Int8Params(weight, requires_grad=False, has_fp16_weights=False)
    else:
        quant_type = method.rsplit("-", 1)[1]
        module = bnb.nn.Linear4bit(linear.in_features, linear.out_features, bias=linear.bias is not None,
                                   compute_dtype=linear.weight.dtype, quant_type=quant_type)
        module.weight = bnb.nn.Params4bit(weight, requires_grad=False, quant_type=quant_type)
    if linear.bias is not None:
        module.bias = torch.nn.Parameter(linear.bias.detach(), requires_grad=False)
    return module.to(device)  # bitsandbytes quantizes when the weight is moved to its device


def quantize_linear(linear: torch.nn.Linear, method: str) -> torch.nn.Module:
    reason = refusal(method, linear.weight.device.type)
    if reason:
        raise ValueError(f"--quantize {method}: {reason}")
    if method == "eetq":
        return Int8PerChannelLinear(linear)
    if method == "fp8":
        return Fp8Linear(linear)
    return _bitsandbytes(linear, method)


def quantize_runner(runner: Any, method: str) -> None:
    """Replace every linear layer of the runner's decoder layers by its quantized form."""
    for layer in runner.layers:
        for name, module in layer.linears().items():
            setattr(layer, name, quantize_linear(module, method))
