"""Results folders: the schema's tables and dtypes, appends, read-back equality, resume bookkeeping."""

from __future__ import annotations

import math
import os

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from tgi_toolkit import schema as S
from tgi_toolkit.bench.provenance import config_id, config_label
from tgi_toolkit.bench.results import Results, ResultsFolder, frame, load_results
from tgi_toolkit.config import LauncherConfig


def request_row(run: str, point: str, i: int, **extra) -> dict:
    return {S.RUN_ID: run, S.CONFIG_ID: "", S.CONFIG_LABEL: "", S.BACKEND: "url", S.MODEL_ID: "m",
            S.SCENARIO: "concurrency", S.POINT_ID: point, S.USERS: 2, S.PROMPT_TOKENS: 16, S.MAX_NEW_TOKENS: 4,
            S.REPEAT: 0, S.WARMUP: False, S.REQUEST_INDEX: i, S.SENT_S: 0.1 * i, S.INPUT_TOKENS: 16,
            S.OUTPUT_TOKENS: 4, S.TTFT_S: 0.05, S.E2E_S: 0.2, S.TPOT_S: 0.05, S.SPEED_TOK_S: 20.0,
            S.ITL_S: [0.05, 0.05, 0.05], S.FINISH_REASON: "length", S.SHORT_OUTPUT: False, S.ERROR: None,
            S.ERROR_MESSAGE: None, S.STATUS: 200, **extra}


def test_frames_have_every_schema_column_in_order():
    for table, columns in (("requests", S.REQUEST_COLUMNS), ("points", S.POINT_COLUMNS),
                           ("batch", S.BATCH_COLUMNS), ("server", S.SERVER_COLUMNS)):
        assert tuple(frame([], table).columns) == columns
    df = frame([request_row("r", "p", 0)], "requests")
    assert pd.isna(df.loc[0, S.BATCH_SIZE]) and math.isnan(df.loc[0, S.RATE_RPS])
    assert list(df.loc[0, S.ITL_S]) == [0.05, 0.05, 0.05]
    assert df[S.WARMUP].dtype == bool and df[S.USERS].dtype == "Int64"


def test_appended_points_read_back_identical(tmp_path):
    folder = ResultsFolder(tmp_path)
    first = frame([request_row("r1", "a", 0), request_row("r1", "a", 1, **{S.ERROR: "overloaded"})], "requests")
    second = frame([request_row("r1", "b", 0)], "requests")
    points = frame([{S.RUN_ID: "r1", S.POINT_ID: "a", S.REQUESTS: 2}], "points")
    folder.append({"requests": first, "points": points})
    folder.append({"requests": second, "points": frame([{S.RUN_ID: "r1", S.POINT_ID: "b", S.REQUESTS: 1}],
                                                       "points")})
    folder.write_run({"run_id": "r1", "started_at": "2026-01-01T00:00:00+00:00", "resume_key": "k"})
    loaded = load_results(tmp_path)
    assert_frame_equal(loaded.requests, pd.concat([first, second], ignore_index=True))
    assert loaded.points[S.POINT_ID].tolist() == ["a", "b"]
    assert loaded.run_ids == ["r1"] and "2 points, 3 requests" in repr(loaded)
    assert folder.finished_points("r1") == {"a", "b"} and folder.find_run("k")["run_id"] == "r1"
    assert folder.find_run("other") is None
    assert not list(tmp_path.glob(".*.tmp"))  # temporary files renamed into place


def test_a_same_size_rewrite_within_the_timestamp_granularity_is_not_served_from_the_cache(tmp_path):
    folder = ResultsFolder(tmp_path)  # the cache of this process (a sweep's, a run's)
    folder.append({"requests": frame([request_row("r1", "a", 0, **{S.TTFT_S: 0.05})], "requests")})
    path = tmp_path / "requests.parquet"
    cached = path.stat()
    # Another process rewrites the table the way ResultsFolder does (a new file renamed into place):
    # same size, and an mtime the filesystem's clock could not tell apart from the first.
    other = ResultsFolder(tmp_path / "other")
    other.append({"requests": frame([request_row("r1", "a", 0, **{S.TTFT_S: 0.07})], "requests")})
    os.replace(tmp_path / "other" / "requests.parquet", path)
    os.utime(path, ns=(cached.st_atime_ns, cached.st_mtime_ns))
    now = path.stat()
    assert (now.st_size, now.st_mtime_ns) == (cached.st_size, cached.st_mtime_ns) and now.st_ino != cached.st_ino
    assert folder.table("requests")[S.TTFT_S].tolist() == [0.07]


def test_rows_of_unfinished_points_are_dropped_for_a_rerun(tmp_path):
    folder = ResultsFolder(tmp_path)
    folder.append({"requests": frame([request_row("r1", "a", 0), request_row("r1", "b", 0),
                                      request_row("r2", "b", 0)], "requests")})
    folder.drop_unfinished("r1", {"a"})
    left = load_results(tmp_path).requests
    assert list(zip(left[S.RUN_ID], left[S.POINT_ID], strict=True)) == [("r1", "a"), ("r2", "b")]


def test_results_filter_by_run(tmp_path):
    results = Results(requests=frame([request_row("r1", "a", 0), request_row("r2", "a", 0)], "requests"),
                      runs=[{"run_id": "r1"}, {"run_id": "r2"}])
    one = results.run("r2")
    assert one.requests[S.RUN_ID].tolist() == ["r2"] and one.run_ids == ["r2"]
    with pytest.raises(FileNotFoundError):
        load_results(tmp_path / "missing")


def test_config_identity_ignores_where_the_server_listens():
    a = LauncherConfig(max_batch_size=8)
    b = a.model_copy(update={"port": 41234, "hostname": "0.0.0.0"})
    assert config_id(a) == config_id(b) != config_id(LauncherConfig())
    assert config_label(a) == "max_batch_size=8" and config_label(LauncherConfig()) == "default"
    assert config_id(None) == "" and config_label(None) == ""
