"""How much load one replica sustains: the highest request rate (or number of users) at which the simulated
server still meets the objectives at the percentile, found by bisection.

1. Bracket: from a starting load (evaluate.first_guess), multiply (or divide) by 2 until one load meets the
   objectives and the next does not. A load meets them when tune.select.evaluate_points says so: TTFT and
   TPOT at the percentile within the limits, no failed request. Below a load at which requests run alone
   (ALONE), a lower one cannot help: the candidate cannot meet the objectives at all.
2. Bisect geometrically until the bracket is within `precision` (10 %): the sustained load is its lower end,
   a load that was simulated and met the objectives (for users, integers: until the ends are adjacent).
3. The band: the same search against the objectives tightened by the prediction's error (limits / (1 + e):
   the server is e slower than predicted) and loosened (limits / (1 - e)), reusing every load already simulated;
   this is what the tie rule compares.
Every simulated load is memoized, so the band costs a few more simulations, not a search each.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from tgi_toolkit import schema as S
from tgi_toolkit.tune.select import MEETS, Objectives, evaluate_points

FACTOR = 2.0
PRECISION = 1.1
MAX_PROBES = 40
# Below this many requests in flight on average (rate x median end-to-end latency) requests run alone: a lower
# rate cannot lower the latency any more, so a load that still misses the objectives there means none will.
ALONE = 0.05


@dataclass
class Probes:
    """Simulated loads and their point rows; `run(load)` simulates a load once."""

    simulate: Callable[[float], dict[str, Any]]
    integer: bool = False
    rows: dict[float, dict[str, Any]] = field(default_factory=dict)

    def key(self, load: float) -> float:
        return float(int(load)) if self.integer else float(f"{load:.4g}")

    def run(self, load: float) -> dict[str, Any]:
        load = self.key(load)
        if load not in self.rows:
            if len(self.rows) >= MAX_PROBES:
                raise RuntimeError(f"capacity search: more than {MAX_PROBES} loads simulated without a bracket")
            self.rows[load] = self.simulate(load)
        return self.rows[load]

    def meets(self, load: float, objectives: Objectives) -> bool:
        return meets(self.run(load), objectives)


def meets(row: dict[str, Any], objectives: Objectives) -> bool:
    """The tuner's rule (tune.select.evaluate_points) on one point row."""
    return bool(evaluate_points(pd.DataFrame([row]), objectives)[MEETS].iloc[0])


def scaled(objectives: Objectives, factor_ttft: float, factor_tpot: float) -> Objectives:
    """The limits divided by (1 + error): what the predictions must meet if the server is that much slower."""
    return Objectives(ttft_s=objectives.ttft_s / factor_ttft if objectives.ttft_s else None,
                      tpot_s=objectives.tpot_s / factor_tpot if objectives.tpot_s else None,
                      percentile=objectives.percentile, max_error_rate=objectives.max_error_rate)


def _middle(lo: float, hi: float, integer: bool) -> float:
    return float((int(lo) + int(hi)) // 2) if integer else math.sqrt(lo * hi)


def _done(lo: float, hi: float, integer: bool, precision: float) -> bool:
    return hi - lo <= 1 if integer else hi / lo <= precision


def sustained(probes: Probes, objectives: Objectives, start: float, *, precision: float = PRECISION,
              floor: float | None = None, ceiling: float | None = None) -> float | None:
    """The highest load meeting `objectives` (within `precision`), or None when even the floor fails; a load at
    or above `ceiling` that meets them ends the search there (the answer is then a lower bound).

    Loads already simulated narrow the bracket first, so a second search (the band) starts where the first ended.
    """
    integer = probes.integer
    floor = (1.0 if integer else 1e-3) if floor is None else floor
    good = [x for x in probes.rows if meets(probes.rows[x], objectives)]
    bad = [x for x in probes.rows if not meets(probes.rows[x], objectives)]
    lo = max(good, default=None)
    hi = min((x for x in bad if lo is None or x > lo), default=None)
    x = start if lo is None and hi is None else None
    while lo is None or hi is None:  # bracket
        if ceiling is not None and lo is not None and lo >= ceiling:
            return lo
        if x is None:
            x = lo * FACTOR if hi is None else hi / FACTOR  # type: ignore[operator]
            if integer:
                x = max(floor, float(math.ceil(x) if hi is None else math.floor(x)))
        x = probes.key(x)
        if not integer and hi is not None and hi * float(probes.rows[hi].get(S.stat_column("e2e", "p50")) or 0) < ALONE:
            return None  # the failing load already ran its requests alone
        if x < floor or (integer and hi is not None and x >= hi):
            if probes.meets(floor, objectives):
                lo = floor
                break
            return None
        if probes.meets(x, objectives):
            lo = x
        else:
            hi = x
        x = None
    while hi is not None and not _done(lo, hi, integer, precision):
        middle = probes.key(_middle(lo, hi, integer))
        if middle in (lo, hi):
            break
        if probes.meets(middle, objectives):
            lo = middle
        else:
            hi = middle
    return lo


def band(probes: Probes, objectives: Objectives, errors: tuple[float | None, float | None],
         nominal: float, ceiling: float | None = None) -> tuple[float, float] | None:
    """(low, high) sustained load if TTFT and TPOT were off by their errors; None when no error is known.
    `ceiling` stops the searches as it stopped the nominal one."""
    ttft, tpot = errors
    if ttft is None and tpot is None:
        return None
    e1, e2 = ttft or 0.0, tpot or 0.0
    slow = sustained(probes, scaled(objectives, 1 + e1, 1 + e2), nominal, ceiling=ceiling)
    fast = sustained(probes, scaled(objectives, max(1 - e1, 0.05), max(1 - e2, 0.05)), nominal, ceiling=ceiling)
    return (slow or 0.0, fast if fast is not None else nominal)
