"""The speeds the scenario tests no longer assert (issue 43: a test checks counts of the schedule, which hold
on a busy machine; the timings live here), measured through the toolkit's own scenarios on one embedded engine.

    .venv/bin/python benchmarks/scenario_speeds.py [--repeats 3] [--url http://127.0.0.1:3000]

Each round, on the same server (launched with the tests' limits unless --url is given):
1. Batch (tests/test_bench_scenarios.py's batch test): decode throughput at batch sizes 1, 2 and 4, 32-token
   prompts, 12 new tokens; the lesson: it rises with the batch size.
2. Concurrency (its concurrency test): output throughput of 1 user against 4 users, 24-token prompts, 8 new
   tokens, 8 requests a point; the lesson: 4 users' is higher.
3. Ingestion (its ingestion test): median TTFT of 768-token prompts against 16-token ones; the lesson: longer.
Printed per round: the figures, whether each lesson held, and whether any of the round's points was measured
while the machine was busy (`machine_busy`: other processes took the CPU). Exit status 1 when a lesson
failed in a round where no point was busy. The prefix cache's TTFT speed-up (tests/test_engine_tgi3.py) is
measured by benchmarks/engine_tgi3.py.
"""

from __future__ import annotations

import argparse
import sys

from tgi_toolkit import LauncherConfig, Server
from tgi_toolkit import schema as S
from tgi_toolkit.bench import measure_ingestion, run_batch, run_concurrency

# the tests' engine (tests/conftest.py's ENGINE_ARGS)
LIMITS = ["--max-input-tokens", "1000", "--max-total-tokens", "1200", "--max-batch-prefill-tokens", "2048",
          "--max-concurrent-requests", "64"]
QUICK = {"progress": False, "scrape_interval": 0.2}


def busy(points) -> bool:
    return bool(points[S.MACHINE_BUSY].fillna(False).any())


def one_round(url: str) -> list[tuple[str, str, bool, bool]]:
    """(lesson, figures, held, busy) for each of the three scenarios."""
    out = []
    batch = run_batch(url, batch_sizes=[1, 2, 4], sequence_length=32, decode_length=12, runs=2, warmups=1, **QUICK)
    measured = batch.batch[~batch.batch[S.WARMUP]]
    tput = measured.groupby(S.BATCH_SIZE)[S.DECODE_THROUGHPUT].mean()
    out.append(("decode throughput rises with the batch size",
                ", ".join(f"batch {b}: {v:.0f} tok/s" for b, v in tput.items()),
                bool(tput[1] < tput[2] < tput[4]), busy(batch.points)))

    conc = run_concurrency(url, users=[1, 4], prompt_tokens=24, max_new_tokens=8, requests=8, **QUICK)
    points = conc.points.set_index(S.USERS)
    one, four = points.loc[1, S.OUTPUT_THROUGHPUT], points.loc[4, S.OUTPUT_THROUGHPUT]
    out.append(("4 users' output throughput is above 1 user's",
                f"1 user: {one:.0f} tok/s, 4 users: {four:.0f} tok/s ({four / one:.2f}x)", bool(four > one),
                busy(conc.points)))

    ingestion = measure_ingestion(url, prompt_tokens=[16, 768], repeats=3, **QUICK)
    ttft = ingestion.requests.groupby(S.PROMPT_TOKENS)[S.TTFT_S].median()
    out.append(("768 prompt tokens take longer to a first token than 16",
                f"TTFT p50 16: {ttft[16] * 1000:.0f} ms, 768: {ttft[768] * 1000:.0f} ms",
                bool(ttft[768] > ttft[16]), busy(ingestion.points)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--url", help="a running server instead of an embedded engine launched for the run")
    args = parser.parse_args()
    failed_idle = 0
    server = None if args.url else Server(LauncherConfig.from_cli(LIMITS), backend="embedded",
                                          startup_progress=False).start()
    try:
        url = args.url or server.url
        for number in range(1, args.repeats + 1):
            for lesson, figures, held, was_busy in one_round(url):
                state = "holds" if held else ("not shown (the machine was busy)" if was_busy else "FAILS")
                failed_idle += not held and not was_busy
                print(f"round {number}: {lesson}: {state}; {figures}" + ("; busy" if was_busy and held else ""),
                      flush=True)
    finally:
        if server is not None:
            server.stop()
    return 1 if failed_idle else 0


if __name__ == "__main__":
    sys.exit(main())
