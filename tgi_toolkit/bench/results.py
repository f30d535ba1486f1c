"""Results on disk and in memory: the schema's tables as DataFrames, written as a run goes.

Each finished point is appended at once (requests, then batch, then points: a row in
points.parquet marks the point finished), so a crash or Ctrl-C loses no finished point; a rerun
finds the unfinished run by its `resume_key` (an extra key of runs/<run_id>.json: a hash of the
scenario, its parameters, the configuration and the model) and runs only the missing points.

A table file is rewritten whole (to a temporary file, then renamed) under a lock on the folder,
so readers never see half a file and runs sharing a folder do not lose each other's rows.
In-memory results go through the same parquet encoding, so `load_results(folder)` gives back
exactly the DataFrames a run returned.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tgi_toolkit import schema as S

# card_metrics, not main_metrics: that module reads folders with this one, so it sits above it
from tgi_toolkit.bench.card_metrics import CARD_MAX_NEW_TOKENS, CARD_PROMPT_TOKENS, CARD_USERS, main_metrics_of

if TYPE_CHECKING:  # bench.stats imports the HTTP client: loaded only when a fit is made
    from tgi_toolkit.bench.stats import IngestionFit

TABLES = {"requests": S.REQUEST_COLUMNS, "points": S.POINT_COLUMNS, "batch": S.BATCH_COLUMNS,
          "server": S.SERVER_COLUMNS}
_INT = "Int64"  # nullable: a scenario without the knob leaves it empty
_DTYPES: dict[str, str] = {
    S.USERS: _INT, S.BATCH_SIZE: _INT, S.PROMPT_TOKENS: _INT, S.MAX_NEW_TOKENS: _INT, S.RATE_RPS: "float64",
    S.REPEAT: "int64", S.WARMUP: "bool", S.REQUEST_INDEX: "int64", S.INPUT_TOKENS: _INT,
    S.OUTPUT_TOKENS: "int64", S.SHORT_OUTPUT: "bool", S.STATUS: "int64", S.REQUESTS: "int64",
    S.ERRORS: "int64", S.SHORT_OUTPUTS: "int64", S.TOTAL_INPUT_TOKENS: "int64",
    S.TOTAL_OUTPUT_TOKENS: "int64", S.CLIENT_BOUND: "bool", S.MACHINE_BUSY: "bool", S.SEQUENCE_LENGTH: "int64",
    S.DECODE_LENGTH: "int64", S.LOCKSTEP: "bool", S.GROUP: _INT, S.TURN: _INT,
}
_STRINGS = {S.RUN_ID, S.CONFIG_ID, S.CONFIG_LABEL, S.BACKEND, S.MODEL_ID, S.SCENARIO, S.POINT_ID, S.ARRIVAL,
            S.FINISH_REASON, S.SERVER_FINISH_REASON, S.ERROR, S.ERROR_MESSAGE, S.METRIC, S.LABELS}


def _typed(rows: Sequence[dict[str, Any]] | pd.DataFrame, table: str) -> pd.DataFrame:
    columns = TABLES[table]
    df = rows.copy() if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    for column in columns:
        if column not in df.columns:
            df[column] = None
    extra = [c for c in df.columns if c not in columns]
    df = df[[*columns, *extra]]
    for column in df.columns:
        if column in _STRINGS or column == S.ITL_S:
            df[column] = df[column].astype(object)
        elif column in _DTYPES:
            dtype = _DTYPES[column]
            if df[column].isna().any():  # a row without the value: the nullable kind keeps it
                dtype = {"int64": _INT, "bool": "boolean"}.get(dtype, dtype)
            df[column] = df[column].astype(dtype)
        elif column in columns:
            df[column] = pd.to_numeric(df[column], errors="coerce").astype("float64")
    if S.ITL_S in df.columns:
        gaps = [[float(g) for g in v] if v is not None else [] for v in df[S.ITL_S]]
        df[S.ITL_S] = pd.Series(gaps, index=df.index, dtype=object)
    return df.reset_index(drop=True)


def _write(df: pd.DataFrame, where: Any) -> None:
    # Column types fixed by the schema, not by the values: an all-empty error column is still
    # text and ITL still a list of floats, so files and frames agree whatever a point held.
    table = pa.Table.from_pandas(df, preserve_index=False)
    for i, name in enumerate(table.column_names):
        want = pa.string() if name in _STRINGS else pa.list_(pa.float64()) if name == S.ITL_S else None
        if want is not None and table.schema.field(i).type != want:
            table = table.set_column(i, pa.field(name, want), table.column(i).cast(want))
    pq.write_table(table, where)


def _roundtrip(df: pd.DataFrame) -> pd.DataFrame:
    buffer = io.BytesIO()
    _write(df, buffer)
    buffer.seek(0)
    return pd.read_parquet(buffer)


def frame(rows: Sequence[dict[str, Any]] | pd.DataFrame, table: str) -> pd.DataFrame:
    """Rows as the schema's table, with the dtypes a parquet file gives back."""
    return _roundtrip(_typed(rows, table))


