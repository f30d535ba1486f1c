"""What every figure shares: column checks, axis titles with units, colours, hover text, empty data."""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from tgi_toolkit import schema as S

TEMPLATE = "plotly_white"
# Enough distinct colours for a sweep's batch sizes or configurations before they repeat.
PALETTE: tuple[str, ...] = (*qualitative.Plotly, *qualitative.D3, *qualitative.Dark24)

_NAMES = {
    S.USERS: "Parallel users", S.BATCH_SIZE: "Batch size", S.RATE_RPS: "Arrival rate",
    S.PROMPT_TOKENS: "Prompt length", S.MAX_NEW_TOKENS: "Output length", S.INPUT_TOKENS: "Prompt length",
    S.OUTPUT_TOKENS: "Output tokens", S.SEQUENCE_LENGTH: "Sequence length", S.DECODE_LENGTH: "Decode length",
    S.PREFILL_LATENCY_S: "Prefill latency", S.PREFILL_THROUGHPUT: "Prefill throughput",
    S.DECODE_TOKEN_LATENCY_S: "Decode latency per token", S.DECODE_TOTAL_LATENCY_S: "Decode total latency",
    S.DECODE_THROUGHPUT: "Decode throughput", S.OUTPUT_THROUGHPUT: "Output throughput",
    S.INPUT_THROUGHPUT: "Input throughput", S.REQUEST_THROUGHPUT: "Request throughput", S.GOODPUT_RPS: "Goodput",
    S.TTFT_S: "TTFT", S.E2E_S: "End-to-end latency", S.TPOT_S: "TPOT", S.SPEED_TOK_S: "Per-request speed",
    S.ITL_S: "Inter-token latency", S.SENT_S: "Time since run start", S.T_S: "Time since run start",
    S.DURATION_S: "Duration", S.SLO_ATTAINMENT: "SLO attainment", S.KV_USAGE_MAX: "Peak KV-cache usage",
    S.KV_CAPACITY_TOKENS: "KV-cache capacity", S.SERVER_BATCH_SIZE_MAX: "Peak server batch size",
    S.SERVER_QUEUE_SIZE_MAX: "Peak queue size", S.TOTAL_OUTPUT_TOKENS: "Output tokens",
    S.TOTAL_INPUT_TOKENS: "Input tokens", S.REQUESTS: "Requests", S.ERRORS: "Errors", S.POINT_ID: "Point",
    S.CONFIG_LABEL: "Configuration", S.RUN_ID: "Run", S.REQUEST_INDEX: "Request",
}
METRIC_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "End-to-end latency",
                 S.SPEED_METRIC: "Per-request speed"}
_TOKEN_COUNTS = {S.PROMPT_TOKENS, S.MAX_NEW_TOKENS, S.INPUT_TOKENS, S.OUTPUT_TOKENS, S.SEQUENCE_LENGTH,
                 S.DECODE_LENGTH, S.KV_CAPACITY_TOKENS, S.TOTAL_INPUT_TOKENS, S.TOTAL_OUTPUT_TOKENS}
_STAT_COLUMNS = {S.stat_column(m, s): (m, s) for m in (*S.LATENCY_METRICS, S.SPEED_METRIC) for s in S.STATS}


def require_columns(df: pd.DataFrame | None, columns: Iterable[str], what: str) -> pd.DataFrame:
    """`df` itself, or a ValueError that names every missing column (and the table it was looked for in)."""
    if df is None:
        raise ValueError(f"{what}: no table given")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: missing column(s) {', '.join(missing)} "
                         f"(the table has: {', '.join(map(str, df.columns)) or 'no columns'})")
    return df


def measured(df: pd.DataFrame, *, successful: bool = False) -> pd.DataFrame:
    """Rows that count in statistics: warm-ups dropped and, with `successful`, failed requests too."""
    keep = pd.Series(True, index=df.index)
    if S.WARMUP in df.columns:
        keep &= ~df[S.WARMUP].fillna(False).astype(bool)
    if successful and S.ERROR in df.columns:
        keep &= df[S.ERROR].isna()
    return df[keep]


def is_time(column: str) -> bool:
    return column.endswith("_s") and not column.endswith("_tok_s")


