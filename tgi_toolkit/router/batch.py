"""What moves through the router: a queue entry, its share of a forward (a row), and the forward."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tgi_toolkit.router.blocks import Allocation


@dataclass(eq=False)
class Entry:
    """A validated request (one segment of it), from the queue to its last token."""

    input_ids: list[int]
    max_new_tokens: int
    request: Any = None  # the engine's own per-request state (sampling, stopping, output sink)
    lookup: bool = True  # False for decoder_input_details requests: no prefix-cache lookup or insert
    id: int = 0
    queued_at: float = 0.0
    batched_at: float | None = None
    cancelled: bool = False  # the client went away
    finished: bool = False
    failed: bool = False  # a forward it was in raised: its KV is not to be trusted
    allocation: Allocation | None = None
    prefix_len: int = 0  # prompt tokens whose KV came from the prefix cache at admission
    cache_len: int = 0  # prompt (and generated) tokens whose KV is present
    chunk: int = 0  # tokens this entry computes in the next forward
    generated: int = 0  # tokens emitted
    # L5/L6: a request asking for more than SEGMENT_TOKENS new tokens runs as segments of at most
    # that many; `max_total_new_tokens` is what is left of the whole request when this segment starts.
    max_total_new_tokens: int | None = None
    output_ids: list[int] = field(default_factory=list)  # the backend appends each token it chooses

    @property
    def input_length(self) -> int:
        return len(self.input_ids)

    @property
    def prefilling(self) -> bool:
        return self.cache_len < self.input_length

    @property
    def reserved_tokens(self) -> int:
        """Tokens of KV the entry holds: its blocks times the block size, or input + max_new_tokens."""
        if self.allocation is not None:
            return len(self.allocation.slots)
        return self.input_length + self.max_new_tokens


@dataclass
class Row:
    """One entry's share of a forward: `length` tokens at positions `start...`."""

    entry: Entry
    start: int
    length: int
    emits: bool  # a decoding row, or the final chunk of a prompt: the forward yields its next token

    @property
    def prompt(self) -> bool:
        return self.start < self.entry.input_length


@dataclass
class Forward:
    rpc: str  # TGI's RPC, as metrics label it: "prefill" or "decode" (a Decode can still carry a chunk, S8)
    rows: list[Row]

    @property
    def tokens(self) -> int:
        return sum(row.length for row in self.rows)

    @property
    def prefilling(self) -> bool:
        return any(row.prompt for row in self.rows)

    @property
    def entries(self) -> list[Entry]:
        return [row.entry for row in self.rows]



# L5: TGI's DEFAULT_GENERATION_LENGTH, the most new tokens one queue entry reserves.
SEGMENT_TOKENS = 1024


def segment(input_ids: list[int], max_new_tokens: int, **kwargs: Any) -> Entry:
    """The first queue entry of a request: its segment reserves at most SEGMENT_TOKENS new tokens."""
    return Entry(input_ids, min(max_new_tokens, SEGMENT_TOKENS), max_total_new_tokens=max_new_tokens, **kwargs)


