"""The embedded engine's start-up time and its own overhead per token, against plain transformers.

    .venv/bin/python benchmarks/engine_overhead.py [--new-tokens 128] [--prompt-tokens 128] [--dtype float32]

1. Time from process start to `/health` 200: cold (the GGUF model converted to safetensors on
   this first start, in an empty cache) and warm (the converted copy reused).
2. Single-request decode speed, one after the other on the same model, dtype and thread count:
   through the engine's HTTP API (streamed, ignore_eos), the engine's model runner called
   in-process (no HTTP, no scheduler), and `model.generate`. Decode time per token excludes the
   first token (prefill) in every case. The server's overhead per token is HTTP against
   `model.generate` (the issue's target: under 10%) and HTTP against the bare runner (what the
   scheduler, sampling, detokenization and HTTP add to a step).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time

import torch
from streams import concurrent, exact_prompt, start_engine

from tgi_toolkit import Server
from tgi_toolkit.engine.model import load_model
from tgi_toolkit.engine.runner import LlamaRunner
from tgi_toolkit.models.files import DEFAULT_MODEL_ID, resolve_model


def start(cache: str, dtype: str) -> Server:
    return start_engine(["--max-input-tokens", "512", "--max-total-tokens", "1024", "--dtype", dtype],
                        env={"TGI_TOOLKIT_CACHE": cache})


def http_ms_per_token(url: str, prompt: str, new_tokens: int) -> float:
    stamps = asyncio.run(concurrent(url, prompt, 1, new_tokens))[0]["stamps"]
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1) * 1000


def runner_ms_per_token(runner: LlamaRunner, ids: list[int], new_tokens: int) -> float:
    seqs, logits = runner.prefill([ids])
    token = int(logits[0][-1].argmax())
    started = time.perf_counter()
    for _ in range(new_tokens - 1):
        token = int(runner.decode([token])[0].argmax())
    elapsed = time.perf_counter() - started
    runner.release(seqs[0])
    return elapsed / (new_tokens - 1) * 1000


def generate_ms_per_token(model, ids: list[int], new_tokens: int) -> float:
    x = torch.tensor([ids])

    def timed(n: int) -> float:
        started = time.perf_counter()
        model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, min_new_tokens=n, do_sample=False)
        return time.perf_counter() - started

    return (timed(new_tokens) - timed(1)) / (new_tokens - 1) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as empty:
        with start(empty, args.dtype) as server:
            cold = server.seconds_to_healthy
    server = start(os.path.expanduser("~/.cache/tgi_toolkit"), args.dtype)
    warm, url = server.seconds_to_healthy, server.url
    rounds = []
    try:
        prompt = exact_prompt(url, args.prompt_tokens)
        loaded = load_model(resolve_model(DEFAULT_MODEL_ID), dtype=args.dtype)
        ids = loaded.tokenizer(prompt)["input_ids"]
        runner = LlamaRunner(loaded.model, max_rows=2, max_positions=len(ids) + args.new_tokens + 2)
        http_ms_per_token(url, prompt, 4)  # warm both paths
        runner_ms_per_token(runner, ids, 4)
        generate_ms_per_token(loaded.model, ids, 4)
        # Interleaved rounds: the machine is shared and its load drifts; a round compares the
        # three paths under (nearly) the same load, and each is idle while another is timed.
        for _ in range(args.repeats):
            rounds.append((http_ms_per_token(url, prompt, args.new_tokens),
                           runner_ms_per_token(runner, ids, args.new_tokens),
                           generate_ms_per_token(loaded.model, ids, args.new_tokens)))
    finally:
        server.stop()

    # Load from other processes only ever adds time, so each path's fastest round is its least
    # disturbed figure; the per-round ratios show how much the load moved things around.
    http, bare, generate = (min(column) for column in zip(*rounds, strict=True))
    print(f"threads {torch.get_num_threads()}, {args.dtype}, prompt {args.prompt_tokens}, "
          f"{args.new_tokens} new tokens, {args.repeats} interleaved rounds (fastest round of each path; "
          f"load average at the end {os.getloadavg()[0]:.1f})")
    print(f"time to healthy: cold {cold:.1f} s (GGUF converted), warm {warm:.1f} s")
    print(f"{'path':<34}{'ms/token':>10}{'tok/s':>9}")
    for name, ms in (("HTTP /generate_stream (engine)", http), ("engine runner, in-process", bare),
                     ("transformers model.generate", generate)):
        print(f"{name:<34}{ms:>10.1f}{1000 / ms:>9.1f}")
    per_round = ", ".join(f"{(h - g) / g:+.0%}" for h, _, g in rounds)
    print(f"server overhead per token vs model.generate: {(http - generate) / generate:+.1%} "
          f"(per round: {per_round}; target < +10%)")
    per_round = ", ".join(f"{(h - b) / b:+.0%}" for h, b, _ in rounds)
    print(f"server overhead per token vs its bare runner: {(http - bare) / bare:+.1%} (per round: {per_round})")


if __name__ == "__main__":
    main()
