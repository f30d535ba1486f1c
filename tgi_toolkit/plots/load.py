"""Metrics against load (parallel users, or arrival rate) from points.parquet rows: happy_vllm's
model-card graphs, total throughput per scenario and per-request speed / TTFT with p25-p75 spread."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tgi_toolkit import schema as S
from tgi_toolkit.plots._common import (
    METRIC_NAMES,
    axis_title,
    color_map,
    column_name,
    hover,
    layout,
    measured,
    note,
    number_format,
    require_columns,
    scaled,
    series_label,
)
from tgi_toolkit.plots.labels import settings_hover, shorten_config_labels

# What tells two lines apart: the configuration (when several), then the scenario's lengths.
SERIES = (S.CONFIG_LABEL, S.PROMPT_TOKENS, S.MAX_NEW_TOKENS)
_STAT_METRICS = (*S.LATENCY_METRICS, S.SPEED_METRIC)
_LENGTHS = {S.PROMPT_TOKENS, S.MAX_NEW_TOKENS}


def _with_series(df: pd.DataFrame, series: Sequence[str]) -> tuple[pd.DataFrame, list[str], str]:
    """Rows with a '_series' label, and what every series shares (for the subtitle). Identity columns count
    only where they vary; the lengths are left to the subtitle ("prompt 192 / output 16 tokens") when every
    series shares them and configurations tell the series apart, else named in each series."""
    present = [c for c in series if c in df.columns]
    identity = (S.CONFIG_LABEL, S.RUN_ID, S.CONFIG_ID)
    used = [c for c in present if c not in identity or df[c].nunique() > 1]
    shared = ""
    if any(c in identity for c in used):
        lengths = [c for c in used if c not in identity]
        same = lengths if all(df[c].nunique(dropna=False) == 1 for c in lengths) else []
        if same and len(df):
            shared = series_label(df.iloc[0], same) + (" tokens" if set(same) <= _LENGTHS else "")
        used = [c for c in used if c not in same]
    labels = [series_label(row, used) for row in df[used].to_dict("records")] if used else ["all"] * len(df)
    out = df.assign(_series=labels)
    return out, list(color_map(out["_series"])), shared


def _columns(metric: str, center: str, low: str, high: str) -> tuple[str, str | None, str | None]:
    """(line, band low, band high) columns: a latency/speed metric takes its stats, a column itself."""
    if metric in _STAT_METRICS:
        return tuple(S.stat_column(metric, s) for s in (center, low, high))  # type: ignore[return-value]
    return metric, None, None


def metrics_vs_users(points: pd.DataFrame, metrics: Sequence[str] = (S.OUTPUT_THROUGHPUT, "ttft"), *,
                     x: str = S.USERS, center: str = "p50", low: str = "p25", high: str = "p75",
                     spread: str = "band", series: Sequence[str] = SERIES, title: str | None = None) -> go.Figure:
    """One panel per metric against `x` (USERS, or RATE_RPS), one line per series.

    A metric is a points column (OUTPUT_THROUGHPUT: a plain line) or one of 'ttft', 'tpot', 'itl',
    'e2e', 'speed': its `center` statistic as the line, `low`-`high` as a band (spread='band') or
    error bars (spread='bars'), as in happy_vllm's graphs. Series are the prompt/output lengths, and
    the configuration where several are present. Repeats of a point are reduced to their median.
    Needs `x` and each line column; band columns may be absent or NaN (no band there).
    """
    if spread not in ("band", "bars"):
        raise ValueError(f"spread must be 'band' or 'bars', not {spread!r}")
    cols = [_columns(m, center, low, high) for m in metrics]
    if not cols:
        raise ValueError("metrics_vs_users: no metrics given")
    df = measured(require_columns(points, [x, *(c[0] for c in cols)], "metrics_vs_users"))
    df, full_labels = shorten_config_labels(df)  # legends name what differs; hover has every setting
    df, labels, shared = _with_series(df, series)
    colors = color_map(labels)
    spread_name = f"{low}–{high}"
    names = [_metric_name(m) + (f" ({center}, {spread_name})" if m in _STAT_METRICS else "") for m in metrics]
    fig = make_subplots(rows=len(cols), cols=1, shared_xaxes=True, vertical_spacing=0.08, subplot_titles=names)
    drawn: set[str] = set()  # series already in the legend: one entry each, whichever panel has it first
    for row, (line_col, low_col, high_col) in enumerate(cols, start=1):
        _, unit = scaled(df, line_col)  # one unit per panel, chosen from all its rows
        for label in labels:
            part = df[df["_series"] == label]
            stats = _median_per_x(part, x, [c for c in (line_col, low_col, high_col) if c and c in part.columns])
            stats = stats[stats[line_col].notna()]
            if stats.empty:
                continue
            settings = settings_hover(full_labels.get(part[S.CONFIG_LABEL].iloc[0])) if full_labels else []
            _add_line(fig, stats, x, (line_col, low_col, high_col), unit, label, colors[label], spread,
                      spread_name, row, show_legend=label not in drawn, settings=settings)
            _add_prediction_band(fig, part, stats, x, metrics[row - 1], line_col, unit, colors[label], row)
            drawn.add(label)
        fig.update_yaxes(title_text=axis_title(line_col, unit), row=row, col=1)
    fig.update_xaxes(title_text=axis_title(x), row=len(cols), col=1)
    if x == S.USERS and len(df):
        # Users come in whole numbers: tick the measured counts, never 1.2 or 1.4 users.
        fig.update_xaxes(tickmode="array", tickvals=sorted(pd.to_numeric(df[x]).dropna().unique().tolist()))
    if not drawn:
        note(fig, "no measured points with values")
    default = " and ".join(_metric_name(m) for m in metrics) + f" against {column_name(x).lower()}"
    return layout(fig, title or default, subtitle=shared, height=max(450, 300 * len(cols)))


def _metric_name(metric: str) -> str:
    return METRIC_NAMES.get(metric) or column_name(metric)


def _median_per_x(part: pd.DataFrame, x: str, columns: list[str]) -> pd.DataFrame:
    numeric = part[[x, *columns]].apply(pd.to_numeric, errors="coerce")
    grouped = numeric.dropna(subset=[x]).groupby(x)
    return grouped.median().join(grouped.size().rename("_rows")).reset_index().sort_values(x)


def _add_line(fig: go.Figure, stats: pd.DataFrame, x: str, columns: tuple[str, str | None, str | None],
              unit: str, label: str, color: str, spread: str, spread_name: str, row: int,
              show_legend: bool, settings: Sequence[str] = ()) -> None:
    line_col, low_col, high_col = columns
    fmt = number_format(unit)
    y = scaled(stats, line_col, unit)[0]
    lines = [f"<b>{label}</b>", f"{axis_title(x)}: %{{x}}", f"{column_name(line_col)}: %{{y:{fmt}}} {unit}"]
    custom = stats[["_rows"]].to_numpy()
    error_y = band = None
    if low_col and high_col and low_col in stats and high_col in stats:
        lo, hi = scaled(stats, low_col, unit)[0], scaled(stats, high_col, unit)[0]
        custom = pd.concat([stats["_rows"], lo, hi], axis=1).to_numpy()
        lines.append(f"{spread_name}: %{{customdata[1]:{fmt}}}–%{{customdata[2]:{fmt}}} {unit}")
        if spread == "bars":
            error_y = {"type": "data", "array": (hi - y).clip(lower=0), "arrayminus": (y - lo).clip(lower=0),
                       "color": color, "thickness": 1.2, "width": 4}
        else:
            band = stats.assign(_lo=lo, _hi=hi).dropna(subset=["_lo", "_hi"])
    lines += ["rows: %{customdata[0]}", *settings]
    fig.add_trace(go.Scatter(x=stats[x], y=y, mode="lines+markers", name=label, legendgroup=label,
                             showlegend=show_legend, line={"color": color}, marker={"color": color},
                             error_y=error_y, customdata=custom, hovertemplate=hover(*lines)), row=row, col=1)
    if band is not None and not band.empty:  # a closed polygon: high left to right, then low back
        fig.add_trace(go.Scatter(
            x=[*band[x], *band[x][::-1]], y=[*band["_hi"], *band["_lo"][::-1]], fill="toself", fillcolor=color,
            opacity=0.18, line={"width": 0}, mode="lines", hoverinfo="skip", name=f"{label} {spread_name}",
            legendgroup=label, showlegend=False), row=row, col=1)


def _add_prediction_band(fig: go.Figure, part: pd.DataFrame, stats: pd.DataFrame, x: str, metric: str,
                         line_col: str, unit: str, color: str, row: int) -> None:
    """A simulated GPU line's cross-validated error (S.PREDICTION_ERRORS) as a dotted band around it."""
    column = S.PREDICTION_ERRORS.get(metric)
    if column is None or column not in part.columns:
        return
    err = pd.to_numeric(part.groupby(x)[column].median(), errors="coerce").reindex(stats[x]).to_numpy()
    if not (err == err).any():  # NaN everywhere: measured, or no published corpus behind it
        return
    y = scaled(stats, line_col, unit)[0].to_numpy()
    keep = err == err
    xs, hi, lo = stats[x].to_numpy()[keep], (y * (1 + err))[keep], (y * (1 - err))[keep]
    fig.add_trace(go.Scatter(
        x=[*xs, *xs[::-1]], y=[*hi, *lo[::-1]], fill="toself", fillcolor=color, opacity=0.10,
        line={"width": 1, "dash": "dot", "color": color}, mode="lines", hoverinfo="skip",
        name=f"±{100 * float(err[keep].max()):.0f} % cross-validated on published figures", showlegend=False),
        row=row, col=1)


def throughput_vs_users(points: pd.DataFrame, *, x: str = S.USERS, y: str = S.OUTPUT_THROUGHPUT,
                        series: Sequence[str] = SERIES, title: str | None = None) -> go.Figure:
    """Total throughput against parallel users, one line per scenario (happy_vllm's
    total_speed_generation_graph). Needs `x` and `y` (default OUTPUT_THROUGHPUT)."""
    return metrics_vs_users(points, (y,), x=x, series=series,
                            title=title or f"Total {column_name(y).lower()} against {column_name(x).lower()}")


def speed_and_ttft_vs_users(points: pd.DataFrame, *, x: str = S.USERS, spread: str = "bars",
                            series: Sequence[str] = SERIES, title: str | None = None) -> go.Figure:
    """Per-request speed and TTFT against parallel users: median line, p25-p75 bars (happy_vllm's
    speed_generation_graph). Needs `x`, speed_p50_tok_s and ttft_p50_s (p25/p75 where present)."""
    return metrics_vs_users(points, (S.SPEED_METRIC, "ttft"), x=x, spread=spread, series=series,
                            title=title or f"Per-request speed and TTFT against {column_name(x).lower()}")
