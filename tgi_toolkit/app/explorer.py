"""The explorer tab without Gradio: result sets by name, results folders as zips, and comparisons.

A result set is anything the figures of `tgi_toolkit.plots` take: a seed's published results
(`data/reference/`, through `tgi_toolkit.reference`), a committed example run (`data/examples/`), a
run made in the app, or a results folder a user uploads as a zip. Each is named once in a `Catalog`;
`compare()` draws the chosen ones side by side with `plots.compare_points` / `plots.compare_batch`
and sets their model-card main metrics next to each other.
"""

from __future__ import annotations

import shutil
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from tgi_toolkit import schema as S
from tgi_toolkit.bench.main_metrics import GENERATION, INGESTION, KV_CAPACITY, METRICS

# Uploaded zips are opened on a shared machine: refuse archives that would fill its disk.
MAX_UNZIPPED_BYTES = 512 * 1024 * 1024
MAX_MEMBERS = 10_000
_SKIPPED = (".lock",)  # a results folder's lock file: nothing a reader needs
LOAD_SCENARIOS = ("concurrency", "rate")  # points drawn against load (ingestion points are one user each)
METRIC_KEYS = METRICS  # the main metrics' keys, as published cards and `main_metrics` name them
METRIC_LABELS = {INGESTION: "Prompt ingestion speed",
                 GENERATION: "Generation speed per request (happy_vllm's 10 users, 1024/128)",
                 KV_CAPACITY: "KV-cache capacity"}


class ResultsFileError(ValueError):
    """An uploaded file that is not a usable results folder; the message says why."""


@dataclass
class ResultSet:
    """One set to compare: its points and batch rows in the schema's columns, and its main metrics."""

    name: str
    kind: str  # reference | example | run | upload
    points: pd.DataFrame
    batch: pd.DataFrame  # batch.parquet rows, or a reference's batch_stats (published statistics)
    metrics: dict[str, str] = field(default_factory=dict)  # METRIC_KEYS -> the value as printed
    source: str = ""

    @property
    def load_points(self) -> pd.DataFrame:
        return self.points[self.points[S.SCENARIO].isin(LOAD_SCENARIOS)]


def reference_set(name: str, data_dir: str | Path | None = None) -> ResultSet:
    """A seed's published results (`tgi_toolkit.reference`) as a ResultSet."""
    from tgi_toolkit.reference import load_reference

    ref = load_reference(name, data_dir)
    return ResultSet(f"reference: {ref.label}", "reference", ref.points, ref.batch_stats,
                     _metric_texts(ref.card_metrics()), ref.source)


def folder_set(name: str, folder: str | Path, kind: str) -> ResultSet:
    """A results folder (one run or many) as a ResultSet; its main metrics from `tgi_toolkit.bench.main_metrics`."""
    from tgi_toolkit.bench import load_results
    from tgi_toolkit.bench.main_metrics import main_metrics

    results = load_results(folder)
    metrics = {} if results.points.empty and results.requests.empty else _metric_texts(main_metrics(results))
    return ResultSet(name, kind, results.points, results.batch[~results.batch[S.WARMUP].astype(bool)]
                     if len(results.batch) else results.batch, metrics, str(folder))


def _metric_texts(table: pd.DataFrame) -> dict[str, str]:
    """METRIC_KEYS -> the cells of a `main_metrics` frame ('; '-joined over configurations); {} for none."""
    if table.empty:
        return {}
    return {key: "; ".join(table.loc[table["metric"] == key, "text"]) or "-" for key in METRIC_KEYS}


class Catalog:
    """The result sets the explorer offers, by display name; each is read when first chosen."""

    def __init__(self, data_dir: str | Path | None = None) -> None:
        from tgi_toolkit.reference import DATA_DIR, list_references

        self.data_dir = Path(data_dir) if data_dir is not None else DATA_DIR
        self._loaders: dict[str, Callable[[], ResultSet]] = {}
        self._cache: dict[str, ResultSet] = {}
        self.kinds: dict[str, str] = {}
        for ref in list_references(self.data_dir):
            # the display name holds the label, known only once read: reading meta.json is cheap
            loaded = reference_set(ref, self.data_dir)
            self._register(loaded.name, "reference", lambda loaded=loaded: loaded)
        examples = self.data_dir / "examples"
        if examples.is_dir():
            for folder in sorted(p for p in examples.iterdir() if (p / "points.parquet").is_file()):
                self.add_folder(f"example: {folder.name}", folder, "example")

    def _register(self, name: str, kind: str, loader: Callable[[], ResultSet]) -> str:
        self._loaders[name], self.kinds[name] = loader, kind
        self._cache.pop(name, None)
        return name

    def names(self, kind: str | None = None) -> list[str]:
        return [n for n in self._loaders if kind is None or self.kinds[n] == kind]

    def unique_name(self, name: str) -> str:
        """`name`, or `name (2)`, ... when taken."""
        candidate, n = name, 1
        while candidate in self._loaders:
            n += 1
            candidate = f"{name} ({n})"
        return candidate

    def add_folder(self, name: str, folder: str | Path, kind: str) -> str:
        """Offer a results folder under `name` (made unique); returns the name used."""
        name = self.unique_name(name)
        return self._register(name, kind, lambda: folder_set(name, folder, kind))

    def load(self, name: str) -> ResultSet:
        if name not in self._loaders:
            raise KeyError(f"no result set named {name!r}")
        if name not in self._cache:
            self._cache[name] = self._loaders[name]()
        return self._cache[name]


