"""Our closed-loop harness against guidellm's client, on one embedded engine, in alternating rounds.

    .venv/bin/python benchmarks/harness_vs_guidellm.py [--users 1 4 16] [--rounds 3] [--ramp-up auto]
        [--prompt-tokens 158] [--max-new-tokens 64] [--requests-per-user 6] [--guidellm PATH] [--url URL]

guidellm is a dev-only tool with pins of its own: install it in a virtual environment of its own, torch
first and pinned so that pip does not pull a CUDA build, and point --guidellm (or $GUIDELLM) at it:

    python3.11 -m venv /tmp/guidellm-venv
    /tmp/guidellm-venv/bin/pip install torch==2.13.0 guidellm
    GUIDELLM=/tmp/guidellm-venv/bin/guidellm .venv/bin/python benchmarks/harness_vs_guidellm.py

Set-up (issue 29): one idle engine (`tgi-toolkit serve`'s defaults) unless --url; OpenAI completions route;
prompts of 158 tokens, 64 new tokens forced (guidellm sends ignore_eos, ours too), 6 requests a user (24 at 4
users). guidellm runs `--profile kind=concurrent,streams=N,rampup_duration=R` with the local model's tokenizer
(no hub); ours runs `run_concurrency` with --ramp-up (default "auto"). R is the ramp ours used at that users count
(--guidellm-rampup same, the default: ours runs first in round 0 to resolve it), so both start their users the
same way; with --guidellm-rampup none guidellm keeps its default of 0, and its users then stay in step for the
whole run (measured 2026-11-26: in-step share 0.83-0.96 against 0.1-0.4 by chance, the phase check below). The two
take turns, the order swapped every round after the first, each guidellm round with a new seed so that no prompt
is a prefix-cache hit. Each tool's line gives the phase check of its own request start times.

guidellm runs one worker process per stream (GUIDELLM__MAX_WORKER_PROCESSES=N; --guidellm-workers default keeps
its own limit of 10). With more streams than processes its ramp is not i/N: at 16 streams the stream whose first
request its strategy sets at the start (the N-th, outside its `index < streams` ramp) was sent only with its
process-mate's first, 2.24 s into a 4.46 s ramp beside the stream due at 2.23 s (2026-11-27, each request's
targeted_start against its request_start). Two users admitted in one step stay together for the whole run at fixed
lengths, and the simulator puts that one late start at 1.27x the 16-user TTFT p50 of the even ramp (801 against
631 ms), most of the 0.71-0.75 ratios measured before with guidellm's default. Each guidellm line gives its latest
send after the time its strategy set (its client's turnaround, or a late stream).

Each line also gives the client's CPU seconds for the whole point, start-up included (guidellm's process and its
workers; ours, this process's): on 2 cores a client's CPU is taken from the server it measures.

Compared, per users count (median over rounds):
- TTFT p50;
- ITL p50 in guidellm's definition: each request's mean gap after its first token, (last - first token) /
  (tokens - 1), which is our TPOT; our ITL p50 (every gap pooled) is printed beside it;
- output throughput: output tokens of the measured requests / the measured window.
Target: ours within +-15 % of guidellm's on all three at every users count; exit 1 when missed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET = 0.15
METRICS = ("ttft_s", "itl_s", "output_tok_s")
INSTALL = ("guidellm is not installed. It is a dev-only dependency with pins of its own; install it in a venv:\n"
           "    python3.11 -m venv /tmp/guidellm-venv\n"
           "    /tmp/guidellm-venv/bin/pip install torch==2.13.0 guidellm\n"
           "then run again with --guidellm /tmp/guidellm-venv/bin/guidellm (or GUIDELLM=that path).")


def find_guidellm(given: str | None) -> str | None:
    """The executable named (--guidellm, else $GUIDELLM), or else one in /tmp/guidellm-venv or on PATH."""
    named = given or os.environ.get("GUIDELLM")
    for candidate in (named,) if named else ("/tmp/guidellm-venv/bin/guidellm", shutil.which("guidellm")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def local_tokenizer(model_id: str, revision: str | None) -> str:
    """The served model's tokenizer folder, so guidellm counts tokens as the server does without the hub."""
    from tgi_toolkit.models.files import converted_model_dir, resolve_model

    return str(converted_model_dir(resolve_model(model_id, revision)))


