"""Where the embedded engine's CPU time goes while closed-loop users stream, and what libgomp's wait between
parallel regions changes, on a quiet machine and beside CPU burners, in alternating rounds of one run.

    .venv/bin/python benchmarks/engine_cpu.py [--users 16 32] [--burner-users 16] [--burners 2] [--rounds 3]
        [--duration 8] [--spins 10000 30000 100000] [--py-spy PATH]

One engine per wait, each started as engine_vs_vllm starts the user's engine (--dtype bfloat16 --max-batch-size
32) with a forward trace, and suspended except while measured: `passive` (the engine's own default,
OMP_WAIT_POLICY=PASSIVE) and `spin N` for each --spins (GOMP_SPINCOUNT=N, libgomp's bound on a waiting thread's
busy loop before it sleeps; its own default 300000, about 3 ms). Each measurement is engine_vs_vllm's client
(OpenAI /v1/completions, streamed, distinct 128-token prompts, 128 new tokens, N closed-loop users, tokens
counted in a window opened once every user has its first token); over the window:
- output tok/s, and its ratio to `passive` in the same round (the figure to read: the machine is shared);
- CPU seconds a second: the engine's compute thread (the scheduler, the forwards, sampling and detokenizing),
  libgomp's worker (its second matmul thread), the engine's main thread (HTTP, the event loop), its other
  threads, this client, and the machine's idle share (2 cores = 2.0);
- from the forward trace: the compute thread's share of the window inside forwards (the model, then sampling,
  detokenizing and handing the tokens over) and between them (the scheduler: finished requests, the queue's
  poll), the median forward and gap, and the median rows a forward.
The compute thread is the engine's Python thread with the most CPU time (it loaded the model); libgomp's worker
the busiest of the others but the main thread. Each engine's first closed loop at each N is a warm-up, not
counted; with --py-spy (py-spy's executable), the passive engine's is as long as a measurement and sampled
(py-spy record --threads --idle --nonblocking --format raw) into engine_cpu_<N>.txt in the working directory.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
from engine_vs_vllm import USER_ENGINE_FLAGS, Side, distinct_prompts
from streams import closed_loop, start_engine, window_throughput

from tgi_toolkit.simulate.trace import read_trace_lines

BURNER = "while 1: pass"


def thread_times(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of process `pid`, by thread id."""
    return {t.id: t.user_time + t.system_time for t in psutil.Process(pid).threads()}


def snapshot(pid: int) -> dict:
    own = psutil.Process().cpu_times()
    return {"at": time.perf_counter(), "threads": thread_times(pid), "client": own.user + own.system,
            "idle": psutil.cpu_times().idle}


async def sampled_loop(side: Side, pid: int, users: int, duration: float, prompts, new_tokens: int):
    """The closed loop, with CPU snapshots every 0.25 s beside it."""
    snaps: list[dict] = []

    async def sample() -> None:
        while True:
            snaps.append(snapshot(pid))
            await asyncio.sleep(0.25)

    sampler = asyncio.create_task(sample())
    try:
        records = await closed_loop(side.url, prompts, users, new_tokens, duration, openai_model=side.model,
                                    window=True)
    finally:
        sampler.cancel()
    return records, snaps


class Engine:
    """An engine of one wait, its trace, and which of its threads is which."""

    def __init__(self, name: str, env: dict[str, str], kv_gib: str, trace_dir: str) -> None:
        self.name, self.trace = name, os.path.join(trace_dir, name.replace(" ", "-") + ".jsonl")
        server = start_engine(USER_ENGINE_FLAGS, {**env, "TGI_TOOLKIT_KV_CACHE_GIB": kv_gib,
                                                  "TGI_TOOLKIT_FORWARD_TRACE": self.trace})
        self.pid = server.pid
        self.side = Side(name, server.url, server, server.pid, parked=True)
        self.offset = os.path.getsize(self.trace)
        # Model load and warm-up ran on the compute thread: it has the most CPU time so far.
        times = thread_times(self.pid)
        self.compute = max((t for t in times if t != self.pid), key=times.get)

    def measure(self, users: int, duration: float, prompts, new_tokens: int, py_spy: str | None = None) -> dict:
        self.side.resume()
        spy = None
        try:
            if py_spy:
                spy = subprocess.Popen([py_spy, "record", "--threads", "--idle", "--nonblocking", "--format", "raw",
                                        "--rate", "200", "-d", str(int(duration + 8)), "-p", str(self.pid),
                                        "-o", f"engine_cpu_{users}.txt"], stdout=subprocess.DEVNULL)
            wall_offset = time.time() - time.perf_counter()
            records, snaps = asyncio.run(sampled_loop(self.side, self.pid, users, duration, prompts, new_tokens))
            time.sleep(1.0)  # the server drops the cancelled requests
        finally:
            if spy is not None:
                spy.wait()
            self.side.suspend()
        begin, end = records[0]["window"]
        a = next(s for s in snaps if s["at"] >= begin)
        b = [s for s in snaps if s["at"] <= end][-1]
        span = b["at"] - a["at"]
        per = {t: (b["threads"][t] - a["threads"].get(t, 0.0)) / span for t in b["threads"]}
        compute, main = per.pop(self.compute, 0.0), per.pop(self.pid, 0.0)
        worker = max(per.values(), default=0.0)
        lines, self.offset = read_trace_lines(self.trace, self.offset)
        lines = [x for x in lines if begin + wall_offset <= x["t"] - x["seconds"] and x["t"] <= end + wall_offset]
        gaps = [(y["t"] - y["seconds"]) - x["t"] for x, y in zip(lines, lines[1:], strict=False)]
        window = end - begin
        return {"tok_s": window_throughput(records)["tok_s"], "compute": compute, "worker": worker, "main": main,
                "other": sum(per.values()) - worker, "client": (b["client"] - a["client"]) / span,
                "idle": (b["idle"] - a["idle"]) / span,
                "in_forward": sum(x["seconds"] for x in lines) / window, "between": sum(gaps) / window,
                "forward_ms": 1000 * statistics.median(x["seconds"] for x in lines) if lines else float("nan"),
                "gap_ms": 1000 * statistics.median(gaps) if gaps else float("nan"),
                "rows": statistics.median(x["rows"] for x in lines) if lines else float("nan")}


