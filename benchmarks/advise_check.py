"""`advise` checked where the truth is here: this machine's embedded engine as the only "GPU".

    .venv/bin/python benchmarks/advise_check.py [--cost cost.json] [--fractions 1.0,0.004]

1. Profile the embedded engine (`simulate.profile` over a grid around the check's lengths; or read --cost): a
   LinearCostModel of this machine, the only candidate. The objectives are multiples of what the profile
   predicts for a lone request (TTFT x 3, one decode step x 2) unless --ttft / --tpot say otherwise, so the
   check means the same on a quiet machine and on a busy one.
2. For each KV memory setting (--cuda-memory-fraction of TGI_TOOLKIT_KV_CACHE_GIB: the default, and one that
   holds a few requests), run `advise` with that candidate: it tunes the prefill budget and KV memory in
   simulation and predicts the request rate R one replica sustains under the objectives.
3. Start the engine with the recommended launcher settings, warm it, and measure it with `tgi-toolkit bench rate`
   at R and at 1.3 R (the same request count, lengths and seeded Poisson send times the simulation used).

--pace 2 (the default; 0 turns it off) is simulate_accuracy's control for a machine whose speed drifts: the
measured engine holds every forward to 2 x its profiled price (TGI_TOOLKIT_PACE) and advise prices forwards
the same way, so what is checked is advise's search, the scheduler and the front end, not the minute-to-minute
speed of a shared machine. Unpaced on this machine (load average 7-9), the engine ran 1.5-2x slower than its
profile of a minute before; paced at 1.3 it still overran the pace by 18-29 %; at 2 by 2-5 % (printed as
measured / priced). A rate near saturation turns a few percent of speed into tens of percent of TTFT p90.

Target (issue 25): the measured point meets the objectives at R and misses them at 1.3 R, for every setting.
The objectives and R were not tuned on these measurements: R comes from the profile alone. Prints predicted
and measured TTFT and TPOT at the percentile; exits 1 on a miss. Slow on a shared 2-core machine (~10 min).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OVER = 1.3
# The profile's grid: the check's lengths (32 + 16 tokens) and the batches they reach (30-50 rows at the rates
# found: a model fitted to 8 rows at most priced 36-row forwards 3x too cheap), small enough for a busy machine.
# One torch thread per engine, profile and measurement alike: on a shared 2-core machine the default threads
# make forward times erratic.
GRID = {"prompt_tokens": (16, 32, 64, 128), "batch_sizes": (1, 4, 16, 32), "contexts": (32, 96), "decode_length": 8,
        "repeats": 1}
ENV = {"OMP_NUM_THREADS": "1"}


def _profile(out: Path, progress: bool) -> object:
    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.server import Server
    from tgi_toolkit.simulate import profile

    trace = str(out / "forwards.jsonl")
    with Server(LauncherConfig(), backend="embedded", env={**ENV, "TGI_TOOLKIT_FORWARD_TRACE": trace},
                startup_progress=progress) as server:
        return profile(server, **GRID, progress=progress, output=str(out / "cost.json"))


def _objectives(cost: object, prompt: int, output: int) -> tuple[float, float]:
    """(TTFT, TPOT) limits: 3 x a lone request's predicted TTFT, 2 x a lone decode step (the profile's prices)."""
    from tgi_toolkit.costs.linear import uniform_shape

    ttft = cost.request_overhead_s + cost.seconds(uniform_shape(1, prompt, 0))  # type: ignore[attr-defined]
    step = cost.seconds(uniform_shape(1, 1, prompt + output // 2, prefilling=False))  # type: ignore[attr-defined]
    return 3 * ttft, 2 * step


def _measure(launcher: object, rates: list[float], args: argparse.Namespace, requests: int, out: Path,
             env: dict[str, str], cost: object) -> tuple[list[dict], str]:
    """`tgi-toolkit bench rate` against the engine started with `launcher`, warmed by a burst first; and how the
    cost model prices the forwards it ran (measured / priced: above 1, the machine was slower than the model)."""
    from benchmarks.simulate_accuracy import _speed
    from tgi_toolkit.bench import load_results, run_concurrency
    from tgi_toolkit.server import Server

    out.mkdir(parents=True, exist_ok=True)
    trace = out / "forwards.jsonl"
    with Server(launcher, backend="embedded", env={**ENV, **env, "TGI_TOOLKIT_FORWARD_TRACE": str(trace)},
                startup_progress=False) as server:
        # the engine's attention cache grows on first use, stalling that forward for seconds: a burst as wide as
        # the widest batch ahead first, unmeasured (as simulate_accuracy warms its servers)
        run_concurrency(server, users=[args.warm_users], prompt_tokens=16, max_new_tokens=2,
                        requests=args.warm_users, progress=False)
        # ... and its positions: one request as long as the measured ones (a growth inside the first measured
        # point stalled every stream of one forward: TPOT p90 0.62 s at R against 0.44 s at 1.3 R)
        run_concurrency(server, users=[1], prompt_tokens=args.prompt_tokens, max_new_tokens=args.max_new_tokens,
                        requests=1, progress=False)
        offset = trace.stat().st_size if trace.exists() else 0
        command = [sys.executable, "-m", "tgi_toolkit.cli", "bench", "rate", "--url", server.url,
                   "--prompt-tokens", str(args.prompt_tokens), "--max-new-tokens", str(args.max_new_tokens),
                   "--requests", str(requests), "--seed", "0", "--output", str(out), "--no-progress",
                   "--slo-ttft", str(args.ttft), "--slo-tpot", str(args.tpot)]
        for rate in rates:
            command += ["--rate", f"{rate:.6g}"]
        subprocess.run(command, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
    _, _, speed = _speed(cost, str(trace), offset)
    points = load_results(out).points.sort_values("rate_rps")
    return [dict(row) for _, row in points.iterrows()], speed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cost", help="a cost.json of this machine's engine (default: profile it now)")
    parser.add_argument("--fractions", default="1.0,0.004",
                        help="KV memory settings (--cuda-memory-fraction), comma-separated (default 1.0,0.004)")
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--ttft", type=float, help="TTFT p90 limit, seconds (default: 3 x a lone request's)")
    parser.add_argument("--tpot", type=float, help="TPOT p90 limit, seconds (default: 2 x a lone decode step)")
    parser.add_argument("--requests", type=int, default=80, help="requests per point, at least (default 80)")
    parser.add_argument("--warm-users", type=int, default=64)
    parser.add_argument("--pace", type=float, default=2.0,
                        help="hold each measured forward to this many times its profiled price (0: unpaced)")
    parser.add_argument("--output", default=None, help="folder for the profile and measurements (default: temp)")
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args()

    from tgi_toolkit import schema as S
    from tgi_toolkit.advise import Candidate, advise
    from tgi_toolkit.advise.capacity import meets
    from tgi_toolkit.advise.traffic import Traffic, objectives
    from tgi_toolkit.advise.workload import requests_at, simulate_load
    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.simulate import load_cost_model
    from tgi_toolkit.tune.sizing import model_config_path

    began = time.perf_counter()
    out = Path(args.output or tempfile.mkdtemp(prefix="advise-check-"))
    out.mkdir(parents=True, exist_ok=True)
    cost = load_cost_model(args.cost) if args.cost else _profile(out, args.progress)
    print(f"cost model: {cost.formula()} + request overhead {cost.request_overhead_s * 1e3:.3g} ms")
    pace_env: dict[str, str] = {}
    if args.pace:
        import dataclasses

        from benchmarks.simulate_accuracy import _scaled

        # a paced forward lasts its price exactly (unless the machine overruns it): no spread to simulate
        cost = dataclasses.replace(_scaled(cost, args.pace), jitter_cv=0.0)
        cost.name = f"{cost.name} x{args.pace:g} (the pace)"
        pace_env = {"TGI_TOOLKIT_PACE": str(cost.save(out / "cost-paced.json"))}
        print(f"paced: every forward of the measured servers lasts at least {args.pace:g} x its profiled price")
    ttft_limit, tpot_limit = _objectives(cost, args.prompt_tokens, args.max_new_tokens)
    args.ttft, args.tpot = args.ttft or round(ttft_limit, 3), args.tpot or round(tpot_limit, 3)
    goals = objectives(args.ttft, args.tpot, 90)
    model = model_config_path(LauncherConfig())
    prices = {"gpus": {"embedded": 0.0}, "date": time.strftime("%Y-%m-%d"), "source": "this machine: no price"}
    ttft, tpot = S.stat_column("ttft", goals.percentile), S.stat_column("tpot", goals.percentile)
    failures = []
    print(f"objectives: {goals.describe()}; {args.prompt_tokens} prompt + {args.max_new_tokens} output tokens")
    print(f"{'KV fraction':>11} {'settings':44} {'rate':>7} {'pred TTFT':>9} {'meas TTFT':>9} {'pred TPOT':>9} "
          f"{'meas TPOT':>9} {'meets':>11}")
    for fraction in (float(f) for f in args.fractions.split(",")):
        candidate = Candidate("embedded", cost=cost, memory_fraction=fraction, label=f"this machine, KV {fraction:g}")
        # a demand far above one replica's, so the search runs to the replica's own limit (no headroom stop)
        advice = advise(model, candidates=[candidate], rate=1000.0, prompt_tokens=args.prompt_tokens,
                        max_new_tokens=args.max_new_tokens, ttft=args.ttft, tpot=args.tpot, prices=prices,
                        requests=args.requests, progress=args.progress)
        evaluation = advice.evaluations[0]
        if evaluation.sustained is None:
            print(f"{fraction:>11g} advise found no sustainable rate: {evaluation.note}")
            failures.append(f"KV {fraction:g}: no sustainable rate predicted")
            continue
        rate = evaluation.sustained
        rates = [rate, rate * OVER]
        traffic = Traffic(rate_rps=rate, prompt_tokens=args.prompt_tokens, max_new_tokens=args.max_new_tokens,
                          requests=args.requests)
        count = requests_at(traffic, rate * OVER, goals)  # one count for both rates, as one bench run sends
        traffic = Traffic(rate_rps=rate, prompt_tokens=args.prompt_tokens, max_new_tokens=args.max_new_tokens,
                          requests=count)
        predicted = [simulate_load(cost, traffic, r, goals, config=evaluation.launcher) for r in rates]
        measured, speed = _measure(evaluation.launcher, rates, args, count, out / f"kv-{fraction:g}", pace_env, cost)
        settings = ",".join(f"{k}={v}" for k, v in evaluation.overrides.items()) or "TGI 3 defaults"
        for label, p, m, want in zip(("R", f"{OVER}R"), predicted, measured, (True, False), strict=True):
            got = meets(m, goals)
            print(f"{fraction:>11g} {settings[:44]:44} {m['rate_rps']:>7.3g} {p[ttft]:>9.3g} {m[ttft]:>9.3g} "
                  f"{p[tpot]:>9.3g} {m[tpot]:>9.3g} {('yes' if got else 'no') + ' (' + label + ')':>11}")
            if label == "R":
                print(f"{'':>11} the measured server's forwards (both rates): {speed}")
            if got != want:
                verdict = "meets" if got else "misses"
                failures.append(f"KV {fraction:g}: measured at {label} = {m['rate_rps']:.3g} req/s {verdict} the "
                                f"objectives (the target: {'meets' if want else 'misses'})")
    print(f"measurements in {out}; {time.perf_counter() - began:.0f} s")
    print("target: objectives hold at the predicted rate R and fail at 1.3 R for every KV setting: "
          + ("met" if not failures else "MISSED\n  " + "\n  ".join(failures)))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
