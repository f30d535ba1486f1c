"""The server seen from inside, from server.parquet samples: queue and running batch over time
(with the client's requests beneath, on the same run clock), and KV-cache usage."""

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
    integer_text,
    layout,
    measured,
    note,
    number_format,
    require_columns,
    scaled,
    series_label,
    sorted_values,
)

# The Prometheus names telemetry samples, TGI's (and the embedded engine's) first, then vLLM's.
# KV usage: vLLM publishes the fraction; TGI publishes the tokens the batch holds and its budget.
from tgi_toolkit.schema import (
    BATCH_SIZE_METRICS,
    KV_TOTAL_METRIC,
    KV_USAGE_METRICS,
    KV_USED_METRIC,
    QUEUE_SIZE_METRICS,
)

_SERVER_NEEDS = (S.T_S, S.METRIC, S.VALUE)


def _samples(server: pd.DataFrame | None, names: tuple[str, ...], run_id: str | None) -> pd.DataFrame:
    """Samples of the first metric in `names` the table has, summed over label sets at each time."""
    if server is None or server.empty:
        return pd.DataFrame(columns=[S.RUN_ID, S.T_S, S.VALUE])
    df = require_columns(server, _SERVER_NEEDS, "server samples")
    df = _one_run(df, run_id)
    for name in names:
        rows = df[df[S.METRIC] == name]
        if not rows.empty:
            keys = [c for c in (S.RUN_ID, S.T_S) if c in rows.columns]
            out = rows.groupby(keys, sort=True)[S.VALUE].sum().reset_index()
            return out if S.RUN_ID in out.columns else out.assign(**{S.RUN_ID: ""})
    return pd.DataFrame(columns=[S.RUN_ID, S.T_S, S.VALUE])


def _one_run(df: pd.DataFrame, run_id: str | None) -> pd.DataFrame:
    if run_id is None or S.RUN_ID not in df.columns:
        return df
    return df[df[S.RUN_ID] == run_id]


def server_timeline(server: pd.DataFrame | None, *, requests: pd.DataFrame | None = None,
                    run_id: str | None = None, title: str | None = None) -> go.Figure:
    """Queue size and running batch size over the run, as step lines; with `requests`, each request's
    TTFT at the moment it was sent, in a panel beneath on the same clock.

    Server samples need T_S, METRIC (tgi_queue_size / tgi_batch_current_size, or vLLM's
    num_requests_waiting / running) and VALUE; missing or empty samples leave a note, not an error.
    Requests need SENT_S and TTFT_S. Several runs in the tables: one line per run (each clock starts
    at 0), or pick one with `run_id`.
    """
    if requests is not None:
        require_columns(requests, [S.SENT_S, S.TTFT_S], "server_timeline requests")
    rows = 2 if requests is not None else 1
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=["Server: queue and running batch",
                                        "Client: TTFT of each request, at its send time"][:rows])
    drawn = 0
    for what, names, color in (("queue", QUEUE_SIZE_METRICS, "#d62728"), ("batch", BATCH_SIZE_METRICS, "#1f77b4")):
        samples = _samples(server, names, run_id)
        runs = sorted_values(samples[S.RUN_ID])
        for i, run in enumerate(runs):
            part = samples[samples[S.RUN_ID] == run]
            name = f"{what} size" + (f" ({run})" if len(runs) > 1 else "")
            fig.add_trace(go.Scatter(
                x=part[S.T_S], y=part[S.VALUE], mode="lines", name=name,
                line={"shape": "hv", "color": color, "dash": _dash(i)},
                hovertemplate=hover(f"<b>{name}</b>", "t: %{x:.2f} s", f"{what}: %{{y:.0f}} requests")), row=1, col=1)
            drawn += 1
    if not drawn:
        note(fig, f"no server samples of {' / '.join(QUEUE_SIZE_METRICS[:1] + BATCH_SIZE_METRICS[:1])}")
    fig.update_yaxes(title_text="Requests", rangemode="tozero", row=1, col=1)
    if requests is not None:
        _request_panel(fig, _one_run(measured(requests), run_id))
    fig.update_xaxes(title_text=axis_title(S.T_S), row=rows, col=1)
    return layout(fig, title or "Server queue and batch size over time", height=350 * rows)


def _dash(i: int) -> str:
    return ("solid", "dash", "dot", "dashdot", "longdash")[i % 5]


