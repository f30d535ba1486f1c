"""/metrics follows the queue as requests arrive and leave it, before any scheduler step."""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import in_process_api


class WordTokenizer:
    chat_template = None

    def __call__(self, text: str, add_special_tokens: bool = True, **_: object) -> dict[str, list[int]]:
        return {"input_ids": [len(word) for word in text.split()]}


class NoModel:
    """The scheduler is never started here: requests stay in the queue."""

    deliver = None

    def forward(self, forward) -> None:
        raise AssertionError("nothing is batched in this test")

    def release(self, entry) -> None:
        pass


def samples(text: str) -> dict[str, float]:
    return {s.name + str(sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def test_queue_size_changes_when_a_request_arrives_and_when_it_leaves():
    engine, api = in_process_api(NoModel(), WordTokenizer(), max_total_tokens=100)
    body = {"inputs": "a waiting request", "parameters": {"max_new_tokens": 4}}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://engine") as client:
        async def queue_size() -> float:
            return samples((await client.get("/metrics")).text)["tgi_queue_size[]"]

        assert await queue_size() == 0
        waiting = [asyncio.create_task(client.post("/generate", json=body)) for _ in range(2)]
        for _ in range(100):
            if await queue_size() == 2:
                break
            await asyncio.sleep(0.01)
        assert await queue_size() == 2  # counted on arrival: no step has run

        for task in waiting:  # the clients go away; TGI drops their entries when it next takes a batch
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        assert engine.scheduler.step() is False  # nothing left to batch
        after = samples((await client.get("/metrics")).text)
    assert after["tgi_queue_size[]"] == 0
    assert after["tgi_request_failure_total[('err', 'dropped')]"] == 2
