"""Sending a run's requests (`Sender`, `gather_all`): a lost connection may mean the server died, which stops
the run; apart from prompts and rows so that the server-death check reads in one place."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterable
from pathlib import Path
from typing import Any, Protocol

from tgi_toolkit.bench.client import GenerationRequest, StreamRecord, make_client
from tgi_toolkit.bench.errors import ServerDiedError
from tgi_toolkit.bench.target import Target

# Errors the client raised itself (no answer, connection lost) rather than ones the server sent.
LOST = {"ClientConnectorError", "ServerDisconnectedError", "ClientPayloadError", "ClientOSError",
        "ClientConnectionResetError", "ConnectionResetError", "incomplete_stream"}


class Progress(Protocol):
    """How far a run got (run_points.RunPoints): the points finished, out of how many."""

    finished: set[str]
    total: int


async def gather_all(aws: Iterable[Awaitable[Any]]) -> list[Any]:
    """Like asyncio.gather, but the first failure cancels the rest (no orphan requests)."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class Sender:
    """A run's requests to its server, complete when built: the target, its client (opened and closed by the
    run), what every request carries (ignore_eos, sampling), and the rule that a lost connection from a server
    no longer alive stops the run (`died`: that error, saying how far the run's `points` got and where the
    finished ones are saved, `output`)."""

    def __init__(self, target: Target, points: Progress, output: Path | None, *, ignore_eos: bool,
                 sampling: dict[str, Any], request_timeout: float = 600.0) -> None:
        self.target, self.points, self.output = target, points, output
        self.ignore_eos, self.sampling = ignore_eos, sampling
        self.client = make_client(target.api, target.url, api_key=target.api_key, model=target.model_name,
                                  read_timeout=request_timeout)
        self.alive_at = 0.0  # when the server was last found alive (one check a second at most)
        self.alive_lock = asyncio.Lock()

    def encode(self, prompt: str, max_new_tokens: int) -> bytes:
        return self.client.encode(GenerationRequest(prompt, max_new_tokens, self.ignore_eos, self.sampling))

    async def request(self, body: bytes, point_id: str | None = None, record: StreamRecord | None = None,
                      ) -> StreamRecord:
        record = await self.client.stream(body, record)
        await self.check_record(record, point_id)
        return record

    async def check_record(self, record: StreamRecord, point_id: str | None) -> None:
        """A request that lost its connection may mean the server died: then stop the run."""
        if record.error not in LOST:
            return
        async with self.alive_lock:
            if time.monotonic() - self.alive_at < 1.0:
                return  # checked a moment ago: it was alive
            alive = await asyncio.to_thread(self.target.alive)
            if alive:
                self.alive_at = time.monotonic()
                return
        raise self.died(f"{record.error}: {record.error_message}", point_id)

    def died(self, message: str, point_id: str | None) -> ServerDiedError:
        """The error that stops a run whose server died, with how far it got and where its results are."""
        return ServerDiedError(message, url=self.target.url, point_id=point_id, finished=len(self.points.finished),
                               total=self.points.total, output=self.output)
