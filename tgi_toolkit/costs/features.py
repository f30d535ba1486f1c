"""The features one forward is priced from, below every cost model (tgi_toolkit.costs.linear's calibrated model,
tgi_toolkit.costs.roofline's roofline); the engine's forward trace (tgi_toolkit.engine.metrics) writes the same
features beside each forward's measured seconds."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Shape:
    """The features of one forward that a cost model prices."""

    rows: int
    tokens: int
    context: int
    pairs: float
    prefilling: bool
    # the rows emitting one token after a cached context, and that context summed: a forward that chunks a
    # prompt into running decodes mixes two attention kernels, which the measured-kernel model prices apart.
    # Not compared: the linear model and the forward trace's readers price the five features above.
    decode_rows: float = field(default=0, compare=False)
    decode_context: float = field(default=0, compare=False)

    def vector(self, free_tokens: int = 0, token_tile: int = 1) -> list[float]:
        """The linear model's features (costs.TERMS order); tokens beyond `free_tokens` only (the knee), in
        whole tiles of `token_tile`."""
        return [1.0, float(self.prefilling), float(billed_tokens(self.tokens, free_tokens, token_tile)),
                float(self.rows), float(self.context), float(self.pairs)]


def billed_tokens(tokens: int, free_tokens: int = 0, token_tile: int = 1) -> int:
    """The tokens a forward pays for beyond the knee, rounded up to whole tiles: a matmul kernel computes rows in
    tiles (16 rows a tile in a CPU's bf16 AMX kernel), so 17 rows cost as much as 32."""
    return token_tile * math.ceil(max(tokens - free_tokens, 0) / token_tile)


def row_pairs(start: int, length: int) -> float:
    return length * start + length * (length + 1) / 2


def shape_of(forward: Any) -> Shape:
    """A scheduler Forward's features (rows with `start` and `length`; prefilling when any row computes
    prompt tokens)."""
    rows = forward.rows
    tokens = context = decode_rows = decode_context = 0
    pairs = 0.0
    for row in rows:
        tokens += row.length
        context += row.start + row.length
        pairs += row_pairs(row.start, row.length)
        if row.length == 1 and row.start > 0:
            decode_rows += 1
            decode_context += row.start + 1
    prefilling = bool(getattr(forward, "prefilling", any(r.length > 1 for r in rows)))
    return Shape(len(rows), tokens, context, pairs, prefilling, decode_rows, decode_context)
