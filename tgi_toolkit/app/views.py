"""What the benchmark tab shows of a results folder: figures, a summary table per point, the model
card's main metrics and text-generation-benchmark's tables. Plain functions of `Results`.

The figures are the model card's (`tgi_toolkit.report_figures.card_figures`), so the app, the card and the
notebooks draw the same pictures; while a run goes only the scenario's main figure is redrawn
after each point (drawing them all takes a second or two).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from tgi_toolkit import schema as S

# points table: (column, header, factor): latencies shown in ms, throughputs as they are.
_POINT_COLUMNS = (
    (S.SCENARIO, "scenario", None), (S.USERS, "users", None), (S.BATCH_SIZE, "batch", None),
    (S.PROMPT_TOKENS, "prompt tok", None), (S.MAX_NEW_TOKENS, "output tok", None),
    (S.REQUESTS, "requests", None), (S.ERRORS, "errors", None),
    (S.OUTPUT_THROUGHPUT, "throughput (tok/s)", 1.0),
    (S.stat_column("ttft", "p50"), "TTFT p50 (ms)", 1000.0), (S.stat_column("tpot", "p50"), "TPOT p50 (ms)", 1000.0),
    (S.stat_column("itl", "p50"), "ITL p50 (ms)", 1000.0), (S.stat_column("e2e", "p50"), "E2E p50 (s)", 1.0),
    (S.stat_column(S.SPEED_METRIC, "mean"), "speed mean (tok/s)", 1.0),
)


def points_table(results: Any) -> pd.DataFrame:
    """One row per measured point with the numbers people compare first; columns the results do not
    have (no batch size in a concurrency run) are left out, latencies in ms, rounded for reading."""
    points = results.points
    if points.empty:
        return pd.DataFrame(columns=[header for _, header, _ in _POINT_COLUMNS])
    out = {}
    for column, header, factor in _POINT_COLUMNS:
        if column not in points.columns or points[column].isna().all():
            continue
        values = points[column]
        if factor is not None:
            values = (pd.to_numeric(values, errors="coerce") * factor).round(2 if factor == 1.0 else 1)
        out[header] = values.astype(object).where(values.notna(), "")  # blank, not <NA>, in the page
    return pd.DataFrame(out).reset_index(drop=True)


def main_metrics_table(results: Any) -> pd.DataFrame:
    """happy_vllm's model-card main metrics (`tgi_toolkit.bench.main_metrics`) with how each was got."""
    from tgi_toolkit.bench.main_metrics import CONFIG_LABEL, main_metrics

    if results.points.empty and results.requests.empty:
        return pd.DataFrame(columns=["metric", "value", "how it was obtained"])
    table = main_metrics(results)
    out = pd.DataFrame({"metric": table["label"], "value": table["text"], "how it was obtained": table["basis"]})
    if table[CONFIG_LABEL].nunique() > 1:
        out.insert(0, "configuration", table[CONFIG_LABEL])
    return out


def batch_markdown(results: Any) -> str:
    """text-generation-benchmark's tables for the batch runs (empty without one)."""
    if results.batch.empty:
        return ""
    return results.tables()


def figures(results: Any) -> dict[str, Any]:
    """The model card's figures these results can draw, as {title: plotly figure}, in card order."""
    from tgi_toolkit.report_figures import card_figures

    out: dict[str, Any] = {}
    for figure in card_figures(results):
        title = figure.figure.layout.title.text or figure.name
        out[title if title not in out else f"{title} ({figure.name})"] = figure.figure
    return out


def live_figure(results: Any, scenario: str) -> Any:
    """The scenario's main figure from the points saved so far (None before the first point)."""
    from tgi_toolkit import plots

    if scenario == "concurrency":
        points = results.points[results.points[S.SCENARIO] == "concurrency"]
        return plots.throughput_vs_users(points) if len(points) else None
    if scenario == "batch":
        return plots.batch_latency_throughput(results.batch) if len(results.batch) else None
    requests = results.requests[results.requests[S.SCENARIO] == "ingestion"]
    return plots.ingestion_plot(requests) if len(requests) else None


def headline(results: Any) -> str:
    """One sentence with the run's best throughput, for the status box ('' when there is none)."""
    points = results.points
    if points.empty or points[S.OUTPUT_THROUGHPUT].isna().all():
        return ""
    best = points.loc[pd.to_numeric(points[S.OUTPUT_THROUGHPUT], errors="coerce").idxmax()]
    ttft = best.get(S.stat_column("ttft", "p50"))
    ttft_text = f", TTFT p50 {ttft * 1000:.0f} ms" if ttft is not None and not pd.isna(ttft) and math.isfinite(ttft) \
        else ""
    return (f"Best output throughput: {best[S.OUTPUT_THROUGHPUT]:.1f} tok/s at `{best[S.POINT_ID]}`"
            f"{ttft_text}.")


__all__ = ["batch_markdown", "figures", "headline", "live_figure", "main_metrics_table", "points_table"]
