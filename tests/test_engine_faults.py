"""The engine under faults, in process with a stand-in model: a dead compute side is never silent."""

from __future__ import annotations

import asyncio
import threading

import httpx

from tests.conftest import in_process_api
from tgi_toolkit.engine.events import Delivery, Event, GenerationError, Token
from tgi_toolkit.engine.infer import Engine
from tgi_toolkit.router import Forward, SchedulerConfig


class WordTokenizer:
    chat_template = None

    def __call__(self, text: str, add_special_tokens: bool = True, **_: object) -> dict[str, list[int]]:
        return {"input_ids": [len(word) for word in text.split()]}


class DyingModel:
    """Serves tokens until `die` is set; then its next forward raises what no forward handler catches
    (a BaseException, as a broken native library or an interpreter shutdown would)."""

    def __init__(self) -> None:
        self.die = threading.Event()
        self.deliver = Delivery()
        self.forwards = 0

    def forward(self, forward: Forward) -> None:
        self.forwards += 1
        if self.die.is_set():
            raise SystemExit("the compute side is gone")
        events = []
        for row in forward.rows:
            if row.emits:
                state = row.entry.request
                events.append((state.emit, Event(row.entry.generated, Token(1, "a", -0.1, False), [])))
        self.deliver(events)

    def release(self, entry) -> None:
        pass


async def test_when_the_compute_side_dies_health_fails_and_every_request_ends_with_an_error():
    model = DyingModel()
    engine, api = in_process_api(model, WordTokenizer())
    deaths: list[BaseException] = []
    engine.on_death = deaths.append
    engine.start()
    body = {"inputs": "a long running request", "parameters": {"max_new_tokens": 900}}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://engine",
                                 timeout=30) as client:
        assert (await client.get("/health")).status_code == 200
        running = [asyncio.create_task(client.post("/generate", json=body)) for _ in range(3)]
        while model.forwards < 5:
            await asyncio.sleep(0.01)
        model.die.set()
        answers = await asyncio.wait_for(asyncio.gather(*running), 20)  # nothing hangs
        assert [a.status_code for a in answers] == [424] * 3
        assert all(a.json()["error_type"] == "generation" for a in answers)
        health = await client.get("/health")
        assert health.status_code == 503 and health.json() == {"error": "unhealthy", "error_type": "healthcheck"}
        late = await client.post("/generate", json=body)  # after the death: refused at once, not queued
        assert late.status_code == 424
    for _ in range(500):  # the owner is told right after the requests (on the compute thread)
        if deaths:
            break
        await asyncio.sleep(0.01)
    assert len(deaths) == 1 and isinstance(deaths[0], SystemExit) and engine.failure is deaths[0]
    engine.stop()


def test_submit_after_death_raises_a_generation_error():
    engine = Engine(DyingModel(), SchedulerConfig(max_batch_prefill_tokens=100, max_batch_total_tokens=1000))
    engine.failure = SystemExit("gone")
    try:
        engine.submit(None, lambda event: None)
    except GenerationError as exc:
        assert "compute side died" in str(exc)
    else:
        raise AssertionError("submit accepted a request with no compute side")


class ChatTokenizer(WordTokenizer):
    chat_template = "{{ messages }}"

    def apply_chat_template(self, messages, tokenize: bool = False, add_generation_prompt: bool = True) -> str:
        return " ".join(m["content"] for m in messages)


async def test_a_content_part_whose_text_is_not_a_string_is_a_422_not_a_500():
    # Found by schemathesis driving TGI's spec: the text parts were joined as they came.
    _, api = in_process_api(DyingModel(), ChatTokenizer())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://engine") as client:
        for text in (5, {"a": 1}, [None]):
            answer = await client.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}]})
            assert answer.status_code == 422 and answer.json()["error_type"] == "validation", answer.text
