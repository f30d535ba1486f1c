"""Accelerators the planner knows by name, and parsing of memory sizes.

Memory is the total one card reports (nvidia-smi's `memory.total`, in MiB), not the marketing
figure: an "80GB" A100 has 81,920 MiB, an H100 80GB HBM3 81,559 MiB. What the CUDA context and the
driver take out of it is the planner's reserve, not subtracted here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MiB = 2**20
GiB = 2**30


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_bytes: int
    bf16: bool = True  # native bfloat16 (Ampere and later)
    fp8: bool = False  # native FP8 tensor cores (Ada, Hopper and later)

    def describe(self) -> str:
        return f"{self.name} ({self.memory_bytes / GiB:.2f} GiB)"


_KNOWN: tuple[Gpu, ...] = (
    Gpu("A100-80GB", 81_920 * MiB),
    Gpu("A100-40GB", 40_960 * MiB),
    Gpu("A100-80GB-PCIe", 81_920 * MiB),
    Gpu("H100-80GB", 81_559 * MiB, fp8=True),
    Gpu("H100-NVL", 95_830 * MiB, fp8=True),
    Gpu("H200", 143_771 * MiB, fp8=True),
    Gpu("B200", 183_359 * MiB, fp8=True),
    Gpu("L4", 23_034 * MiB, fp8=True),
    Gpu("L40S", 46_068 * MiB, fp8=True),
    Gpu("L40", 46_068 * MiB, fp8=True),
    Gpu("A40", 46_068 * MiB),
    Gpu("A10G", 23_028 * MiB),
    Gpu("A10", 23_028 * MiB),
    Gpu("T4", 15_360 * MiB, bf16=False),
    Gpu("V100-16GB", 16_384 * MiB, bf16=False),
    Gpu("V100-32GB", 32_768 * MiB, bf16=False),
    Gpu("RTX-4090", 24_564 * MiB, fp8=True),
    Gpu("RTX-3090", 24_576 * MiB),
    Gpu("MI300X", 196_592 * MiB, fp8=True),
)

# Other spellings people use for the same cards (after normalisation).
_ALIASES = {
    "a100": "A100-80GB", "a10080g": "A100-80GB", "a100sxm480gb": "A100-80GB", "a100pcie": "A100-80GB-PCIe",
    "a100sxm440gb": "A100-40GB", "a10040g": "A100-40GB",
    "h100": "H100-80GB", "h10080g": "H100-80GB", "h10080gbhbm3": "H100-80GB", "h100sxm": "H100-80GB",
    "h100pcie": "H100-80GB", "h100nvl94gb": "H100-NVL",
    "h200141gb": "H200", "h200sxm": "H200",
    "4090": "RTX-4090", "geforcertx4090": "RTX-4090", "3090": "RTX-3090", "geforcertx3090": "RTX-3090",
    "v100": "V100-16GB", "v10016g": "V100-16GB", "v10032g": "V100-32GB", "teslat4": "T4",
}


def _norm(name: str) -> str:
    name = name.lower().removeprefix("nvidia").removeprefix("amd")
    return re.sub(r"[\s_\-./]+", "", name)


KNOWN_GPUS: dict[str, Gpu] = {g.name: g for g in _KNOWN}
_BY_KEY = {_norm(g.name): g for g in _KNOWN} | {k: KNOWN_GPUS[v] for k, v in _ALIASES.items()}

_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int | float, *, field: str = "size") -> int:
    """Bytes from an int or a string such as "24GiB", "80GB" (SI: 80e9), "512 MiB", "1e9"."""
    if isinstance(text, bool):
        raise ValueError(f"{field} must be a number of bytes or a size like '24GiB'; got {text!r}")
    if isinstance(text, (int, float)):
        if text <= 0:
            raise ValueError(f"{field} must be positive; got {text!r}")
        return int(text)
    match = _SIZE.match(text)
    if match is None or match.group(2).lower() not in _UNITS:
        try:
            return parse_size(float(text), field=field)
        except ValueError:
            pass
        raise ValueError(f"{field} must be a number of bytes or a size like '24GiB', '80GB', '512MiB'; "
                         f"got {text!r}") from None
    return parse_size(float(match.group(1)) * _UNITS[match.group(2).lower()], field=field)


def resolve_gpu(gpu: str | int | float | Gpu) -> Gpu:
    """A known card by name (case, spaces and dashes do not matter), or a bare memory size."""
    if isinstance(gpu, Gpu):
        return gpu
    if isinstance(gpu, str):
        found = _BY_KEY.get(_norm(gpu))
        if found is not None:
            return found
        if _SIZE.match(gpu) is None:
            raise ValueError(f"gpu {gpu!r} is not known; use one of {', '.join(KNOWN_GPUS)}, "
                             "or a memory size such as '24GiB' or '80GB'")
    size = parse_size(gpu, field="gpu")
    return Gpu(name=f"{size / GiB:.2f} GiB card", memory_bytes=size)
