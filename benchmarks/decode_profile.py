"""Where a decode step's time goes, against this machine's memory bandwidth and matmul peak, measured here.

    .venv/bin/python benchmarks/decode_profile.py [--dtype bfloat16] [--rows 1 16 32] [--context 192]
        [--rounds 5] [--compile] [--quantize eetq] [--threads 1]

Each round measures, one after the other (a shared machine's speed drifts, so every ratio is taken
within a round and the median over rounds is printed):
- the machine's limits: a large bfloat16 copy (STREAM's "copy": bytes read plus bytes written over
  the time, 1 GiB each way, far beyond the caches) and a large bfloat16 matmul (4096^3, oneDNN/AMX);
- the engine's decode step (`LlamaRunner.decode`, as the engine runs it: eager by default, the compiled
  buckets of --cuda-graphs with --compile) at each row count, each row holding --context tokens of KV,
  and the greedy token choice the engine runs after it (sampling).

Then one profiled step per row count (torch.profiler) splits the step: matmuls (the decoder's linear
layers), the LM head (the last matmul), attention (SDPA and the KV cache writes), the other kernels
(norms, RoPE, SwiGLU, residuals, fused inductor kernels) and what no kernel accounts for (Python
and dispatch: the step's wall time less its kernels'). Printed against the weight-read time (the
step's weight bytes over the copy bandwidth) and the matmul time at peak (its FLOPs over the peak).
Target: a 16-row step within 2x of the weight-read time (median of the per-round ratios); exit 1 if not.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from tgi_toolkit.engine.decode_step import decode_layers
from tgi_toolkit.engine.model import load_model
from tgi_toolkit.engine.runner import LlamaRunner
from tgi_toolkit.engine.sampling import SamplingParams, TokenChooser, choose_batch
from tgi_toolkit.models.files import DEFAULT_MODEL_ID, resolve_model

STEP_TARGET = 2.0  # a 16-row step over the weight-read time
COPY_BYTES = 2**30
MATMUL = 4096

MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::linear", "aten::matmul", "aten::_weight_int8pack_mm",
              "mkldnn::_linear_pointwise", "onednn::", "aten::bmm")
ATTENTION_OPS = ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product", "aten::index_put")


def copy_bandwidth(src: torch.Tensor, dst: torch.Tensor) -> float:
    """Bytes moved (read + written) per second by one large copy, best of three."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - started)
    return 2 * src.numel() * src.element_size() / best


