"""Two or more result sets side by side: two configurations, two runs, or a run against a seed's
published table (`tgi_toolkit.reference.load_reference`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tgi_toolkit import schema as S
from tgi_toolkit.plots._common import (
    axis_title,
    color_map,
    column_name,
    column_unit,
    hover,
    integer_text,
    is_time,
    layout,
    measured,
    note,
    number_format,
    require_columns,
    sorted_values,
    time_scale,
)
from tgi_toolkit.plots.load import SERIES, metrics_vs_users

BATCH_METRICS = (S.PREFILL_LATENCY_S, S.PREFILL_THROUGHPUT, S.DECODE_TOKEN_LATENCY_S, S.DECODE_THROUGHPUT)


def label_sets(sets: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The sets as one table whose CONFIG_LABEL is each set's name, so that any figure that splits by
    configuration (batch_latency_throughput, pareto_plot, metrics_vs_users) tells them apart."""
    if not sets:
        raise ValueError("no result sets given")
    return pd.concat([df.assign(**{S.CONFIG_LABEL: name}) for name, df in sets.items()], ignore_index=True)


def _batch_summary(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per batch size: average, lowest, highest and row count of `metric`.

    Raw batch.parquet rows are reduced here; a reference's `batch_stats` (an S.STAT column) already holds
    the published average/lowest/highest, which are taken as they are.
    """
    if S.STAT in df.columns:
        wide = df.pivot_table(index=S.BATCH_SIZE, columns=S.STAT, values=metric, aggfunc="first")
        wide = wide.reindex(columns=["average", "lowest", "highest"])
        return wide.assign(rows=np.nan)
    values = pd.to_numeric(df[metric], errors="coerce")
    grouped = values.groupby(df[S.BATCH_SIZE])
    return pd.DataFrame({"average": grouped.mean(), "lowest": grouped.min(), "highest": grouped.max(),
                         "rows": grouped.count()})


def compare_batch(sets: Mapping[str, pd.DataFrame], *, metrics: Sequence[str] = BATCH_METRICS,
                  title: str | None = None) -> go.Figure:
    """Grouped bars per batch size, one colour per set, one panel per metric; whiskers span lowest to
    highest. Each set is batch.parquet rows or a reference's `batch_stats`. Needs BATCH_SIZE and the metrics.
    """
    if not sets:
        raise ValueError("compare_batch: no result sets given")
    frames = {name: measured(require_columns(df, [S.BATCH_SIZE, *metrics], f"compare_batch[{name!r}]"))
              for name, df in sets.items()}
    colors = color_map(frames)
    sizes = sorted_values(pd.concat([f[S.BATCH_SIZE] for f in frames.values()]))
    ncols = 2 if len(metrics) > 1 else 1
    nrows = -(-len(metrics) // ncols)
    fig = make_subplots(rows=nrows, cols=ncols, subplot_titles=[column_name(m) for m in metrics],
                        vertical_spacing=0.15, horizontal_spacing=0.1)
    drawn = 0
    for k, metric in enumerate(metrics):
        row, col = divmod(k, ncols)
        summaries = {name: _batch_summary(df, metric).reindex(sizes) for name, df in frames.items()}
        # one unit per panel, from every set's values, so that bars side by side are comparable
        factor, unit = (time_scale(pd.concat([s["average"] for s in summaries.values()])) if is_time(metric)
                        else (1.0, column_unit(metric)))
        fmt = number_format(unit)
        for name, summary in summaries.items():
            avg, lo, hi = (summary[c] * factor for c in ("average", "lowest", "highest"))
            if avg.notna().sum() == 0:
                continue
            custom = np.column_stack([lo, hi, summary["rows"].map(lambda n: "published" if pd.isna(n)
                                                                  else f"{int(n)} run(s)")])
            fig.add_trace(go.Bar(
                x=[integer_text(s) for s in sizes], y=avg, name=name, legendgroup=name, showlegend=k == 0,
                marker={"color": colors[name]},
                error_y={"type": "data", "array": (hi - avg).clip(lower=0), "arrayminus": (avg - lo).clip(lower=0),
                         "visible": True, "color": "#444", "thickness": 1},
                customdata=custom,
                hovertemplate=hover(f"<b>{name}</b>", "batch %{x}", f"average: %{{y:{fmt}}} {unit}",
                                    f"lowest–highest: %{{customdata[0]:{fmt}}}–%{{customdata[1]:{fmt}}} {unit}",
                                    "%{customdata[2]}")), row=row + 1, col=col + 1)
            drawn += 1
        fig.update_xaxes(title_text=axis_title(S.BATCH_SIZE), type="category", row=row + 1, col=col + 1)
        fig.update_yaxes(title_text=axis_title(metric, unit), row=row + 1, col=col + 1)
    if not drawn:
        note(fig, "no batch rows to compare")
    return layout(fig, title or " vs ".join(frames), barmode="group", height=350 * nrows)


def compare_points(sets: Mapping[str, pd.DataFrame], metrics: Sequence[str] = (S.OUTPUT_THROUGHPUT, "ttft"), *,
                   x: str = S.USERS, center: str = "p50", spread: str = "band",
                   title: str | None = None) -> go.Figure:
    """Points of several sets against load, one colour per set (and scenario), one panel per metric;
    see `metrics_vs_users` for the metrics and what each needs. happy_vllm's cards publish a mean
    per-request speed only: compare with them using center='mean'."""
    return metrics_vs_users(label_sets(sets), metrics, x=x, center=center, spread=spread, series=SERIES,
                            title=title or " vs ".join(sets))
