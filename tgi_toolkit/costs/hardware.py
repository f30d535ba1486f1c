"""What a GPU can do: its datasheet, and what a published microbenchmark measured it doing.

A datasheet's dense tensor FLOP/s and HBM bandwidth are peaks that cards reach to different degrees: with the
vendor's BLAS an H100 runs a large BF16 GEMM at about 80 % of its datasheet and an MI300X at about 51 %, while
their memory copies reach 89 % and 77 % (the sources above MEASURED_TFLOPS; docs/gpu-corpus.md). A roofline
that multiplies every datasheet by the same efficiency prices an MI300X's prefill 1.6x too cheap. So the
roofline starts from `achievable`: the measured figure where one was published, else the datasheet times the
median fraction the measured NVIDIA cards reach (TYPICAL_FRACTION), and its fitted efficiencies are fractions
of that.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSpec:
    tflops: float  # dense bf16/fp16 tensor TFLOP/s
    bandwidth_gbs: float  # HBM GB/s
    link_gbs: float  # per-GPU interconnect GB/s (NVLink, else PCIe 4.0 x16 = 64)


# Dense 16-bit tensor FLOPs without sparsity, HBM bandwidth and the per-GPU NVLink (or PCIe) bandwidth, from the
# vendors' product pages (the A10G's from Baseten's A10 vs A10G comparison: AWS publishes none).
GPU_SPECS: dict[str, GpuSpec] = {
    "A100-80GB": GpuSpec(312, 2039, 600), "A100-40GB": GpuSpec(312, 1555, 600),
    "A100-80GB-PCIe": GpuSpec(312, 1935, 64),  # 300 W, no NVLink bridge: its shards talk over PCIe
    "H100-80GB": GpuSpec(989, 3350, 900), "H100-NVL": GpuSpec(835, 3900, 600),
    "H200": GpuSpec(989, 4800, 900), "B200": GpuSpec(2250, 8000, 1800),
    "L4": GpuSpec(121, 300, 64), "L40S": GpuSpec(362, 864, 64), "L40": GpuSpec(181, 864, 64),
    "A40": GpuSpec(150, 696, 112), "A10G": GpuSpec(70, 600, 64), "A10": GpuSpec(125, 600, 64),
    "T4": GpuSpec(65, 320, 32), "V100-16GB": GpuSpec(125, 900, 300), "V100-32GB": GpuSpec(125, 900, 300),
    "RTX-4090": GpuSpec(165, 1008, 64), "RTX-3090": GpuSpec(71, 936, 64), "MI300X": GpuSpec(1307, 5300, 896),
}

# Matmul: Stas Bekman, ml-engineering, compute/accelerator/README.md, maximum achievable matmul FLOPS table (BF16
# torch.matmul, best shape of a sweep, cache reset between iterations), rows of 2025-01-04/06. Copy: Microsoft Azure
# AI-benchmarking-guide, Azure_Results/ND_*_results.md, BabelStream triad (ND H100 v5 2024-09-24, ND H200 v5
# 2025-07-07, ND A100 v4 2024-09-25, ND MI300X v5 2025-03-27). One method per quantity, so the cards differ by
# what they do and not by how they were measured. The matmul source says H200's is H100's (the same die and
# clocks); the A100-40GB has the 80GB card's die and clocks.
MEASURED_TFLOPS: dict[str, float] = {"H100-80GB": 794.5, "H200": 794.5, "A100-80GB": 271.2, "A100-40GB": 271.2,
                                     "MI300X": 668.4}
MEASURED_BANDWIDTH_GBS: dict[str, float] = {"H100-80GB": 2970, "H200": 4180, "A100-80GB": 1700, "MI300X": 4100}
NVIDIA = ("H100-80GB", "H200", "A100-80GB", "A100-40GB")


def _typical(measured: dict[str, float], field: str) -> float:
    return statistics.median(measured[g] / getattr(GPU_SPECS[g], field) for g in NVIDIA if g in measured)


TYPICAL_FRACTION = {"tflops": _typical(MEASURED_TFLOPS, "tflops"),
                    "bandwidth_gbs": _typical(MEASURED_BANDWIDTH_GBS, "bandwidth_gbs")}


@dataclass(frozen=True)
class Achievable:
    tflops: float
    bandwidth_gbs: float
    measured: tuple[str, ...]  # which of the two a microbenchmark measured on this card


def achievable(gpu: str) -> Achievable:
    """The dense 16-bit GEMM TFLOP/s and the copy bandwidth `gpu` reaches (module docstring)."""
    spec = GPU_SPECS[gpu]
    tflops = MEASURED_TFLOPS.get(gpu, spec.tflops * TYPICAL_FRACTION["tflops"])
    bandwidth = MEASURED_BANDWIDTH_GBS.get(gpu, spec.bandwidth_gbs * TYPICAL_FRACTION["bandwidth_gbs"])
    measured = tuple(k for k, table in (("tflops", MEASURED_TFLOPS), ("bandwidth", MEASURED_BANDWIDTH_GBS))
                     if gpu in table)
    return Achievable(tflops, bandwidth, measured)