# -- zips ------------------------------------------------------------------------------------------------
def zip_results(folder: str | Path, dest: str | Path) -> Path:
    """Zip a results folder as `<folder name>/...` (its lock file left out); returns the zip's path."""
    folder, dest = Path(folder), Path(dest)
    if not (folder / "points.parquet").is_file() and not (folder / "runs").is_dir():
        raise ResultsFileError(f"{folder} is not a results folder (no points.parquet, no runs/)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.name not in _SKIPPED and not path.name.endswith(".tmp"):
                archive.write(path, Path(folder.name) / path.relative_to(folder))
    return dest


def extract_results(zip_path: str | Path, dest: str | Path) -> Path:
    """Unpack an uploaded zip into `dest` (a new folder) and return the results folder inside it: the
    top level or the one folder holding points.parquet. ResultsFileError when it is not one, or when
    a member would land outside `dest` or the archive is too big."""
    zip_path, dest = Path(zip_path), Path(dest)
    try:
        archive = zipfile.ZipFile(zip_path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ResultsFileError(f"{zip_path.name} is not a zip file ({exc})") from None
    with archive:
        members = archive.infolist()
        if len(members) > MAX_MEMBERS or sum(m.file_size for m in members) > MAX_UNZIPPED_BYTES:
            raise ResultsFileError(f"{zip_path.name} is too big to unpack here "
                                   f"(limits: {MAX_MEMBERS} files, {MAX_UNZIPPED_BYTES // 2**20} MiB)")
        root = dest.resolve()
        for member in members:
            target = (root / member.filename).resolve()
            if not target.is_relative_to(root):
                raise ResultsFileError(f"{zip_path.name} holds a path outside its folder: {member.filename!r}")
        dest.mkdir(parents=True, exist_ok=True)
        archive.extractall(dest)
    found = sorted({p.parent for p in dest.rglob("points.parquet")}, key=lambda p: len(p.parts))
    if not found:
        shutil.rmtree(dest, ignore_errors=True)
        raise ResultsFileError(f"{zip_path.name} holds no results folder (no points.parquet inside); zip the "
                               f"folder a benchmark wrote, or use the benchmark tab's download")
    return found[0]


# -- comparing -------------------------------------------------------------------------------------------
def compare(sets: Sequence[ResultSet]) -> dict[str, Any]:
    """The figures comparing `sets`, as {title: plotly figure}: results against load (when some set has
    concurrency or rate points) and text-generation-benchmark's batch metrics (when some has batch rows).

    Published happy_vllm cards hold a mean per-request speed only, so with a reference among the sets
    the load figure draws means (center='mean'); otherwise medians with their p25-p75 band."""
    from tgi_toolkit import plots

    out: dict[str, Any] = {}
    loads = {s.name: s.load_points for s in sets if len(s.load_points)}
    if loads:
        center = "mean" if any(s.kind == "reference" and s.name in loads for s in sets) else "p50"
        metrics = (S.OUTPUT_THROUGHPUT, "ttft", S.SPEED_METRIC)
        out["Throughput, TTFT and per-request speed against parallel users"] = _legend_below(plots.compare_points(
            loads, metrics, center=center, title=f"Against load ({'means' if center == 'mean' else 'medians'})"))
    batches = {s.name: s.batch for s in sets if len(s.batch)}
    if batches:
        out["Batch benchmark: prefill and decode latency and throughput"] = _legend_below(plots.compare_batch(batches))
    return out


def _legend_below(fig: Any) -> Any:
    # Set names are long ("reference: CodeLlama-7b-Instruct, happy_vllm 1.1.3 / ..."): beside the panels
    # the legend would take half the width of the page.
    return fig.update_layout(legend={"orientation": "h", "yanchor": "top", "y": -0.12, "xanchor": "left", "x": 0},
                             margin={"b": 140})


def metrics_table(sets: Sequence[ResultSet]) -> pd.DataFrame:
    """The model card's three main metrics, one column per set, as printed ('-' where a set has none)."""
    rows = {METRIC_LABELS[key]: [s.metrics.get(key, "-") or "-" for s in sets] for key in METRIC_KEYS}
    return pd.DataFrame.from_dict(rows, orient="index", columns=[s.name for s in sets]).rename_axis(
        "main metric").reset_index()


__all__ = ["Catalog", "ResultSet", "ResultsFileError", "compare", "extract_results", "folder_set", "metrics_table",
           "reference_set", "zip_results"]
