"""The features one forward is priced from, below every cost model (tgi_toolkit.costs.linear's calibrated model,
tgi_toolkit.simulate.gpu's roofline); the engine's forward trace (tgi_toolkit.engine.metrics) writes the same
features beside each forward's measured seconds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Shape:
    """The features of one forward that a cost model prices."""

    rows: int
    tokens: int
    context: int
    pairs: float
    prefilling: bool

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
    tokens = context = 0
    pairs = 0.0
    for row in rows:
        tokens += row.length
        context += row.start + row.length
        pairs += row_pairs(row.start, row.length)
    prefilling = bool(getattr(forward, "prefilling", any(r.length > 1 for r in rows)))
    return Shape(len(rows), tokens, context, pairs, prefilling)