def empty(table: str) -> pd.DataFrame:
    return frame([], table)


@dataclass
class Results:
    """The tables of one run (or of a folder of runs) and their provenance.

    requests: one row per request (schema.REQUEST_COLUMNS); points: one row per measured point
    (POINT_COLUMNS); batch: text-generation-benchmark rows (BATCH_COLUMNS); server: /metrics,
    process and GPU samples (SERVER_COLUMNS); runs: runs/<run_id>.json dicts (PROVENANCE_KEYS).
    """

    requests: pd.DataFrame = field(default_factory=lambda: empty("requests"))
    points: pd.DataFrame = field(default_factory=lambda: empty("points"))
    batch: pd.DataFrame = field(default_factory=lambda: empty("batch"))
    server: pd.DataFrame = field(default_factory=lambda: empty("server"))
    runs: list[dict[str, Any]] = field(default_factory=list)
    path: Path | None = None

    def __repr__(self) -> str:
        where = f" at {self.path}" if self.path else ""
        return (f"Results({len(self.runs)} run(s){where}: {len(self.points)} points, {len(self.requests)} requests, "
                f"{len(self.batch)} batch rows, {len(self.server)} server samples)")

    @property
    def run_ids(self) -> list[str]:
        return [r["run_id"] for r in self.runs]

    def run(self, run_id: str) -> Results:
        """The rows of one run."""
        def pick(df: pd.DataFrame) -> pd.DataFrame:
            return df[df[S.RUN_ID] == run_id].reset_index(drop=True)

        return Results(pick(self.requests), pick(self.points), pick(self.batch), pick(self.server),
                       [r for r in self.runs if r["run_id"] == run_id], self.path)

    def select(self, run_ids: Sequence[str]) -> Results:
        """The rows of these runs only: a folder reused with other parameters also holds other runs'
        points, which summaries of one session (main metrics, a card, figures) must leave out."""
        wanted = set(run_ids)

        def pick(df: pd.DataFrame) -> pd.DataFrame:
            return df[df[S.RUN_ID].isin(wanted)].reset_index(drop=True)

        return Results(pick(self.requests), pick(self.points), pick(self.batch), pick(self.server),
                       [r for r in self.runs if r["run_id"] in wanted], self.path)

    def tables(self, run_id: str | None = None) -> str:
        """text-generation-benchmark's tables (seed 000) for the batch runs, as Markdown."""
        from tgi_toolkit.bench.tables import batch_tables

        return batch_tables(self if run_id is None else self.run(run_id))

    def main_metrics(self, users: int = CARD_USERS, prompt_tokens: int = CARD_PROMPT_TOKENS,
                     max_new_tokens: int = CARD_MAX_NEW_TOKENS) -> pd.DataFrame:
        """happy_vllm's "Main metrics" per configuration, with how each was obtained: the model card's
        (`tgi_toolkit.bench.main_metrics.main_metrics`)."""
        return main_metrics_of(self, users, prompt_tokens, max_new_tokens)

    def ingestion(self) -> IngestionFit:
        """The prompt-ingestion fit (stats.ingestion_fit) over the ingestion runs' requests; its `kept`
        is a boolean Series over `self.requests`' index: True for the requests the line was fitted to
        (`self.requests[fit["kept"]]`), False for outliers and every other request."""
        from tgi_toolkit.bench.stats import ingestion_fit

        rows = self.requests[(self.requests[S.SCENARIO] == "ingestion") & ~self.requests[S.WARMUP]
                             & self.requests[S.ERROR].isna()]
        lengths = rows[S.INPUT_TOKENS].astype("float64").fillna(rows[S.PROMPT_TOKENS].astype("float64"))
        fit = ingestion_fit(lengths.to_numpy(), rows[S.TTFT_S].to_numpy())
        fit["kept"] = pd.Series(fit["kept"], index=rows.index).reindex(self.requests.index, fill_value=False)
        return fit


