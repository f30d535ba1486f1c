"""--quantize on the embedded engine: weight memory, greedy agreement and speed of each method.

    .venv/bin/python benchmarks/quantization.py [--tokens 48] [--dtype float32]

Every method runs on the same loaded model, one after the other in one process, so the ratios
are comparable even on a noisy machine. Agreement: teacher-forced greedy agreement, i.e. fed the
unquantized model's greedy continuation, the share of positions where the quantized model's top
token is the same (free-running outputs diverge at the first difference and say little more).
"""

from __future__ import annotations

import argparse
import time

import torch

from tgi_toolkit.engine.model import load_model
from tgi_toolkit.engine.quantization import SUPPORTED, quantize_runner, refusal
from tgi_toolkit.engine.runner import LlamaRunner
from tgi_toolkit.models.files import DEFAULT_MODEL_ID, resolve_model

PROMPTS = ["The capital of France is", "def quicksort(items):", "Once upon a time, in a small village,",
           "The three laws of thermodynamics are"]


def greedy(runner: LlamaRunner, prompts: list[list[int]], n: int) -> list[list[int]]:
    seqs, logits = runner.prefill(prompts)
    out = [[int(lg[-1].argmax())] for lg in logits]
    for _ in range(n - 1):
        step = runner.decode([o[-1] for o in out])
        for o, row in zip(out, step, strict=True):
            o.append(int(row.argmax()))
    for seq in seqs:
        runner.release(seq)
    return out


def agreement(runner: LlamaRunner, prompts: list[list[int]], reference: list[list[int]]) -> float:
    full = [p + r for p, r in zip(prompts, reference, strict=True)]
    seqs, logits = runner.prefill(full, all_logits=[True] * len(full))
    for seq in seqs:
        runner.release(seq)
    same = total = 0
    for prompt, ref, lg in zip(prompts, reference, logits, strict=True):
        predicted = lg[len(prompt) - 1:-1].argmax(-1).tolist()
        same += sum(a == b for a, b in zip(predicted, ref, strict=True))
        total += len(ref)
    return same / total


def step_ms(runner: LlamaRunner, batch: int, steps: int = 12) -> float:
    seqs, _ = runner.prefill([list(range(100, 228))] * batch)
    tokens = [5] * batch
    runner.decode(tokens)
    started = time.perf_counter()
    for _ in range(steps):
        runner.decode(tokens)
    elapsed = (time.perf_counter() - started) / steps * 1000
    for seq in seqs:
        runner.release(seq)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    loaded = load_model(resolve_model(DEFAULT_MODEL_ID), dtype=args.dtype)
    prompts = [loaded.tokenizer.encode(p) for p in PROMPTS]
    rows = []
    reference = None
    for method in (None, *SUPPORTED):
        if method and refusal(method):
            print(f"{method}: skipped ({refusal(method)})")
            continue
        runner = LlamaRunner(loaded.model, max_rows=32, max_positions=512)
        if method:
            quantize_runner(runner, method)
        reference = reference or greedy(runner, prompts, args.tokens)
        rows.append((method or f"none ({args.dtype})", runner.weight_bytes() / 2**20,
                     agreement(runner, prompts, reference), step_ms(runner, 1), step_ms(runner, 16)))
    base = rows[0]
    print(f"\n{'method':<22}{'weights MiB':>12}{'ratio':>7}{'greedy agree':>14}"
          f"{'ms/step b=1':>13}{'speed×':>8}{'ms/step b=16':>14}{'speed×':>8}")
    for name, mib, agree, ms1, ms16 in rows:
        print(f"{name:<22}{mib:>12.1f}{mib / base[1]:>7.2f}{agree:>14.1%}{ms1:>13.1f}{base[3] / ms1:>8.2f}"
              f"{ms16:>14.1f}{base[4] / ms16:>8.2f}")


if __name__ == "__main__":
    main()
