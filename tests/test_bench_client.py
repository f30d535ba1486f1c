"""Streaming clients against scripted SSE answers: what the embedded engine cannot produce (vLLM's
per-chunk usage, multi-token chunks, role-only chunks, cut streams) is simulated here."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from tgi_toolkit.bench.client import ChatClient, CompletionsClient, GenerationRequest, TgiClient, make_client
from tgi_toolkit.bench.errors import BenchError


def tgi_event(i: int, last: bool = False, details: dict | None = None) -> bytes:
    event = {"index": i, "token": {"id": i, "text": f" t{i}", "logprob": -0.1, "special": False},
             "generated_text": "all" if last else None, "details": details}
    return b"data:" + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


SCRIPTS: dict[str, list[bytes]] = {
    "tgi": [tgi_event(0), tgi_event(1) + tgi_event(2),  # two events in one read
            tgi_event(3, True, {"finish_reason": "length", "generated_tokens": 4, "seed": None, "input_length": 7})],
    "tgi-error": [tgi_event(0),
                  b'data:{"error":"Request failed during generation: boom","error_type":"generation"}\n\n'],
    "tgi-cut": [tgi_event(0), tgi_event(1)],
    "completions": [
        b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}],'
        b'"usage":{"prompt_tokens":7,"completion_tokens":1}}\n\n',
        b'data: {"choices":[{"index":0,"text":"bcd","finish_reason":null}],'
        b'"usage":{"prompt_tokens":7,"completion_tokens":4}}\n\n',
        b'data: {"choices":[{"index":0,"text":"e","finish_reason":"length"}],'
        b'"usage":{"prompt_tokens":7,"completion_tokens":5}}\n\n',
        b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":5,"total_tokens":12}}\n\n',
        b"data: [DONE]\n\n"],
    "chat": [
        b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"content":" there"},"finish_reason":"stop"}]}\n\n',
        b'data: {"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":2,"total_tokens":22}}\n\n',
        b"data: [DONE]\n\n"],
}


@pytest.fixture
async def fake() -> AsyncIterator[tuple[str, list[dict]]]:
    bodies: list[dict] = []

    async def stream(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        bodies.append(body)
        script = request.headers.get("x-script") or request.match_info.get("kind", "tgi")
        if script == "refuse":
            return web.json_response({"error": "Input validation error: too long", "error_type": "validation"},
                                     status=422)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if script == "stall":  # one token, then silence
            await response.write(tgi_event(0))
            await asyncio.sleep(3)
        for chunk in SCRIPTS[script]:
            await response.write(chunk)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/generate_stream", stream)
    app.router.add_post("/v1/completions", stream)
    app.router.add_post("/v1/chat/completions", stream)
    runner = web.AppRunner(app, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}", bodies
    await runner.cleanup()


def _scripted(client, script: str):
    client.headers["x-script"] = script
    return client


async def test_tgi_stream_stamps_every_token_and_reads_details(fake):
    url, bodies = fake
    async with TgiClient(url) as client:
        rec = await client.stream(GenerationRequest("hello", 4, ignore_eos=True, sampling={"temperature": 0.5}))
    assert rec.ok and rec.status == 200
    assert rec.events == 4 and rec.token_counts is None
    assert rec.token_ns == sorted(rec.token_ns) and rec.token_ns[0] >= rec.sent_ns
    assert rec.token_ns[1] == rec.token_ns[2]  # arrived in one read: one arrival time
    assert (rec.output_tokens, rec.input_tokens, rec.finish_reason) == (4, 7, "length")
    assert bodies[0] == {"inputs": "hello", "stream": True, "parameters": {
        "max_new_tokens": 4, "details": True, "temperature": 0.5, "ignore_eos": True}}


async def test_errors_are_recorded_not_raised(fake):
    url, _ = fake
    async with TgiClient(url) as client:
        mid = await _scripted(client, "tgi-error").stream(GenerationRequest("x", 4))
        refused = await _scripted(client, "refuse").stream(GenerationRequest("x", 4))
        cut = await _scripted(client, "tgi-cut").stream(GenerationRequest("x", 4))
    assert (mid.error, mid.status, mid.events) == ("generation", 200, 1)
    assert "boom" in mid.error_message
    assert (refused.error, refused.status) == ("validation", 422) and "too long" in refused.error_message
    assert cut.error == "incomplete_stream" and cut.output_tokens == 2
    async with TgiClient("http://127.0.0.1:9") as client:  # nothing listens on port 9
        gone = await client.stream(GenerationRequest("x", 4))
    assert gone.status == 0 and gone.error and "Connect" in gone.error


async def test_completions_count_tokens_from_usage_deltas(fake):
    url, bodies = fake
    async with CompletionsClient(url, model="m") as client:
        rec = await _scripted(client, "completions").stream(GenerationRequest("p", 5, ignore_eos=True))
    assert rec.ok and rec.events == 3
    assert rec.token_counts == [1, 3, 1]  # the second chunk carried three tokens
    assert (rec.output_tokens, rec.input_tokens, rec.finish_reason) == (5, 7, "length")
    body = bodies[0]
    assert body["model"] == "m" and body["prompt"] == "p" and body["max_tokens"] == 5
    assert body["temperature"] == 0.0 and body["ignore_eos"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


async def test_chat_skips_the_role_only_chunk(fake):
    url, bodies = fake
    async with ChatClient(url) as client:
        rec = await _scripted(client, "chat").stream(GenerationRequest("p", 8, sampling={"do_sample": True,
                                                                                       "top_p": 0.9}))
    assert rec.events == 2 and rec.output_tokens == 2 and rec.input_tokens == 20
    assert rec.finish_reason == "eos_token"
    assert bodies[0]["messages"] == [{"role": "user", "content": "p"}]
    assert bodies[0]["temperature"] == 1.0 and bodies[0]["top_p"] == 0.9


async def test_a_silent_stream_times_out_and_the_client_goes_on(fake):
    url, _ = fake
    async with TgiClient(url, read_timeout=0.3) as client:
        began = time.monotonic()
        stalled = await _scripted(client, "stall").stream(GenerationRequest("x", 4))
        assert stalled.error == "ReadTimeout" and stalled.events == 1
        assert 0.3 <= time.monotonic() - began < 2.0
        fine = await _scripted(client, "tgi").stream(GenerationRequest("x", 4))
        assert fine.ok and fine.events == 4
        # a cancellation by the caller is not swallowed
        task = asyncio.ensure_future(_scripted(client, "stall").stream(GenerationRequest("x", 4)))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_unknown_api_names_the_choices():
    with pytest.raises(BenchError, match="api.*tgi, completions, chat"):
        make_client("grpc", "http://x")
