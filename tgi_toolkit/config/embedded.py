"""What the embedded CPU engine accepts and gives itself, for code that must not import the engine.

The configuration form, the capacity planner, the tuner and the app show the engine's refusals and
predict its KV budget before any server starts; the engine applies the same rules at start-up
(tgi_toolkit.engine.serve re-exports them). Keeping them here puts the engine above the
configuration in the import order, and keeps torch out of a form that only renders a command line.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from tgi_toolkit.config.scheduling import DEFAULT_KV_CACHE_GIB

# The KV-cache memory the engine gives itself by default (TGI_TOOLKIT_KV_CACHE_GIB changes it; see
# tgi_toolkit.config.scheduling.embedded_kv_bytes), scaled by --cuda-memory-fraction: TGI measures the
# value from free GPU memory at warm-up (docs/tgi-rules.md L2); vLLM's CPU backend takes a fixed space
# the same way.
DEFAULT_KV_CACHE_BYTES = int(DEFAULT_KV_CACHE_GIB * 1024**3)

# The pid of the process that started the engine (set by tgi_toolkit.server for every server it starts): the
# engine exits when that process is gone (tgi_toolkit.engine.lifeline), so that it never outlives it.
PARENT_PID_ENV = "TGI_TOOLKIT_PARENT_PID"
# "0": the engine leaves its start-up heap to the garbage collector's passes (engine.serve.freeze_heap)
GC_FREEZE_ENV = "TGI_TOOLKIT_GC_FREEZE"
# Milliseconds: a forward running longer has its thread's stack logged while it runs (engine.watchdog); unset: none
STALL_MS_ENV = "TGI_TOOLKIT_STALL_MS"

_GPU_ONLY = "checkpoints need GPU kernels; on the CPU the engine runs bitsandbytes, bitsandbytes-nf4, " \
            "bitsandbytes-fp4 or eetq."
_CANNOT = {
    "awq": f"AWQ {_GPU_ONLY}",
    "gptq": f"GPTQ {_GPU_ONLY}",
    "marlin": f"Marlin {_GPU_ONLY}",
    "exl2": f"ExLlamaV2 {_GPU_ONLY}",
    "compressed-tensors": f"compressed-tensors {_GPU_ONLY}",
}
# The --quantize methods the engine runs (tgi_toolkit.engine.quantization implements them).
BITSANDBYTES = ("bitsandbytes", "bitsandbytes-nf4", "bitsandbytes-fp4")
SUPPORTED = (*BITSANDBYTES, "eetq")


class UnsupportedSetting(ValueError):
    """A launcher setting the single-process CPU engine cannot honour."""


DEVICES = ("cuda", "cpu")
# --compile-sizes' default on a CUDA card: the one-row step, where cuBLAS's GEMMs left the weights' read time furthest
# behind (docs/gpu-probe.md) and one compile serves every layer; more sizes, more start-up
COMPILE_SIZES_DEFAULT = (1,)
# How the card's decode layers compile (engine.decode_step.CompiledDecode; profile-gpu times its GEMMs the same
# way): shapes static per batch size, and coordinate-descent tuning, which makes inductor compute a one-row matmul
# as a reduction kernel streaming the weight (torch/_inductor/decomposition.py `mm`; gpt-fast's setting)
CUDA_COMPILE_OPTIONS = {"coordinate_descent_tuning": True}


def parse_sizes(value: str, flag: str) -> tuple[int, ...]:
    """Batch sizes separated by commas, `0` alone for none; anything else is refused naming `flag`."""
    try:
        sizes = tuple(int(part) for part in value.split(","))
    except ValueError:
        sizes = (-1,)
    if any(n < 0 for n in sizes) or (0 in sizes and len(sizes) > 1):
        raise UnsupportedSetting(f"{flag} must be batch sizes separated by commas (e.g. 1,2,4), or 0 for none; "
                                 f"got {value!r}")
    return tuple(sorted({n for n in sizes if n}))


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def resolve_device(name: str | None) -> str:
    """`--device`: "cuda" or "cpu"; unset, cuda where torch sees a CUDA GPU, else cpu. Refused before any model
    loads: an unknown name, or cuda on a machine without one, each naming the allowed values."""
    if name is None or name == "":
        return "cuda" if cuda_available() else "cpu"
    if name not in DEVICES:
        raise UnsupportedSetting(f"--device must be one of {', '.join(DEVICES)}; got {name!r}")
    if name == "cuda" and not cuda_available():
        raise UnsupportedSetting("--device cuda: torch sees no CUDA GPU on this machine (a CPU build of torch, or "
                                 "no driver); use --device cpu, or leave --device out to take what is there "
                                 f"(allowed: {', '.join(DEVICES)})")
    return name


def has_fp8(device: str) -> bool:
    """Whether fp8 (e4m3) matmuls run on this device: a CUDA card of compute capability 8.9 (Ada) or above."""
    import torch

    return device == "cuda" and torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)


def cpu_has_bf16() -> bool:
    """Whether this CPU computes in bfloat16 natively (AVX512-BF16 or AMX), from /proc/cpuinfo."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def quantize_refusal(method: str, device: str | None = None) -> str | None:
    """A sentence saying why `--quantize method` cannot run on this engine and machine, or None when it can;
    `device` is the engine's `--device` (None: a CUDA GPU where torch sees one)."""
    if method in _CANNOT:
        return _CANNOT[method]
    if method == "fp8":
        import torch  # only here: asking about fp8 hardware is the one check that needs it

        on_cuda = device == "cuda" or (device is None and torch.cuda.is_available())
        if on_cuda and torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9):
            return None
        where = "a CPU" if not on_cuda else f"this GPU ({torch.cuda.get_device_name()})"
        return (f"fp8 matmuls need a CUDA GPU with fp8 support (compute capability 8.9 or above: Ada, Hopper); "
                f"the engine runs on {where}.")
    if method in BITSANDBYTES and importlib.util.find_spec("bitsandbytes") is None:
        return "needs the bitsandbytes package: pip install 'tgi_toolkit[quantize]'."
    if method not in SUPPORTED:
        return f"unknown method; the embedded engine runs {', '.join(SUPPORTED)}."
    return None