def matmul_peak(a: torch.Tensor, b: torch.Tensor) -> float:
    """FLOP/s of a large bfloat16 matmul, best of three."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - started)
    return 2 * a.shape[0] * a.shape[1] * b.shape[1] / best


def category(name: str) -> str:
    if any(name.startswith(op) for op in ATTENTION_OPS):
        return "attention"
    if any(name.startswith(op) for op in MATMUL_OPS):
        return "matmul"
    return "other kernels"


def profiled_split(step, lm_head_ms: float) -> dict[str, float]:
    """One profiled step: milliseconds per category of top-level kernels (ops called from Python or
    from compiled code), and the rest of the wall time (Python and dispatch)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        step()
        wall = (time.perf_counter() - started) * 1e3
    split: dict[str, float] = defaultdict(float)
    # The TorchScript step shows as one event around its ops: drop it, so that its ops count as top-level.
    events = [e for e in prof.events() if e.name not in ("ProfilerStep*", decode_layers.__name__)]
    # Top-level ops only: an event nested in another event's interval counts in its parent's time.
    events.sort(key=lambda e: (e.time_range.start, -e.time_range.end))
    end = -1
    for event in events:
        if event.time_range.start >= end:
            split[category(event.name)] += (event.time_range.end - event.time_range.start) / 1e3
            end = event.time_range.end
    split["matmul"] -= lm_head_ms
    split["LM head"] = lm_head_ms
    split["Python and dispatch"] = wall - sum(split.values())
    split["wall"] = wall
    return split


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 16, 32])
    parser.add_argument("--context", type=int, default=192, help="KV tokens per row (prompt 128 + 64 generated)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per row count per round (median)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False,
                        help="the compiled decode step, as the engine serves it with --cuda-graphs; default: the "
                             "eager one, as it serves without")
    parser.add_argument("--quantize", default=None, help="--quantize method, e.g. eetq")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default torch's: the cores); 1 avoids OpenMP barrier stalls on a busy "
                             "machine, where a descheduled thread holds up each of a step's ~600 parallel regions")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    loaded = load_model(resolve_model(DEFAULT_MODEL_ID), dtype=args.dtype)
    runner = LlamaRunner(loaded.model, max(args.rows), args.context + 2)
    if args.quantize:
        from tgi_toolkit.engine.quantization import quantize_runner

        quantize_runner(runner, args.quantize)
    if args.compile:
        started = time.perf_counter()
        runner.compile_decode(args.rows)
        print(f"compiled the decode step for {args.rows} rows in {time.perf_counter() - started:.1f} s")
    weight_bytes = runner.weight_bytes()
    linear_params = sum(m.in_features * m.out_features for layer in runner.layers for m in layer.linears().values()
                        if hasattr(m, "in_features"))
    head_params = runner.lm_head.numel()
    print(f"# {DEFAULT_MODEL_ID}, {args.dtype}{', ' + args.quantize if args.quantize else ''}, "
          f"{torch.get_num_threads()} threads, {args.context} KV tokens per row; weights read per step "
          f"{weight_bytes / 2**20:.1f} MiB; {'compiled' if args.compile else 'eager'} decode step")

    src = torch.ones(COPY_BYTES // 2, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    a = torch.randn(MATMUL, MATMUL).to(torch.bfloat16)
    b = torch.randn(MATMUL, MATMUL).to(torch.bfloat16)
    seqs: dict[int, list] = {}
    tokens = {n: torch.randint(0, runner.vocab_size, (n,)).tolist() for n in args.rows}
    choosers = {n: [TokenChooser(SamplingParams()) for _ in range(n)] for n in args.rows}

    def step(n: int) -> torch.Tensor:
        for seq in seqs[n]:
            seq.length = args.context  # the step writes the same position again: constant context
        return runner.decode(tokens[n])

    def use(n: int) -> None:
        for seq in list(runner.cache.seqs):
            runner.release(seq)
        seqs[n] = [runner.new_seq() for _ in range(n)]
        for seq in seqs[n]:
            seq.length = args.context

    bandwidth, peak, steps, sampling = [], [], defaultdict(list), defaultdict(list)
    for r in range(args.rounds):
        bandwidth.append(copy_bandwidth(src, dst))
        peak.append(matmul_peak(a, b))
        for n in args.rows:
            use(n)
            step(n)
            times, choice = [], []
            for _ in range(args.steps):
                started = time.perf_counter()
                logits = step(n)
                middle = time.perf_counter()
                choose_batch(logits, choosers[n], lambda i: [])
                times.append(middle - started)
                choice.append(time.perf_counter() - middle)
            steps[n].append(statistics.median(times))
            sampling[n].append(statistics.median(choice))
        read_ms = weight_bytes / bandwidth[-1] * 1e3
        print(f"round {r + 1}: copy {bandwidth[-1] / 1e9:.1f} GB/s (weights {read_ms:.1f} ms), matmul "
              f"{peak[-1] / 1e12:.2f} TFLOP/s; step ms " + ", ".join(
                  f"{n} rows {steps[n][-1] * 1e3:.1f}" for n in args.rows), flush=True)

    bw, pk = statistics.median(bandwidth), statistics.median(peak)
    read_ms = weight_bytes / bw * 1e3
    print(f"\nmachine (medians): copy {bw / 1e9:.2f} GB/s, matmul peak {pk / 1e12:.2f} TFLOP/s; "
          f"weight-read time {read_ms:.1f} ms per step")
    names = ["matmul", "LM head", "attention", "other kernels", "Python and dispatch"]
    print(f"\n{'rows':>5}{'step ms':>9}{'sampling':>10}{'weights':>9}{'mm@peak':>9}"
          + "".join(f"{name:>21}" for name in names) + f"{'step/weights':>14}")
    ratios: dict[int, list[float]] = {}
    for n in args.rows:
        use(n)
        step(n)
        hidden = torch.randn(n, runner.lm_head.shape[1]).to(runner.dtype)
        lm_head = []  # the LM head's matmul alone, as the step runs it (median of 3)
        for _ in range(4):
            started = time.perf_counter()
            runner.head(hidden)
            lm_head.append((time.perf_counter() - started) * 1e3)
        lm_head_ms = statistics.median(lm_head[1:])
        split = profiled_split(lambda n=n: step(n), lm_head_ms)
        at_peak = 2 * n * (linear_params + head_params) / pk * 1e3
        ratios[n] = [s * 1e3 / (weight_bytes / b_ * 1e3) for s, b_ in zip(steps[n], bandwidth, strict=True)]
        step_ms = statistics.median(steps[n]) * 1e3
        print(f"{n:>5}{step_ms:>9.1f}{statistics.median(sampling[n]) * 1e3:>10.2f}{read_ms:>9.1f}{at_peak:>9.1f}"
              + "".join(f"{split[name]:>12.1f} ({split[name] / split['wall']:>4.0%})" for name in names)
              + f"{statistics.median(ratios[n]):>14.2f}")
    print("(the split is one profiled step, whose wall time the profiler lengthens; step ms is the median "
          "unprofiled step)")
    if 16 in ratios:
        got = statistics.median(ratios[16])
        print(f"\n16-row step over the weight-read time, per round: {', '.join(f'{x:.2f}' for x in ratios[16])}; "
              f"median {got:.2f} (target <= {STEP_TARGET})")
        if got > STEP_TARGET:
            print("target missed")
            sys.exit(1)
        print("target met")


if __name__ == "__main__":
    main()
