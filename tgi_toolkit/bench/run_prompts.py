"""A run's prompts (`RunPrompts`): each point's token-exact prompts, and the check that the server counts a
built prompt's tokens as asked (pitfall 2); apart from sending so that the prompt rules read in one place."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tgi_toolkit.bench.client import GenerationRequest
from tgi_toolkit.bench.errors import BenchError
from tgi_toolkit.bench.prompts import PromptFactory, make_tokenizer
from tgi_toolkit.bench.run_requests import RunRequests

# The prompt index of the length check's own request (measured prompts are 0, 1, ...).
CHECK_PROMPT_INDEX = -1


class RunPrompts(RunRequests):
    """Prompts for a run's points (run.Run sets `prompts`, `prompt_options`, `prompt_salt`, `provenance`, ...)."""

    prompts: PromptFactory | None
    prompt_options: dict[str, Any]
    prompt_salt: str
    provenance: dict[str, Any]
    accept_server_count: bool
    _checked_lengths: set[int]

    async def prompt_list(self, length: int, n: int, point_id: str) -> list[str]:
        """`n` distinct token-exact prompts of `length` tokens for one point, none of them sent before by
        this run or an earlier one (built off the event loop)."""
        if self.prompts is None:
            t = self.target
            tok = await asyncio.to_thread(make_tokenizer, t.url, self.prompt_options["tokenizer"],
                                          api_key=t.api_key, model=t.model_name)
            opts = self.prompt_options
            self.prompts = PromptFactory(tok, seed=opts["seed"], prefix_tokens=opts["prefix_tokens"],
                                         dataset=opts["dataset"])
            self.provenance["prompts"] = self.prompts.describe()
        try:
            prompts = await asyncio.to_thread(self.prompts.prompts, length, n, f"{self.prompt_salt}:{point_id}")
            # The length check sends a prompt of its own (index -1, never measured): a server with a
            # prefix cache (TGI 3, vLLM) would answer a measured prompt it had just seen from its cache.
            probe = None if length in self._checked_lengths else \
                await asyncio.to_thread(self.prompts.prompt, length, CHECK_PROMPT_INDEX, self.prompt_salt)
        except httpx.HTTPError as exc:  # the server's /tokenize did not answer
            if not await asyncio.to_thread(self.target.alive):
                raise self._died(f"{type(exc).__name__}: {exc}", None) from exc
            raise BenchError("tokenizer", f"{self.prompts.tokenizer.name}: {exc}") from exc
        if probe is not None:
            await self._check_length(probe, length)
        return prompts

    async def _check_length(self, prompt: str, length: int) -> None:
        """The server's own count of a built prompt must be the requested length (pitfall 2)."""
        if length in self._checked_lengths:
            return
        # with the run's ignore_eos: a server that serves only benchmark requests (random weights) answers it too
        record = await self.client.stream(GenerationRequest(prompt, 1, self.ignore_eos, sampling={}))
        await self.check_record(record, None)
        if record.error is not None:
            raise BenchError("prompt_tokens", f"the server refused a prompt of {length} tokens: "
                                              f"{record.error}: {record.error_message}")
        reported = record.input_tokens
        check = "unverified (the server reports no input length)" if reported is None else int(reported)
        if self.target.api == "chat":
            check = f"{reported} (includes the chat template)"
        elif reported is not None and reported != length and self.accept_server_count:
            check = f"{int(reported)} by the server's own count (accepted; asked {length})"
        elif reported is not None and reported != length:
            raise BenchError("tokenizer", f"a prompt of {length} tokens by {self.prompts.tokenizer.name} is "
                                          f"{reported} tokens for the server",
                             "the server's own tokenizer (no --tokenizer-name) or the served model's; or "
                             "--accept-server-count to measure with the server's count")
        self.provenance["prompt_check"][str(length)] = check
        self._checked_lengths.add(length)
