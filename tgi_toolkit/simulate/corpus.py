"""Published GPU serving figures (data/reference/gpu_figures.csv) and the shapes of their models
(data/models/gpu_models.json, among the shipped shapes plan, simulate and advise read by id): what the
roofline is fitted to and judged against. One row per figure, with where it came from; docs/simulator.md says
how the corpus was gathered and what each column means."""

from __future__ import annotations

import csv
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tgi_toolkit.costs.server_profiles import server_of

FIGURES_FILE = "gpu_figures.csv"
MODELS_FILE = "gpu_models.json"
# metric -> (unit, True when a larger value is a faster server)
METRICS = {
    "decode_tok_s_per_user": ("tok/s", True), "tpot_ms": ("ms", False), "output_tok_s": ("tok/s", True),
    "total_tok_s": ("tok/s", True), "ttft_ms": ("ms", False), "prefill_ms": ("ms", False),
    "e2e_s": ("s", False), "requests_s": ("req/s", True),
    "ingestion_tok_s": ("tok/s", True),
    # TGI's own log field time_per_token: (prefill + decode time, queue excluded) / generated tokens
    "tgi_time_per_token_ms": ("ms", False),  # 1 / slope of TTFT against prompt length, one request at a time
}
REGIMES = ("batch1_decode", "batched_decode", "prefill", "tensor_parallel", "e2e")


@dataclass(frozen=True)
class Figure:
    id: str
    source_id: str
    source_url: str
    model_id: str
    gpu: str
    num_gpus: int
    server: str  # a server_profiles.SERVERS profile
    dtype: str
    quantize: str | None
    batch_size: int | None
    users: int | None
    request_rate: float | None
    input_tokens: int
    output_tokens: int
    metric: str
    value: float
    regime: str
    caveats: str = ""
    quote: str = ""
    scheduler_steps: int = 1  # vLLM's --num-scheduler-steps (multi-step scheduling)
    max_batch_size: int | None = None  # the server's cap on sequences at once (vLLM's --max-num-seqs), if stated
    server_version: str = ""  # as published: the measured-kernel model reads the tables nearest it

    @property
    def burst(self) -> bool:
        """`batch_size` prompts sent to a server at once (request_rate inf), not an offline static batch."""
        return self.batch_size is not None and self.request_rate == math.inf

    @property
    def streams(self) -> int:
        """Sequences decoding together: the batch or the users (open-loop rates are found by simulation)."""
        return int(self.batch_size or self.users or 1)


def _int(text: str) -> int | None:
    text = (text or "").strip()
    return int(round(float(text))) if text else None


def _float(text: str) -> float | None:
    text = (text or "").strip()
    return float(text) if text else None


def figure_from_row(row: dict[str, str]) -> Figure:
    """One CSV row as a Figure; ValueError naming the row and the field that is wrong."""
    name = row.get("id") or "?"
    try:
        metric = row["metric"].strip()
        if metric not in METRICS:
            raise ValueError(f"metric {metric!r} is not one of {', '.join(METRICS)}")
        regime = row["regime"].strip()
        if regime not in REGIMES:
            raise ValueError(f"regime {regime!r} is not one of {', '.join(REGIMES)}")
        batch, rate = _int(row.get("batch_size", "")), _float(row.get("request_rate", ""))
        if rate == math.inf and batch is None:
            raise ValueError("request_rate inf (prompts sent at once) needs batch_size, how many were sent")
        value = float(row["value"])
        if not value > 0 or math.isinf(value):
            raise ValueError(f"value must be a positive number; got {row['value']!r}")
        return Figure(
            id=name, source_id=row["source_id"].strip(), source_url=row["source_url"].strip(),
            model_id=row["model_id"].strip(), gpu=row["gpu"].strip(), num_gpus=_int(row["num_gpus"]) or 1,
            server=server_of(row["server"], row.get("server_version", ""), row.get("source_date", "")),
            server_version=(row.get("server_version") or "").strip(),
            dtype=(row.get("dtype") or "float16").strip(),
            quantize=(row.get("quantize") or "").strip() or None, batch_size=batch,
            users=_int(row.get("users", "")), request_rate=rate,
            input_tokens=_int(row["input_tokens"]) or 1, output_tokens=_int(row["output_tokens"]) or 1,
            metric=metric, value=value, regime=regime, caveats=row.get("caveats", ""), quote=row.get("quote", ""),
            scheduler_steps=_int(row.get("scheduler_steps", "")) or 1,
            max_batch_size=_int(row.get("max_num_seqs", "")))
    except (KeyError, ValueError) as exc:
        raise ValueError(f"{FIGURES_FILE} row {name}: {exc}") from None


def corpus_dir() -> Path:
    from tgi_toolkit.data_folder import REFERENCE_SUBDIR, default_data_dir

    return default_data_dir() / REFERENCE_SUBDIR


def load_figures(path: str | Path | None = None) -> list[Figure]:
    """The figures the roofline is fitted to and judged on: every row but those `excluded` says why not."""
    return [figure_from_row(row) for row in _rows(path) if not (row.get("excluded") or "").strip()]


def excluded_figures(path: str | Path | None = None) -> list[tuple[str, str]]:
    """(id, why) of the rows kept in the corpus but left out of fit and judgement: a set-up its own source
    contradicts or leaves open (decided from the source, whatever the model predicts for it)."""
    return [(row["id"], row["excluded"].strip()) for row in _rows(path) if (row.get("excluded") or "").strip()]


def _rows(path: str | Path | None) -> list[dict[str, str]]:
    with open(Path(path) if path else corpus_dir() / FIGURES_FILE, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def models_file(name: str = MODELS_FILE) -> Path:
    """A file of the corpus's model shapes, among the shipped ones (tgi_toolkit.models.shipped)."""
    from tgi_toolkit.models.shipped import shipped_models_dir

    return shipped_models_dir() / name


def load_models(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """{model_id: config.json fields}, `_source` dropped (it says where the fields were read)."""
    from tgi_toolkit.models.shipped import read_shapes

    models = read_shapes(Path(path) if path else models_file())
    return {k: {f: v for f, v in cfg.items() if not f.startswith("_")} | {"_name_or_path": k}
            for k, cfg in models.items()}


def corpus_sha256(paths: tuple[str | Path, ...] | None = None) -> str:
    """One hash of the figures and the models' shapes: a fit names the corpus it came from."""
    paths = paths or (corpus_dir() / FIGURES_FILE, models_file())
    digest = hashlib.sha256()
    for p in paths:
        digest.update(Path(p).read_bytes())
    return digest.hexdigest()
