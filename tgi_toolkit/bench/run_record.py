"""A run's record (`RunRecord`): its provenance, its resume key, and taking up an earlier session's finished
points; apart from sending so that what identifies a run reads in one place."""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from tgi_toolkit.bench import provenance
from tgi_toolkit.bench.client import now_ns
from tgi_toolkit.bench.run_tables import RunTables
from tgi_toolkit.bench.target import Target


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


# Flags of a command line that say where and how a run goes, not what it measures (the second item: whether
# the flag takes a value); two command lines that differ only in these ask for the same run.
WHERE_FLAGS = {"--output": True, "-o": True, "--resume": False, "--overwrite": False, "--no-resume": False,
               "--no-progress": False}


def run_identity(command: list[str]) -> list[str]:
    """A command line (provenance's `command`) without its WHERE_FLAGS: what identifies the run it asked for
    before any server is started (the resume key needs the server's configuration and model)."""
    out, skip = [], False
    for i, arg in enumerate(command):
        if arg == "--":  # launcher flags: all part of the run's identity
            return out + command[i:]
        if skip:
            skip = False
        elif arg in WHERE_FLAGS:
            skip = WHERE_FLAGS[arg]
        else:
            out.append(arg)
    return out


def earlier_runs(folder: str | Path, command: list[str]) -> list[dict[str, Any]]:
    """The runs a results folder holds that the same command line made (oldest first)."""
    found = []
    for path in (Path(folder) / "runs").glob("*.json"):
        with contextlib.suppress(ValueError, OSError):
            run = json.loads(path.read_text())
            if run.get("command") and run_identity(run["command"]) == run_identity(command):
                found.append(run)
    return sorted(found, key=lambda r: r.get("started_at") or "")



class RunRecord(RunTables):
    """A run's identity and provenance record (run.Run sets `target`, `scenario`, `workload`, `config_id`,
    `config_label`, `command`, `resume`)."""

    target: Target
    scenario: str
    workload: dict[str, Any]
    config_id: str
    config_label: str
    command: list[str] | None
    resume: bool
    finished: set[str]
    _created_folder: bool

    # -- identity and provenance ---------------------------------------------------------------
    def resume_key(self) -> str:
        ident = {"scenario": self.scenario, "workload": self.workload, "config_id": self.config_id,
                 "model_id": self.target.model_id}
        if self.target.config is None:  # a server we did not launch: its address is its identity
            ident["url"] = self.target.url
        return hashlib.sha1(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def _start_provenance(self) -> None:
        prior = self.folder.find_run(self.resume_key()) if self.folder is not None and self.resume else None
        if prior is not None:
            self.run_id, self.started_at = prior["run_id"], prior["started_at"]
            self.finished = self.folder.finished_points(self.run_id)
            self.folder.drop_unfinished(self.run_id, self.finished)
            sessions = int(prior.get("sessions", 1)) + 1
        else:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            self.run_id, self.started_at, sessions = f"{self.scenario}-{stamp}-{uuid.uuid4().hex[:6]}", _utc_now(), 1
        # Measured prompts are new to the server in every run, point and resumed session (PromptFactory).
        self.prompt_salt = f"{self.run_id}:{sessions}"
        # The run clock continues across resumed sessions: zero is the run's first start.
        started = _dt.datetime.fromisoformat(self.started_at).timestamp()
        self.clock_ns = now_ns() - int((time.time() - started) * 1e9)
        config = self.target.config
        self.provenance: dict[str, Any] = {
            "run_id": self.run_id, "config_id": self.config_id, "scenario": self.scenario,
            "started_at": self.started_at, "finished_at": None, "status": "running",
            "launcher_config": config.to_dict(redact=True) if config is not None else None,
            "backend": self.target.backend, "url": self.target.url, "info": self.target.info,
            "workload": self.workload, "versions": provenance.versions(), "hardware": provenance.hardware(),
            "placement": provenance.placement(self.target.pid),
            "git": provenance.git_revision(), "command": self.command,
            # beyond PROVENANCE_KEYS
            "config_label": self.config_label, "resume_key": self.resume_key(), "sessions": sessions,
            "server_facts": {k: v for k, v in self.target.facts.items() if k != "args_line"},
            "prompt_check": {}, "error": None,
        }
        self._write_provenance()

    def _write_provenance(self) -> None:
        if self.folder is not None:
            self.folder.write_run(self.provenance)


    def _forget(self) -> None:
        """Nothing was measured (bad input found on the way): no run record, and no folder if this run made it."""
        if self.folder is None:
            return
        (self.folder.path / "runs" / f"{self.run_id}.json").unlink(missing_ok=True)
        if self._created_folder:
            leftovers = [p for p in self.folder.path.rglob("*") if p.is_file() and p.name != ".lock"]
            if not leftovers:
                shutil.rmtree(self.folder.path, ignore_errors=True)

