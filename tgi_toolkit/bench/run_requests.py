"""Sending a run's requests (`RunRequests`, `gather_all`): a lost connection may mean the server died,
which stops the run; apart from prompts and rows so that the server-death check reads in one place."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterable
from pathlib import Path
from typing import Any

from tgi_toolkit.bench.client import GenerationRequest, StreamRecord
from tgi_toolkit.bench.errors import ServerDiedError
from tgi_toolkit.bench.target import Target

# Errors the client raised itself (no answer, connection lost) rather than ones the server sent.
LOST = {"ClientConnectorError", "ServerDisconnectedError", "ClientPayloadError", "ClientOSError",
        "ClientConnectionResetError", "ConnectionResetError", "incomplete_stream"}


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



class RunRequests:
    """A run's requests through its client (run.Run sets `target`, `client`, `ignore_eos`, `sampling`, ...)."""

    target: Target
    client: Any
    ignore_eos: bool
    sampling: dict[str, Any]
    finished: set[str]
    total_points: int
    output: Path | None
    _alive_at: float
    _alive_lock: asyncio.Lock

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
        async with self._alive_lock:
            if time.monotonic() - self._alive_at < 1.0:
                return  # checked a moment ago: it was alive
            alive = await asyncio.to_thread(self.target.alive)
            if alive:
                self._alive_at = time.monotonic()
                return
        raise self._died(f"{record.error}: {record.error_message}", point_id)

    def _died(self, message: str, point_id: str | None) -> ServerDiedError:
        return ServerDiedError(message, url=self.target.url, point_id=point_id, finished=len(self.finished),
                               total=self.total_points, output=self.output)