def _request_panel(fig: go.Figure, requests: pd.DataFrame) -> None:
    ttft, unit = scaled(requests, S.TTFT_S)
    failed = requests[S.ERROR].notna() if S.ERROR in requests.columns else pd.Series(False, index=requests.index)
    group_cols = [c for c in (S.POINT_ID,) if c in requests.columns]
    labels = ([series_label(r, group_cols) for r in requests[group_cols].to_dict("records")] if group_cols
              else ["requests"] * len(requests))
    labels = pd.Series(labels, index=requests.index)
    colors = color_map(labels)
    custom = np.column_stack([requests[c].map(integer_text).to_numpy() if c in requests.columns
                              else np.full(len(requests), "") for c in (S.REQUEST_INDEX, S.OUTPUT_TOKENS)])
    fmt = number_format(unit)
    for label, color in colors.items():
        for is_failed in (False, True):
            mask = (labels == label) & (failed == is_failed)
            if not is_failed:
                mask &= ttft.notna()
            if not mask.any():
                continue
            name = label + (" (failed)" if is_failed else "")
            y = ttft[mask].fillna(0.0)  # a failed request may have no TTFT: drawn on the axis
            fig.add_trace(go.Scatter(
                x=requests.loc[mask, S.SENT_S], y=y, mode="markers", name=name,
                marker={"color": color, "size": 6, "symbol": "x" if is_failed else "circle"},
                customdata=custom[mask.to_numpy()],
                hovertemplate=hover(f"<b>{name}</b>", "sent at %{x:.2f} s", f"TTFT: %{{y:{fmt}}} {unit}",
                                    "request #%{customdata[0]}, %{customdata[1]} output tokens")), row=2, col=1)
    if not colors:
        fig.add_annotation(text="no requests", xref="x2 domain", yref="y2 domain", x=0.5, y=0.5, showarrow=False)
    fig.update_yaxes(title_text=axis_title(S.TTFT_S, unit), rangemode="tozero", row=2, col=1)


def kv_usage_timeline(server: pd.DataFrame | None, *, run_id: str | None = None, title: str | None = None) -> go.Figure:
    """KV-cache usage (fraction of capacity) over the run: vLLM's kv_cache_usage_perc, or for TGI and the
    embedded engine tgi_batch_current_max_tokens / tgi_batch_max_total_tokens. Needs T_S, METRIC, VALUE;
    no such samples leave a note."""
    usage = _samples(server, KV_USAGE_METRICS, run_id)
    if usage.empty:
        held = _samples(server, (KV_USED_METRIC,), run_id)
        budget = _samples(server, (KV_TOTAL_METRIC,), run_id)
        if not held.empty and not budget.empty:
            # the budget is a constant gauge, sampled perhaps less often: take the latest one before each sample
            merged = pd.merge_asof(held.sort_values(S.T_S), budget.sort_values(S.T_S), on=S.T_S, by=S.RUN_ID,
                                   suffixes=("", "_budget"), direction="backward")
            capacity = merged[f"{S.VALUE}_budget"].replace(0, np.nan)
            usage = merged.assign(**{S.VALUE: merged[S.VALUE] / capacity})[[S.RUN_ID, S.T_S, S.VALUE]]
    fig = go.Figure()
    runs = sorted_values(usage[S.RUN_ID])
    for i, run in enumerate(runs):
        part = usage[usage[S.RUN_ID] == run]
        name = "KV-cache usage" + (f" ({run})" if len(runs) > 1 else "")
        fig.add_trace(go.Scatter(x=part[S.T_S], y=part[S.VALUE], mode="lines", name=name,
                                 line={"shape": "hv", "dash": _dash(i), "color": "#9467bd"},
                                 hovertemplate=hover(f"<b>{name}</b>", "t: %{x:.2f} s", "usage: %{y:.1%}")))
    if not runs:
        note(fig, f"no KV samples ({KV_USAGE_METRICS[0]}, or {KV_USED_METRIC} with {KV_TOTAL_METRIC})")
    fig.update_xaxes(title_text=axis_title(S.T_S))
    fig.update_yaxes(title_text="KV-cache usage (fraction of capacity)", tickformat=".0%", range=[0, 1.05])
    return layout(fig, title or "KV-cache usage over time")
