"""Kernel times measured on one card, carried to another by the two cards' datasheets: the card you do not have,
priced from the kernel times `profile-gpu` measured on the one you do (issue 41, item 5).

Each measured call is scaled by its own roofline on the two cards:

    t_B = t_A x r_B / r_A,   r_X = max(flops / FLOP/s_X, bytes / (bytes/s)_X)

at each card's achievable figures (costs.hardware.achievable: a published microbenchmark's, else the datasheet's
times the measured cards' typical fraction). So a one-row GEMM, which streams its weight, moves with the copy
bandwidth, a long prompt's GEMM with the tensor FLOP/s, and one between the two with whichever bounds it on each
card. Nothing here is fitted. The host's table times the machine's CPU, not its card, and is kept as measured;
FP8 rows are left out for a card without FP8 tensor cores, which cannot run them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tgi_toolkit.costs.hardware import GPU_SPECS, achievable
from tgi_toolkit.costs.kernel_tables import KernelTables
from tgi_toolkit.planner.gpus import KNOWN_GPUS, resolve_gpu

CARRIED = ("gemm", "compiled_gemm", "context_attention", "generation_attention")  # the ops with a rule below
KEPT = ("host",)  # the CPU's, whatever the card


def table_card(tables: KernelTables) -> str | None:
    """The card the tables were measured on, by its planner name; None for a CPU or a card with no datasheet."""
    for table in tables.tables.values():
        if "device" in table and len(table):
            try:
                name = resolve_gpu(str(table["device"].iloc[0])).name
            except ValueError:
                return None
            return name if name in GPU_SPECS else None
    return None


def work(op: str, table: Any) -> tuple[np.ndarray, np.ndarray]:
    """Each row's FLOPs and bytes moved (arrays), counted from its shape columns.

    GEMM (m x k) @ (k x n): 2 m n k FLOPs; reads both operands at the input's bytes an element (1 for fp8),
    writes m x n in 16 bits. Context attention over a causal prompt of `isl` tokens: 2 x 2 x heads x head_dim
    FLOPs a (query, key) pair, isl (isl + 1) / 2 pairs a sequence; reads queries, keys and values, writes the
    output. Generation attention, one query against `step` cached tokens: 4 x heads x head_dim FLOPs a key;
    reads the keys and values."""
    if op in ("gemm", "compiled_gemm"):
        m, n, k = (table[c].to_numpy(dtype=float) for c in ("m", "n", "k"))
        elem = np.where(table["gemm_dtype"].to_numpy() == "fp8", 1.0, 2.0)
        return 2 * m * n * k, (m * k + k * n) * elem + 2 * m * n
    b, h, kv, d = (table[c].to_numpy(dtype=float) for c in ("batch_size", "num_heads", "num_key_value_heads",
                                                           "head_dim"))
    elem = np.where(table["kv_cache_dtype"].to_numpy() == "fp8", 1.0, 2.0)
    if op == "context_attention":
        s = table["isl"].to_numpy(dtype=float)
        return 4 * h * d * b * s * (s + 1) / 2, b * s * d * (2 * h * 2 + 2 * kv * elem)
    if op == "generation_attention":
        step = table["step"].to_numpy(dtype=float)
        return 4 * h * d * b * step, b * step * 2 * kv * d * elem + b * 2 * h * d * 2
    raise ValueError(f"op: no carry rule for {op!r}; one of {', '.join(CARRIED)}")


def roofline_seconds(flops: np.ndarray, bytes_: np.ndarray, gpu: str, fp8: np.ndarray) -> np.ndarray:
    """max(compute, memory) at `gpu`'s achievable figures; FP8 rows at twice the 16-bit tensor rate."""
    reach = achievable(gpu)
    peak = reach.tflops * 1e12 * np.where(fp8, 2.0, 1.0)
    return np.maximum(flops / peak, bytes_ / (reach.bandwidth_gbs * 1e9))


def carry(tables: KernelTables, source: str, target: str) -> KernelTables:
    """`tables` measured on card `source`, as they would read on card `target` (module docstring): each
    carried op's latencies scaled row by row, the host's kept, any other op left out (its price falls to the
    roofline, as for tables that never had it)."""
    tables_out, sources = {}, {}
    for op, table in tables.tables.items():
        if op in KEPT:
            tables_out[op], sources[op] = table, tables.sources[op]
        if op not in CARRIED:
            continue
        fp8 = (table["gemm_dtype"] if "gemm_dtype" in table else table["attn_dtype"]).to_numpy() == "fp8"
        if not KNOWN_GPUS[target].fp8:
            table, fp8 = table[~fp8], fp8[~fp8]
        flops, bytes_ = work(op, table)
        ratio = roofline_seconds(flops, bytes_, target, fp8) / roofline_seconds(flops, bytes_, source, fp8)
        tables_out[op] = table.assign(latency=table["latency"].to_numpy() * ratio)
        sources[op] = f"{tables.sources[op]}, carried from {source} to {target} by the datasheets"
    return KernelTables(tables_out, sources)


def carried_to(tables: KernelTables, target: str) -> KernelTables:
    """`tables` as read on card `target`: carried when they were measured on another card with a datasheet,
    else as they are (the same card, or a CPU's tables, which no datasheet relates to a GPU)."""
    source = table_card(tables)
    return tables if source is None or source == target else carry(tables, source, target)
