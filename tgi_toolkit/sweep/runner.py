"""Running a sweep (`run_sweep`, what `Sweep.run` calls): record the plan in the folder's manifest, choose the
configurations still to run (a failure is kept, a killed one resumes), hand them to an executor, return the folder's
Results.

`run_config` is the unit of work (launch, measure, stop, record; config_job.py); the executors decide where it
runs (executors.py): `LocalExecutor` one configuration after another in this process, `RayExecutor` as Ray tasks
in parallel, each reserving the GPUs its server needs. Either way the bench writes its tables into
the sweep's folder under the folder's lock, and each configuration's entry in `sweep.json` says
what happened to it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tgi_toolkit.sweep.config_job import ConfigJob
from tgi_toolkit.sweep.executors import Executor, SweepContext, executor_for
from tgi_toolkit.sweep.grid import SweepPlan
from tgi_toolkit.sweep.manifest import Manifest

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.bench.results import Results


def _failed_to_start(entry: dict[str, Any]) -> bool:
    return entry.get("status") == "failed" and entry.get("seconds_to_healthy") is None and int(
        entry.get("launches") or 0) > 0


def _relaunch(entry: dict[str, Any], entries: dict[str, dict[str, Any]]) -> bool:
    """Whether a rerun relaunches a failed configuration without retry_failed: when its server died
    during a run (a kill from outside: it resumes from its finished points), or when no launched
    configuration of the sweep ever started (a cause they all share, such as a missing model, now
    perhaps fixed: retrying costs a launch each, keeping them would leave the sweep empty)."""
    if entry.get("resumable"):
        return True
    launched = [e for e in entries.values() if int(e.get("launches") or 0) > 0 and e.get("in_spec", True)]
    return _failed_to_start(entry) and all(_failed_to_start(e) for e in launched)


# -- the sweep ----------------------------------------------------------------------------------------
def run_sweep(sweep: SweepPlan, folder: str | os.PathLike[str], *, resume: bool = True, progress: bool = True,
              executor: str | Executor = "local", retry_failed: bool = False,
              on_point: Callable[[dict[str, Any]], None] | None = None,
              on_config: Callable[[dict[str, Any]], None] | None = None,
              command: Sequence[str] | None = None) -> Results:
    """`Sweep.run`: record the plan in the manifest, run what is not finished, return the folder's Results."""
    from tgi_toolkit.bench.results import load_results

    runner = executor_for(executor, sweep.ray)
    folder = Path(folder).resolve()  # Ray workers and servers may not share our working directory
    folder.mkdir(parents=True, exist_ok=True)
    configs = sweep.configs()
    manifest = Manifest(folder)
    data = manifest.start(sweep, configs, resume=resume, command=command)
    entries = {e["config_id"]: e for e in data["configs"]}
    workloads = sweep.resolved_workloads()
    jobs: list[ConfigJob] = []
    kept: list[dict[str, Any]] = []
    for config in configs:
        entry = entries[config.config_id]
        if not config.valid:
            continue
        todo = [w for w in workloads if entry["workloads"].get(w.key, {}).get("status") != "complete"]
        if not todo:
            if entry["status"] != "complete":  # interrupted after its last workload finished
                entry["status"] = "complete"
                manifest.put(entry)
            continue
        if resume and entry["status"] == "failed" and not retry_failed and not _relaunch(entry, entries):
            kept.append(entry)
            continue
        jobs.append(ConfigJob(config.config_id, config.label, config.config, sweep.backend, workloads,
                              dict(sweep.server), resume, list(command) if command is not None else None))

    if kept:
        print(f"not relaunched: {len(kept)} configuration(s) recorded as failed ("
              + "; ".join(f"{e['label']}: {str(e.get('error') or 'failed')[:120]}" for e in kept)
              + "): a failure is kept as a result, since a setting that does not fit (memory, limits) fails "
                "again; pass retry_failed=True (--retry-failed) to relaunch them", file=sys.stderr)

    bar = None
    if progress:
        from tgi_toolkit.progress import progress_bar

        bar = progress_bar(len(configs), "sweep configurations", unit="config", initial=len(configs) - len(jobs))

    def done(entry: dict[str, Any]) -> None:
        if bar is not None:
            bar.set_postfix_str(f"{entry['label']}: {entry['status']}"[:80], refresh=False)
            bar.update(1)
        if on_config is not None:
            on_config(entry)

    try:
        runner.run(jobs, SweepContext(folder, manifest, progress, done, on_point))
    finally:
        if bar is not None:
            bar.close()
    return load_results(folder)
