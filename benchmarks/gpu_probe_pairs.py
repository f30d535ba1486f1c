"""What two GPU probes (benchmarks/gpu_probe.py) say about each other and about NVIDIA's operator database.

    .venv/bin/python benchmarks/gpu_probe_pairs.py data/measured/gpu/h200-2026-11-28 data/measured/gpu/h100-2026-11-28

1. Kernel times: each card's own GEMM and attention times (profile-gpu, torch inside the embedded engine's
   process) against the operator database's for the same shapes on the same card (aiconfigurator-core, measured
   inside vLLM): how far the tables a measured prediction reads are from what the card did here.
2. GPU to GPU (issue 41, item 5): every point of the second card's batch table and concurrency, predicted from the
   first card's measured point scaled by the two datasheets' roofline ratio for that point (the same carry
   `simulate --measured-on` makes), against what the second card measured; and the other way round.
Prints the figures; no target, nothing written.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SYSTEM_OF = {"H200": "h200_sxm", "H100": "h100_sxm"}
POINT_KEYS = {"batch": "batch_size", "concurrency": "users"}
METRICS = {"batch": ("prefill_latency_s", "decode_token_latency_s"),
           "concurrency": ("ttft_p50_s", "itl_p50_s", "output_throughput_tok_s")}


def card_of(folder: Path) -> str:
    device = json.loads((folder / "summary.json").read_text())["provenance"]["device"]
    return next(k for k in SYSTEM_OF if k in device)


def kernels_against_database(folder: Path) -> None:
    import pandas as pd

    from tgi_toolkit.costs.kernel_tables import KernelTables, attention_surface

    card = card_of(folder)
    own = KernelTables.from_dir(folder / "kernels")
    db = KernelTables.database(SYSTEM_OF[card], "vllm")
    gemm = own.tables["gemm"]
    grid = db.gemm("bfloat16")
    print(f"\n{card}: profile-gpu's kernel times / the operator database's ({db.sources['gemm']}), same shapes")
    print(f"  {'GEMM n x k':18} " + " ".join(f"{'m=' + str(m):>7}" for m in (1, 16, 128, 1024, 8192)))
    ratios = []
    for (n, k), rows in gemm[gemm.gemm_dtype == "bfloat16"].groupby(["n", "k"]):
        curve, _ = grid.curve(int(n), int(k))
        by_m = dict(zip(rows.m, rows.latency / 1e3, strict=True))
        line = []
        for m in (1, 16, 128, 1024, 8192):
            if m in by_m:
                r = by_m[m] / curve(m)
                ratios.append(r)
                line.append(f"{r:7.2f}")
            else:
                line.append(f"{'-':>7}")
        print(f"  {f'{n} x {k}':18} " + " ".join(line))
    print(f"  GEMMs: median ratio {statistics.median(ratios):.2f} over {len(ratios)} shapes and sizes")
    for op, length, by in (("generation_attention", "step", "num_key_value_heads"),
                           ("context_attention", "isl", "num_heads")):
        mine = own.tables[op]
        surface, _ = attention_surface(db.tables[op], 32, 8, 128, length, by=by)
        r = [row.latency / 1e3 / surface(row.batch_size, getattr(row, length))
             for row in mine.itertuples() if row.num_heads == 32 and row.num_key_value_heads == 8]
        print(f"  {op}: median ratio {statistics.median(r):.2f} over {len(r)} points "
              f"(range {min(r):.2f}-{max(r):.2f})")
    copy = pd.read_parquet(folder / "kernels" / "mem_perf.parquet")
    big = copy[copy.bytes == copy.bytes.max()].iloc[0]
    rate = big.bytes * 2 / (big.latency / 1e3) / 1e9
    print(f"  copy: {rate:,.0f} GB/s read + written at {big.bytes / 2**20:.0f} MiB")


def points(folder: Path, source: str, scenario: str) -> dict[int, dict[str, float]]:
    summary = json.loads((folder / "summary.json").read_text())
    rows = summary["measured"][scenario] if source == "measured" else summary["predicted"][source][scenario]
    return {int(r[POINT_KEYS[scenario]]): r for r in rows}


def carried(first: Path, second: Path) -> list[float]:
    """Each point of `second` predicted from `first`'s measurement scaled by the roofline ratio."""
    errors = []
    a, b = card_of(first), card_of(second)
    print(f"\n{b} predicted from {a}'s measured points x the datasheets' roofline ratio (predicted / measured on {b}):")
    for scenario, metrics in METRICS.items():
        measured_a, measured_b = points(first, "measured", scenario), points(second, "measured", scenario)
        roof_a, roof_b = points(first, "roofline", scenario), points(second, "roofline", scenario)
        print(f"  {scenario:12} " + " ".join(f"{m:>24}" for m in metrics))
        for key in sorted(measured_b):
            cells = []
            for m in metrics:
                predicted = measured_a[key][m] * roof_b[key][m] / roof_a[key][m]
                ratio = predicted / measured_b[key][m]
                errors.append(abs(ratio - 1))
                cells.append(f"{ratio:24.2f}")
            print(f"  {key:12d} " + " ".join(cells))
    print(f"  median |error| {statistics.median(errors):.1%} over {len(errors)} figures, "
          f"{sum(e <= 0.15 for e in errors) / len(errors):.0%} within ±15 %")
    return errors


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 2:
        print("usage: gpu_probe_pairs.py FIRST_PROBE_DIR SECOND_PROBE_DIR", file=sys.stderr)
        return 2
    first, second = Path(args[0]), Path(args[1])
    for folder in (first, second):
        kernels_against_database(folder)
    carried(first, second)
    carried(second, first)
    return 0


if __name__ == "__main__":
    sys.exit(main())
