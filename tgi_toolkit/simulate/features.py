"""The features one forward is priced from, below every cost model (tgi_toolkit.simulate.costs' linear model,
tgi_toolkit.simulate.gpu's roofline) so that each can name them and the loader can build either."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """The features of one forward that a cost model prices."""

    rows: int
    tokens: int
    context: int
    pairs: float
    prefilling: bool

    def vector(self, free_tokens: int = 0) -> list[float]:
        """The linear model's features (costs.TERMS order); tokens beyond `free_tokens` only (the knee)."""
        return [1.0, float(self.prefilling), float(max(self.tokens - free_tokens, 0)), float(self.rows),
                float(self.context), float(self.pairs)]
