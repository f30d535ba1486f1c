"""The model card's content before rendering: its title, the parameters table, the measurement
conditions and the sections in card order; `tgi_toolkit.report` renders them as Markdown and HTML."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tgi_toolkit import schema as S
from tgi_toolkit.bench.main_metrics import (
    GENERATION,
    INGESTION,
    KV_CAPACITY,
    METRICS,
    main_metrics_table,
    run_info,
    split_by_config,
)
from tgi_toolkit.bench.results import as_results
from tgi_toolkit.report_figures import CardFigure

# The main metrics' column headers when configurations are rows; the legend above the table gives each
# happy_vllm's full row name.
_SHORT_HEADERS = {INGESTION: "Prompt ingestion", GENERATION: "Generation speed", KV_CAPACITY: "KV-cache capacity"}


# -- parameters ---------------------------------------------------------------------------------------------
def parameters(results: Any) -> pd.DataFrame:
    """The card's parameters table: for each configuration, where and how the server ran (model,
    backend, engine, versions, hardware, first run's start) then every launcher setting as recorded
    in the runs' provenance, and the budgets the server resolved at start-up. One column per
    configuration, one row per parameter, values as text."""
    results = as_results(results)
    columns: dict[str, dict[str, str]] = {}
    for config, part in split_by_config(results).items():
        runs = part.runs
        first = runs[0] if runs else {}
        info = run_info(part)
        versions = first.get("versions") or {}
        hardware = first.get("hardware") or {}
        gpus = ", ".join(g.get("name", "?") for g in hardware.get("gpus") or [])
        col: dict[str, str] = {
            "model": info.get("model_id") or (part.points[S.MODEL_ID].dropna().iloc[0]
                                              if part.points[S.MODEL_ID].notna().any() else "?"),
            "backend": first.get("backend", "?"),
            "server": " ".join(str(v) for v in (info.get("engine") or info.get("router"), info.get("version")) if v),
            "model_dtype": info.get("model_dtype"),
            "suite_started_at": first.get("started_at"),
            "runs": ", ".join(f"{r.get('scenario')} ({r.get('status')})" for r in runs),
            "tgi_toolkit_version": versions.get("tgi_toolkit"),
            "torch_version": versions.get("torch"),
            "transformers_version": versions.get("transformers"),
            "hardware": gpus or f"{hardware.get('cpu', '?')} ({hardware.get('cores_logical', '?')} cores, CPU)",
            "git_revision": ((first.get("git") or {}).get("revision") or "")[:12] or None,
        }
        launcher = next((r["launcher_config"] for r in runs if r.get("launcher_config")), None) or {}
        col.update({key: launcher[key] for key in launcher})
        for key in ("max_batch_total_tokens", "max_batch_prefill_tokens", "max_input_tokens", "max_total_tokens"):
            if info.get(key) is not None and launcher.get(key) != info[key]:
                col[f"{key} (resolved by the server)"] = info[key]
        columns[config] = {k: _cell(v) for k, v in col.items()}
    keys: list[str] = []
    for col in columns.values():
        keys += [k for k in col if k not in keys]
    return pd.DataFrame({name: [col.get(k, "") for k in keys] for name, col in columns.items()},
                        index=pd.Index(keys, name="parameter"))


def _cell(value: Any) -> str:
    # happy_vllm's table prints Python's repr of lists and None
    return "None" if value is None else str(value)


# -- the card ---------------------------------------------------------------------------------------------------
def card_title(results: Any) -> str:
    """The title, "Model card for MODEL on HARDWARE", from the runs' provenance."""
    info = run_info(results)
    model = (info.get("model_id") or "an unknown model").split("/")[-1]
    first = results.runs[0] if results.runs else {}
    hardware = first.get("hardware") or {}
    gpus = [g.get("name", "GPU") for g in hardware.get("gpus") or []]
    where = (f"{len(gpus)}x {gpus[0]}" if len(gpus) > 1 else gpus[0]) if gpus else \
        f"{hardware.get('cores_logical', '?')}-core CPU"
    return f"Model card for {model} on {where}"



@dataclass
class CardSection:
    """One section of the card, as report.py renders it in Markdown and HTML."""

    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[tuple[list[str], list[list[str]]]] = field(default_factory=list)
    figures: list[CardFigure] = field(default_factory=list)
    preformatted: str = ""


