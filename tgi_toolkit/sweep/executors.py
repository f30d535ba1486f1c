"""Where a sweep's configurations run: `LocalExecutor` one after another in this process, `RayExecutor` as
parallel Ray tasks (each reserving its GPUs, or cores of its own through `own_cores`); apart from the unit of work."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tgi_toolkit.bench.provenance import utc_now
from tgi_toolkit.sweep.config_job import GPU_BACKENDS, ConfigJob, error_text, resources_for, run_config
from tgi_toolkit.sweep.grid import SweepError
from tgi_toolkit.sweep.manifest import Manifest


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
                    entry.update(status="failed", error=f"Ray task failed: {error_text(exc)}"[:4000],
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
