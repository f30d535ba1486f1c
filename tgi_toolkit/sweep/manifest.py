"""The sweep manifest: `sweep.json` in the results folder, the specification and every configuration's fate.

One entry per configuration (by config_id), with its status:
  pending      not measured yet
  running      a server is (or was, if the sweep was killed) measuring it
  complete     every workload finished
  failed       the server did not start (exit code and log tail kept), died during a run, or a
               workload was refused (the bench's message kept)
  invalid      breaks a launcher rule: never launched; `problems` names each rule and its fields
  interrupted  stopped by Ctrl-C; resumed by the next run
and per workload: status, run_id (the bench's run in the same folder) and error.

Written whole to a temporary file and renamed, under an exclusive lock on `.sweep.lock`, so
parallel configurations (Ray tasks, other processes) never lose each other's updates and readers
never see half a file. The bench's tables share the folder under their own lock (`.lock`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tgi_toolkit.bench.provenance import redact_argv, utc_now
from tgi_toolkit.sweep.grid import SweepConfig, SweepPlan

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


MANIFEST = "sweep.json"
LOCK = ".sweep.lock"
STATUSES = ("pending", "running", "complete", "failed", "invalid", "interrupted")
# Statuses that a resumed sweep does not launch again (failed ones only with retry_failed).
DONE = ("complete", "invalid")


def new_entry(config: SweepConfig) -> dict[str, Any]:
    return {
        "config_id": config.config_id, "index": config.index, "label": config.label,
        "config_label": config.config_label, "overrides": config.overrides,
        "launcher_config": config.config.to_dict(non_default_only=True, redact=True) if config.config else None,
        "status": "pending" if config.valid else "invalid", "problems": config.problems,
        "in_spec": True, "launches": 0, "workloads": {}, "error": None, "exit_code": None, "log_tail": [],
        "log_path": None, "seconds_to_healthy": None, "server_facts": {}, "resources": {}, "placement": {},
        "host": None, "started_at": None, "finished_at": None,
    }


class Manifest:
    """Reads and updates `sweep.json` in one folder, each change under the folder's sweep lock."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self.path = self.folder / MANIFEST

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / LOCK, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def exists(self) -> bool:
        return self.path.is_file()

    def read(self) -> dict[str, Any]:
        """The manifest as it is on disk ({} when there is none)."""
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}

    def _write(self, data: dict[str, Any]) -> None:
        data["updated_at"] = utc_now()
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{uuid.uuid4().hex[:6]}.tmp")
        tmp.write_text(json.dumps(data, indent=2, default=str))
        os.replace(tmp, self.path)

    def update(self, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Read, apply `change` in place, write back; all under the lock. Returns the new manifest."""
        with self.locked():
            data = self.read()
            change(data)
            self._write(data)
            return data

    def start(self, sweep: SweepPlan, configs: Sequence[SweepConfig], *, resume: bool,
              command: Sequence[str] | None = None) -> dict[str, Any]:
        """Record the specification and its configurations; keep finished work when resuming.

        Entries of configurations no longer in the specification stay (their results are in the
        folder) with in_spec false. Without `resume` every entry starts again as pending.
        """
        def change(data: dict[str, Any]) -> None:
            if not data:
                data.update({"kind": "tgi_toolkit.sweep", "version": 1, "sweep_id": uuid.uuid4().hex,
                             "created_at": utc_now(), "sessions": 0, "configs": []})
            data["sessions"] = int(data.get("sessions", 0)) + 1
            data["spec"] = sweep.to_dict()
            data["knobs"] = sweep.knobs()
            data["workloads"] = {w.key: {"label": w.label, **w.to_dict()} for w in sweep.resolved_workloads()}
            data["command"] = redact_argv(command)
            old = {e["config_id"]: e for e in data.get("configs", [])}
            entries = []
            for config in configs:
                entry = new_entry(config)
                prior = old.pop(config.config_id, None)
                if prior is not None and resume and config.valid:
                    prior.update({k: entry[k] for k in ("index", "label", "overrides", "in_spec")})
                    entry = prior
                entries.append(entry)
            for prior in old.values():
                prior["in_spec"] = False
                entries.append(prior)
            data["configs"] = entries

        return self.update(change)

    def entry(self, config_id: str) -> dict[str, Any] | None:
        return next((e for e in self.read().get("configs", []) if e["config_id"] == config_id), None)

    def put(self, entry: dict[str, Any]) -> None:
        """Replace (or add) one configuration's entry."""
        def change(data: dict[str, Any]) -> None:
            configs = data.setdefault("configs", [])
            for i, old in enumerate(configs):
                if old["config_id"] == entry["config_id"]:
                    configs[i] = entry
                    return
            configs.append(entry)

        self.update(change)


def load_manifest(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The sweep manifest of a results folder (FileNotFoundError when the folder holds no sweep)."""
    manifest = Manifest(folder)
    if not manifest.exists():
        raise FileNotFoundError(f"{folder} holds no sweep manifest ({MANIFEST})")
    return manifest.read()


def sweep_status(folder: str | os.PathLike[str]) -> pd.DataFrame:
    """One row per configuration of the sweep in `folder`: its swept settings, status and why.

    Columns: config_id, label, one column per swept field, status, launches, problems (the broken
    rules, joined), error, run_ids. Merge it with a points table on config_id to colour plots by a
    swept field: `points.merge(sweep_status(folder)[["config_id", "max_batch_size"]], on="config_id")`.
    """
    import pandas as pd

    data = load_manifest(folder)
    knobs = list(data.get("knobs", []))
    rows = []
    for entry in data.get("configs", []):
        row: dict[str, Any] = {"config_id": entry["config_id"], "label": entry["label"]}
        values = {**(entry.get("launcher_config") or {}), **entry.get("overrides", {})}
        for knob in knobs:
            row[knob] = values.get(knob)
        row.update({"status": entry["status"], "in_spec": entry.get("in_spec", True),
                    "launches": entry.get("launches", 0),
                    "problems": "; ".join(p["rule"] for p in entry.get("problems", [])) or None,
                    "error": entry.get("error"),
                    "run_ids": [w["run_id"] for w in entry.get("workloads", {}).values() if w.get("run_id")]})
        rows.append(row)
    columns = ["config_id", "label", *knobs, "status", "in_spec", "launches", "problems", "error", "run_ids"]
    df = pd.DataFrame(rows, columns=columns)
    for knob in knobs:  # integers stay integers where some configuration leaves the field unset
        df[knob] = df[knob].convert_dtypes()
    return df
