"""A run's prompts (`RunPrompts`): each point's token-exact prompts, and the check that the server counts a
built prompt's tokens as asked (pitfall 2); apart from sending so that the prompt rules read in one place."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

from tgi_toolkit.bench.client import GenerationRequest
from tgi_toolkit.bench.errors import BenchError
from tgi_toolkit.bench.prompts import PromptFactory, make_tokenizer
from tgi_toolkit.bench.run_record import RunRecord
from tgi_toolkit.bench.run_requests import Sender

# The prompt index of the length check's own request (measured prompts are 0, 1, ...).
CHECK_PROMPT_INDEX = -1

T = TypeVar("T")


def tokenizer_name(tokenizer: Any) -> str | None:
    """A name for the tokenizer option that stays the same from one session to the next (it is part of the
    resume key)."""
    if tokenizer is None or isinstance(tokenizer, (str, Path)):
        return None if tokenizer is None else str(tokenizer)
    return str(getattr(tokenizer, "name_or_path", None) or getattr(tokenizer, "name", None) or type(tokenizer).__name__)


class RunPrompts:
    """What a run sends as text, complete when built: the prompt options (a tokenizer, the seed, a shared prefix,
    a dataset), whether a server counting prompt tokens its own way is accepted, the sender whose server counts
    them and the record whose salt makes every run's prompts new. `factory()` builds the PromptFactory on first
    use (it may ask the server's /tokenize) and records it in the provenance."""

    def __init__(self, sender: Sender, record: RunRecord, *, tokenizer: Any = None, seed: int = 0,
                 prefix_tokens: int = 0, dataset: str | Path | None = None, accept_server_count: bool = False) -> None:
        self.sender, self.record = sender, record
        self.tokenizer, self.seed, self.prefix_tokens, self.dataset = tokenizer, seed, prefix_tokens, dataset
        # A server that counts prompt tokens its own way (another tokenizer, words, ...): keep the
        # prompts, record its count (input_tokens) and the difference instead of refusing to run.
        self.accept_server_count = bool(accept_server_count)
        self.built: PromptFactory | None = None
        self.checked_lengths: set[int] = set()

    def options(self) -> dict[str, Any]:
        """The prompt options as the run's workload records them (part of its resume key)."""
        return {"seed": self.seed, "prefix_tokens": self.prefix_tokens,
                "dataset": str(self.dataset) if self.dataset is not None else None,
                "tokenizer": tokenizer_name(self.tokenizer)}

    async def factory(self, with_prefix: bool = True) -> PromptFactory:
        """The run's PromptFactory, built on first use (with_prefix=False: without the shared prefix, for the
        workloads of scenarios.plans, which build their own shared text)."""
        if self.built is None:
            t = self.sender.target
            tok = await asyncio.to_thread(make_tokenizer, t.url, self.tokenizer, api_key=t.api_key, model=t.model_name)
            prefix = {"prefix_tokens": self.prefix_tokens} if with_prefix else {}
            self.built = PromptFactory(tok, seed=self.seed, dataset=self.dataset, **prefix)
            self.record.provenance["prompts"] = self.built.describe()
        return self.built

    @property
    def tokenizer_label(self) -> str:
        """The tokenizer's name in an error message."""
        return self.built.tokenizer.name if self.built is not None else "the tokenizer"

    async def build(self, make: Callable[[], T]) -> T:
        """Call a text builder off the event loop; the server's /tokenize failing is a clear error (or the
        server's death)."""
        try:
            return await asyncio.to_thread(make)
        except httpx.HTTPError as exc:
            if not await asyncio.to_thread(self.sender.target.alive):
                raise self.sender.died(f"{type(exc).__name__}: {exc}", None) from exc
            raise BenchError("tokenizer", f"{self.built.tokenizer.name if self.built else 'tokenizer'}: {exc}") from exc

    async def prompt_list(self, length: int, n: int, point_id: str) -> list[str]:
        """`n` distinct token-exact prompts of `length` tokens for one point, none of them sent before by
        this run or an earlier one (built off the event loop)."""
        prompts = await self.factory()
        salt = self.record.prompt_salt

        def make() -> tuple[list[str], str | None]:
            measured = prompts.prompts(length, n, f"{salt}:{point_id}")
            # The length check sends a prompt of its own (index -1, never measured): a server with a
            # prefix cache (TGI 3, vLLM) would answer a measured prompt it had just seen from its cache.
            probe = None if length in self.checked_lengths else prompts.prompt(length, CHECK_PROMPT_INDEX, salt)
            return measured, probe

        built, probe = await self.build(make)
        if probe is not None:
            await self.check_length(probe, length)
        return built

    async def check_length(self, prompt: str, length: int) -> None:
        """The server's own count of a built prompt must be the requested length (pitfall 2)."""
        if length in self.checked_lengths:
            return
        # with the run's ignore_eos: a server that serves only benchmark requests (random weights) answers it too
        sender = self.sender
        record = await sender.client.stream(GenerationRequest(prompt, 1, sender.ignore_eos, sampling={}))
        await sender.check_record(record, None)
        if record.error is not None:
            raise BenchError("prompt_tokens", f"the server refused a prompt of {length} tokens: "
                                              f"{record.error}: {record.error_message}")
        reported = record.input_tokens
        check = "unverified (the server reports no input length)" if reported is None else int(reported)
        if sender.target.api == "chat":
            check = f"{reported} (includes the chat template)"
        elif reported is not None and reported != length and self.accept_server_count:
            check = f"{int(reported)} by the server's own count (accepted; asked {length})"
        elif reported is not None and reported != length:
            raise BenchError("tokenizer", f"a prompt of {length} tokens by {self.tokenizer_label} is "
                                          f"{reported} tokens for the server",
                             "the server's own tokenizer (no --tokenizer-name) or the served model's; or "
                             "--accept-server-count to measure with the server's count")
        self.record.provenance["prompt_check"][str(length)] = check
        self.checked_lengths.add(length)

    def close(self) -> None:
        """Close the tokenizer when it holds a connection (the server's /tokenize)."""
        tokenizer = getattr(self.built, "tokenizer", None)
        if hasattr(tokenizer, "close"):
            tokenizer.close()
