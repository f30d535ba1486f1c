"""Figures of the prefix-cache and chunked-prefill workloads (scenarios.plans): TTFT with and without
a cached prefix, and how long running streams stall while a long prompt is prefilled.

Series are the configurations (CONFIG_LABEL) where several are present, else the runs; name two
result sets with `plots.label_sets({"chunked": a.requests, "not chunked": b.requests})`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tgi_toolkit import schema as S
from tgi_toolkit.plots._common import (
    axis_title,
    color_map,
    hover,
    layout,
    measured,
    note,
    number_format,
    require_columns,
    time_scale,
)
from tgi_toolkit.plots.labels import settings_hover, shorten_config_labels

FIRST, LATER = "first of its group (prefix computed)", "later requests (prefix cached)"


def _series(df: pd.DataFrame) -> pd.Series:
    """One label per row: the configuration where several are present (what differs between them,
    `shorten_config_labels`), else the run, else 'all'."""
    if S.CONFIG_LABEL in df.columns and df[S.CONFIG_LABEL].nunique(dropna=True) > 1:
        return shorten_config_labels(df)[0][S.CONFIG_LABEL].astype(str)
    if S.RUN_ID in df.columns and df[S.RUN_ID].nunique(dropna=True) > 1:
        return df[S.RUN_ID].astype(str)
    if S.CONFIG_LABEL in df.columns and df[S.CONFIG_LABEL].notna().any() and str(df[S.CONFIG_LABEL].iloc[0]):
        return df[S.CONFIG_LABEL].astype(str)
    return pd.Series("all", index=df.index)


def _settings(requests: pd.DataFrame, scenario: str) -> dict[str, str]:
    """Short series label -> the configuration's full label, for the hover text of `scenario`'s figure."""
    if S.CONFIG_LABEL not in requests.columns or S.SCENARIO not in requests.columns:
        return {}
    df = measured(requests, successful=True)
    return shorten_config_labels(df[df[S.SCENARIO] == scenario])[1]


def _quartiles(values: pd.Series) -> tuple[float, float, float]:
    v = pd.to_numeric(values, errors="coerce").dropna()
    if v.empty:
        return np.nan, np.nan, np.nan
    return float(v.quantile(0.5)), float(v.quantile(0.25)), float(v.quantile(0.75))


def ttft_table(requests: pd.DataFrame, scenario: str | None = None) -> pd.DataFrame:
    """Median TTFT (and p25, p75, count) per series and turn of a multi-turn or shared-prefix run.

    Columns: series, turn (0-based; shared prefix: 0 = a group's first request, the rest pooled as 1),
    requests, ttft_p50_s, ttft_p25_s, ttft_p75_s. Warm-ups and failed requests are left out."""
    df = measured(require_columns(requests, [S.TTFT_S, S.TURN, S.SCENARIO], "ttft_table"), successful=True)
    if scenario is not None:
        df = df[df[S.SCENARIO] == scenario]
    df = df[df[S.TURN].notna()]
    df = df.assign(_series=_series(df), _turn=df[S.TURN].astype(int))
    if scenario == "shared_prefix":
        df["_turn"] = df["_turn"].clip(upper=1)
    rows = []
    for (series, turn), part in df.groupby(["_series", "_turn"], sort=True):
        p50, p25, p75 = _quartiles(part[S.TTFT_S])
        rows.append({"series": series, S.TURN: turn, S.REQUESTS: len(part), "ttft_p50_s": p50, "ttft_p25_s": p25,
                     "ttft_p75_s": p75})
    return pd.DataFrame(rows, columns=["series", S.TURN, S.REQUESTS, "ttft_p50_s", "ttft_p25_s", "ttft_p75_s"])


def _bars(table: pd.DataFrame, factor: float) -> dict:
    return {"type": "data", "symmetric": False,
            "array": ((table["ttft_p75_s"] - table["ttft_p50_s"]) * factor).tolist(),
            "arrayminus": ((table["ttft_p50_s"] - table["ttft_p25_s"]) * factor).tolist()}


def ttft_by_turn(requests: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """TTFT of each turn of multi-turn conversations (median, p25-p75 bars), one line per series.

    With a prefix cache, turn t recomputes only the last answer and the new message, so TTFT stays
    flat while the prompt grows; without one it grows with the history. Needs TTFT_S, TURN, SCENARIO."""
    table = ttft_table(requests, "multi_turn")
    full = _settings(requests, "multi_turn")
    fig = go.Figure()
    layout(fig, title or "TTFT by conversation turn", "Series")
    factor, unit = time_scale(table["ttft_p50_s"])
    fig.update_xaxes(title_text="Turn (each resends the history)", dtick=1)
    fig.update_yaxes(title_text=axis_title(S.TTFT_S, unit), rangemode="tozero")
    if table.empty:
        return note(fig, "no multi-turn requests with a first token")
    colors = color_map(table["series"])
    for series, part in table.groupby("series", sort=False):
        x = (part[S.TURN] + 1).tolist()
        fig.add_trace(go.Scatter(
            x=x, y=(part["ttft_p50_s"] * factor).tolist(), mode="lines+markers", name=str(series),
            line={"color": colors[series]}, error_y=_bars(part, factor), customdata=part[S.REQUESTS].tolist(),
            hovertemplate=hover(f"<b>{series}</b>", "turn %{x}", f"TTFT p50 %{{y:{number_format(unit)}}} {unit}",
                                "requests %{customdata}", *settings_hover(full.get(series)))))
    return fig


def shared_prefix_ttft(requests: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """TTFT of a group's first request (its prefix computed) against its later ones (the prefix in
    the cache): median bars with p25-p75, one colour per series. Needs TTFT_S, TURN, SCENARIO."""
    table = ttft_table(requests, "shared_prefix")
    full = _settings(requests, "shared_prefix")
    fig = go.Figure()
    layout(fig, title or "TTFT with and without a cached shared prefix", "Series", barmode="group")
    factor, unit = time_scale(table["ttft_p50_s"])
    fig.update_yaxes(title_text=axis_title(S.TTFT_S, unit), rangemode="tozero")
    if table.empty:
        return note(fig, "no shared-prefix requests with a first token")
    colors = color_map(table["series"])
    for series, part in table.groupby("series", sort=False):
        x = [FIRST if t == 0 else LATER for t in part[S.TURN]]
        fig.add_trace(go.Bar(
            x=x, y=(part["ttft_p50_s"] * factor).tolist(), name=str(series), marker_color=colors[series],
            error_y=_bars(part, factor), customdata=part[S.REQUESTS].tolist(),
            hovertemplate=hover(f"<b>{series}</b>", "%{x}", f"TTFT p50 %{{y:{number_format(unit)}}} {unit}",
                                "requests %{customdata}", *settings_hover(full.get(series)))))
    return fig


def stall_gaps_table(requests: pd.DataFrame, repeat: int | None = 0) -> pd.DataFrame:
    """Every inter-token gap of the running streams of decode-stall rounds, on the long prompt's clock.

    Columns: series, repeat, stream, t_s (arrival of the gap's later token, seconds after the long
    prompt was sent), gap_s, and long_ttft_s (that round's long-prompt TTFT). `repeat`: one round
    (default the first measured), None for all."""
    cols = [S.GROUP, S.TURN, S.SENT_S, S.TTFT_S, S.ITL_S, S.REPEAT, S.SCENARIO, S.RUN_ID]
    df = measured(require_columns(requests, cols, "stall_gaps_table"), successful=True)
    df = df[df[S.SCENARIO] == "decode_stall"]
    if repeat is not None:
        df = df[df[S.REPEAT] == repeat]
    df = df.assign(_series=_series(df))
    rows = []
    for (series, rep, _run), part in df.groupby(["_series", S.REPEAT, S.RUN_ID], sort=True):
        long = part[part[S.GROUP] == 1]
        if long.empty or pd.isna(long[S.TTFT_S].iloc[0]):
            continue
        t0, long_ttft = float(long[S.SENT_S].iloc[0]), float(long[S.TTFT_S].iloc[0])
        for _, stream in part[part[S.GROUP] == 0].iterrows():
            t = float(stream[S.SENT_S]) + float(stream[S.TTFT_S]) - t0
            for gap in stream[S.ITL_S]:
                t += float(gap)
                rows.append({"series": series, S.REPEAT: int(rep), "stream": int(stream[S.TURN]), "t_s": t,
                             "gap_s": float(gap), "long_ttft_s": long_ttft})
    return pd.DataFrame(rows, columns=["series", S.REPEAT, "stream", "t_s", "gap_s", "long_ttft_s"])


def decode_stall(requests: pd.DataFrame, *, repeat: int | None = 0, title: str | None = None) -> go.Figure:
    """The running streams' inter-token gaps around a long prompt's arrival (decode-stall runs): one
    marker per gap at its later token's arrival, on the long prompt's clock (0 = sent), one colour per
    series; a dashed line marks each series' long-prompt first token. Without chunked prefill the
    streams wait for the whole prefill (one tall gap); with it each forward carries one chunk beside
    their decode tokens (several short ones). The x axis opens on the long prompts' wait; the gaps
    after it are drawn too (zoom out). Needs the decode-stall request columns."""
    table = stall_gaps_table(requests, repeat)
    full = _settings(requests, "decode_stall")
    fig = go.Figure()
    layout(fig, title or "Running streams while a long prompt joins: inter-token gaps", "Series")
    factor, unit = time_scale(table["gap_s"]) if not table.empty else (1000.0, "ms")
    fig.update_xaxes(title_text="Time since the long prompt was sent (s)")
    fig.update_yaxes(title_text=f"Gap between a stream's tokens ({unit})", rangemode="tozero")
    if table.empty:
        return note(fig, "no decode-stall rounds with a long-prompt first token")
    colors = color_map(table["series"])
    for series, part in table.groupby("series", sort=False):
        fig.add_trace(go.Scatter(
            x=part["t_s"].tolist(), y=(part["gap_s"] * factor).tolist(), mode="markers", name=str(series),
            marker={"color": colors[series], "size": 6, "opacity": 0.75}, customdata=part["stream"].tolist(),
            hovertemplate=hover(f"<b>{series}</b>", "stream %{customdata}", "t %{x:.3f} s",
                                f"gap %{{y:{number_format(unit)}}} {unit}", *settings_hover(full.get(series)))))
        for long_ttft in sorted(set(part["long_ttft_s"])):
            fig.add_vline(x=long_ttft, line={"color": colors[series], "dash": "dash", "width": 1})
    fig.add_vline(x=0, line={"color": "#888", "width": 1})
    # the streams go on long after the prefill: open on the long prompts' wait (zoom out to see the rest)
    last = float(table["long_ttft_s"].max())
    fig.update_xaxes(range=[-0.15 * last, 1.3 * last])
    return fig


def decode_stall_summary(points: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """Per series: the streams' largest and p99 gap while the long prompt waited, their usual gap
    before, and (second panel) the long prompt's TTFT. Needs the decode-stall point columns."""
    cols = [S.STALL_MAX_GAP_S, S.STALL_P99_GAP_S, S.STALL_BASELINE_GAP_S, S.LONG_PROMPT_TTFT_S, S.SCENARIO]
    df = require_columns(points, cols, "decode_stall_summary")
    df = df[df[S.SCENARIO] == "decode_stall"]
    df = df.assign(_series=_series(df))
    fig = make_subplots(rows=1, cols=2, column_widths=[0.65, 0.35],
                        subplot_titles=("Streams' inter-token gap", "Long prompt's TTFT"))
    layout(fig, title or "Decode stall while a long prompt joins", "Gap", barmode="group")
    factor, unit = time_scale(pd.concat([df[c] for c in cols[:4]])) if not df.empty else (1000.0, "ms")
    fig.update_yaxes(title_text=unit, rangemode="tozero")
    if df.empty:
        return note(fig, "no decode-stall points")
    names = {S.STALL_MAX_GAP_S: "largest while it waited", S.STALL_P99_GAP_S: "p99 while it waited",
             S.STALL_BASELINE_GAP_S: "usual (before it)"}
    colors = dict(zip(names, ("#d62728", "#ff7f0e", "#7f7f7f"), strict=True))
    for column, name in names.items():
        fig.add_trace(go.Bar(x=df["_series"].tolist(), y=(df[column] * factor).tolist(), name=name,
                             marker_color=colors[column],
                             hovertemplate=hover(f"<b>{name}</b>", "%{x}", f"%{{y:{number_format(unit)}}} {unit}")),
                      row=1, col=1)
    fig.add_trace(go.Bar(x=df["_series"].tolist(), y=(df[S.LONG_PROMPT_TTFT_S] * factor).tolist(), name="TTFT",
                         marker_color="#1f77b4", showlegend=True,
                         hovertemplate=hover("<b>long prompt TTFT</b>", "%{x}",
                                             f"%{{y:{number_format(unit)}}} {unit}")),
                  row=1, col=2)
    return fig
