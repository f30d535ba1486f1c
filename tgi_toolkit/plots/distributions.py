"""Per-request figures from requests.parquet: the distribution of inter-token latency (or of any
per-request time) per point or configuration, and the prompt-ingestion fit (TTFT against prompt length)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tgi_toolkit import schema as S
from tgi_toolkit.plots._common import (
    axis_title,
    color_map,
    column_name,
    hover,
    layout,
    measured,
    note,
    number_format,
    require_columns,
    series_label,
    time_scale,
)
from tgi_toolkit.plots.labels import settings_hover, shorten_config_labels

if TYPE_CHECKING:  # bench.stats brings the HTTP client with it: imported when a fit is made
    from tgi_toolkit.bench.stats import IngestionFit

KINDS = ("violin", "box", "histogram", "ecdf")
ECDF_POINTS = 2000  # an ECDF of 10^5 pooled gaps is drawn through this many quantiles


def _pooled(values: pd.Series) -> np.ndarray:
    """Every number in a column of scalars or of lists/arrays (ITL), NaN and None dropped."""
    parts = []
    for v in values:
        if isinstance(v, (list, tuple, np.ndarray)):
            parts.append(np.asarray(v, dtype=float).ravel())
        elif v is not None and not (isinstance(v, float) and np.isnan(v)) and v is not pd.NA:
            parts.append(np.asarray([v], dtype=float))
    out = np.concatenate(parts) if parts else np.empty(0)
    return out[np.isfinite(out)]


def distribution(requests: pd.DataFrame, column: str = S.ITL_S, *, by: str | Sequence[str] = S.POINT_ID,
                 kind: str = "violin", unit: str | None = None, title: str | None = None) -> go.Figure:
    """The distribution of a per-request time, one trace per value of `by` (a point, a configuration).

    `column` is ITL_S (each request's gaps, pooled) or a scalar column (TTFT_S, TPOT_S, E2E_S);
    `kind` is 'violin', 'box', 'histogram' (share of values per bin) or 'ecdf'. Warm-ups and failed
    requests are left out. Needs `column` and the `by` columns.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    by_cols = [by] if isinstance(by, str) else list(by)
    df = measured(require_columns(requests, [column, *by_cols], "distribution"), successful=True)
    # configurations named by what differs between them; the hover has every setting
    df, full_labels = shorten_config_labels(df) if S.CONFIG_LABEL in by_cols else (df, {})
    groups: dict[str, np.ndarray] = {}
    settings: dict[str, list[str]] = {}
    if not df.empty:
        for key, part in df.groupby(by_cols, sort=False, dropna=False):
            keys = key if isinstance(key, tuple) else (key,)
            label = series_label(dict(zip(by_cols, keys, strict=True)), by_cols)
            values = _pooled(part[column])
            if values.size:
                groups[label] = values
                config = dict(zip(by_cols, keys, strict=True)).get(S.CONFIG_LABEL)
                settings[label] = settings_hover(full_labels.get(config)) if config is not None else []
    pooled = np.concatenate(list(groups.values())) if groups else np.empty(0)
    factor, unit = time_scale(pooled) if unit is None else ({"ms": 1000.0, "s": 1.0}[unit], unit)
    colors = color_map(groups)
    value_title = axis_title(column, unit)
    fmt = number_format(unit)
    fig = go.Figure()
    for label in colors:  # sorted: points and configurations in a stable order
        values = groups[label] * factor
        style = {"name": label, "marker": {"color": colors[label]}}
        on_y = hover(f"<b>{label}</b>", f"{column_name(column)}: %{{y:{fmt}}} {unit}", *settings[label])
        if kind == "violin":
            fig.add_trace(go.Violin(y=values, box_visible=True, meanline_visible=True, points=False,
                                    line={"color": colors[label]}, hoveron="violins+kde", hovertemplate=on_y,
                                    **style))
        elif kind == "box":
            fig.add_trace(go.Box(y=values, boxmean=True, boxpoints=False, hovertemplate=on_y, **style))
        elif kind == "histogram":
            fig.add_trace(go.Histogram(x=values, histnorm="probability", opacity=0.6,
                                       hovertemplate=hover(f"<b>{label}</b>", f"{column_name(column)}: %{{x}} {unit}",
                                                           "share: %{y:.1%}"), **style))
        else:
            x, y = _ecdf(values)
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line={"color": colors[label], "shape": "hv"},
                                     hovertemplate=hover(f"<b>{label}</b>",
                                                         f"%{{y:.1%}} of values ≤ %{{x:{fmt}}} {unit}"),
                                     name=label))
    if kind in ("violin", "box"):
        fig.update_yaxes(title_text=value_title)
        fig.update_xaxes(title_text=" / ".join(column_name(c) for c in by_cols), type="category")
    else:
        fig.update_xaxes(title_text=value_title)
        fig.update_yaxes(title_text="Share of values" if kind == "histogram" else "Fraction of values ≤ x",
                         tickformat=".0%")
        fig.update_layout(barmode="overlay")
    if not groups:
        note(fig, f"no measured values of {column}")
    return layout(fig, title or f"{column_name(column)} distribution", showlegend=kind in ("histogram", "ecdf"))


def _ecdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ordered = np.sort(values)
    y = np.arange(1, ordered.size + 1) / ordered.size
    if ordered.size <= ECDF_POINTS:
        return ordered, y
    pick = np.linspace(0, ordered.size - 1, ECDF_POINTS).round().astype(int)
    return ordered[pick], y[pick]