def burners(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen(["python3", "-c", BURNER]) for _ in range(count)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
        p.wait()


FIELDS = ("tok_s", "compute", "worker", "main", "other", "client", "idle", "in_forward", "between", "forward_ms",
          "gap_ms", "rows")


def report(results: dict[tuple[str, int, str], list[dict]], names: list[str]) -> None:
    print("\nmedians over the rounds; ratio = tok/s over the passive engine's in the same round (median of rounds)")
    print(f"{'load':<8} {'users':>5} {'wait':<12} {'tok/s':>6} {'ratio':>6}  {'compute':>7} {'worker':>6} {'main':>5} "
          f"{'other':>5} {'client':>6} {'idle':>5}  {'in fwd':>6} {'between':>7} {'fwd ms':>6} {'gap ms':>6} rows")
    for (load, users, name), runs in results.items():
        base = results[(load, users, names[0])]
        ratios = [r["tok_s"] / p["tok_s"] for r, p in zip(runs, base, strict=True)]
        m = {f: statistics.median(r[f] for r in runs) for f in FIELDS}
        print(f"{load:<8} {users:>5} {name:<12} {m['tok_s']:>6.0f} {statistics.median(ratios):>6.2f}  "
              f"{m['compute']:>7.2f} {m['worker']:>6.2f} {m['main']:>5.2f} {m['other']:>5.2f} {m['client']:>6.2f} "
              f"{m['idle']:>5.2f}  {m['in_forward']:>6.2f} {m['between']:>7.2f} {m['forward_ms']:>6.1f} "
              f"{m['gap_ms']:>6.1f} {m['rows']:>4.0f}  (" + ", ".join(f"{x:.2f}" for x in ratios) + ")")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[16, 32], help="closed-loop users, quiet machine")
    parser.add_argument("--burner-users", type=int, nargs="*", default=[16], help="users measured beside burners")
    parser.add_argument("--burners", type=int, default=2, help="`python3 -c 'while 1: pass'` processes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--spins", type=int, nargs="*", default=[10000, 30000, 100000])
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--kv-gib", default="1", help="TGI_TOOLKIT_KV_CACHE_GIB: each engine's KV cache; 1 so "
                        "four engines fit in 24 GiB beside the others' work (32 users need about 0.2)")
    parser.add_argument("--py-spy", help="py-spy's executable: sample the passive engine's first measurement")
    args = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; users {args.users} quiet, {args.burner_users} beside {args.burners} burners; "
          f"rounds {args.rounds}, windows of {args.duration:.0f} s", flush=True)
    waits = {"passive": {}, **{f"spin {n}": {"GOMP_SPINCOUNT": str(n)} for n in args.spins}}
    prompts = distinct_prompts(args.prompt_tokens)
    engines: list[Engine] = []
    results: dict[tuple[str, int, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as trace_dir:
        try:
            for name, env in waits.items():
                engines.append(Engine(name, env, args.kv_gib, trace_dir))
            plan = [("quiet", n) for n in args.users] + [("burners", n) for n in args.burner_users]
            # Warm-up, not counted: each engine's first closed loop at each N (a first measurement ran 7-17 %
            # apart from later ones in engine_vs_vllm); the passive engine's is the one py-spy samples.
            for users in args.users:
                for engine in engines:
                    spy = args.py_spy if engine is engines[0] else None
                    got = engine.measure(users, args.duration if spy else 3.0, prompts, args.new_tokens, spy)
                    print(f"  warm-up {users} users {engine.name}: {got['tok_s']:.0f} tok/s", flush=True)
            for r in range(args.rounds):
                for load, users in plan:
                    running = burners(args.burners) if load == "burners" else []
                    try:
                        for engine in engines if r % 2 == 0 else engines[::-1]:
                            got = engine.measure(users, args.duration, prompts, args.new_tokens)
                            results.setdefault((load, users, engine.name), []).append(got)
                            print(f"  round {r + 1} {load} {users} users {engine.name}: {got['tok_s']:.0f} tok/s, "
                                  f"compute {got['compute']:.2f} worker {got['worker']:.2f} main {got['main']:.2f} "
                                  f"client {got['client']:.2f} idle {got['idle']:.2f}, in forwards "
                                  f"{got['in_forward']:.2f} between {got['between']:.2f}", flush=True)
                    finally:
                        stop(running)
        finally:
            for engine in engines:
                engine.side.stop()
    report(results, list(waits))
    print(f"\n{time.strftime('%H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}; "
          f"{Path(__file__).name} done")


if __name__ == "__main__":
    main()
