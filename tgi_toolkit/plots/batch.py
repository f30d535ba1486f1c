"""text-generation-benchmark's figures from batch.parquet rows: latency against throughput per batch
size (its TUI scatter), and a batch size by sequence length heatmap of any metric."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tgi_toolkit import schema as S
from tgi_toolkit.plots._common import (
    axis_title,
    color_map,
    column_name,
    hover,
    integer_text,
    layout,
    measured,
    note,
    number_format,
    require_columns,
    scaled,
    sorted_values,
)
from tgi_toolkit.plots.labels import settings_hover, shorten_config_labels

# (throughput column, latency column, subplot title) per step, as text-generation-benchmark pairs them.
BATCH_STEPS: dict[str, tuple[str, str, str]] = {
    "prefill": (S.PREFILL_THROUGHPUT, S.PREFILL_LATENCY_S, "Prefill"),
    "decode": (S.DECODE_THROUGHPUT, S.DECODE_TOKEN_LATENCY_S, "Decode (per token)"),
}
SYMBOLS = ("circle", "diamond", "square", "x", "triangle-up", "star", "cross", "pentagon")


def _groups(df: pd.DataFrame, column: str | None) -> list[object]:
    """Distinct values of `column` that split traces; [None] when absent or single-valued."""
    if column is None or column not in df.columns:
        return [None]
    values = sorted_values(df[column])
    return values if len(values) > 1 else [None]


def batch_latency_throughput(batch: pd.DataFrame, *, steps: Sequence[str] = ("prefill", "decode"),
                             symbol_by: str | None = S.CONFIG_LABEL, title: str | None = None,
                             log_axes: bool = False) -> go.Figure:
    """Latency against throughput, one colour per batch size, one subplot per step (prefill, decode).

    What text-generation-benchmark's TUI draws: each batch.parquet row (a run) is a point. Rows of
    several configurations (or a run beside `load_reference(...).batch`) get one marker symbol per
    value of `symbol_by`. Needs BATCH_SIZE and, per step, PREFILL_THROUGHPUT + PREFILL_LATENCY_S or
    DECODE_THROUGHPUT + DECODE_TOKEN_LATENCY_S. Warm-up rows are left out.
    """
    unknown = [s for s in steps if s not in BATCH_STEPS]
    if unknown or not steps:
        raise ValueError(f"steps must be among {', '.join(BATCH_STEPS)}; got {list(steps)}")
    needed = [S.BATCH_SIZE, *(c for s in steps for c in BATCH_STEPS[s][:2])]
    df = measured(require_columns(batch, needed, "batch_latency_throughput"))
    # legends name what differs between configurations; hover has every setting
    df, full_labels = shorten_config_labels(df, symbol_by) if symbol_by else (df, {})
    colors = color_map(df[S.BATCH_SIZE])
    groups = _groups(df, symbol_by)
    fig = make_subplots(rows=1, cols=len(steps), subplot_titles=[BATCH_STEPS[s][2] for s in steps],
                        horizontal_spacing=0.1)
    drawn = 0
    for col, step in enumerate(steps, start=1):
        x_col, y_col, _ = BATCH_STEPS[step]
        x, x_unit = scaled(df, x_col)
        y, y_unit = scaled(df, y_col)
        template = [f"Throughput: %{{x:{number_format(x_unit)}}} {x_unit}",
                    f"Latency: %{{y:{number_format(y_unit)}}} {y_unit}", "Run: %{customdata[0]}"]
        for size in colors:
            for g_index, group in enumerate(groups):
                keep = (df[S.BATCH_SIZE] == size) & x.notna() & y.notna()
                if group is not None:
                    keep &= df[symbol_by] == group
                if not keep.any():
                    continue
                name = f"batch {integer_text(size)}" + (f" · {group}" if group is not None else "")
                fig.add_trace(go.Scatter(
                    x=x[keep], y=y[keep], mode="markers", name=name, legendgroup=name, showlegend=col == 1,
                    marker={"color": colors[size], "symbol": SYMBOLS[g_index % len(SYMBOLS)], "size": 9,
                            "line": {"width": 0.5, "color": "white"}},
                    customdata=_run_labels(df[keep]),
                    hovertemplate=hover(f"<b>{name}</b>", *template, *settings_hover(full_labels.get(group))),
                ), row=1, col=col)
                drawn += 1
        fig.update_xaxes(title_text=axis_title(x_col), type="log" if log_axes else None, row=1, col=col)
        fig.update_yaxes(title_text=axis_title(y_col, y_unit), type="log" if log_axes else None, row=1, col=col)
    if not drawn:
        note(fig, "no measured batch rows with both latency and throughput")
    return layout(fig, title or "Latency against throughput per batch size", legend_title="Batch size")


def _run_labels(df: pd.DataFrame) -> list[list[str]]:
    """'run_id #repeat' per row for hover text; what is absent is left out."""
    runs = df[S.RUN_ID].astype(str) if S.RUN_ID in df.columns else pd.Series("", index=df.index)
    repeats = df[S.REPEAT] if S.REPEAT in df.columns else pd.Series(pd.NA, index=df.index)
    return [[f"{r} #{integer_text(k)}" if pd.notna(k) else r] for r, k in zip(runs, repeats, strict=True)]


def batch_heatmap(df: pd.DataFrame, z: str = S.DECODE_THROUGHPUT, *, x: str = S.SEQUENCE_LENGTH,
                  y: str = S.BATCH_SIZE, agg: str = "median", facet_by: str | None = S.CONFIG_LABEL,
                  title: str | None = None, colorscale: str = "Viridis") -> go.Figure:
    """A metric over batch size (rows) by sequence length (columns), one cell per pair.

    Rows sharing a cell (runs, repeats) are reduced with `agg` ('median', 'mean', 'min', 'max'); the
    hover says how many. Works on points.parquet too (`x=PROMPT_TOKENS, y=USERS`). Several values of
    `facet_by` (configurations) give side-by-side panels on one colour scale. Needs x, y and z.
    """
    data = measured(require_columns(df, [x, y, z], "batch_heatmap"))
    values, unit = scaled(data, z)
    data = data.assign(_z=values).dropna(subset=[x, y])
    # panel titles name what differs between configurations; hover has every setting
    data, full_labels = shorten_config_labels(data, facet_by) if facet_by else (data, {})
    facets = _groups(data, facet_by)
    fig = make_subplots(rows=1, cols=len(facets), shared_yaxes=True,
                        subplot_titles=[str(f) for f in facets] if facets != [None] else None)
    # categorical axes: batch sizes 1, 2, 4 ... 64 get equal-width cells
    x_cats, y_cats = sorted_values(data[x]), sorted_values(data[y])
    fmt = number_format(unit)
    for col, facet in enumerate(facets, start=1):
        part = data if facet is None else data[data[facet_by] == facet]
        grid = part.pivot_table(index=y, columns=x, values="_z", aggfunc=agg, dropna=False)
        count = part.pivot_table(index=y, columns=x, values="_z", aggfunc="count", dropna=False)
        grid = grid.reindex(index=y_cats, columns=x_cats)
        count = count.reindex(index=y_cats, columns=x_cats).fillna(0).astype(int)
        fig.add_trace(go.Heatmap(
            z=grid.to_numpy(dtype=float), x=[integer_text(v) for v in x_cats], y=[integer_text(v) for v in y_cats],
            coloraxis="coloraxis", customdata=count.to_numpy(), texttemplate=f"%{{z:{fmt}}}",
            hovertemplate=hover(f"{axis_title(y)}: %{{y}}", f"{axis_title(x)}: %{{x}}",
                                f"{column_name(z)}: %{{z:{fmt}}} {unit}", f"{agg} of %{{customdata}} row(s)",
                                *settings_hover(full_labels.get(facet))),
            name=str(facet) if facet is not None else column_name(z)), row=1, col=col)
        fig.update_xaxes(title_text=axis_title(x), type="category", row=1, col=col)
    fig.update_yaxes(title_text=axis_title(y), type="category", row=1, col=1)
    if data["_z"].notna().sum() == 0:
        note(fig, f"no values of {z}")
    fig.update_layout(coloraxis={"colorscale": colorscale, "colorbar": {"title": {"text": axis_title(z, unit)}}})
    return layout(fig, title or f"{column_name(z)} by {column_name(y).lower()} and {column_name(x).lower()}")
