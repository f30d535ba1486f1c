"""Pareto selection: the rows of a table that no other row beats on both of two columns. Below both tune (which
configurations are worth keeping) and plots (the frontier drawn), so neither imports the other for it."""

from __future__ import annotations

import numpy as np
import pandas as pd


def pareto_front(df: pd.DataFrame, x: str, y: str, *, maximize_x: bool = True, minimize_y: bool = True) -> pd.Series:
    """True for the rows no other row dominates (at least as good on both, better on one).

    Rows with NaN in x or y are never on the front. Exact duplicates of a front point are on it too.
    O(n log n): sort best-x first; a row is on the front when its y beats every row with strictly better x.
    """
    missing = [c for c in (x, y) if c not in df.columns]
    if missing:
        raise ValueError(f"pareto_front: missing column(s) {', '.join(missing)} "
                         f"(the table has: {', '.join(map(str, df.columns)) or 'no columns'})")
    a = pd.to_numeric(df[x], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    b = pd.to_numeric(df[y], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    a = a if maximize_x else -a  # from here on, larger is better on both
    b = -b if minimize_y else b
    on_front = np.zeros(len(df), dtype=bool)
    valid = np.flatnonzero(np.isfinite(a) & np.isfinite(b))
    order = valid[np.lexsort((-b[valid], -a[valid]))]  # by a descending, then b descending
    best_b = -np.inf  # best b among rows with strictly larger a
    i = 0
    while i < order.size:
        j = i
        while j < order.size and a[order[j]] == a[order[i]]:
            j += 1
        group = order[i:j]
        top = b[group[0]]  # the group's best b (sorted first)
        if top > best_b:  # dominated by nothing with larger a; within the group only the best b survive
            on_front[group[b[group] == top]] = True
        best_b = max(best_b, top)
        i = j
    return pd.Series(on_front, index=df.index, name="pareto")
