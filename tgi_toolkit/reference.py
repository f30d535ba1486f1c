"""Published results from the seeds (`data/reference/`), read into the same tables as our own runs.

    >>> from tgi_toolkit.reference import list_references, load_reference
    >>> list_references()
    ['happy-vllm-codellama-7b-a100', 'happy-vllm-phi-3-vision-a100-rerun', 'happy-vllm-phi-3-vision-h100',
     'happy-vllm-phi-3-vision-h100-rerun', 'tgi-benchmark-mt0-xxl']
    >>> ref = load_reference("tgi-benchmark-mt0-xxl")
    >>> ref.batch          # batch.parquet columns: one row per batch size, the published averages

Where a published number and one of our result columns mean the same thing it lands in that column
(BATCH_COLUMNS, POINT_COLUMNS), so plots and comparisons take a reference exactly as they take a run.
What has no counterpart stays in `tables` / `main_metrics` as published, units and all; `data/README.md`
says where each file comes from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tgi_toolkit import schema as S
from tgi_toolkit.bench.results import frame  # the dtypes a results folder gives back
from tgi_toolkit.data_folder import REFERENCE_SUBDIR, data_dirs, default_data_dir


def _found_or_first() -> Path:
    try:
        return default_data_dir()
    except FileNotFoundError:
        return data_dirs()[0]


# The data folder at import time (importing never fails: `default_data_dir()` says what is missing).
DATA_DIR = _found_or_first()

# batch_stats: which statistic a row holds (keys of schema.BATCH_STATS: average, lowest, ...).
STAT = S.STAT

# text-generation-benchmark's table rows -> batch.parquet columns, and the factor to our units.
_LATENCY_STEPS = {"Prefill": S.PREFILL_LATENCY_S, "Decode (token)": S.DECODE_TOKEN_LATENCY_S,
                  "Decode (total)": S.DECODE_TOTAL_LATENCY_S}
_THROUGHPUT_STEPS = {"Prefill": S.PREFILL_THROUGHPUT, "Decode": S.DECODE_THROUGHPUT}
_TO_SECONDS = {"ms": 1e-3, "s": 1.0}
_BATCH_METRICS = (*_LATENCY_STEPS.values(), *_THROUGHPUT_STEPS.values())

# happy_vllm main metrics -> points.parquet columns (the rest stay in main_metrics only).
_POINT_METRICS = {"generation_speed_per_request": S.stat_column(S.SPEED_METRIC, "mean"),
                  "kv_cache_capacity": S.KV_CAPACITY_TOKENS}


@dataclass(frozen=True)
class Reference:
    """One published result set: its files as published, and views in our result schema."""

    name: str
    path: Path
    meta: dict[str, Any]
    tables: pd.DataFrame = field(repr=False)  # text-generation-benchmark tables as published ('' if none)
    main_metrics: pd.DataFrame = field(repr=False)  # happy_vllm's main metrics as published
    launch_parameters: dict[str, Any] = field(repr=False)  # happy_vllm's launch table, values parsed

    @property
    def label(self) -> str:
        return str(self.meta.get("label", self.name))

    @property
    def source(self) -> str:
        return str(self.meta.get("source", ""))

    def _identity(self, scenario: str, point_id: str) -> dict[str, Any]:
        return {S.RUN_ID: f"reference:{self.name}", S.CONFIG_ID: "", S.CONFIG_LABEL: self.label,
                S.BACKEND: self.meta.get("backend", ""), S.MODEL_ID: self.meta.get("model_id", ""),
                S.SCENARIO: scenario, S.POINT_ID: point_id}

    @cached_property
    def batch_stats(self) -> pd.DataFrame:
        """One row per (batch size, statistic) with BATCH_COLUMNS' metrics in our units; column STAT.

        Statistics a table did not publish (throughput p50/p90/p99) are NaN.
        """
        if self.tables.empty:
            return frame([], "batch").assign(**{STAT: pd.Series(dtype=object)})
        experiment = self.meta.get("experiment", {})
        seq, dec = experiment.get("sequence_length"), experiment.get("decode_length")
        rows: dict[tuple[int, str], dict[str, Any]] = {}
        for rec in self.tables.to_dict("records"):
            size = int(rec["batch_size"])
            if rec["table"] == "latency":
                column, factor = _LATENCY_STEPS[rec["step"]], _TO_SECONDS[rec["unit"]]
            else:
                column = _THROUGHPUT_STEPS[rec["step"]]
                # text-generation-benchmark counts one prefill token per request (B / latency);
                # prefill_throughput_tok_s counts the prompt tokens (B * S / latency).
                factor = float(seq) if column == S.PREFILL_THROUGHPUT else 1.0
            for stat, published in S.BATCH_STATS.items():
                row = rows.setdefault((size, stat), {
                    **self._identity("batch", f"batch={size},sequence={seq},decode={dec}"),
                    S.BATCH_SIZE: size, S.SEQUENCE_LENGTH: seq, S.DECODE_LENGTH: dec,
                    S.REPEAT: None,  # no run number: these summarise all the runs (nullable Int64)
                    S.WARMUP: False, STAT: stat})
                value = rec.get(published.lower())
                row[column] = float(value) * factor if pd.notna(value) else np.nan
        return frame(list(rows.values()), "batch")

    @cached_property
    def batch(self) -> pd.DataFrame:
        """batch.parquet rows: one per batch size holding the published averages (REPEAT is <NA>)."""
        stats = self.batch_stats
        return stats[stats[STAT] == "average"].drop(columns=STAT).reset_index(drop=True)

    @cached_property
    def points(self) -> pd.DataFrame:
        """points.parquet rows: the one concurrency point a happy_vllm card states (10 users, 1024/128)."""
        if self.main_metrics.empty:
            return frame([], "points")
        speed = self.main_metrics.set_index("metric").loc["generation_speed_per_request"]
        users, prompt, output = (int(speed[c]) for c in ("parallel_requests", "prompt_tokens", "output_tokens"))
        row: dict[str, Any] = {
            **self._identity("concurrency", f"users={users},prompt={prompt},output={output}"),
            S.USERS: users, S.PROMPT_TOKENS: prompt, S.MAX_NEW_TOKENS: output}
        for rec in self.main_metrics.to_dict("records"):
            if rec["metric"] in _POINT_METRICS:
                row[_POINT_METRICS[rec["metric"]]] = float(rec["value"])
        return frame([row], "points")

    def metric(self, name: str) -> float:
        """A main metric's value, e.g. `metric("prompt_ingestion_speed") == 13500.0` (tokens/s)."""
        found = self.main_metrics[self.main_metrics["metric"] == name]
        if found.empty:
            have = ", ".join(self.main_metrics["metric"]) or "none"
            raise KeyError(f"{self.name} publishes no metric {name!r} (it has: {have})")
        return float(found["value"].iloc[0])

    def card_metrics(self) -> pd.DataFrame:
        """The card's "Main metrics" in the rows `bench.main_metrics.main_metrics` gives ours (columns
        COLUMNS: config_label is this reference's label, label and text as printed, basis names the seed),
        so `main_metrics_table(pd.concat([main_metrics(ours), ref.card_metrics()]))` sets them side by side."""
        from tgi_toolkit.bench.main_metrics import COLUMNS, CONFIG_LABEL, GENERATION, point_text

        rows = []
        for rec in self.main_metrics.to_dict("records"):
            point = (point_text(*(int(rec[c]) for c in ("parallel_requests", "prompt_tokens", "output_tokens")))
                     if rec["metric"] == GENERATION else "")
            rows.append({CONFIG_LABEL: self.label, "metric": rec["metric"], "label": rec["printed_metric"],
                         "value": float(rec["value"]), "unit": rec["unit"], "text": rec["printed_value"],
                         "basis": f"published ({self.source or self.name})", "point": point})
        return pd.DataFrame(rows, columns=list(COLUMNS))

    def main_metrics_table(self) -> pd.DataFrame:
        """The card's "Main metrics" as `bench.main_metrics.main_metrics_table` shows ours: one row per
        metric (the printed row names), one column (this reference's label), the cells as printed.
        Empty for a reference that publishes none."""
        from tgi_toolkit.bench.main_metrics import main_metrics_table

        if self.main_metrics.empty:
            return pd.DataFrame()
        return main_metrics_table(self.card_metrics())

    def launcher_config(self) -> Any:
        """The published server settings as a LauncherConfig (TGI arguments, or the mapped vLLM ones)."""
        from tgi_toolkit.config import LauncherConfig, from_vllm_table

        if "deployment_arguments" in self.meta:
            return LauncherConfig.create(**self.meta["deployment_arguments"])
        if self.launch_parameters:
            # from_vllm_table holds the one vLLM -> launcher mapping; hand it the table it reads.
            lines = ["|Parameter|Value|", "| :---: | :---: |",
                     *(f"|{k}|{_cell_text(v)}|" for k, v in self.launch_parameters.items())]
            return from_vllm_table("\n".join(lines))[0]
        raise ValueError(f"{self.name} publishes no server settings")


