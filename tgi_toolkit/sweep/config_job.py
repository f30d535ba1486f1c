"""One configuration's unit of work (`ConfigJob`, `run_config`): launch its server, run its workloads, stop it,
record what happened in its entry; the executors (executors.py) only decide where it runs."""

from __future__ import annotations

import contextlib
import os
import socket
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tgi_toolkit.bench.provenance import utc_now
from tgi_toolkit.sweep.grid import Workload

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.config import LauncherConfig

GPU_BACKENDS = ("tgi", "tgi-docker", "vllm")
LOG_DIR = "logs"


@dataclass
class ConfigJob:
    """One configuration to launch and the workloads it still has to run (picklable, for Ray)."""

    config_id: str
    label: str
    config: LauncherConfig
    backend: str
    workloads: list[Workload]
    server_options: dict[str, Any] = field(default_factory=dict)
    resume: bool = True
    command: list[str] | None = None


def resources_for(config: LauncherConfig, backend: str, num_cpus: float = 1.0) -> dict[str, float]:
    """What one configuration's server needs: a GPU per shard on GPU backends, none for the CPU engine."""
    gpus = float(config.num_shard or 1) if backend in GPU_BACKENDS else 0.0
    return {"num_cpus": float(num_cpus), "num_gpus": gpus}


def error_text(exc: BaseException) -> str:
    """An exception as a manifest's error: its type, then its message where it has one."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _finish(entry: dict[str, Any], workloads: Sequence[Workload]) -> None:
    records = entry["workloads"]
    errors = [f"{records[w.key]['label']}: {records[w.key]['error']}" for w in workloads
              if records.get(w.key, {}).get("status") == "failed"]
    complete = all(records.get(w.key, {}).get("status") == "complete" for w in workloads)
    entry["status"] = "complete" if complete else "failed"
    if errors and not entry.get("error"):
        entry["error"] = "; ".join(errors)
    entry["finished_at"] = utc_now()


def run_config(job: ConfigJob, folder: str | os.PathLike[str], entry: dict[str, Any], *,
               save: Callable[[dict[str, Any]], None], progress: bool = True,
               on_point: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Launch `job`'s server, run its unfinished workloads into `folder`, stop it; return its entry.

    Never raises for what a sweep records (a server that does not start, dies, or a workload the
    bench refuses): the entry says it. `save(entry)` is called after every change, so a killed
    sweep still knows which workloads finished. Ctrl-C marks the entry interrupted and re-raises.
    """
    from tgi_toolkit.bench.api import run_scenario
    from tgi_toolkit.bench.errors import BenchError, ServerDiedError
    from tgi_toolkit.config import ConfigError
    from tgi_toolkit.server import Server, ServerError

    folder = Path(folder)
    records: dict[str, dict[str, Any]] = entry.setdefault("workloads", {})
    todo = [w for w in job.workloads if records.get(w.key, {}).get("status") != "complete"]
    log_path = folder / LOG_DIR / f"{job.config_id}.log"
    entry.pop("resumable", None)
    entry.update(status="running", started_at=utc_now(), finished_at=None, error=None, exit_code=None, log_tail=[],
                 seconds_to_healthy=None,
                 host=socket.gethostname(), launches=int(entry.get("launches") or 0) + 1,
                 log_path=f"{LOG_DIR}/{log_path.name}")  # relative: the folder may move
    save(entry)
    server = Server(job.config, backend=job.backend, log_path=log_path, startup_progress=progress,
                    **job.server_options)
    current: dict[str, Any] | None = None
    try:
        try:
            server.start()
        except ServerError as exc:
            entry.update(status="failed", error=exc.message, exit_code=exc.exit_code, log_tail=exc.log_tail,
                         finished_at=utc_now())
            save(entry)
            return entry
        except ConfigError as exc:  # checked before launch already; kept for configs built elsewhere
            entry.update(status="invalid", problems=[{"fields": list(p.fields), "rule": str(p)} for p in exc.problems],
                         finished_at=utc_now())
            save(entry)
            return entry
        entry.update(seconds_to_healthy=server.seconds_to_healthy,
                     server_facts={k: v for k, v in server.facts.items() if k != "args_line"})
        save(entry)
        for workload in todo:
            current = records.setdefault(workload.key, {})
            current.update(label=workload.label, status="running", error=None)
            save(entry)
            try:
                results = run_scenario(workload.scenario, server, output=folder, resume=job.resume,
                                       progress=progress, on_point=on_point, command=job.command, **workload.params)
            except BenchError as exc:
                # Refused before anything was sent, e.g. a prompt over this configuration's
                # max_input_tokens: the other workloads may still suit it.
                current.update(status="failed", error=str(exc))
            except ServerDiedError as exc:
                died = getattr(exc, "results", None)
                current.update(status="failed", error=str(exc),
                               run_id=died.run_ids[-1] if died is not None and died.run_ids else None)
                # Not the configuration's own verdict (killed from outside, the machine's OOM killer):
                # a rerun resumes it from its finished points.
                entry.update(error=f"server died during {workload.label}: {exc}", log_tail=server.logs(),
                             resumable=True)
                save(entry)
                break
            except Exception as exc:  # a sweep goes on: the next configuration may be fine
                current.update(status="failed", error=error_text(exc), traceback=traceback.format_exc(limit=5))
                if not server.running:
                    entry.update(error=f"server stopped during {workload.label}: {error_text(exc)}",
                                 log_tail=server.logs(), resumable=True)
                    save(entry)
                    break
            else:
                current.update(status="complete", run_id=results.run_ids[-1] if results.run_ids else None,
                               points=len(results.points))
            save(entry)
            current = None
    except BaseException:  # Ctrl-C (or a Ray cancel): what finished is recorded, the rest resumes
        entry["status"] = "interrupted"
        if current is not None:
            current["status"] = "interrupted"
        entry["finished_at"] = utc_now()
        with contextlib.suppress(BaseException):
            server.stop()
        save(entry)
        raise
    finally:
        # also for a server that died: stop() reaps it (its exit code) and ends what it left behind
        server.stop()
    entry["exit_code"] = server.returncode
    _finish(entry, job.workloads)
    save(entry)
    return entry
