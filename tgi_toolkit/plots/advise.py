"""Cost against latency for the deployments `advise` ranked: which are worth considering at all (the Pareto set:
none other is both cheaper and faster), with each prediction's error bars where its error is known."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tgi_toolkit import schema as S
from tgi_toolkit.pareto import pareto_front
from tgi_toolkit.plots._common import color_map, layout, note, require_columns

COST = "cost_per_million_tokens"


def cost_latency(table: pd.DataFrame, *, percentile: str = "p90", latency: str = "ttft",
                 objectives: Mapping[str, Any] | None = None, currency: str = "USD") -> go.Figure:
    """Cost per million output tokens (y) against the predicted `latency` ('ttft' or 'tpot') at `percentile` (x),
    one marker per candidate coloured by GPU kind; the Pareto set joined by a line and listed in its trace's
    name; x error bars from the regime's cross-validated error and y bars from the cost band, where known;
    the objective's limit as a dashed vertical line."""
    if latency not in ("ttft", "tpot"):
        raise ValueError(f"latency must be 'ttft' or 'tpot'; got {latency!r}")
    x = S.stat_column(latency, percentile)
    fig = go.Figure()
    title = f"Cost against {latency.upper()} {percentile}"
    subtitle = "the cheapest deployments that meet the objectives (stars: the Pareto set)"
    if table is None or table.empty:
        return note(layout(fig, title, subtitle=subtitle), "no candidate meets the objectives")
    require_columns(table, ["candidate", "gpu", COST, "cost_low", "cost_high", x], "cost_latency")
    df = table.reset_index(drop=True).copy()
    df["pareto"] = pareto_front(df, x, COST, maximize_x=False, minimize_y=True)
    errors = pd.to_numeric(df.get(f"{latency}_relative_error"), errors="coerce") if f"{latency}_relative_error" \
        in df else pd.Series(np.nan, index=df.index)
    colours = color_map(df["gpu"])
    for gpu, group in df.groupby("gpu", sort=False):
        err = errors.loc[group.index]
        cost = group[COST].astype(float)
        fig.add_scatter(
            x=group[x], y=cost, mode="markers+text", name=str(gpu), text=group["candidate"], textposition="top center",
            marker={"size": 12, "color": colours[gpu], "symbol": ["star" if p else "circle" for p in group["pareto"]],
                    "line": {"width": 1, "color": "#333"}},
            error_x={"type": "data", "array": (group[x] * err).fillna(0).tolist(), "visible": bool(err.notna().any())},
            error_y={"type": "data", "symmetric": False,
                     "array": (group["cost_high"].replace(np.inf, np.nan) - cost).fillna(0).tolist(),
                     "arrayminus": (cost - group["cost_low"]).fillna(0).tolist()},
            customdata=np.stack([group["replicas"], group["gpus"], group["settings"]], axis=-1)
            if {"replicas", "gpus", "settings"} <= set(group) else None,
            hovertemplate=(f"%{{text}}<br>{latency.upper()} {percentile} %{{x:.3g}} s<br>%{{y:.3g}} {currency} per "
                           "million output tokens<br>%{customdata[0]} replica(s), %{customdata[1]} GPU(s)<br>"
                           "%{customdata[2]}<extra></extra>"))
    front = df[df["pareto"]].sort_values(x)
    fig.add_scatter(x=front[x], y=front[COST], mode="lines", line={"dash": "dot", "color": "#555"},
                    name="Pareto set: " + ", ".join(front["candidate"]), hoverinfo="skip")
    limit = (objectives or {}).get(f"{latency}_s")
    if limit:
        fig.add_vline(x=float(limit), line_dash="dash", line_color="#c00",
                      annotation_text=f"{latency.upper()} objective {float(limit):g} s")
    return layout(fig, title, "GPU kind", subtitle=subtitle,
                  xaxis_title=f"predicted {latency.upper()} {percentile} (s)",
                  yaxis_title=f"{currency} per million output tokens")
