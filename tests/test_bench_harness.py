"""The harness against servers it did not expect (issue 15, items 4 and 7): a mock OpenAI-style
server process (tests/standins/fake_servers.py `openai`, as guidellm's mock server) on 127.0.0.1
that misbehaves in one way per test, driven through the public API and the CLI."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tgi_toolkit import schema as S
from tgi_toolkit.bench import BenchError, load_results, run_concurrency
from tgi_toolkit.cli import main as cli_main

from .conftest import free_port

STANDIN = Path(__file__).resolve().parent / "standins" / "fake_servers.py"


@contextlib.contextmanager
def mock_server(behaviours: str = "", *, itl: float = 0.002) -> Iterator[str]:
    """A mock OpenAI server process with these behaviours (fake_servers.py's docstring)."""
    port = free_port()
    env = {**os.environ, "TGI_TOOLKIT_STANDIN": behaviours or "ok"}
    proc = subprocess.Popen([sys.executable, str(STANDIN), "openai", "--port", str(port), "--itl", str(itl)],
                            env=env, stdout=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            assert proc.poll() is None and time.monotonic() < deadline, "mock server did not start"
            time.sleep(0.05)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def small_run(url: str, **options) -> object:
    options = {"users": [1], "prompt_tokens": 8, "max_new_tokens": 5, "requests": 6, "progress": False,
               "scrape_interval": 0.2, **options}
    return run_concurrency(url, **options)


def test_tokenize_400_keeps_the_clear_error():
    # BenchError is a ValueError: the prompt builder's retry used to swallow it and say
    # "could not build a prompt of exactly 8 tokens" instead.
    with mock_server("tokenize-400") as url, pytest.raises(BenchError) as caught:
        small_run(url)
    message = str(caught.value)
    assert "no usable /tokenize" in message and "HTTP 400" in message and "--tokenizer-name" in message


def test_a_server_with_its_own_token_count_is_measured_with_accept_server_count(tmp_path, capsys):
    args = ["bench", "concurrency", "-u", "1", "--prompt-tokens", "8", "--max-new-tokens", "4", "--requests", "2",
            "--no-progress", "--api", "completions"]
    refused, accepted = tmp_path / "refused", tmp_path / "accepted"
    with mock_server("own-count") as url:
        assert cli_main([*args, "--url", url, "--output", str(refused)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: tokenizer:") and "--accept-server-count" in err and "11 tokens" in err
        assert not refused.exists()  # refused before the first point: nothing left behind
        assert cli_main([*args, "--url", url, "--output", str(accepted), "--accept-server-count"]) == 0
        assert "also holds" not in capsys.readouterr().out
        # the same folder again, other parameters: the summary is this run's and says the rest is left out
        other = [a if a != "4" else "3" for a in args]
        assert cli_main([*other, "--url", url, "--output", str(accepted), "--accept-server-count"]) == 0
        out = capsys.readouterr().out
        assert "users=1,prompt=8,output=3" in out and "output=4" not in out.split("results:")[0]
        assert "the folder also holds 1 other run(s), left out of the summary above" in out
    results = load_results(accepted)
    results = results.run(results.run_ids[0])
    assert results.points[S.ERRORS].tolist() == [0]
    assert set(results.requests[S.INPUT_TOKENS]) == {11}  # the server's count, recorded as it said
    assert "accepted; asked 8" in results.runs[0]["prompt_check"]["8"]


@pytest.mark.parametrize(("behaviour", "errors"), [
    ("malformed", {"malformed_event"}),
    ("http-500", {"internal_error"}),
    ("drop", {"incomplete_stream", "ClientPayloadError", "ServerDisconnectedError"}),
])
def test_a_failing_request_is_that_requests_error_and_the_point_goes_on(behaviour, errors, tmp_path):
    with mock_server(behaviour) as url:
        results = small_run(url, output=tmp_path)
    point = results.points.iloc[0]
    assert (point[S.REQUESTS], point[S.ERRORS]) == (6, 2)
    failed = results.requests[results.requests[S.ERROR].notna()]
    # the server's 2nd and 5th requests; its 1st was the prompt-length check
    assert set(failed[S.REQUEST_INDEX]) == {0, 3} and set(failed[S.ERROR]) <= errors
    ok = results.requests[results.requests[S.ERROR].isna()]
    assert (ok[S.OUTPUT_TOKENS] == 5).all()
    assert len(load_results(tmp_path).points) == 1  # on disk


def test_an_empty_last_chunk_is_no_token_event():
    # no per-chunk usage (the mock sends usage once at the end): tokens are counted from chunks
    with mock_server("empty-final") as url:
        results = small_run(url, requests=2, api="completions")
    requests = results.requests
    assert (requests[S.OUTPUT_TOKENS] == 5).all()
    assert [len(gaps) for gaps in requests[S.ITL_S]] == [4, 4]  # 5 token chunks, not 6


def test_stop_at_max_tokens_is_a_length_stop():
    with mock_server("stop-at-max") as url:
        results = small_run(url, requests=2, api="chat")
    requests = results.requests
    assert set(requests[S.SERVER_FINISH_REASON]) == {"stop"}
    assert set(requests[S.FINISH_REASON]) == {"length"}
    assert not requests[S.SHORT_OUTPUT].any()


def test_the_mock_server_streams_as_an_openai_server():
    # the stand-in itself: what the tests above rely on
    with mock_server() as url:
        with httpx.stream("POST", url + "/v1/completions", json={"prompt": "a b", "max_tokens": 2, "stream": True,
                                                                  "stream_options": {"include_usage": True}}) as r:
            lines = [line for line in r.iter_lines() if line]
    events = [json.loads(line[6:]) for line in lines[:-1]]
    assert [e["choices"][0]["finish_reason"] if e["choices"] else None for e in events] == [None, "length", None]
    assert events[-1]["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}
    assert lines[-1] == "data: [DONE]"


def test_a_flood_of_events_is_client_bound_and_a_busy_machine_is_not(tmp_path):
    # A truly client-bound point: the stand-in writes pre-built heavy events with no pause, so the
    # client's loop parses all the time (its own CPU is what limits the point).
    with mock_server("flood") as url:
        flood = small_run(url, requests=2, max_new_tokens=6000, api="completions").points.iloc[0]
    loop = flood[[S.CLIENT_LOOP_CPU, S.CLIENT_LOOP_WAIT, S.CLIENT_LOOP_BLOCKS]].to_dict()
    assert flood[S.CLIENT_LOOP_CPU] + flood[S.CLIENT_LOOP_WAIT] >= 0.9, loop  # never idle
    assert bool(flood[S.CLIENT_BOUND]), loop
    # A busy machine: a slow server (20 ms per token) while one process per core spins. The
    # loop wakes late, but it is idle most of the time: the machine is flagged, not the client.
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        with mock_server(itl=0.02) as url:
            busy = small_run(url, requests=2, max_new_tokens=40, api="completions").points.iloc[0]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    loop = busy[[S.CLIENT_LOOP_CPU, S.CLIENT_LOOP_WAIT, S.CLIENT_LOOP_BLOCKS, S.OTHER_CPU_CORES,
                 S.CLIENT_LAG_P99_MS]].to_dict()
    assert busy[S.CLIENT_LOOP_BLOCKS] >= 20, loop  # it kept running out of work: light, only kept waiting
    assert not bool(busy[S.CLIENT_BOUND]), loop
    assert bool(busy[S.MACHINE_BUSY]) and busy[S.OTHER_CPU_CORES] >= 0.5
