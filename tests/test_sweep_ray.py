"""Sweeps on Ray: configurations as parallel tasks on a local Ray instance, results in one folder.

Needs the `ray` extra (in `dev`); skipped without it.
"""

from __future__ import annotations

import datetime as dt
import os

import pytest

ray = pytest.importorskip("ray")

from tgi_toolkit import schema as S  # noqa: E402
from tgi_toolkit.bench.results import load_results  # noqa: E402
from tgi_toolkit.sweep import RayExecutor, Sweep, Workload, load_manifest  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_ray():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report from a test
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _interval(entry):
    return dt.datetime.fromisoformat(entry["started_at"]), dt.datetime.fromisoformat(entry["finished_at"])


def test_gpu_configs_that_the_cluster_cannot_hold_fail_at_once(local_ray, tmp_path):
    sweep = Sweep(base={"max_input_tokens": 32, "max_total_tokens": 64}, grid={"num_shard": [1, 2]},
                  workloads=[Workload("batch", batch_sizes=[1])], backend="tgi")
    sweep.run(tmp_path, progress=False, executor="ray")
    entries = load_manifest(tmp_path)["configs"]
    assert [e["error"] for e in entries] == ["needs 1 GPU(s); the Ray cluster has 0",
                                             "needs 2 GPU(s); the Ray cluster has 0"]
    assert [e["resources"]["num_gpus"] for e in entries] == [1.0, 2.0]
    assert [e["launches"] for e in entries] == [0, 0]


def test_configurations_run_in_parallel_into_one_folder_and_resume(local_ray, tmp_path):
    def sweep(sizes):
        return Sweep(base={"max_input_tokens": 32, "max_total_tokens": 48, "max_batch_prefill_tokens": 64},
                     grid={"max_batch_size": sizes},
                     workloads=[Workload("concurrency", users=[2], prompt_tokens=16, max_new_tokens=4, requests=2)],
                     server={"health_timeout": 180})

    results = sweep([1, 2]).run(tmp_path, progress=False, executor=RayExecutor(num_cpus=1))
    entries = load_manifest(tmp_path)["configs"]
    assert [e["status"] for e in entries] == ["complete", "complete"], [e["error"] for e in entries]
    assert all(e["resources"] == {"num_cpus": 1.0, "num_gpus": 0.0} for e in entries)
    (a_start, a_end), (b_start, b_end) = (_interval(e) for e in entries)
    assert a_start < b_end and b_start < a_end  # two CPUs, one each: the two servers ran at once
    # ... each on a core of its own (not both on both), its torch on one thread; the run's provenance
    # says what the server process had
    cores = [e["placement"]["cores"] for e in entries]
    assert sorted(cores) == [[0], [1]], cores
    for entry in entries:
        (record,) = entry["workloads"].values()
        run = next(r for r in results.runs if r["run_id"] == record["run_id"])
        assert run["placement"]["server_cores"] == entry["placement"]["cores"]
        assert run["placement"]["server_threads"] == "1"
        assert run["placement"]["client_cores"] == entry["placement"]["cores"]
    assert sorted(results.points[S.CONFIG_ID]) == sorted(e["config_id"] for e in entries)
    assert len(results.runs) == 2 and {r["launcher_config"]["max_batch_size"] for r in results.runs} == {1, 2}

    # A third configuration, on a worker told it cannot see the folder: its tables travel back to
    # the driver, which appends them; the two finished ones are not launched again.
    sweep([1, 2, 3]).run(tmp_path, progress=False, executor=RayExecutor(num_cpus=1, shared_folder=False))
    entries = load_manifest(tmp_path)["configs"]
    assert [(e["status"], e["launches"]) for e in entries] == [("complete", 1)] * 3
    results = load_results(tmp_path)
    assert results.points[S.CONFIG_ID].nunique() == 3 and len(results.runs) == 3
    shipped = entries[2]
    assert (tmp_path / shipped["log_path"]).read_text().count("Setting max batch total tokens") == 1
    (record,) = shipped["workloads"].values()
    assert record["run_id"] in set(results.points[S.RUN_ID])
