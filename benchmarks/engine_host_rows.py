"""The embedded engine's host time around its decode steps, a forward and a row: where costs.engine_forward's
ENGINE_LOOP comes from.

    .venv/bin/python benchmarks/engine_host_rows.py [--repeats 3]

Serves gpu_probe's tiny random Llama on the CPU over HTTP (the engine process the probe serves, its forward trace
on) and runs bench's batch table at batch 1, 8, 32 and 64 (16-token prompts, 64 new tokens, 3 runs each), `repeats`
times. From the trace (gpu_probe.traced_batch) each batch size's decode steps give the engine's host time beside the
model: the loop between two forwards (`decode_gap_ms`) and the Python inside a forward outside its runner and its
token choice (`decode_host_ms`: reading the rows, each row's text and event, handing the events to the front end,
while that front end streams the last step's). Their sum at each batch size is a median over the repeats, and a
line through batch 1 and 64 gives a forward's and a row's seconds. The host's seconds a torch call, timed as
profile-gpu times it, are printed beside them. The first prompt's forward at each batch size (`first_prompt_ms`)
runs while the front end takes in the other B - 1 requests: its growth from batch 1 to 64 over 63 is the front
end's seconds a request (ENGINE_LOOP's frontend_s); beside it the CPU seconds the front end's thread ran meanwhile
(`first_prompt_frontend_ms`, its own CPU clock): where the two agree a request's intake held the GIL throughout. And
at batch 1 the request's path outside its forward: bench's time to the first token less the prompt's forward and the
loop's gap before a forward (which ENGINE_LOOP's forward_overhead_s holds), the medians over the table's batch-1 runs:
sending, HTTP, validation, tokenization and the queue on the way in, the token's event and the stream on the way out
(ENGINE_LOOP's request_overhead_s). No target: it prints what ENGINE_LOOP holds beside this run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

SIZES = [1, 8, 32, 64]


def torch_call_us() -> float:
    """profile-gpu's `torch_call` on this CPU: torch.add on 256 elements, timed by its own per_call_ms."""
    from functools import partial

    import torch

    from tgi_toolkit.costs.kernel_timing import per_call_ms

    a, out = torch.ones(256), torch.empty(256)
    return per_call_ms(partial(torch.add, a, a, out=out)) * 1e3


def one_run(folder: Path, tokenizer: Path | None) -> tuple[dict[int, tuple[float, float, float, float]], float]:
    """Per batch size: (decode_gap_ms, decode_host_ms, first_prompt_ms, first_prompt_frontend_ms), the medians of one
    served batch table; and the request's path outside its forward at batch 1 (ms)."""
    import gpu_probe
    import pandas as pd

    from tgi_toolkit import bench
    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.server import Server

    model_dir = gpu_probe.prepare_model(folder, gpu_probe.TINY, tokenizer)
    plan = {"batch_sizes": SIZES, "users": [max(SIZES)], "max_total_tokens": 1024, "max_batch_prefill_tokens": 4096}
    config = LauncherConfig.from_cli(["--model-id", str(model_dir), *gpu_probe.launcher_flags(plan, "cpu")])
    trace = folder / "forwards.jsonl"
    env = {"TGI_TOOLKIT_DEVICE": "cpu", "TGI_TOOLKIT_RANDOM_WEIGHTS": "1", "TGI_TOOLKIT_KV_CACHE_GIB": "0.25",
           "TGI_TOOLKIT_FORWARD_TRACE": str(trace)}
    with Server(config, log_path=folder / "engine.log", env=env, health_timeout=200, startup_progress=False) as server:
        first = trace.stat().st_size if trace.exists() else 0
        bench.run_batch(server.url, batch_sizes=SIZES, sequence_length=16, decode_length=64, runs=3,
                        ignore_eos=True, progress=False, output=str(folder / "batch"))
        last = trace.stat().st_size
    rows = gpu_probe.traced_batch(trace, [first, last], SIZES, 3)
    table = pd.read_parquet(folder / "batch" / "batch.parquet")
    # its warm-up run too, as the trace's median holds it
    ttft = table.loc[table["batch_size"] == 1, "prefill_latency_s"].median() * 1e3
    alone = next(r for r in rows if r["batch_size"] == 1)  # the batch-1 row the TTFT above is taken from
    medians = {r["batch_size"]: (r["decode_gap_ms"], r["decode_host_ms"], r["first_prompt_ms"],
                                 r["first_prompt_frontend_ms"]) for r in rows
               if r["decode_host_ms"] and r["first_prompt_ms"] and r["first_prompt_frontend_ms"] is not None}
    return medians, ttft - alone["first_prompt_ms"] - alone["decode_gap_ms"]


def main(argv: list[str] | None = None) -> int:
    from tgi_toolkit.costs.engine_forward import ENGINE_LOOP

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokenizer", type=Path, default=None,
                        help="a folder with tokenizer.json (default: the bundled model's)")
    args = parser.parse_args(argv)
    calls, runs, paths = [torch_call_us()], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            run, path = one_run(Path(tmp) / str(i), args.tokenizer)
            runs.append(run)
            paths.append(path)
            calls.append(torch_call_us())
            print(f"engine_host_rows: run {i + 1} of {args.repeats}: {run}; request path {path:.3f} ms", flush=True)
    print(f"\nthe host's seconds a torch call: {statistics.median(calls):.3f} us (median of {len(calls)})")
    print(f"{'rows':>5} {'gap ms':>8} {'host ms':>8} {'sum ms':>8} {'first ms':>9} {'front end ms':>13}"
          f"   (medians over {len(runs)} runs)")
    total, first, front = {}, {}, {}
    for n in SIZES:
        got = [run[n] for run in runs if n in run]
        if not got:
            print(f"{n:5d}  no clean run of this batch size")
            continue
        gap, host = statistics.median(g[0] for g in got), statistics.median(g[1] for g in got)
        total[n] = statistics.median(g[0] + g[1] for g in got)
        first[n], front[n] = statistics.median(g[2] for g in got), statistics.median(g[3] for g in got)
        print(f"{n:5d} {gap:8.3f} {host:8.3f} {total[n]:8.3f} {first[n]:9.3f} {front[n]:13.3f}")
    if 1 in total and 64 in total:
        row = (total[64] - total[1]) / 63
        print(f"\na line through 1 and 64 rows: {total[1] - row:.3f} ms a forward + {row * 1e3:.1f} us a row; "
              f"ENGINE_LOOP holds {ENGINE_LOOP['forward_overhead_s'] * 1e3:.3f} ms + "
              f"{ENGINE_LOOP['row_overhead_s'] * 1e6:.1f} us")
    if 1 in first and 64 in first:
        print(f"the first prompt's forward while the front end takes in the other B - 1: "
              f"{(first[64] - first[1]) / 63:.3f} ms a request more (batch 1 to 64); ENGINE_LOOP's frontend_s holds "
              f"{ENGINE_LOOP['frontend_s'] * 1e3:.3f} ms; the front end's thread ran "
              f"{(front[64] - front[1]) / 63:.3f} ms of CPU a request meanwhile")
    print(f"a batch-1 request's path outside its forward: {statistics.median(paths):.3f} ms (median of "
          f"{', '.join(f'{p:.3f}' for p in paths)}); ENGINE_LOOP's request_overhead_s holds "
          f"{ENGINE_LOOP['request_overhead_s'] * 1e3:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
