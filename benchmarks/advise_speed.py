"""How long `advise` takes: a 12-candidate search (4 GPU kinds x 1, 2, 4 GPUs per replica) for Llama-3-8B.

    .venv/bin/python benchmarks/advise_speed.py [--requests 120] [--target 60]

Target (issue 25): the search answers in under 60 s on this machine. Prints each candidate's simulations and
seconds, the wall time and this process's CPU time (on a shared machine the wall time carries the others'
load, printed beside it), and exits 1 when the wall time misses the target.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=120, help="simulated requests per load, at least")
    parser.add_argument("--target", type=float, default=60.0, help="seconds the search must answer in")
    args = parser.parse_args()
    from tgi_toolkit.advise import advise

    load_before = os.getloadavg()[0]
    wall, cpu = time.perf_counter(), time.process_time()
    advice = advise(ROOT / "tests" / "data" / "configs" / "llama-3-8b.json", rate=20, prompt_tokens=512,
                    max_new_tokens=128, ttft=1.0, tpot=0.05, gpus=["A10G", "L4", "A100-80GB", "H100"],
                    shards=[1, 2, 4], requests=args.requests, progress=False)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(advice.summary())
    print(f"\n{'candidate':22} {'simulations':>11} {'seconds':>8}")
    for e in advice.evaluations:
        print(f"{e.candidate.name:22} {e.simulations:>11} {e.seconds:>8.1f}")
    candidates = len(advice.evaluations) + len(advice.refused)
    print(f"\n{candidates} candidates ({len(advice.refused)} refused by the planner): wall {wall:.1f} s, "
          f"CPU {cpu:.1f} s; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after "
          f"({os.cpu_count()} cores)")
    met = wall < args.target
    print(f"target: under {args.target:g} s wall: {'met' if met else 'MISSED'} ({wall / args.target:.2f} of it)")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
