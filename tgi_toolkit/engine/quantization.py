"""`--quantize` on the embedded engine: which of TGI's methods can run here, and applying them."""

from __future__ import annotations

from typing import Any

# TGI's quantization names and why the CPU engine cannot run them (yet).
_CANNOT = {
    "awq": "AWQ checkpoints need GPU kernels; the embedded engine runs unquantized or 8-/4-bit weights on the CPU.",
    "gptq": "GPTQ checkpoints need GPU kernels; the embedded engine runs unquantized or 8-/4-bit weights on the CPU.",
    "marlin": "Marlin kernels are CUDA-only.",
    "exl2": "ExLlamaV2 kernels are CUDA-only.",
    "compressed-tensors": "compressed-tensors checkpoints need GPU kernels.",
    "fp8": "fp8 matmuls need a GPU with fp8 support (Hopper/Ada); this CPU has none.",
}


def refusal(method: str) -> str | None:
    """A sentence saying why `method` cannot run on this engine, or None when it can."""
    if method in _CANNOT:
        return _CANNOT[method]
    return f"{method} is not available on the embedded engine yet."


def quantize_model(model: Any, method: str) -> None:
    reason = refusal(method)
    if reason:
        raise ValueError(f"--quantize {method}: {reason}")
