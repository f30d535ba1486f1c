"""Running a sweep: one server per configuration, every workload against it, results in one folder.

`run_config` is the unit of work (launch, measure, stop, record); the executors decide where it
runs: `LocalExecutor` one configuration after another in this process, `RayExecutor` as Ray tasks
in parallel, each reserving the GPUs its server needs. Either way the bench writes its tables into
the sweep's folder under the folder's lock, and each configuration's entry in `sweep.json` says
what happened to it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tgi_toolkit.sweep.grid import SweepError, SweepPlan, Workload
from tgi_toolkit.sweep.manifest import Manifest, utc_now

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.bench.results import Results
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


def _describe(exc: BaseException) -> str:
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
                current.update(status="failed", error=_describe(exc), traceback=traceback.format_exc(limit=5))
                if not server.running:
                    entry.update(error=f"server stopped during {workload.label}: {_describe(exc)}",
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


# -- executors --------------------------------------------------------------------------------------
@dataclass
class SweepContext:
    """What an executor needs besides the jobs: where results go and whom to tell."""

    folder: Path
    manifest: Manifest
    progress: bool
    done: Callable[[dict[str, Any]], None]
    on_point: Callable[[dict[str, Any]], None] | None = None


class Executor(Protocol):
    name: str

    def run(self, jobs: Sequence[ConfigJob], ctx: SweepContext) -> None: ...


class LocalExecutor:
    """One configuration after another, in this process (the bench's progress bars show)."""

    name = "local"

    def run(self, jobs: Sequence[ConfigJob], ctx: SweepContext) -> None:
        for job in jobs:
            entry = ctx.manifest.entry(job.config_id) or {"config_id": job.config_id, "label": job.label}
            entry["resources"] = resources_for(job.config, job.backend)
            entry["placement"] = {"host": socket.gethostname(), "cores": sorted(os.sched_getaffinity(0)),
                                  "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}
            ctx.done(run_config(job, ctx.folder, entry, save=ctx.manifest.put, progress=ctx.progress,
                                on_point=ctx.on_point))


def _same_sweep(folder: Path, sweep_id: str) -> bool:
    """This worker sees the driver's folder (shared storage): its manifest carries the sweep's id."""
    with contextlib.suppress(OSError, ValueError):
        return Manifest(folder).read().get("sweep_id") == sweep_id
    return False


CORES_FILE = "tgi-toolkit-sweep-cores.json"


@contextlib.contextmanager
def own_cores(count: int, *, poll: float = 0.5, folder: str | os.PathLike[str] | None = None) -> Iterator[list[int]]:
    """`count` cores of this machine that no other sweep configuration holds, while the block runs.

    Ray reserves CPUs by count and pins nothing, so two CPU engines on one node would share every
    core and each be measured while the other competes. Claims live in a file in the machine's temp
    folder, under an flock, keyed by the claiming process (a dead one's claims are void); when fewer
    cores are free than asked, this waits, so CPU configurations then run one after another.
    """
    import psutil

    usable = sorted(os.sched_getaffinity(0))
    count = min(max(1, count), len(usable))
    path = Path(folder if folder is not None else tempfile.gettempdir()) / CORES_FILE
    mine: list[int] = []
    while not mine:
        with open(path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            claims = _read_claims(path)
            claims = {core: pid for core, pid in claims.items() if psutil.pid_exists(pid)}
            free = [c for c in usable if str(c) not in claims]
            if len(free) >= count:
                mine = free[:count]
                claims.update({str(c): os.getpid() for c in mine})
                path.write_text(json.dumps(claims))
        if not mine:
            time.sleep(poll)
    try:
        yield mine
    finally:
        with open(path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            claims = {k: v for k, v in _read_claims(path).items() if not (int(k) in mine and v == os.getpid())}
            path.write_text(json.dumps(claims))


def _read_claims(path: Path) -> dict[str, int]:
    try:
        return {str(k): int(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def _ray_task(job: ConfigJob, folder: str, entry: dict[str, Any], sweep_id: str,
              shared: bool | None) -> dict[str, Any]:
    """A configuration on a Ray worker: into the sweep's folder when the worker sees it, else into a
    temporary folder whose tables travel back to the driver.

    A GPU configuration gets the GPUs Ray assigned through CUDA_VISIBLE_DEVICES, which Ray sets in
    the worker and the server inherits. A CPU configuration gets cores of its own (`own_cores`, as
    many as it reserved): this thread, and so the server it starts and the bench client, are pinned
    to them and the server's torch runs that many threads (OMP_NUM_THREADS). Both go in the entry's
    `placement` (and the bench's provenance records what the server process had)."""
    entry["placement"] = {"host": socket.gethostname(), "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if job.backend in GPU_BACKENDS:
        return _ray_run(job, folder, entry, sweep_id, shared)
    with own_cores(int(float(entry.get("resources", {}).get("num_cpus") or 1))) as cores:
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, cores)  # this thread: its children (the server) and threads inherit
        env = {**(job.server_options.get("env") or {}), "OMP_NUM_THREADS": str(len(cores))}
        job.server_options = {**job.server_options, "env": env}
        entry["placement"]["cores"] = cores
        try:
            return _ray_run(job, folder, entry, sweep_id, shared)
        finally:
            os.sched_setaffinity(0, before)


def _ray_run(job: ConfigJob, folder: str, entry: dict[str, Any], sweep_id: str,
             shared: bool | None) -> dict[str, Any]:
    if shared is None:
        shared = _same_sweep(Path(folder), sweep_id)
    if shared:
        manifest = Manifest(folder)
        return {"entry": run_config(job, folder, entry, save=manifest.put, progress=False)}
    from tgi_toolkit.bench.results import load_results

    with tempfile.TemporaryDirectory(prefix="tgi-toolkit-sweep-") as tmp:
        entry = run_config(job, tmp, entry, save=lambda _entry: None, progress=False)
        results = load_results(tmp)
        log = Path(tmp) / entry["log_path"] if entry.get("log_path") else None
        return {"entry": entry, "shipped": {
            "tables": {"requests": results.requests, "points": results.points, "batch": results.batch,
                       "server": results.server},
            "runs": results.runs,
            "log": log.read_text(errors="replace") if log is not None and log.is_file() else ""}}


def _land(folder: Path, entry: dict[str, Any], shipped: dict[str, Any]) -> None:
    """Tables from a worker without the folder: appended under the folder's lock like a local run's."""
    from tgi_toolkit.bench.results import ResultsFolder

    target = ResultsFolder(folder)
    target.append(shipped["tables"])
    for run in shipped["runs"]:
        target.write_run(run)
    if shipped.get("log") and entry.get("log_path"):
        path = folder / entry["log_path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as handle:
            handle.write(shipped["log"])


class RayExecutor:
    """Configurations as parallel Ray tasks, each reserving what its server needs.

    address: the cluster (None: the running Ray session, or a new local one; "auto": the cluster
    this machine belongs to). num_cpus: CPUs each task reserves. GPUs: num_shard (or 1) per task
    on tgi, tgi-docker and vllm; none for the embedded CPU engine. Ray sets CUDA_VISIBLE_DEVICES in
    each task, and the server inherits it (tgi-docker turns it into --gpus).

    shared_folder: whether workers see the results folder (same machine, or shared storage with
    working flock, e.g. NFSv4). None checks from each worker: one that does not see it measures
    into a temporary folder and sends its tables back, and the driver appends them.
    init: extra keyword arguments for ray.init when this executor starts Ray.
    """

    name = "ray"

    def __init__(self, address: str | None = None, *, num_cpus: float = 1.0, shared_folder: bool | None = None,
                 init: dict[str, Any] | None = None) -> None:
        self.address, self.num_cpus, self.shared_folder = address, float(num_cpus), shared_folder
        self.init = dict(init or {})

    def run(self, jobs: Sequence[ConfigJob], ctx: SweepContext) -> None:
        try:
            import ray
        except ImportError:
            raise SweepError("executor 'ray' needs Ray: pip install 'tgi_toolkit[ray]'") from None
        started = not ray.is_initialized()
        if started:
            ray.init(address=self.address, **self.init)
        try:
            self._run(ray, jobs, ctx)
        finally:
            if started:
                ray.shutdown()

    def _run(self, ray: Any, jobs: Sequence[ConfigJob], ctx: SweepContext) -> None:
        task = ray.remote(_ray_task)
        sweep_id = ctx.manifest.read()["sweep_id"]
        cluster_gpus = float(ray.cluster_resources().get("GPU", 0))
        refs: dict[Any, tuple[ConfigJob, dict[str, Any]]] = {}
        for job in jobs:
            entry = ctx.manifest.entry(job.config_id) or {"config_id": job.config_id, "label": job.label}
            entry["resources"] = need = resources_for(job.config, job.backend, self.num_cpus)
            if need["num_gpus"] > cluster_gpus:
                # Ray would keep such a task pending forever: say so now instead.
                entry.update(status="failed", finished_at=utc_now(),
                             error=f"needs {need['num_gpus']:g} GPU(s); the Ray cluster has {cluster_gpus:g}")
                ctx.manifest.put(entry)
                ctx.done(entry)
                continue
            ctx.manifest.put(entry)
            ref = task.options(num_cpus=need["num_cpus"], num_gpus=need["num_gpus"], max_retries=0,
                               name=f"tgi-toolkit sweep {job.label}"[:100]).remote(
                job, str(ctx.folder), entry, sweep_id, self.shared_folder)
            refs[ref] = (job, entry)
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                job, entry = refs[done[0]]
                try:
                    out = ray.get(done[0])
                except Exception as exc:  # the task itself failed (worker lost, unpicklable result)
                    entry.update(status="failed", error=f"Ray task failed: {_describe(exc)}"[:4000],
                                 finished_at=utc_now())
                else:
                    entry = out["entry"]
                    if "shipped" in out:
                        _land(ctx.folder, entry, out["shipped"])
                ctx.manifest.put(entry)
                ctx.done(entry)
        except KeyboardInterrupt:
            # A plain cancel raises KeyboardInterrupt inside each task, so its server is stopped and
            # its entry marked interrupted (a forced one would orphan the server processes).
            for ref in pending:
                ray.cancel(ref)
            ray.wait(pending, num_returns=len(pending), timeout=60)
            raise


def executor_for(executor: str | Executor, options: dict[str, Any] | None = None) -> Executor:
    if not isinstance(executor, str):
        return executor
    if executor == "local":
        return LocalExecutor()
    if executor == "ray":
        return RayExecutor(**(options or {}))
    raise SweepError(f"executor: {executor!r} is not known (allowed: local, ray, or a RayExecutor)")


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
