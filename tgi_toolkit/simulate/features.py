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

    def vector(self) -> list[float]:
        return [1.0, float(self.prefilling), float(self.tokens), float(self.rows), float(self.context),
                float(self.pairs)]