def card_sections(results: Any, metrics: pd.DataFrame, params: pd.DataFrame,
                  figures: Sequence[CardFigure]) -> list[CardSection]:
    """The card's sections in order: main metrics (and how each was obtained), measurement conditions where a
    point was flagged, the figures under their sections, then the launch parameters."""
    from tgi_toolkit.plots.labels import short_labels  # plotly comes with plots: imported when a card is written

    configs = list(dict.fromkeys(metrics["config_label"]))
    # configurations named by what differs between them, as in the figures; the parameters table has every setting
    name = short_labels([*configs, *params.columns])
    table = main_metrics_table(metrics)
    if len(configs) == 1:
        main = CardSection("Main metrics", ["The main metrics are summarized in the following table :"])
        main.tables.append((["Metric", "Value"], [[label, *cells] for label, cells in
                                                  zip(table.index, table.values.tolist(), strict=True)]))
    else:  # one row per configuration under short headers, so that 4 configurations fit a 1,280-pixel window
        short = [_SHORT_HEADERS.get(key, key) for key in METRICS]
        legend = "; ".join(f"{name}: {label}" for name, label in zip(short, table.index, strict=True))
        main = CardSection("Main metrics", [f"The main metrics are summarized in the following table, one row per "
                                            f"configuration ({legend}) :"])
        main.tables.append((["Configuration", *short],
                            [[name[config], *table[config].tolist()] for config in configs]))
    main.paragraphs.append("How each value was obtained:")
    main.tables.append((["Configuration", "Metric", "Basis"] if len(configs) > 1 else ["Metric", "Basis"],
                        [[*([name[r.config_label]] if len(configs) > 1 else []), r.label, r.basis]
                         for r in metrics.itertuples()]))
    sections = [main]
    conditions = _conditions(results, short_labels(results.points[S.CONFIG_LABEL]))
    if conditions is not None:
        sections.append(conditions)
    by_section: dict[str, CardSection] = {}
    intros = {
        "Total generation speed": "The following graph shows the total throughput with respect to the number of "
                                  "parallel queries for different scenarii :",
        "Generation speed and latency": "The following graphs show the throughput for each request with respect to "
                                        "the number of parallel queries, and the time to first token. The lines "
                                        "show the median whereas the bars show the 25th and 75th percentile.",
    }
    for fig in figures:
        if fig.section not in by_section:
            intro = [intros[fig.section]] if fig.section in intros else []
            by_section[fig.section] = CardSection(fig.section, intro)
            sections.append(by_section[fig.section])
        by_section[fig.section].figures.append(fig)
    if len(results.batch) and "Batch benchmark (text-generation-benchmark)" in by_section:
        with contextlib.suppress(Exception):  # the tables are extra: a partial batch run still gets its figure
            by_section["Batch benchmark (text-generation-benchmark)"].preformatted = results.tables()
    launched = CardSection("Parameters", ["The server was launched using the following arguments :"])
    launched.tables.append((["Parameter", *(name[c] for c in params.columns)] if len(params.columns) > 1
                            else ["Parameter", "Value"],
                            [[k, *row] for k, row in zip(params.index, params.values.tolist(), strict=True)]))
    sections.append(launched)
    return sections


def _conditions(results: Any, name: dict[str, str]) -> CardSection | None:
    """The points whose numbers the machine stretched: measured while other processes took CPU
    (machine_busy), while the benchmark client itself was the bottleneck (client_bound), or with the users
    in step (lockstep)."""
    points = results.points
    flags = {S.MACHINE_BUSY: "machine busy (other processes took CPU)",
             S.CLIENT_BOUND: "client-bound (the benchmark client's own CPU limited the point)",
             S.LOCKSTEP: "lockstep (the users sent in step: TTFT and ITL show that phase; run with a ramp-up)"}
    marked = pd.Series(False, index=points.index)
    for column in flags:
        if column in points:
            marked |= points[column].fillna(False).astype(bool)
    if not marked.any():
        return None
    rows = []
    for _, point in points[marked].iterrows():
        said = [text for column, text in flags.items() if column in points and pd.notna(point[column])
                and bool(point[column])]
        other = point.get(S.OTHER_CPU_CORES)
        load = f"{other:.1f}" if isinstance(other, float) and np.isfinite(other) else "-"
        rows.append([name.get(str(point[S.CONFIG_LABEL]), str(point[S.CONFIG_LABEL] or point[S.CONFIG_ID] or "")),
                     str(point[S.SCENARIO]),
                     str(point[S.POINT_ID]), "; ".join(said), load])
    section = CardSection("Measurement conditions", [
        f"{int(marked.sum())} of {len(points)} points were measured under conditions other than the server's "
        f"own (Flag): the machine or the client limited them (latencies stretched, throughputs understated), or "
        f"their users sent in step (TTFT and ITL show that phase). Measure again on an idle machine, with a "
        f"ramp-up, before comparing them."])
    section.tables.append((["Configuration", "Scenario", "Point", "Flag", "Other processes (cores)"], rows))
    return section