def run_guidellm(exe: str, url: str, tokenizer: str, users: int, requests: int, prompt: int, output: int,
                 seed: int, rampup: float = 0.0, workers: int | None = None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "guidellm.json"
        cmd = [exe, "run", "--backend", f"kind=openai_http,target={url},request_format=/v1/completions",
               "--profile", f"kind=concurrent,streams={users},rampup_duration={rampup:.3f}",
               "--constraint", f"kind=max_requests,count={requests}",
               "--data", f"kind=synthetic_text,prompt_tokens={prompt},output_tokens={output}",
               "--tokenizer", f"kind=hf_auto,model={tokenizer}", "--seed", f"kind=static,value={seed}",
               "--output", f"kind=json,path={path}", "--disable-console"]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        if workers:
            env["GUIDELLM__MAX_WORKER_PROCESSES"] = str(workers)
        before = _cpu_seconds(resource.RUSAGE_CHILDREN)
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
        cpu = _cpu_seconds(resource.RUSAGE_CHILDREN) - before  # guidellm and its workers, all reaped by now
        if done.returncode != 0 or not path.exists():
            raise RuntimeError(f"guidellm failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        bench = json.loads(path.read_text())["benchmarks"][0]
    metrics = bench["metrics"]
    # guidellm's own request start times, judged by the harness's phase check (one decode step: its ITL p50)
    from tgi_toolkit.bench.phase import chance_share, is_lockstep, synchronised_share

    timings = [r["info"]["timings"] for r in bench["requests"]["successful"]]
    sent = sorted(t["request_start"] for t in timings)
    # how long after the time guidellm's strategy set for it a request was sent (its client's turnaround, or a
    # stream that started late)
    late = max(t["request_start"] - t["targeted_start"] for t in timings)
    step = float(metrics["inter_token_latency_ms"]["successful"]["median"]) / 1e3
    sync, chance = synchronised_share(sent, step), chance_share(sent, step)

    def median(name: str) -> float:
        return float(metrics[name]["successful"]["median"])

    ok = int(metrics["request_totals"]["successful"])
    if ok != requests:
        raise RuntimeError(f"guidellm finished {ok} of {requests} requests: {metrics['request_totals']}")
    return {"ttft_s": median("time_to_first_token_ms") / 1e3, "itl_s": median("inter_token_latency_ms") / 1e3,
            "e2e_mean_s": float(metrics["request_latency"]["successful"]["mean"]),
            "output_tok_s": float(metrics["output_tokens_per_second"]["successful"]["mean"]),
            "span_s": float(bench["duration"]), "client_cpu_s": cpu, "rampup_s": rampup, "sync": sync, "chance": chance,
            "late_s": late,
            "lockstep": is_lockstep(sync, chance)}


SERVER_SERIES = ("tgi_request_duration", "tgi_request_queue_duration", "tgi_request_input_length",
                 "tgi_request_generated_tokens")


def server_totals(url: str) -> dict[str, float]:
    """The engine's running sums and counts of each request's whole time and queue time (its /metrics)."""
    from urllib.request import urlopen

    from tgi_toolkit.bench.prometheus import parse_prometheus

    with urlopen(url + "/metrics", timeout=10) as response:
        series = parse_prometheus(response.read().decode())
    return {name: value for name, labels, value in series if name.removesuffix("_sum").removesuffix("_count")
            in SERVER_SERIES and name.endswith(("_sum", "_count"))}


def server_view(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Mean seconds per request the server itself saw between two `server_totals` (warm-ups included)."""
    def mean(name: str) -> float:
        count = after.get(f"{name}_count", 0.0) - before.get(f"{name}_count", 0.0)
        return (after.get(f"{name}_sum", 0.0) - before.get(f"{name}_sum", 0.0)) / count if count else float("nan")

    return {"server_e2e_s": mean("tgi_request_duration"), "server_queue_s": mean("tgi_request_queue_duration"),
            "server_input_tokens": mean("tgi_request_input_length"),
            "server_output_tokens": mean("tgi_request_generated_tokens")}


def _pin(cores: set[int]) -> None:
    """Every thread of this process onto `cores` (a process's affinity is per thread on Linux)."""
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), cores)


def _cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def run_ours(url: str, users: int, requests: int, prompt: int, output: int, ramp_up: Any) -> dict[str, float]:
    from tgi_toolkit import schema as S
    from tgi_toolkit.bench import run_concurrency

    before = _cpu_seconds(resource.RUSAGE_SELF)
    res = run_concurrency(url, users=[users], prompt_tokens=prompt, max_new_tokens=output, requests=requests,
                          ramp_up=ramp_up, api="completions", progress=False)
    cpu = _cpu_seconds(resource.RUSAGE_SELF) - before  # this process: our client (the server is a child)
    point = res.points.iloc[0]
    if point[S.ERRORS] or point[S.SHORT_OUTPUTS]:
        raise RuntimeError(f"ours: {point[S.ERRORS]} errors, {point[S.SHORT_OUTPUTS]} short outputs")
    return {"ttft_s": float(point[S.stat_column("ttft", "p50")]), "itl_s": float(point[S.stat_column("tpot", "p50")]),
            "output_tok_s": float(point[S.OUTPUT_THROUGHPUT]), "span_s": float(point[S.DURATION_S]),
            "pooled_itl_s": float(point[S.stat_column("itl", "p50")]), "ramp_s": float(point[S.RAMP_UP_S]),
            "sync": float(point[S.ARRIVAL_SYNC_SHARE]), "chance": float(point[S.ARRIVAL_SYNC_CHANCE]),
            "lockstep": bool(point[S.LOCKSTEP]), "client_cpu_s": cpu,
            "e2e_mean_s": float(point[S.stat_column("e2e", "mean")])}


def _line(tool: str, rnd: int, users: int, m: dict[str, Any]) -> str:
    start = f"rampup {m['rampup_s']:.2f} s, latest send {m['late_s'] * 1e3:.0f} ms after its target" \
        if tool == "guidellm" else \
        f"pooled ITL {m['pooled_itl_s'] * 1e3:.1f} ms, ramp {m['ramp_s']:.2f} s"
    extra = (f"  [{start}, in-step share {m['sync']:.2f} (chance {m['chance']:.2f})"
             f"{', LOCKSTEP' if m['lockstep'] else ''}]")
    extra += (f"\n        server's view: e2e mean {m['server_e2e_s'] * 1e3:.0f} ms (the client's "
              f"{m['e2e_mean_s'] * 1e3:.0f}), queue {m['server_queue_s'] * 1e3:.0f} ms, "
              f"{m['server_input_tokens']:.1f} prompt and {m['server_output_tokens']:.1f} new tokens a request")
    return (f"round {rnd} users {users:>2} {tool:<8} TTFT p50 {m['ttft_s'] * 1e3:7.1f} ms  ITL p50 "
            f"{m['itl_s'] * 1e3:6.1f} ms  output {m['output_tok_s']:6.1f} tok/s  span {m['span_s']:5.1f} s  client CPU "
            f"{m['client_cpu_s']:5.1f} s{extra}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ramp-up", default="auto", help="ours: seconds, or auto (default)")
    p.add_argument("--prompt-tokens", type=int, default=158)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--requests-per-user", type=int, default=6)
    p.add_argument("--guidellm-rampup", choices=("same", "none"), default="same",
                   help="same (default): guidellm's rampup_duration is the ramp ours used at that users count (ours "
                        "runs first in round 0 to resolve it); none: guidellm's default, 0")
    p.add_argument("--guidellm-workers", choices=("streams", "default"), default="streams",
                   help="streams (default): one guidellm worker process per stream, so that its ramp starts stream i "
                        "at i/N; default: guidellm's own limit of 10 processes, with which past 10 streams one "
                        "stream starts late, with another (module docstring)")
    p.add_argument("--guidellm", help="the guidellm executable (default $GUIDELLM, /tmp/guidellm-venv, PATH)")
    p.add_argument("--url", help="a running engine (default: start `tgi-toolkit serve`'s defaults)")
    p.add_argument("--isolate", action="store_true",
                   help="the started engine on the first core with one torch thread, both clients on the others: "
                        "a client's CPU then cannot slow the server it measures")
    args = p.parse_args()
    exe = find_guidellm(args.guidellm)
    if exe is None:
        print(INSTALL, file=sys.stderr)
        return 2
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.server import Server

    config = LauncherConfig()
    tokenizer = local_tokenizer(config.model_id, config.revision)
    print(f"guidellm: {exe} ({version}); tokenizer {tokenizer}; worker processes: {args.guidellm_workers}")
    print(f"prompts {args.prompt_tokens} tokens, {args.max_new_tokens} new, {args.requests_per_user} requests a user; "
          f"ours with ramp_up={args.ramp_up}; target: ours within +-{TARGET:.0%} of guidellm (median over rounds)")
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    cores = sorted(os.sched_getaffinity(0))
    if args.isolate and (args.url or len(cores) < 2):
        p.error("--isolate starts the engine itself and needs 2 cores or more")
    if args.isolate:
        _pin({cores[0]})  # the engine inherits it, every thread of it
        print(f"isolated: the engine on core {cores[0]} (OMP_NUM_THREADS=1), the clients on {cores[1:]}")
    server = None if args.url else Server(config, backend="embedded",
                                          env={"OMP_NUM_THREADS": "1"} if args.isolate else None).start()
    if args.isolate:
        _pin(set(cores[1:]))  # this process (our client) and guidellm, started from it
    url = args.url or server.url
    started = time.monotonic()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped early: the rounds so far, then the server
    try:
        for rnd in range(args.rounds):
            for users in args.users:
                requests = max(args.requests_per_user * users, 8)
                order = ("guidellm", "ours") if (rnd + users) % 2 and rnd else ("ours", "guidellm")
                for tool in order:
                    before = server_totals(url)
                    if tool == "ours":
                        m = run_ours(url, users, requests, args.prompt_tokens, args.max_new_tokens, args.ramp_up)
                    else:
                        ramps = [m["ramp_s"] for m in results[("ours", users)]] if args.guidellm_rampup == "same" \
                            else [0.0]
                        m = run_guidellm(exe, url, tokenizer, users, requests, args.prompt_tokens,
                                         args.max_new_tokens, seed=1000 * rnd + users, rampup=statistics.median(ramps),
                                         workers=users if args.guidellm_workers == "streams" else None)
                    m.update(server_view(before, server_totals(url)))
                    results.setdefault((tool, users), []).append(m)
                    print(_line(tool, rnd, users, m), flush=True)
    except KeyboardInterrupt:
        print("interrupted: the summary below is of the runs finished so far", flush=True)
    finally:
        if server is not None:
            server.stop()
    print(f"\n{time.monotonic() - started:.0f} s in all. Median over the rounds run; ratio = ours / guidellm")
    missed = []
    for users in args.users:
        if not (results.get(("ours", users)) and results.get(("guidellm", users))):
            missed.append(f"{users} users (not run)")
            continue
        for metric in METRICS:
            ours = statistics.median(m[metric] for m in results[("ours", users)])
            theirs = statistics.median(m[metric] for m in results[("guidellm", users)])
            ratio = ours / theirs
            ok = abs(ratio - 1) <= TARGET
            unit, scale = ("tok/s", 1) if metric == "output_tok_s" else ("ms", 1e3)
            print(f"users {users:>2} {metric:<12} ours {ours * scale:8.1f} {unit:<5} guidellm {theirs * scale:8.1f} "
                  f"{unit:<5} ratio {ratio:5.2f} {'ok' if ok else 'MISSED'}")
            if not ok:
                missed.append(f"{metric} at {users} users ({ratio:.2f})")
    if missed:
        print(f"\ntarget missed (+-{TARGET:.0%}): {', '.join(missed)}")
        return 1
    print(f"\ntarget met: every ratio within +-{TARGET:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