def time_scale(values: Iterable[float] | pd.Series) -> tuple[float, str]:
    """(factor, unit) to show seconds in: ms while the typical value is under a second, else s."""
    arr = pd.to_numeric(pd.Series(list(values), dtype=object), errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    arr = arr[np.isfinite(arr)]
    return (1000.0, "ms") if arr.size and float(np.median(np.abs(arr))) < 1.0 else (1.0, "s")


def column_name(column: str) -> str:
    """Human name of a schema column: 'Prefill latency', 'TTFT p50', ...; unknown columns as written."""
    if column in _NAMES:
        return _NAMES[column]
    if column in _STAT_COLUMNS:
        metric, stat = _STAT_COLUMNS[column]
        return f"{METRIC_NAMES[metric]} {stat}"
    return column.replace("_", " ")


def column_unit(column: str, time_unit: str = "s") -> str:
    """The unit a column is shown in ('' when it has none): time columns take `time_unit`."""
    if column.endswith("_tok_s"):
        return "tokens/s"
    if column.endswith("_rps"):
        return "requests/s"
    if column.endswith("_ms"):
        return "ms"
    if is_time(column):
        return time_unit
    if column in _TOKEN_COUNTS:
        return "tokens"
    if column == S.SLO_ATTAINMENT or column == S.KV_USAGE_MAX:
        return "fraction"
    return ""


def axis_title(column: str, time_unit: str = "s") -> str:
    """'Prefill latency (ms)', 'Decode throughput (tokens/s)', 'Batch size'."""
    unit = column_unit(column, time_unit)
    return f"{column_name(column)} ({unit})" if unit else column_name(column)


@dataclass(frozen=True)
class AxisScale:
    """How a figure shows a column: the figure's number = the table's number x `factor`, in `unit`."""

    factor: float
    unit: str  # 'ms', 's', 'tokens/s', 'requests/s', 'tokens', '' (none), ...

    def __call__(self, value: float) -> float:
        """`value`, in the column's own unit (seconds for a time), in the figure's unit."""
        return value * self.factor


_TIME_FACTORS = {"ms": 1000.0, "s": 1.0}


def axis_scale(df: pd.DataFrame, column: str, unit: str | None = None) -> AxisScale:
    """The unit a figure of `df` shows `column` in, and the factor from the table's unit to it.

    Times (columns ending in `_s`) are shown in ms while their median is under a second, else in s
    (`unit` forces 'ms' or 's'); other columns in their own unit, unscaled. Use it to place anything
    in a figure's coordinates, e.g. `axis_scale(points, "ttft_p90_s")(5.0)` for a 5-second limit."""
    if not is_time(column):
        return AxisScale(1.0, column_unit(column))
    if unit is None:
        factor, unit = time_scale(pd.to_numeric(df[column], errors="coerce"))
        return AxisScale(factor, unit)
    if unit not in _TIME_FACTORS:
        raise ValueError(f"unit: {unit!r} is not a time unit the figures use ({', '.join(_TIME_FACTORS)})")
    return AxisScale(_TIME_FACTORS[unit], unit)


def scaled(df: pd.DataFrame, column: str, unit: str | None = None) -> tuple[pd.Series, str]:
    """A column's numbers in the unit it is shown in, and that unit (`axis_scale`)."""
    scale = axis_scale(df, column, unit)
    return pd.to_numeric(df[column], errors="coerce").astype(float) * scale.factor, scale.unit


def color_map(values: Iterable[Hashable]) -> dict[Hashable, str]:
    """A colour per distinct value, in sorted order so that batch 1 is always the first colour."""
    distinct = sorted({v for v in values if not _missing(v)}, key=_sort_key)
    return {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(distinct)}


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA


def _sort_key(value: object) -> tuple[int, float, tuple[tuple[int, float, str], ...]]:
    # numbers in numeric order before text, and text in natural order, its digits read as numbers:
    # batch 2 < batch 16, "users=2,..." < "users=10,...", "prompt 128 / ..." < "prompt 1024 / ..."
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        return (0, float(value), ())
    chunks = re.split(r"(\d+(?:\.\d+)?)", str(value))
    return (1, 0.0, tuple((1, float(c), "") if i % 2 else (0, 0.0, c) for i, c in enumerate(chunks)))


def sorted_values(values: Iterable[Hashable]) -> list[Hashable]:
    return list(color_map(values))


def integer_text(value: object) -> str:
    """'16' for 16.0 (columns with NaN are floats), '–' for a missing value, the value as written otherwise."""
    if _missing(value):
        return "–"
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def hover(*lines: str) -> str:
    """A hovertemplate from lines; `<extra></extra>` drops plotly's trace-name box (the name is line 1)."""
    return "<br>".join(lines) + "<extra></extra>"


def number_format(unit: str) -> str:
    """d3 format for hover values: whole tokens/s, 3 significant digits for times, 2 decimals else."""
    return {"tokens/s": ",.1f", "tokens": ",.0f", "ms": ",.2f", "s": ",.3f"}.get(unit, ",.3g")


def layout(fig: go.Figure, title: str, legend_title: str = "", *, subtitle: str = "", **kwargs: object) -> go.Figure:
    """The look every figure shares: title (and subtitle) top left, white template, full trace names in hover labels,
    long legend entries wrapped (`labels.legend_name`) so that the plot keeps most of the figure's width."""
    from tgi_toolkit.plots.labels import legend_name

    # the subtitle holds what would make a title too long for its figure (a title does not wrap: it is cut)
    heading = {"text": title, "x": 0.01, "xanchor": "left", **({"subtitle": {"text": subtitle}} if subtitle else {})}
    fig.update_layout(title=heading, template=TEMPLATE,
                      hoverlabel={"namelength": -1}, legend={"title": {"text": legend_title}}, **kwargs)
    for trace in fig.data:
        if trace.name and trace.showlegend is not False:
            trace.name = legend_name(trace.name)
    return fig


def note(fig: go.Figure, text: str) -> go.Figure:
    """Say on the figure why it is empty (or partly so) instead of drawing nothing silently."""
    fig.add_annotation(text=text, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False,
                       font={"size": 14, "color": "#888"})
    return fig


def series_label(row: pd.Series | dict, columns: Sequence[str]) -> str:
    """'prompt 1024 / output 128' for the columns that make a series (those with values)."""
    short = {S.PROMPT_TOKENS: "prompt", S.MAX_NEW_TOKENS: "output", S.USERS: "users", S.BATCH_SIZE: "batch",
             S.SEQUENCE_LENGTH: "sequence", S.DECODE_LENGTH: "decode"}
    parts = []
    for c in columns:
        value = row[c]
        if _missing(value):
            continue
        parts.append(str(value) if c in (S.CONFIG_LABEL, S.RUN_ID, S.POINT_ID)
                     else f"{short.get(c, column_name(c).lower())} {integer_text(value)}")
    return " / ".join(parts) or "all"