def itl_distribution(requests: pd.DataFrame, *, by: str | Sequence[str] = S.POINT_ID, kind: str = "violin",
                     title: str | None = None) -> go.Figure:
    """Inter-token latency pooled per point (or per `by`), as a violin, box, histogram or ECDF.

    Needs ITL_S (a list of gaps per request) and the `by` columns."""
    return distribution(requests, S.ITL_S, by=by, kind=kind, title=title or "Inter-token latency distribution")


# -- prompt ingestion ---------------------------------------------------------------------------------
def _prompt_lengths(df: pd.DataFrame) -> pd.Series:
    """The server's count (INPUT_TOKENS) where known, else the requested PROMPT_TOKENS."""
    counted = pd.to_numeric(df[S.INPUT_TOKENS], errors="coerce") if S.INPUT_TOKENS in df else None
    asked = pd.to_numeric(df[S.PROMPT_TOKENS], errors="coerce") if S.PROMPT_TOKENS in df else None
    if counted is None and asked is None:
        raise ValueError(f"prompt ingestion: missing column(s) {S.INPUT_TOKENS} or {S.PROMPT_TOKENS} "
                         f"(the table has: {', '.join(map(str, df.columns))})")
    if counted is None:
        return asked.astype(float)
    return counted.fillna(asked).astype(float) if asked is not None else counted.astype(float)


def _ingestion_data(requests: pd.DataFrame) -> pd.DataFrame:
    """(prompt length, TTFT) of the measured, successful requests; only the ingestion scenario's
    when the table has some (as Results.ingestion() does), else all of them."""
    df = measured(require_columns(requests, [S.TTFT_S], "prompt ingestion"), successful=True)
    if S.SCENARIO in df.columns and (df[S.SCENARIO] == "ingestion").any():
        df = df[df[S.SCENARIO] == "ingestion"]
    out = pd.DataFrame({"x": _prompt_lengths(df), "y": pd.to_numeric(df[S.TTFT_S], errors="coerce")}, index=df.index)
    return out.dropna()


def fit_ingestion(requests: pd.DataFrame) -> IngestionFit:
    """happy_vllm's prompt ingestion speed from a requests table: `bench.stats.ingestion_fit` (a line
    of TTFT against prompt length, refitted without outliers) over its measured requests.

    Returns speed_tok_s, slope_s_per_tok, intercept_s, r2 and n (requests kept), NaN where fewer
    than two distinct lengths, and kept: a boolean Series over `requests`' index, True for the
    requests the line was fitted to (False for outliers, warm-ups, failures, other scenarios).
    Needs TTFT_S and INPUT_TOKENS or PROMPT_TOKENS.
    """
    # imported here: bench.stats brings the HTTP client with it, which drawing figures does not need
    from tgi_toolkit.bench.stats import ingestion_fit

    data = _ingestion_data(requests)
    fit = ingestion_fit(data["x"].to_numpy(), data["y"].to_numpy())
    fit["kept"] = pd.Series(fit["kept"], index=data.index).reindex(requests.index, fill_value=False)
    return fit


def ingestion_plot(requests: pd.DataFrame, *, title: str | None = None, grey_outliers: bool = True) -> go.Figure:
    """TTFT against prompt length with the fitted line (`fit_ingestion`); the speed in the title,
    with "not to be quoted: ..." and why in the subtitle when the fit is poor (`bench.stats.ingestion_unreliable`).

    grey_outliers: draw the requests the fit left out (outliers) in grey, apart from those it kept.
    Needs TTFT_S and INPUT_TOKENS or PROMPT_TOKENS."""
    data = _ingestion_data(requests)
    fit = fit_ingestion(requests)
    factor, unit = time_scale(data["y"])
    fmt = number_format(unit)
    fig = go.Figure()
    kept = fit["kept"].loc[data.index] if grey_outliers else pd.Series(True, index=data.index)
    for mask, name, color in ((kept, "requests", "#1f77b4"), (~kept, "outliers (left out of the fit)", "#b0b0b0")):
        if mask.any():
            fig.add_trace(go.Scatter(x=data["x"][mask], y=data["y"][mask] * factor, mode="markers", name=name,
                                     marker={"color": color, "size": 7},
                                     hovertemplate=hover(f"<b>{'request' if name == 'requests' else 'outlier'}</b>",
                                                         "Prompt: %{x:,.0f} tokens", f"TTFT: %{{y:{fmt}}} {unit}")))
    speed, subtitle = "", "TTFT against prompt length"
    if np.isfinite(fit["slope_s_per_tok"]):
        xs = np.array([data["x"].min(), data["x"].max()])
        left_out = ", outliers left out" if fit["n"] < len(data) else ""
        name = f"fit ({int(fit['n'])} of {len(data)} requests{left_out})"
        fig.add_trace(go.Scatter(
            x=xs, y=(fit["intercept_s"] + fit["slope_s_per_tok"] * xs) * factor, mode="lines", name=name,
            line={"color": "#d62728", "dash": "dash"},
            hovertemplate=hover("<b>fit</b>", "Prompt: %{x:,.0f} tokens", f"TTFT: %{{y:{fmt}}} {unit}",
                                f"slope: {fit['slope_s_per_tok'] * 1e3:.4g} ms/token, R²: {fit['r2']:.3f}")))
        if np.isfinite(fit["speed_tok_s"]):
            speed = f": {fit['speed_tok_s']:,.0f} tokens/s"
            if fit.get("unreliable"):  # never the number alone: the subtitle says how little it means
                subtitle = str(fit["unreliable"])
    else:
        note(fig, "too few distinct prompt lengths to fit a line" if len(data) else "no measured requests")
    fig.update_xaxes(title_text=axis_title(S.INPUT_TOKENS))
    fig.update_yaxes(title_text=axis_title(S.TTFT_S, unit))
    return layout(fig, title or f"Prompt ingestion{speed}", subtitle=subtitle)
