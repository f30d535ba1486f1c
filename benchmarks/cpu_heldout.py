"""The simulator's error on this machine, unpaced, on workloads it was never developed on.

    .venv/bin/python benchmarks/cpu_heldout.py [--cost cost.json] [--repeats 2] [--set 2]

The profile is taken once (or read with --cost) and frozen before anything is measured; then every held-out
point (SETS below, each declared before it was first run: other user counts, lengths and rates than the 48 points
benchmarks/simulate_accuracy.py --local was developed on) is measured `repeats` times on the embedded engine,
TGI 3's default path, and simulated once. For each point and metric (TTFT p50, TPOT p50, output throughput) the
repeats' spread, |a - b| / mean, is the measurement's own precision here; the prediction counts as right when
|predicted / mean - 1| <= spread + 10 %.

Two sets of held-out workloads (--set). Set 1 was declared before the script's first run (2026-11-26); its
misses at 12-24 users were then diagnosed on two of its points (benchmarks/results/README.md), which led to the
profile's decode batch of 24 rows and the cost model's `token_tile`: set 1 has since been development data.
Set 2 (the default) was declared on 2026-11-27, before that change was first measured, and never run before it.

Target (issue 24): right at 90 % of the metrics. Prints every point and exits non-zero on a miss.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulate_accuracy import COLUMNS  # noqa: E402  (the same metrics as the developed-on points)

TARGET = 0.90
MARGIN = 0.10
# Declared before the first run and never tuned on: closed-loop users and Poisson rates, lengths unlike the
# developed-on points' (64/512 in, 16/64 out for users; 128 + 32 for rates).
SETS = {
    1: {"users": [(n, p, o) for p, o in ((96, 48), (320, 24)) for n in (2, 6, 12, 24)],
        "rates": [(r, 256, 24) for r in (1.5, 3.0, 6.0)]},
    # declared 2026-11-27 (module docstring): other user counts, lengths and rates again
    2: {"users": [(n, p, o) for p, o in ((160, 40), (48, 56)) for n in (3, 10, 20, 28)],
        "rates": [(r, 200, 32) for r in (2.0, 4.5)]},
}


def points(bench: object, simulate: object, held_out: int = 2) -> list[tuple[object, object, dict]]:
    chosen = SETS[held_out]
    out = [(bench.run_concurrency, simulate.run_concurrency,  # type: ignore[attr-defined]
            {"users": [n], "prompt_tokens": p, "max_new_tokens": o, "requests": None, "warmup_requests": n})
           for n, p, o in chosen["users"]]
    out += [(bench.run_rate, simulate.run_rate,  # type: ignore[attr-defined]
             {"rates": [r], "arrival": "poisson", "prompt_tokens": p, "max_new_tokens": o, "requests": 40})
            for r, p, o in chosen["rates"]]
    return out


def judge(predicted: float, measured: list[float]) -> tuple[float, float, bool]:
    """(error, spread, right): |predicted / mean - 1| against the repeats' |max - min| / mean + MARGIN."""
    mean = statistics.fmean(measured)
    spread = (max(measured) - min(measured)) / mean
    error = abs(predicted / mean - 1)
    return error, spread, error <= spread + MARGIN


def main(argv: list[str] | None = None) -> int:
    import logging

    from tgi_toolkit import bench, simulate
    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.server import Server

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cost", help="a frozen profile (default: take one first and freeze it)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the server (as simulate_accuracy)")
    ap.add_argument("--set", type=int, default=2, choices=sorted(SETS), dest="held_out",
                    help="which held-out workloads (module docstring; default: 2)")
    args = ap.parse_args(argv)
    if args.repeats < 2:
        ap.error("--repeats must be at least 2: the spread needs two measurements")
    logging.getLogger("tgi_toolkit.router.scheduler").setLevel(logging.ERROR)
    launcher = LauncherConfig(max_input_tokens=1024, max_total_tokens=1100, max_batch_prefill_tokens=1100)
    env = {"OMP_NUM_THREADS": str(args.threads)} if args.threads else {}
    out = ROOT / "out"
    out.mkdir(exist_ok=True)
    if args.cost:
        cost = simulate.load_cost_model(args.cost)
    else:
        trace = out / "forwards-heldout-profile.jsonl"
        trace.unlink(missing_ok=True)
        with Server(launcher, backend="embedded", startup_progress=False,
                    env={**env, "TGI_TOOLKIT_FORWARD_TRACE": str(trace)}) as server:
            cost = simulate.profile(server, quick=False, output=str(out / "cost-heldout.json"))
    print(f"frozen profile: {cost.formula()}")  # type: ignore[attr-defined]
    chosen = points(bench, simulate, args.held_out)
    predicted = [predict(cost, **common, config=launcher, chunking=True).points.iloc[0]
                 for _, predict, common in chosen]
    measured: list[list[object]] = [[] for _ in chosen]
    for repeat in range(args.repeats):
        with Server(launcher, backend="embedded", startup_progress=False, env=env) as server:
            # as simulate_accuracy --local: grow the engine's cache before any measured point
            bench.run_concurrency(server, users=[64], prompt_tokens=16, max_new_tokens=2, requests=64, progress=False)
            for i, (measure, _, common) in enumerate(chosen):
                measured[i].append(measure(server, **common, progress=False).points.iloc[0])
                print(f"repeat {repeat + 1}: {measured[i][-1]['point_id']} measured", flush=True)
    right = total = 0
    print(f"\n{'point':45} " + "  ".join(f"{c[:-2]:>15}: pred / meas... / error, spread" for c in COLUMNS))
    for pred, reps in zip(predicted, measured, strict=True):
        cells = []
        for column in COLUMNS:
            values = [float(r[column]) for r in reps]
            error, spread, ok = judge(float(pred[column]), values)
            right += ok
            total += 1
            cells.append(f"{float(pred[column]):9.4g} / {' '.join(f'{v:.4g}' for v in values)} / "
                         f"{error:.0%}, {spread:.0%}{'' if ok else ' MISS'}")
        print(f"{pred['point_id']:45} " + "  ".join(cells))
    share = right / total
    print(f"\nright (error within the repeats' spread + {MARGIN:.0%}): {right} of {total} metrics, {share:.0%} "
          f"(target {TARGET:.0%})")
    return 0 if share >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
