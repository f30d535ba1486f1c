"""The model runner's mixed forward against its decode and prefill steps, side by side in one run.

    .venv/bin/python benchmarks/runner_forward.py [--dtype bfloat16] [--rows 1 4 16 32] [--context 192]
        [--chunk 256] [--mixed-rows 16] [--repeats 9] [--threads 1] [--cpu-time]

Three measurements on the default model, in this process (no server):
1. A pure decode step at each batch size: `decode(tokens)` against `forward(rows)` with every running
   row decoding (decode is that forward; the ratio should be 1 within noise), and the time the step
   spends outside the model (forward's checks and attention plan, with the layers and LM head stubbed out).
2. A mixed forward (--mixed-rows decode rows plus a --chunk-token prompt chunk) against what the
   non-chunking path runs for the same work: a decode step, then a separate prefill of the prompt.
3. What the runner's layout avoids: gathering every row's keys and values from scattered pool slots
   into contiguous `[rows, kv_heads, positions, head_dim]` tensors each decode step (what a paged
   cache costs when attention is SDPA, which reads contiguous per-row keys), against the step itself.

Each row holds --context tokens of KV (copied from random pool contents; timing does not depend
on the values). Times are medians of --repeats runs, alternated between the compared variants so
that a busy machine slows both alike.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from tgi_toolkit.engine.kv_cache import Seq
from tgi_toolkit.engine.model import load_model
from tgi_toolkit.engine.runner import LlamaRunner
from tgi_toolkit.models.files import DEFAULT_MODEL_ID, resolve_model

CLOCK = time.perf_counter


def median_ms(fns: list[Callable[[], object]], repeats: int) -> list[float]:
    """Median time of each function by CLOCK, run in turn `repeats` times after one warm-up each."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = CLOCK()
            fn()
            times[i].append(CLOCK() - start)
    return [1e3 * statistics.median(t) for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--context", type=int, default=192, help="KV tokens per row (prompt 128 + 64 generated)")
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--mixed-rows", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default torch's: the cores); 1 is steadier on a busy machine, where "
                             "a descheduled OpenMP thread stalls every parallel region")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time by the computing thread's CPU time (implies --threads 1): time spent "
                             "descheduled on a busy machine is not counted")
    args = parser.parse_args()
    if args.cpu_time:
        global CLOCK
        CLOCK, args.threads = time.thread_time, 1
    if args.threads:
        torch.set_num_threads(args.threads)

    loaded = load_model(resolve_model(DEFAULT_MODEL_ID), dtype=args.dtype)
    rows_max = max(*args.rows, args.mixed_rows) + 1
    runner = LlamaRunner(loaded.model, rows_max, max(args.context, 2 * args.chunk) + 64)
    ctx = args.context
    pool = runner.enable_pool(rows_max * ctx + 1)
    pool.k.normal_(std=0.5)
    pool.v.normal_(std=0.5)
    # Each row's slots scattered over the pool, as a block-size-1 allocator hands them out.
    scattered = torch.randperm(rows_max * ctx - 1) + 1
    gen = torch.Generator().manual_seed(0)
    print(f"# model {DEFAULT_MODEL_ID}, {args.dtype}, {torch.get_num_threads()} threads, {ctx} KV tokens per row; "
          f"medians of {args.repeats} by {'thread CPU time' if args.cpu_time else 'wall time'}. "
          "A shared machine: figures are noisy.")

    def fill(n: int) -> list[Seq]:
        for seq in list(runner.cache.seqs):
            runner.release(seq)
        return [runner.new_seq(scattered[i * ctx:(i + 1) * ctx].tolist()) for i in range(n)]

    def tokens(n: int) -> list[int]:
        return torch.randint(0, runner.vocab_size, (n,), generator=gen).tolist()

    def rewind(seqs: list[Seq]) -> None:
        for seq in seqs:
            seq.length = ctx  # the next step writes the same position again: constant context

    print("\n## 1. pure decode step: decode() against forward() with every row decoding")
    print(f"{'rows':>5} {'decode ms':>10} {'forward ms':>11} {'forward/decode':>15} {'outside us':>12}")
    step_ms: dict[int, float] = {}
    for n in args.rows:
        seqs = fill(n)
        toks = tokens(n)
        rows = [(seq, [t]) for seq, t in zip(seqs, toks, strict=True)]
        via_decode, via_forward = median_ms([lambda: (runner.decode(toks), rewind(seqs)),  # noqa: B023
                                             lambda: (runner.forward(rows), rewind(seqs))],  # noqa: B023
                                            args.repeats)
        step_ms[n] = via_decode
        # What the step spends outside the model (checks, the attention plan, per-row views), apart from the
        # noise of two timed steps: forward with the layers and the LM head stubbed out (rewinding included).
        fixed, hidden = torch.zeros(n, runner.vocab_size), torch.zeros(n, runner.embed.shape[1], dtype=runner.dtype)
        runner._layers = lambda plan, tokens, step: hidden  # noqa: B023
        runner.logits = lambda h: fixed  # noqa: B023
        start = CLOCK()
        for _ in range(1000):
            runner.forward(rows)
            rewind(seqs)
        dispatch_us = (CLOCK() - start) * 1e3
        del runner._layers, runner.logits
        print(f"{n:>5} {via_decode:>10.2f} {via_forward:>11.2f} {via_forward / via_decode:>15.3f} {dispatch_us:>12.1f}")

    print(f"\n## 2. {args.mixed_rows} decode rows + a {args.chunk}-token prompt chunk: one mixed forward "
          f"against a decode step then a separate prefill")
    seqs = fill(args.mixed_rows)
    toks, chunk = tokens(args.mixed_rows), tokens(args.chunk)
    rows = [(seq, [t]) for seq, t in zip(seqs, toks, strict=True)]

    def separate() -> None:
        runner.decode(toks)
        rewind(seqs)
        new, _ = runner.prefill([chunk])
        runner.release(new[0])

    def mixed(start: int) -> Callable[[], None]:
        prefix = scattered[:start].tolist()

        def run() -> None:
            seq = runner.new_seq(prefix)
            runner.forward([*rows, (seq, chunk)])
            rewind(seqs)
            runner.release(seq)
        return run

    def copy_only() -> None:
        runner.release(runner.new_seq(scattered[:args.chunk].tolist()))

    sep, mix0, mix1, copy = median_ms([separate, mixed(0), mixed(args.chunk), copy_only], args.repeats)
    print(f"decode + prefill {sep:8.2f} ms")
    print(f"mixed forward    {mix0:8.2f} ms  ratio {mix0 / sep:.3f}  (chunk at positions 0..{args.chunk - 1})")
    print(f"mixed forward    {mix1 - copy:8.2f} ms  ratio {(mix1 - copy) / sep:.3f}  (a second chunk: positions "
          f"{args.chunk}..{2 * args.chunk - 1}; {copy:.2f} ms of new_seq copying the first from the pool taken off)")

    print("\n## 3. gathering each row's KV from scattered pool slots every decode step, against the step")
    print(f"{'rows':>5} {'step ms':>8} {'gather ms':>10} {'gather/step':>12}")
    layers = len(runner.layers)
    for n in args.rows:
        idx = scattered[:n * ctx]

        def gather() -> None:
            for layer in range(layers):
                for store in (pool.k, pool.v):
                    # One copy, the least a gather costs: [n*ctx, kv_heads, d], which SDPA can read as
                    # the strided view [n, kv_heads, ctx, d] (.view(n, ctx, ...).transpose(1, 2)).
                    torch.index_select(store[layer], 0, idx)  # noqa: B023

        (g,) = median_ms([gather], args.repeats)
        print(f"{n:>5} {step_ms[n]:>8.2f} {g:>10.2f} {g / step_ms[n]:>12.3f}")


if __name__ == "__main__":
    main()
