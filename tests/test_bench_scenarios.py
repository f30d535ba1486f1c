"""The scenarios against the real embedded engine: numbers that hang together, exact prompt
lengths, complete tables, read-back equality, the OpenAI routes, bad input and the CLI."""

from __future__ import annotations

import math

import pytest
from pandas.testing import assert_frame_equal

from tgi_toolkit.bench import (
    BenchError,
    kv_capacity,
    load_results,
    measure_ingestion,
    run_batch,
    run_concurrency,
    run_rate,
    run_scenario,
)
from tgi_toolkit.bench import schema as S
from tgi_toolkit.bench.main_metrics import INGESTION, KV_CAPACITY
from tgi_toolkit.cli import main as cli_main

pytestmark = pytest.mark.slow

QUICK = {"progress": False, "scrape_interval": 0.2}


def assert_same_tables(a, b):
    for name in ("requests", "points", "batch", "server"):
        assert_frame_equal(getattr(a, name), getattr(b, name), obj=name)


def test_batch_matches_text_generation_benchmark(engine_url, tmp_path):
    results = run_batch(engine_url, batch_sizes=[1, 2, 4], sequence_length=32, decode_length=12, runs=2, warmups=1,
                        output=tmp_path, **QUICK)
    batch, requests = results.batch, results.requests
    assert tuple(batch.columns) == S.BATCH_COLUMNS and tuple(requests.columns) == S.REQUEST_COLUMNS
    assert tuple(results.points.columns) == S.POINT_COLUMNS and tuple(results.server.columns) == S.SERVER_COLUMNS
    assert len(batch) == 3 * 3 and batch[S.WARMUP].sum() == 3
    assert len(requests) == (1 + 2 + 4) * 3 and requests[S.ERROR].isna().all()
    # every prompt had exactly the requested length, every output was forced to its full length
    assert (requests[S.INPUT_TOKENS] == 32).all() and (requests[S.OUTPUT_TOKENS] == 12).all()
    assert (requests[S.FINISH_REASON] == "length").all() and not requests[S.SHORT_OUTPUT].any()
    measured = batch[~batch[S.WARMUP]]
    assert measured[[S.PREFILL_LATENCY_S, S.DECODE_TOTAL_LATENCY_S, S.DECODE_THROUGHPUT]].notna().all().all()
    throughput = measured.groupby(S.BATCH_SIZE)[S.DECODE_THROUGHPUT].mean()
    assert throughput[1] < throughput[2] < throughput[4]  # decode throughput rises with batch size
    assert (measured[S.DECODE_TOKEN_LATENCY_S] * 11 - measured[S.DECODE_TOTAL_LATENCY_S]).abs().max() < 1e-9
    points = results.points.set_index(S.BATCH_SIZE)
    assert points[S.REQUESTS].tolist() == [2, 4, 8] and (points[S.ERRORS] == 0).all()
    assert (points[S.SERVER_BATCH_SIZE_MAX] >= 1).all()
    info = results.runs[0]["info"]
    assert (points[S.KV_CAPACITY_TOKENS] == info["max_batch_total_tokens"]).all()

    tables = results.tables()
    for heading in ("| Parameter", "| Sequence Length    | 32", "| Decode Length      | 12", "| N Runs             | 2",
                    "| Step           | Batch Size | Average", "| Lowest", "| Highest", "| p50", "| p90", "| p99",
                    "| Decode (token) |", "| Decode (total) |", "tokens/secs"):
        assert heading in tables, heading
    assert tables.count("| Prefill        |") == 3

    run = results.runs[0]
    assert set(S.PROVENANCE_KEYS) <= set(run) and run["status"] == "complete"
    assert run["info"]["model_id"] == results.points[S.MODEL_ID][0] and run["versions"]["pandas"]
    metrics = set(results.server[S.METRIC])
    assert {"tgi_queue_size", "tgi_batch_current_size", "process_rss_bytes", "client_loop_lag_ms"} <= metrics
    assert_same_tables(results, load_results(tmp_path))


def test_concurrency_points_hang_together(engine_url):
    results = run_concurrency(engine_url, users=[1, 4], prompt_tokens=24, max_new_tokens=8, requests=8,
                              slo_ttft_s=30.0, slo_tpot_s=30.0, **QUICK)
    points = results.points.set_index(S.USERS)
    assert points[S.POINT_ID].tolist() == ["users=1,prompt=24,output=8", "users=4,prompt=24,output=8"]
    assert (points[S.REQUESTS] == 8).all() and (points[S.ERRORS] == 0).all() and (points[S.SHORT_OUTPUTS] == 0).all()
    for metric in (*S.LATENCY_METRICS, S.SPEED_METRIC):
        for stat in S.STATS:
            assert points[S.stat_column(metric, stat)].notna().all(), (metric, stat)
    assert points.loc[4, S.OUTPUT_THROUGHPUT] > points.loc[1, S.OUTPUT_THROUGHPUT]
    assert points.loc[4, S.SERVER_BATCH_SIZE_MAX] >= 2
    # generous objectives: every request meets them, goodput is the request throughput
    assert (points[S.GOODPUT_RPS] - points[S.REQUEST_THROUGHPUT]).abs().max() < 1e-9
    assert (points[S.SLO_ATTAINMENT] == 1.0).all()
    req = results.requests
    assert (req[S.INPUT_TOKENS] == 24).all() and (req[S.OUTPUT_TOKENS] == 8).all()
    assert (req[S.TTFT_S] <= req[S.E2E_S]).all() and (req[S.ITL_S].map(len) == 7).all()
    assert results.runs[0]["prompt_check"] == {"24": 24} and results.path is None


