"""What a request yields: its token events, its final `Finish` and its generation error. The backend makes them,
the engine streams them, the API renders them; kept apart so those share them without importing one another."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Token:
    id: int
    text: str
    logprob: float | None
    special: bool


@dataclass
class Finish:
    reason: str  # "length" | "eos_token" | "stop_sequence"
    generated_text: str
    generated_tokens: int
    seed: int | None
    input_length: int
    queued: float  # seconds in the queue
    inference: float  # seconds from batching to the last token
    prefill: list[Token] = field(default_factory=list)
    tokens: list[Token] = field(default_factory=list)
    top_tokens: list[list[Token]] = field(default_factory=list)
    logprob_sum: float = 0.0


@dataclass
class Event:
    index: int
    token: Token
    top_tokens: list[Token]
    finish: Finish | None = None


class GenerationError(RuntimeError):
    """The model failed mid-request (TGI's 424 `generation`)."""