def _cell_text(value: Any) -> str:
    # happy_vllm writes Python reprs for lists and None/True/False, plain text for strings.
    return value if isinstance(value, str) else repr(value)


def _reference_root(data_dir: str | Path | None) -> Path:
    return (Path(data_dir) if data_dir is not None else default_data_dir()) / REFERENCE_SUBDIR


def list_references(data_dir: str | Path | None = None) -> list[str]:
    """Names of the reference result sets under `data_dir/reference` (default: `default_data_dir()`;
    none when there is no data folder)."""
    try:
        root = _reference_root(data_dir)
    except FileNotFoundError:
        return []
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "meta.json").is_file())


def load_reference(name: str, data_dir: str | Path | None = None) -> Reference:
    """Read one reference set (see `list_references`); KeyError naming the available ones if unknown,
    FileNotFoundError naming the places looked when there is no data folder at all."""
    path = _reference_root(data_dir) / name
    if not (path / "meta.json").is_file():
        raise KeyError(f"no reference result set {name!r} in {path.parent}; available: "
                       f"{', '.join(list_references(data_dir)) or 'none'}")
    meta = json.loads((path / "meta.json").read_text())
    files: Mapping[str, str] = meta.get("files", {})

    def csv(key: str) -> pd.DataFrame:
        return pd.read_csv(path / files[key]) if key in files else pd.DataFrame()

    launch = json.loads((path / files["launch_parameters"]).read_text()) if "launch_parameters" in files else {}
    return Reference(name=name, path=path, meta=meta, tables=csv("batch_benchmark"),
                     main_metrics=csv("main_metrics"), launch_parameters=launch)


def load_references(data_dir: str | Path | None = None) -> dict[str, Reference]:
    """Every reference set, by name."""
    return {name: load_reference(name, data_dir) for name in list_references(data_dir)}