def test_rate_and_the_openai_routes(engine_url):
    rate = run_rate(engine_url, rates=[float("inf"), 8.0], arrival="constant", prompt_tokens=16, max_new_tokens=6,
                    requests=4, api="completions", slo_ttft_s=30.0, **QUICK)
    points = rate.points
    assert points[S.RATE_RPS].tolist() == [math.inf, 8.0] and (points[S.ARRIVAL] == "constant").all()
    assert (points[S.ERRORS] == 0).all() and points[S.GOODPUT_RPS].notna().all()
    req = rate.requests
    assert (req[S.INPUT_TOKENS] == 16).all() and (req[S.OUTPUT_TOKENS] == 6).all()  # ignore_eos on /v1
    paced = req[req[S.RATE_RPS] == 8.0].sort_values(S.REQUEST_INDEX)[S.SENT_S].diff().dropna()
    assert paced.between(0.1, 0.2).all()  # 1/8 s apart

    chat = run_concurrency(engine_url, users=[2], prompt_tokens=16, max_new_tokens=6, requests=2, api="chat",
                           **QUICK)
    assert (chat.requests[S.OUTPUT_TOKENS] == 6).all() and (chat.requests[S.INPUT_TOKENS] > 16).all()
    assert "chat template" in chat.runs[0]["prompt_check"]["16"]


def test_ingestion_speed_and_main_metrics(engine_url):
    results = measure_ingestion(engine_url, prompt_tokens=[16, 256, 768], repeats=2, **QUICK)
    fit = results.ingestion()
    assert fit["speed_tok_s"] > 0 and fit["n"] >= 4
    assert (results.requests[S.OUTPUT_TOKENS] == 1).all()
    # 48x the tokens takes longer; the middle length is left out, its order against its neighbours
    # flips under a loaded CPU (one stalled request of two moves a median).
    ttft = results.requests.groupby(S.PROMPT_TOKENS)[S.TTFT_S].median()
    assert ttft[768] > ttft[16]
    table = results.main_metrics().set_index("metric")
    assert table["label"].tolist()[0] == "Prompt ingestion speed"
    assert table.loc[INGESTION, "value"] == pytest.approx(fit["speed_tok_s"])
    # on a loaded machine the fit scatters: then the cell says why, never the number alone
    text = table.loc[INGESTION, "text"]
    caveat = "" if fit["unreliable"] is None else f", {fit['unreliable']}"
    assert text.endswith("t/s" + caveat)
    assert table.loc[KV_CAPACITY, "value"] > 0
    assert kv_capacity(engine_url) == results.runs[0]["info"]["max_batch_total_tokens"] == \
        table.loc[KV_CAPACITY, "value"]


def test_bad_input_is_refused_before_anything_is_sent(engine_url, tmp_path):
    cases = [
        (lambda: run_batch(engine_url, batch_sizes=[0], output=tmp_path), "batch_size: 0 is not allowed"),
        (lambda: run_batch(engine_url, sequence_length=5000, output=tmp_path), "sequence_length.*max_input_tokens"),
        (lambda: run_concurrency(engine_url, users=[], output=tmp_path), "users: needs at least one value"),
        (lambda: run_concurrency(engine_url, users=[8], requests=4), "requests: 4 is fewer than 8 users"),
        (lambda: run_rate(engine_url, arrival="burst", output=tmp_path), "arrival.*constant, poisson"),
        (lambda: run_scenario("soak", engine_url), "scenario.*batch, concurrency, rate, ingestion"),
        (lambda: run_batch(engine_url, batch_size=[1]), "batch_size.*not an option"),
        (lambda: run_batch(engine_url, sampling={"temp": 1.0}), "sampling.*temperature"),
        (lambda: run_batch("localhost:1"), "url.*no scheme"),
    ]
    for call, message in cases:
        with pytest.raises(BenchError, match=message):
            call()
    assert not (tmp_path / "points.parquet").exists()


def test_cli_prints_seed_tables_and_one_line_errors(engine_url, tmp_path, capsys):
    out = tmp_path / "cli"
    rc = cli_main(["bench", "batch", "--url", engine_url, "-b", "1", "-b", "2", "-s", "16", "-d", "4", "-r", "1",
                   "-w", "0", "--no-progress", "--output", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0 and "| Decode (total) |" in printed and "tokens/secs" in printed
    assert len(load_results(out).batch) == 2
    assert load_results(out).runs[0]["command"][:3] == ["tgi-toolkit", "bench", "batch"]
    rc = cli_main(["bench", "batch", "--url", engine_url, "-b", "0", "--output", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and err.strip() == "error: batch_size: 0 is not allowed (allowed: integers >= 1)"
    rc = cli_main(["bench", "concurrency", "--url", engine_url, "--prompt-tokens", "1100", "--max-new-tokens", "8"])
    assert rc == 2 and "max_input_tokens" in capsys.readouterr().err


async def test_sync_api_inside_a_running_event_loop(engine_url):
    # as in a Jupyter cell: the loop is running, the sync call moves to a worker thread
    results = run_batch(engine_url, batch_sizes=[1], sequence_length=8, decode_length=4, runs=1, warmups=0, **QUICK)
    assert len(results.batch) == 1 and results.batch[S.DECODE_THROUGHPUT].notna().all()