# -- the folder --------------------------------------------------------------------------------
def _read(path: Path, table: str) -> pd.DataFrame:
    return pd.read_parquet(path) if path.exists() else empty(table)


def as_results(results_or_folder: Results | str | os.PathLike[str]) -> Results:
    """`results_or_folder` itself when it is a Results, else the Results in that folder."""
    if isinstance(results_or_folder, (str, os.PathLike)):
        return load_results(results_or_folder)
    return results_or_folder


def load_results(folder: str | os.PathLike[str], run_id: str | None = None) -> Results:
    """The tables and provenance in a results folder (all runs, or one)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a results folder")
    tables = {name: _read(folder / f"{name}.parquet", name) for name in TABLES}
    runs = []
    for path in sorted((folder / "runs").glob("*.json")):
        with contextlib.suppress(ValueError, OSError):
            runs.append(json.loads(path.read_text()))
    runs.sort(key=lambda r: r.get("started_at") or "")
    results = Results(tables["requests"], tables["points"], tables["batch"], tables["server"], runs, folder)
    return results.run(run_id) if run_id is not None else results


def _stamp(path: Path) -> tuple[int, int, int]:
    """What tells one version of a table file from another: every write renames a new file into
    place (a new inode), so the inode changes even when a rewrite of the same size lands within the
    filesystem's timestamp granularity, where (mtime, size) alone would serve a stale table."""
    stat = path.stat()
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


class ResultsFolder:
    """Appends to the tables of one folder and keeps its runs/<run_id>.json files."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.path = Path(folder)
        (self.path / "runs").mkdir(parents=True, exist_ok=True)
        self._cache: dict[str, tuple[tuple[int, int, int], pd.DataFrame]] = {}

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with open(self.path / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _file(self, table: str) -> Path:
        return self.path / f"{table}.parquet"

    def _load(self, table: str) -> pd.DataFrame:
        path = self._file(table)
        if not path.exists():
            return empty(table)
        key = _stamp(path)
        cached = self._cache.get(table)
        if cached is not None and cached[0] == key:
            return cached[1]
        df = pd.read_parquet(path)
        self._cache[table] = (key, df)
        return df

    def _store(self, table: str, df: pd.DataFrame) -> None:
        path = self._file(table)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        _write(df, tmp)
        os.replace(tmp, path)
        self._cache[table] = (_stamp(path), df)

    def append(self, tables: dict[str, pd.DataFrame]) -> None:
        """Append frames (from `frame`) to their tables; `points` last: it marks the point finished."""
        with self.locked():
            for table in ("server", "requests", "batch", "points"):
                new = tables.get(table)
                if new is None or new.empty:
                    continue
                old = self._load(table)
                self._store(table, new if old.empty else pd.concat([old, new], ignore_index=True))

    def table(self, table: str) -> pd.DataFrame:
        with self.locked():
            return self._load(table)

    def finished_points(self, run_id: str) -> set[str]:
        points = self.table("points")
        return set(points.loc[points[S.RUN_ID] == run_id, S.POINT_ID])

    def drop_unfinished(self, run_id: str, finished: set[str]) -> None:
        """Remove rows a run wrote for points that never finished (they will be measured again)."""
        with self.locked():
            for table in ("requests", "batch"):
                df = self._load(table)
                stale = (df[S.RUN_ID] == run_id) & ~df[S.POINT_ID].isin(finished)
                if stale.any():
                    self._store(table, df[~stale].reset_index(drop=True))

    def drop_run(self, run_id: str) -> None:
        """Remove a run from the folder: its rows in every table and its record (a rerun replacing it)."""
        with self.locked():
            for table in TABLES:
                df = self._load(table)
                mine = df[S.RUN_ID] == run_id
                if mine.any():
                    self._store(table, df[~mine].reset_index(drop=True))
            (self.path / "runs" / f"{run_id}.json").unlink(missing_ok=True)

    # -- provenance ------------------------------------------------------------------------------
    def write_run(self, run: dict[str, Any]) -> None:
        path = self.path / "runs" / f"{run['run_id']}.json"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(run, indent=2, default=str))
        os.replace(tmp, path)

    def find_run(self, resume_key: str) -> dict[str, Any] | None:
        """The latest run made with this resume key, if any."""
        found = []
        for path in (self.path / "runs").glob("*.json"):
            with contextlib.suppress(ValueError, OSError):
                run = json.loads(path.read_text())
                if run.get("resume_key") == resume_key:
                    found.append(run)
        return max(found, key=lambda r: r.get("started_at") or "", default=None)
