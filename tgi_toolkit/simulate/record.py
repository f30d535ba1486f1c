"""A simulated run written as a measured one: the same tables (tgi_toolkit.schema), the same per-request and
per-point arithmetic (bench.stats), the same folder (bench.results), so figures, `compare_*`, the model
card and `load_results` take it unchanged.

What tells it apart: `backend` is "simulated"; the provenance has `simulated: true`, the cost model
(`cost_model`), the scheduler's settings (`scheduler`); `config_label` ends in "[simulated: <cost model>]"
and `config_id` hashes the cost model too, so a figure draws predicted beside measured as two configurations.
The server table holds what /metrics would have shown, sampled every `scrape_interval` of virtual time.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tgi_toolkit import schema as S
from tgi_toolkit.bench import provenance, stats
from tgi_toolkit.bench.results import Results, ResultsFolder, frame
from tgi_toolkit.bench.run_points import PointRows
from tgi_toolkit.bench.run_tables import RunTables
from tgi_toolkit.costs.linear import CostModel
from tgi_toolkit.simulate.events import Sample, Simulator
from tgi_toolkit.simulate.workloads import Point

BACKEND = "simulated"


def prediction_errors(cost: CostModel, workload: dict[str, Any]) -> dict[str, float]:
    """A GPU roofline's cross-validated error for this point's TTFT, TPOT and throughput (NaN otherwise)."""
    out = dict.fromkeys(S.PREDICTION_ERRORS.values(), float("nan"))
    if not hasattr(cost, "kernel_seconds"):  # only the roofline is judged against published figures
        return out
    from tgi_toolkit.costs.uncertainty import uncertainty

    rows = int(workload.get(S.USERS) or workload.get(S.BATCH_SIZE) or 2)  # a rate's batch is more than one
    for metric, column in S.PREDICTION_ERRORS.items():
        err = uncertainty(cost, "throughput" if metric == S.OUTPUT_THROUGHPUT else metric, rows=rows).error
        out[column] = float("nan") if err is None else err
    return out


class SimRun:
    """Provenance and saving for one simulated scenario call (its tables saved as a measured run's are,
    bench.run_tables.RunTables)."""

    def __init__(self, target: Any, scenario: str, workload: dict[str, Any], *, output: str | Path | None = None,
                 slo_ttft_s: float | None = None, slo_tpot_s: float | None = None,
                 command: Sequence[str] | None = None, light: bool = False) -> None:
        self.target, self.scenario = target, scenario
        # light: keep plain rows only (no DataFrames, no folder): the tuner's hundreds of runs
        self.light = light and output is None
        self.point_rows: list[dict[str, Any]] = []
        self.request_rows: list[dict[str, Any]] = []
        self.workload = workload
        self.slo_ttft_s, self.slo_tpot_s = slo_ttft_s, slo_tpot_s
        self.folder = ResultsFolder(output) if output is not None else None
        cost = target.cost.describe()
        base_id = provenance.config_id(target.launcher) if target.launcher is not None else ""
        blob = json.dumps({"config": base_id, "scheduler": asdict(target.scheduler), "cost": cost},
                          sort_keys=True, default=str)
        self.config_id = hashlib.sha1(blob.encode()).hexdigest()[:10]
        label = provenance.config_label(target.launcher) if target.launcher is not None else target.config_label()
        self.config_label = f"{label} [simulated: {target.cost.name}]"
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.run_id = f"{scenario}-sim-{stamp}-{uuid.uuid4().hex[:6]}"
        self.provenance: dict[str, Any] = {
            "run_id": self.run_id, "config_id": self.config_id, "scenario": scenario,
            "started_at": provenance.utc_now(), "finished_at": None, "status": "running",
            "launcher_config": target.launcher.to_dict(redact=True) if target.launcher is not None else None,
            "backend": BACKEND, "url": None, "info": target.info(), "workload": workload,
            "versions": {} if self.light else provenance.versions(), "hardware": target.hardware(),
            "git": None if self.light else provenance.git_revision(),
            "command": provenance.redact_argv(command),
            # beyond PROVENANCE_KEYS
            "simulated": True, "cost_model": cost, "scheduler": asdict(target.scheduler),
            "simulated_on": {} if self.light else provenance.hardware(), "config_label": self.config_label,
            "sessions": 1,
            "server_facts": target.facts(), "error": None,
        }
        self.tables = RunTables(self.folder)
        self._write()

    def _write(self) -> None:
        if self.folder is not None and not getattr(self, "light", False):
            self.folder.write_run(self.provenance)

    def finish(self, error: BaseException | None = None) -> None:
        self.provenance["finished_at"] = provenance.utc_now()
        self.provenance["status"] = "complete" if error is None else "failed"
        if error is not None:
            self.provenance["error"] = f"{type(error).__name__}: {error}"
        self._write()

    def save_point(self, point: Point, sim: Simulator, samples: Sequence[Sample], started: float) -> dict[str, Any]:
        """Rows of a finished point (bench.run_points.PointRows, as a measured run's), with the point's server
        samples."""
        ident = {S.RUN_ID: self.run_id, S.CONFIG_ID: self.config_id, S.CONFIG_LABEL: self.config_label,
                 S.BACKEND: BACKEND, S.MODEL_ID: self.target.model_id, S.SCENARIO: self.scenario,
                 S.POINT_ID: point.point_id}
        batch_rows, windows = [], point.windows
        if point.batch is not None:
            size, seq, dec = point.batch
            runs: dict[tuple[int, bool], list[Any]] = {}
            for request in point.requests:
                repeat, warmup, _ = request.tag
                runs.setdefault((repeat, warmup), []).append(request.record)
            windows = []
            for (repeat, warm), records in sorted(runs.items(), key=lambda kv: (not kv[0][1], kv[0][0])):
                batch_rows.append({**ident, S.BATCH_SIZE: size, S.SEQUENCE_LENGTH: seq, S.DECODE_LENGTH: dec,
                                   S.REPEAT: repeat, S.WARMUP: warm, **stats.batch_run(records, seq)})
                ended = [r.token_ns[-1] for r in records if r.token_ns]
                if not warm and ended:
                    windows.append((min(r.sent_ns for r in records), max(ended)))
        rows = PointRows.of(ident, point.workload, [(r.record, *r.tag) for r in point.requests], clock_ns=0,
                            request_columns=[r.columns for r in point.requests], windows=windows,
                            point_columns=point.columns, slo_ttft_s=self.slo_ttft_s, slo_tpot_s=self.slo_tpot_s)
        lo = rows.windows[0][0] / 1e9 if rows.windows else started
        hi = rows.windows[-1][1] / 1e9 if rows.windows else sim.clock.t
        inside = [s for s in samples if lo <= s.t <= hi] or list(samples[-1:])
        capacity = float(self.target.scheduler.max_batch_total_tokens)
        server = {S.CLIENT_LAG_P99_MS: 0.0, S.CLIENT_LAG_MAX_MS: 0.0, S.CLIENT_BOUND: False,
                  S.SERVER_BATCH_SIZE_MAX: float(max((s.batch_size for s in inside), default=float("nan"))),
                  S.SERVER_QUEUE_SIZE_MAX: float(max((s.queue_size for s in inside), default=float("nan"))),
                  S.KV_CAPACITY_TOKENS: capacity,
                  S.KV_USAGE_MAX: max((s.kv_tokens for s in inside), default=float("nan")) / capacity,
                  S.MACHINE_BUSY: False}  # nothing else shared a virtual clock
        point_row = rows.point({**server, **prediction_errors(self.target.cost, rows.workload)})
        if self.light:
            self.point_rows.append(point_row)
            self.request_rows.extend(rows.requests)
            return point_row
        server_rows = []
        for s in samples:
            for metric, value in ((S.BATCH_SIZE_METRICS[0], s.batch_size), (S.QUEUE_SIZE_METRICS[0], s.queue_size),
                                  (S.KV_USED_METRIC, s.kv_tokens), (S.KV_TOTAL_METRIC, capacity)):
                server_rows.append({S.RUN_ID: self.run_id, S.CONFIG_ID: self.config_id, S.T_S: s.t,
                                    S.METRIC: metric, S.LABELS: "", S.VALUE: float(value)})
        self.tables.save({"requests": frame(rows.requests, "requests"), "batch": frame(batch_rows, "batch"),
                          "server": frame(server_rows, "server"), "points": frame([point_row], "points")})
        return point_row

    def results(self) -> Results:
        """This run's tables: read back from its folder, or from memory."""
        return self.tables.results(self.run_id, self.provenance)
