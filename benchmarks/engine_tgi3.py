"""What TGI 3's chunked prefill and prefix cache change for users of the embedded engine, measured.

    .venv/bin/python benchmarks/engine_tgi3.py [--dtype bfloat16] [--streams 8] [--long 2000]
        [--chunk-budget 256] [--system 1000]

1. Decode stall: `--streams` streams are decoding when one `--long`-token prompt arrives. Printed: the
   largest gap between two tokens of the running streams while the long prompt is prefilled, with
   chunked prefill (`--max-batch-prefill-tokens --chunk-budget`: each forward carries at most that
   many prompt tokens beside the decoding rows) against TGI's older path (PREFILL_CHUNKING=0, where
   the whole prompt is prefilled alone while the streams wait; its budget must hold the whole prompt).
2. Prefix cache: TTFT of a `--system`-token prompt sent once, then again (its KV cached once the
   first finished), with and without PREFIX_CACHING.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

import aiohttp
from streams import exact_prompt, start_engine, stream_one


async def stall(url: str, streams: int, long_prompt: str, short_prompt: str) -> dict:
    """Streams decode; when each has 10 tokens the long prompt is sent; gaps around its prefill."""
    counts = [0] * streams

    def on_token(i: int):
        def seen() -> None:
            counts[i] += 1
        return seen

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=None)) as session:
        tasks = [asyncio.create_task(stream_one(session, url, short_prompt, 160, on_token(i)))
                 for i in range(streams)]
        while min(counts) < 1:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)  # a few decode steps of the running batch
        long = await stream_one(session, url, long_prompt, 4)
        running = await asyncio.gather(*tasks)
    sent, first = long["sent"], long["stamps"][0]
    during = [b - a for r in running for a, b in zip(r["stamps"], r["stamps"][1:], strict=False)
              if b > sent and a < first]
    before = [b - a for r in running for a, b in zip(r["stamps"], r["stamps"][1:], strict=False) if b < sent]
    return {"max_gap": max(during) if during else float("nan"), "step": statistics.median(before),
            "long_ttft": first - sent}


def ttfts(url: str, prompt: str, repeats: int) -> list[float]:
    async def one() -> float:
        async with aiohttp.ClientSession() as session:
            r = await stream_one(session, url, prompt, 2)
        return r["stamps"][0] - r["sent"]
    return [asyncio.run(one()) for _ in range(repeats)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--long", type=int, default=2000)
    parser.add_argument("--chunk-budget", type=int, default=256)
    parser.add_argument("--system", type=int, default=1000)
    args = parser.parse_args()
    common = ["--dtype", args.dtype, "--max-input-tokens", str(args.long), "--max-total-tokens",
              str(args.long + 200), "--max-concurrent-requests", str(args.streams + 4)]
    cases = {
        f"chunked, budget {args.chunk_budget}": (["--max-batch-prefill-tokens", str(args.chunk_budget)], None),
        f"not chunked, budget {args.long}": (["--max-batch-prefill-tokens", str(args.long)],
                                             {"PREFILL_CHUNKING": "0"}),
    }
    print(f"decode stall: {args.streams} streams decoding, a {args.long}-token prompt arrives ({args.dtype})")
    results = {}
    for name, (flags, env) in cases.items():
        server = start_engine(common + flags, env)
        try:
            long_prompt = exact_prompt(server.url, args.long)
            short = exact_prompt(server.url, 32)
            ttfts(server.url, short, 1)  # warm the HTTP path
            results[name] = asyncio.run(stall(server.url, args.streams, long_prompt, short))
        finally:
            server.stop()
        r = results[name]
        print(f"  {name:<28} largest gap {r['max_gap'] * 1000:7.0f} ms  (decode step {r['step'] * 1000:.0f} ms; "
              f"long prompt TTFT {r['long_ttft']:.2f} s)", flush=True)
    chunked, plain = results.values()
    print(f"  largest gap, not chunked / chunked: {plain['max_gap'] / chunked['max_gap']:.1f}x")

    print(f"\nrepeated {args.system}-token prompt: TTFT of the first request, then of 3 more")
    for name, env in (("prefix cache on", None), ("PREFIX_CACHING=0", {"PREFIX_CACHING": "0"})):
        server = start_engine(["--dtype", args.dtype], env)
        try:
            prompt = exact_prompt(server.url, args.system)
            ttfts(server.url, exact_prompt(server.url, 8), 1)
            first, *later = ttfts(server.url, prompt, 4)
        finally:
            server.stop()
        print(f"  {name:<18} first {first * 1000:7.0f} ms, later {statistics.median(later) * 1000:6.0f} ms "
              f"(median of 3): {first / statistics.median(later):.1f}x shorter", flush=True)


if __name__ == "__main__":
    main()
