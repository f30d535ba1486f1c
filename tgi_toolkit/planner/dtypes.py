"""Bytes per weight and per cached value for each dtype, quantization method and KV-cache dtype.

Quantization methods pack the decoder's linear weights (attention and MLP projections); the
embeddings, lm_head, norms, biases and MoE routers stay in the activation dtype, as TGI loads them.
A packed weight costs its bits plus its share of the per-group metadata (scales, zero points).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
_DTYPE_ALIASES = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32", "float": "float32"}

# TGI's --kv-cache-dtype values, plus vLLM's spellings.
KV_CACHE_DTYPE_BYTES = {"fp8_e4m3fn": 1, "fp8_e5m2": 1, "fp8": 1, "fp8_e4m3": 1, "auto": 0}


@dataclass(frozen=True)
class QuantScheme:
    name: str
    bits: float  # bits of one packed weight
    group_size: int | None  # weights sharing one set of metadata; None: one set per output channel
    group_overhead_bits: float  # metadata bits per group (scales, zero points, absmax)
    needs_prequantized: bool  # the checkpoint must already be quantized with this method
    note: str

    def bits_per_weight(self, in_features: int) -> float:
        group = self.group_size or in_features
        return self.bits + self.group_overhead_bits / group


# Facts from TGI's launcher docs (seed 002) and its layers: bitsandbytes int8 keeps one fp32 scale
# per row; nf4/fp4 use blocks of 64 with double-quantized absmax (8 bits per block plus one fp32 per
# 256 blocks); GPTQ/AWQ store a fp16 scale and a packed 4-bit zero per group of 128; Marlin is
# symmetric (scale only); EETQ and FP8 are per-channel int8/fp8 with one scale per row.
QUANT_SCHEMES: dict[str, QuantScheme] = {
    "bitsandbytes": QuantScheme("bitsandbytes", 8, None, 32, False, "LLM.int8: 1 B + a fp32 scale per row"),
    "eetq": QuantScheme("eetq", 8, None, 16, False, "int8 per channel: 1 B + a fp16 scale per row"),
    "fp8": QuantScheme("fp8", 8, None, 32, False, "fp8 e4m3: 1 B + a fp32 scale per row"),
    "bitsandbytes-nf4": QuantScheme("bitsandbytes-nf4", 4, 64, 8 + 32 / 256, False,
                                    "NF4: 0.5 B + a double-quantized absmax per 64 weights"),
    "bitsandbytes-fp4": QuantScheme("bitsandbytes-fp4", 4, 64, 8 + 32 / 256, False,
                                    "FP4: 0.5 B + a double-quantized absmax per 64 weights"),
    "gptq": QuantScheme("gptq", 4, 128, 16 + 4, True, "4-bit: 0.5 B + fp16 scale and 4-bit zero per 128"),
    "awq": QuantScheme("awq", 4, 128, 16 + 4, True, "4-bit: 0.5 B + fp16 scale and 4-bit zero per 128"),
    "marlin": QuantScheme("marlin", 4, 128, 16, True, "4-bit symmetric: 0.5 B + fp16 scale per 128"),
    "exl2": QuantScheme("exl2", 4.0, None, 0, True, "variable bits; 4.0 bits per weight assumed "
                        "(the checkpoint's bits, overhead included)"),
    "compressed-tensors": QuantScheme("compressed-tensors", 8, None, 16, True,
                                      "8-bit assumed (W8A8) unless the checkpoint says otherwise"),
}


def dtype_bytes(dtype: str, *, field: str = "dtype") -> int:
    name = _DTYPE_ALIASES.get(str(dtype).lower(), str(dtype).lower())
    if name not in DTYPE_BYTES:
        raise ValueError(f"{field} must be one of {', '.join(DTYPE_BYTES)}; got {dtype!r}")
    return DTYPE_BYTES[name]


def canonical_dtype(dtype: str) -> str:
    dtype_bytes(dtype)
    return _DTYPE_ALIASES.get(str(dtype).lower(), str(dtype).lower())


def kv_dtype_bytes(kv_cache_dtype: str | None, dtype: str) -> int:
    """Bytes per cached key or value element: fp8 caches take 1, otherwise the model dtype."""
    if kv_cache_dtype is None or str(kv_cache_dtype).lower() == "auto":
        return dtype_bytes(dtype)
    key = str(kv_cache_dtype).lower()
    if key in DTYPE_BYTES or key in _DTYPE_ALIASES:
        return dtype_bytes(key, field="kv_cache_dtype")
    if key not in KV_CACHE_DTYPE_BYTES:
        raise ValueError(f"kv_cache_dtype must be one of fp8_e4m3fn, fp8_e5m2 (or fp8, auto); got {kv_cache_dtype!r}")
    return KV_CACHE_DTYPE_BYTES[key]


def quant_scheme(quantize: str | None, quantization_config: dict[str, Any] | None = None) -> QuantScheme | None:
    """The scheme for --quantize, refined by the checkpoint's own quantization_config (bits, group size).

    With `quantize` None, a checkpoint that declares a quant_method is quantized anyway: TGI's launcher
    takes the method from config.json when --quantize is not given.
    """
    qc = quantization_config or {}
    if quantize is None:
        method = str(qc.get("quant_method") or "").lower()
        if method not in QUANT_SCHEMES:
            return None
        quantize = method
    key = str(quantize).lower()
    if key not in QUANT_SCHEMES:
        raise ValueError(f"quantize must be one of {', '.join(QUANT_SCHEMES)}; got {quantize!r}")
    scheme = QUANT_SCHEMES[key]
    if str(qc.get("quant_method") or "").lower() == key:
        bits = qc.get("bits") or qc.get("w_bit")
        group = qc.get("group_size") or qc.get("q_group_size")
        if key == "compressed-tensors":
            weights = next(iter((qc.get("config_groups") or {}).values()), {}).get("weights") or {}
            bits, group = weights.get("num_bits"), weights.get("group_size")
        if bits:
            scheme = QuantScheme(scheme.name, float(bits), scheme.group_size, scheme.group_overhead_bits,
                                 scheme.needs_prequantized, scheme.note + f" (checkpoint: {bits} bits)")
        if group and int(group) > 0:
            scheme = QuantScheme(scheme.name, scheme.bits, int(group), scheme.group_overhead_bits,
                                 scheme.needs_prequantized, scheme.note + f" (group {group})")
    return scheme
