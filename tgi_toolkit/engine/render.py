"""Response rendering: the engine's tokens and finishes as TGI's and OpenAI's JSON, headers and SSE events,
apart from the routes that send them."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from tgi_toolkit.engine.events import Finish, Token


# -- response rendering ---------------------------------------------------------------------------
def token_json(t: Token) -> dict[str, Any]:
    return {"id": t.id, "text": t.text, "logprob": t.logprob, "special": t.special}


def details_json(finish: Finish, best_of: list[Finish] | None = None) -> dict[str, Any]:
    details: dict[str, Any] = {
        "finish_reason": finish.reason,
        "generated_tokens": finish.generated_tokens,
        "seed": finish.seed,
        "prefill": [{"id": t.id, "text": t.text, "logprob": t.logprob} for t in finish.prefill],
        "tokens": [token_json(t) for t in finish.tokens],
    }
    if any(finish.top_tokens):
        details["top_tokens"] = [[token_json(t) for t in top] for top in finish.top_tokens]
    if best_of:
        details["best_of_sequences"] = [
            {"generated_text": f.generated_text, "finish_reason": f.reason,
             "generated_tokens": f.generated_tokens, "seed": f.seed,
             "prefill": [{"id": t.id, "text": t.text, "logprob": t.logprob} for t in f.prefill],
             "tokens": [token_json(t) for t in f.tokens]}
            for f in best_of
        ]
    return details


def timing_headers(finish: Finish, started: float, validated: float) -> dict[str, str]:
    total = time.perf_counter() - started
    per_token = finish.inference / max(finish.generated_tokens, 1)
    return {
        "x-compute-type": "cpu",
        "x-compute-time": f"{total}",
        "x-total-time": str(int(total * 1000)),
        "x-validation-time": str(int((validated - started) * 1000)),
        "x-queue-time": str(int(finish.queued * 1000)),
        "x-inference-time": str(int(finish.inference * 1000)),
        "x-time-per-token": str(int(per_token * 1000)),
        "x-prompt-tokens": str(finish.input_length),
        "x-generated-tokens": str(finish.generated_tokens),
    }


def sse(data: Any) -> bytes:
    # TGI (axum) writes `data:` with no space; clients accept both. orjson, as serde_json: compact,
    # UTF-8 rather than \u escapes, null for a non-finite float.
    return b"data:" + orjson.dumps(data) + b"\n\n"


OPENAI_FINISH = {"length": "length", "eos_token": "stop", "stop_sequence": "stop"}


def openai_logprob(token: Token, top: list[Token]) -> dict[str, Any]:
    return {"token": token.text, "logprob": token.logprob,
            "top_logprobs": [{"token": t.text, "logprob": t.logprob} for t in top]}


async def single_event(chunk: bytes) -> AsyncIterator[bytes]:
    """A stream of one SSE event (an error met before the first token)."""
    yield chunk
