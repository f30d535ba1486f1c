"""A sweep whose engine is killed (kill -9) in the middle: the sweep reports it, the finished points
stay intact, and a plain rerun resumes from them (issue 15 item 9). The real embedded engine, a
tiny workload."""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from tgi_toolkit import schema as S
from tgi_toolkit.bench.results import load_results
from tgi_toolkit.sweep import Sweep, Workload, load_manifest

pytestmark = pytest.mark.slow


def _engines() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True)
            if "tgi_toolkit.engine" in " ".join(p.cmdline())]


def test_an_engine_killed_mid_sweep_is_reported_and_a_rerun_resumes(tmp_path, launches):
    sweep = Sweep(base={"max_input_tokens": 32, "max_total_tokens": 48, "max_batch_prefill_tokens": 64},
                  workloads=[Workload("concurrency", users=[1, 2], prompt_tokens=16, max_new_tokens=4, requests=2)],
                  server={"health_timeout": 180})
    killed: list[int] = []
    others = {p.pid for p in _engines()}  # e.g. the test session's shared engine, when it is running

    def kill_after_first_point(row: dict) -> None:
        if not killed:
            (engine,) = [p for p in _engines() if p.pid not in others]
            killed.append(engine.pid)
            os.kill(engine.pid, signal.SIGKILL)  # as the OOM killer or a stray `kill -9` would

    results = sweep.run(tmp_path, progress=False, on_point=kill_after_first_point)
    assert killed and len(launches) == 1
    (entry,) = load_manifest(tmp_path)["configs"]
    assert entry["status"] == "failed" and entry["error"].startswith("server died during ")
    assert entry["resumable"] is True and entry["exit_code"] == -signal.SIGKILL
    (record,) = entry["workloads"].values()
    assert record["status"] == "failed" and "1 of 2 points finished" in record["error"]
    first = load_results(tmp_path).points
    assert len(first) == 1 and len(results.points) == 1 and first[S.USERS].tolist() == [1]
    run_id = first[S.RUN_ID].iloc[0]

    launches.clear()
    results = sweep.run(tmp_path, progress=False)  # no retry_failed: a killed server resumes
    assert len(launches) == 1
    (entry,) = load_manifest(tmp_path)["configs"]
    assert entry["status"] == "complete" and entry["launches"] == 2 and "resumable" not in entry
    points = results.points.sort_values(S.USERS)
    assert points[S.USERS].tolist() == [1, 2] and set(points[S.RUN_ID]) == {run_id}  # one run, resumed
    # the point measured before the kill is the same row, untouched
    assert points.iloc[0][S.DURATION_S] == first.iloc[0][S.DURATION_S]
    assert not [p for p in _engines() if p.pid not in others]  # the sweep left no engine behind