def refusals(cfg: Any, device: str | None = None) -> list[str]:
    """One sentence per launcher setting that cannot apply to one process on `device` (empty: all can)."""
    out = []

    def changed(name: str) -> bool:
        field = type(cfg).model_fields.get(name)
        return field is not None and getattr(cfg, name) != field.default

    if getattr(cfg, "max_concurrent_requests", 1) < 1:
        out.append(f"--max-concurrent-requests ({cfg.max_concurrent_requests}): the server would answer every "
                   "request 429 (Model is overloaded); give at least 1.")
    if (cfg.num_shard or 1) > 1 or cfg.sharded:
        out.append("--num-shard/--sharded: the embedded engine runs the model in one process on the CPU; "
                   "use the `tgi` or `vllm` backend for tensor parallelism.")
    if getattr(cfg, "ngrok", False):
        out.append("--ngrok: the embedded engine serves on this machine only and opens no tunnel.")
    if getattr(cfg, "speculate", None):
        out.append("--speculate: speculative decoding needs Medusa/draft weights the embedded engine does not run.")
    if getattr(cfg, "lora_adapters", None):
        out.append("--lora-adapters: the embedded engine does not load LoRA adapters.")
    if getattr(cfg, "kv_cache_dtype", None):
        out.append("--kv-cache-dtype: fp8 KV caches need a GPU; the embedded engine keeps keys and values "
                   "in the model dtype.")
    for name, why in (("rope_scaling", "the model's own rope settings are used"),
                      ("rope_factor", "the model's own rope settings are used"),
                      ("watermark_gamma", "watermarking is not implemented"),
                      ("watermark_delta", "watermarking is not implemented"),
                      ("otlp_endpoint", "OpenTelemetry export is not implemented; use /metrics")):
        if changed(name):
            out.append(f"--{name.replace('_', '-')}: {why} by the embedded engine.")
    quantize = getattr(cfg, "quantize", None)
    if quantize is not None:
        reason = quantize_refusal(quantize, device)
        if reason:
            out.append(f"--quantize {quantize}: {reason}")
    return out
