"""Losing nothing: an interrupted run resumes with only its missing points, and a server that dies
mid-run gives a clear error with the finished points on disk."""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from tgi_toolkit import schema as S
from tgi_toolkit.bench import ServerDiedError, load_results, run_concurrency

from .conftest import ENGINE_ARGS, engine_process

pytestmark = pytest.mark.slow

PARAMS = {"users": [1, 2, 3], "prompt_tokens": 16, "max_new_tokens": 4, "requests": 3, "progress": False,
          "scrape_interval": 0.2, "ramp_up": 0}  # no ramp: every row is a measured one


class Stop(Exception):
    pass


def test_an_interrupted_run_resumes_with_only_the_missing_points(engine_url, tmp_path):
    seen: list[str] = []

    def stop_after_first(point: dict) -> None:
        seen.append(point[S.POINT_ID])
        raise Stop  # as a Ctrl-C after the first point was saved

    with pytest.raises(Stop):
        run_concurrency(engine_url, output=tmp_path, on_point=stop_after_first, **PARAMS)
    first = load_results(tmp_path)
    assert first.points[S.POINT_ID].tolist() == seen == ["users=1,prompt=16,output=4"]
    assert first.runs[0]["status"] == "failed" and "Stop" in first.runs[0]["error"]

    again: list[str] = []
    results = run_concurrency(engine_url, output=tmp_path, on_point=lambda p: again.append(p[S.POINT_ID]), **PARAMS)
    assert again == ["users=2,prompt=16,output=4", "users=3,prompt=16,output=4"]  # only the missing ones
    assert results.points[S.POINT_ID].tolist() == [*seen, *again]
    assert results.run_ids == first.run_ids  # the same run, continued
    assert results.runs[0]["status"] == "complete" and results.runs[0]["sessions"] == 2
    kept = results.requests[results.requests[S.POINT_ID] == seen[0]].reset_index(drop=True)
    assert kept[S.SENT_S].tolist() == first.requests[S.SENT_S].tolist()  # finished rows untouched
    assert len(results.requests) == 3 * 3

    nothing: list[str] = []
    same = run_concurrency(engine_url, output=tmp_path, on_point=nothing.append, **PARAMS)
    assert nothing == [] and len(same.points) == 3
    fresh = run_concurrency(engine_url, output=tmp_path, resume=False, **{**PARAMS, "users": [1]})
    assert fresh.run_ids != first.run_ids and len(load_results(tmp_path).runs) == 2


def test_a_server_that_dies_mid_run_keeps_the_finished_points(tmp_path):
    with engine_process(*ENGINE_ARGS, tmp=tmp_path) as engine:
        def kill() -> None:
            os.killpg(engine.proc.pid, signal.SIGKILL)

        def after_first(point: dict) -> None:
            # the second point (2 users, 32 tokens each) is streaming when the server goes
            threading.Timer(0.6, kill).start()

        with pytest.raises(ServerDiedError) as caught:
            run_concurrency(engine.url, users=[1, 2], prompt_tokens=16, max_new_tokens=32, requests=2,
                            output=tmp_path / "out", on_point=after_first, progress=False, scrape_interval=0.2)
    message = str(caught.value)
    assert engine.url in message and "stopped answering" in message
    assert "users=2,prompt=16,output=32" in message and "1 of 2 points finished" in message
    assert str(tmp_path / "out") in message
    saved = load_results(tmp_path / "out")
    assert saved.points[S.POINT_ID].tolist() == ["users=1,prompt=16,output=32"]
    assert set(saved.requests[S.POINT_ID]) == {"users=1,prompt=16,output=32"}
    run = json.loads(next((tmp_path / "out" / "runs").glob("*.json")).read_text())
    assert run["status"] == "failed" and "ServerDiedError" in run["error"]
    assert len(caught.value.results.points) == 1
