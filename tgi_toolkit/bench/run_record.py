"""A run's record (`RunRecord`): where its results go, its provenance, its resume key, and taking up an earlier
session's finished points; and which earlier runs a command line repeats (`earlier_runs`)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import json
import shutil
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tgi_toolkit import schema as S
from tgi_toolkit.bench import provenance
from tgi_toolkit.bench.client import now_ns
from tgi_toolkit.bench.results import Results, ResultsFolder
from tgi_toolkit.bench.run_tables import RunTables
from tgi_toolkit.bench.target import Target

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



class RunRecord:
    """Where a run's results go and what identifies it, complete when built: its results folder (None: memory
    only) and tables, its resume key, run id and provenance (written at once), and when `resume` finds an earlier
    session of the same run in the folder, that run's id, start, clock and finished points."""

    def __init__(self, target: Target, scenario: str, workload: dict[str, Any], *, output: str | Path | None = None,
                 resume: bool = True, command: Sequence[str] | None = None) -> None:
        self.target, self.scenario, self.workload = target, scenario, workload
        self.command = provenance.redact_argv(command)  # `-- --api-key X` passes launcher flags through
        self.config_id = provenance.config_id(target.config)
        self.config_label = provenance.config_label(target.config)
        self.output = Path(output) if output is not None else None
        # A run refused before its first point leaves no folder behind that it created itself.
        self.created_folder = self.output is not None and not self.output.exists()
        self.folder = ResultsFolder(self.output) if self.output is not None else None
        self.tables = RunTables(self.folder)
        self.resume_key = self._resume_key()
        prior = self.folder.find_run(self.resume_key) if self.folder is not None and resume else None
        # the points an earlier session of this run finished (not measured again)
        self.resumed: set[str] = set()
        if prior is not None:
            self.run_id, self.started_at = prior["run_id"], prior["started_at"]
            self.resumed = self.folder.finished_points(self.run_id)
            self.folder.drop_unfinished(self.run_id, self.resumed)
            sessions = int(prior.get("sessions", 1)) + 1
        else:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            self.run_id, sessions = f"{scenario}-{stamp}-{uuid.uuid4().hex[:6]}", 1
            self.started_at = provenance.utc_now()
        self.sessions = sessions
        # Measured prompts are new to the server in every run, point and resumed session (PromptFactory).
        self.prompt_salt = f"{self.run_id}:{sessions}"
        # The run clock continues across resumed sessions: zero is the run's first start.
        started = dt.datetime.fromisoformat(self.started_at).timestamp()
        self.clock_ns = now_ns() - int((time.time() - started) * 1e9)
        config = target.config
        self.provenance: dict[str, Any] = {
            "run_id": self.run_id, "config_id": self.config_id, "scenario": scenario,
            "started_at": self.started_at, "finished_at": None, "status": "running",
            "launcher_config": config.to_dict(redact=True) if config is not None else None,
            "backend": target.backend, "url": target.url, "info": target.info,
            "workload": workload, "versions": provenance.versions(), "hardware": provenance.hardware(),
            "placement": provenance.placement(target.pid),
            "git": provenance.git_revision(), "command": self.command,
            # beyond PROVENANCE_KEYS
            "config_label": self.config_label, "resume_key": self.resume_key, "sessions": sessions,
            "server_facts": {k: v for k, v in target.facts.items() if k != "args_line"},
            "prompt_check": {}, "error": None,
        }
        self.write()

    def _resume_key(self) -> str:
        ident = {"scenario": self.scenario, "workload": self.workload, "config_id": self.config_id,
                 "model_id": self.target.model_id}
        if self.target.config is None:  # a server we did not launch: its address is its identity
            ident["url"] = self.target.url
        return hashlib.sha1(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def ident(self, point_id: str) -> dict[str, Any]:
        """The columns that name a point of this run in every table."""
        return {S.RUN_ID: self.run_id, S.CONFIG_ID: self.config_id, S.CONFIG_LABEL: self.config_label,
                S.BACKEND: self.target.backend, S.MODEL_ID: self.target.model_id, S.SCENARIO: self.scenario,
                S.POINT_ID: point_id}

    def note(self, text: str) -> None:
        """A line for provenance's `notes` (once)."""
        notes = self.provenance.setdefault("notes", [])
        if text not in notes:
            notes.append(text)

    def write(self) -> None:
        if self.folder is not None:
            self.folder.write_run(self.provenance)

    def finish(self, exc: BaseException | None) -> None:
        """The session's end in the provenance: when, and how (complete, failed with its error, interrupted)."""
        self.provenance["finished_at"] = provenance.utc_now()
        if exc is None:
            self.provenance["status"] = "complete"
            return
        self.provenance["status"] = "failed"
        if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt)):
            self.provenance["error"] = "interrupted"
        else:
            self.provenance["error"] = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

    def forget(self) -> None:
        """Nothing was measured (bad input found on the way): no run record, and no folder if this run made it."""
        if self.folder is None:
            return
        (self.folder.path / "runs" / f"{self.run_id}.json").unlink(missing_ok=True)
        if self.created_folder:
            leftovers = [p for p in self.folder.path.rglob("*") if p.is_file() and p.name != ".lock"]
            if not leftovers:
                shutil.rmtree(self.folder.path, ignore_errors=True)

    def results(self) -> Results:
        """This run's tables: from the folder (with earlier sessions' points) or from memory."""
        return self.tables.results(self.run_id, self.provenance)
