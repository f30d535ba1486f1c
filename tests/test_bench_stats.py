"""The benchmark's arithmetic, on hand-made records: docs/measurement.md's definitions and seed 000's tables."""

from __future__ import annotations

import math
import os
import re

import pytest

from tgi_toolkit import schema as S
from tgi_toolkit.bench import stats
from tgi_toolkit.bench.client import StreamRecord
from tgi_toolkit.bench.prometheus import parse_prometheus
from tgi_toolkit.bench.tables import markdown_table
from tgi_toolkit.bench.telemetry import Telemetry, client_bound, machine_busy
from tgi_toolkit.scenarios.shapes import arrival_offsets

MS = 1_000_000  # ns


def record(sent: int, tokens: list[int], counts: list[int] | None = None, output: int | None = None) -> StreamRecord:
    r = StreamRecord(sent_ns=sent, token_ns=tokens, token_counts=counts, status=200, input_tokens=32)
    r.output_tokens = output if output is not None else (sum(counts) if counts else len(tokens))
    return r


def test_request_metrics_follow_the_definitions():
    r = record(0, [100 * MS, 120 * MS, 150 * MS, 160 * MS])
    row = stats.request_metrics(r, clock_ns=-5 * MS)
    assert row[S.SENT_S] == pytest.approx(0.005)
    assert row[S.TTFT_S] == pytest.approx(0.1)
    assert row[S.E2E_S] == pytest.approx(0.16)
    assert row[S.TPOT_S] == pytest.approx(0.06 / 3)
    assert row[S.SPEED_TOK_S] == pytest.approx(3 / 0.06)
    assert row[S.ITL_S] == pytest.approx([0.02, 0.03, 0.01])


def test_a_chunk_of_k_tokens_counts_k_gaps():
    # speculative decoding: the third chunk carries 3 tokens (pitfall 5)
    r = record(0, [10 * MS, 20 * MS, 50 * MS], counts=[1, 1, 3])
    row = stats.request_metrics(r, 0)
    assert row[S.OUTPUT_TOKENS] == 5
    assert row[S.ITL_S] == pytest.approx([0.01, 0.01, 0.01, 0.01])
    assert row[S.TPOT_S] == pytest.approx(0.04 / 4)


def test_one_token_and_failed_requests_have_no_tpot():
    one = stats.request_metrics(record(0, [10 * MS]), 0)
    assert one[S.TTFT_S] == pytest.approx(0.01) and math.isnan(one[S.TPOT_S]) and one[S.ITL_S] == []
    failed = StreamRecord(sent_ns=0, status=0, error="ClientConnectorError", error_message="refused")
    row = stats.request_metrics(failed, 0)
    assert math.isnan(row[S.TTFT_S]) and row[S.OUTPUT_TOKENS] == 0 and row[S.FINISH_REASON] is None


def _row(ttft: float, tpot: float, error: str | None = None) -> dict:
    return {S.ERROR: error, S.SHORT_OUTPUT: False, S.INPUT_TOKENS: 10, S.OUTPUT_TOKENS: 5, S.TTFT_S: ttft,
            S.TPOT_S: tpot, S.E2E_S: ttft + 4 * tpot, S.ITL_S: [tpot] * 4, S.SPEED_TOK_S: 1 / tpot}


def test_point_summary_throughput_and_goodput():
    rows = [_row(0.1, 0.01), _row(0.3, 0.01), _row(0.1, 0.05), _row(float("nan"), float("nan"), "overloaded")]
    out = stats.point_summary(rows, duration_s=2.0, slo_ttft_s=0.2, slo_tpot_s=0.02)
    assert out[S.REQUESTS] == 4 and out[S.ERRORS] == 1
    assert out[S.TOTAL_OUTPUT_TOKENS] == 15 and out[S.OUTPUT_THROUGHPUT] == pytest.approx(7.5)
    assert out[S.REQUEST_THROUGHPUT] == pytest.approx(1.5)
    assert out[S.GOODPUT_RPS] == pytest.approx(0.5)  # only the first meets both objectives
    assert out[S.SLO_ATTAINMENT] == pytest.approx(0.25)
    assert out[S.stat_column("ttft", "max")] == pytest.approx(0.3)
    assert set(out) >= {S.stat_column(m, s) for m in (*S.LATENCY_METRICS, S.SPEED_METRIC) for s in S.STATS}
    free = stats.point_summary(rows, duration_s=2.0)
    assert math.isnan(free[S.GOODPUT_RPS]) and math.isnan(free[S.SLO_TTFT_S])


def test_batch_run_is_text_generation_benchmarks_arithmetic():
    # B=2, S=10, D=5: prefill ends with the later first token, decode with the later last token.
    recs = [record(0, [100 * MS, 110 * MS, 120 * MS, 130 * MS, 140 * MS]),
            record(1 * MS, [105 * MS, 115 * MS, 125 * MS, 135 * MS, 145 * MS])]
    out = stats.batch_run(recs, sequence_length=10)
    assert out[S.PREFILL_LATENCY_S] == pytest.approx(0.105)
    assert out[S.PREFILL_THROUGHPUT] == pytest.approx(2 * 10 / 0.105)
    assert out[S.DECODE_TOTAL_LATENCY_S] == pytest.approx(0.040)
    assert out[S.DECODE_TOKEN_LATENCY_S] == pytest.approx(0.010)
    assert out[S.DECODE_THROUGHPUT] == pytest.approx(2 * 4 / 0.040)
    failed = StreamRecord(error="overloaded", status=429)
    assert all(math.isnan(v) for v in stats.batch_run([recs[0], failed], 10).values())


def test_ingestion_fit_recovers_the_slope_despite_an_outlier():
    lengths = [32, 64, 128, 256, 512, 512, 1024, 1024]
    ttft = [0.010 + n / 10_000 for n in lengths]
    ttft[4] = 1.0  # a request that met a busy server
    fit = stats.ingestion_fit(lengths, ttft)
    assert fit["speed_tok_s"] == pytest.approx(10_000, rel=1e-6)
    assert fit["intercept_s"] == pytest.approx(0.010) and fit["n"] == 7 and fit["r2"] == pytest.approx(1.0)
    assert fit["kept"].tolist() == [True] * 4 + [False] + [True] * 3  # the outlier, by position
    assert math.isnan(stats.ingestion_fit([64, 64], [0.1, 0.2])["speed_tok_s"])
    # unmeasured requests are not kept either; with nothing to fit, nothing is called an outlier
    assert stats.ingestion_fit([64, float("nan"), 128], [0.1, 0.2, float("nan")])["kept"].tolist() == [
        True, False, False]
    assert stats.ingestion_fit([64, 64], [0.1, 0.2])["kept"].tolist() == [True, True]


def test_describe_and_confidence_interval():
    d = stats.describe([1, 2, 3, 4, float("nan")])
    assert d["mean"] == 2.5 and d["min"] == 1 and d["max"] == 4 and d["p50"] == 2.5
    assert all(math.isnan(v) for v in stats.describe([]).values())
    mean, low, high = stats.mean_ci([10.0, 12.0, 11.0, 13.0])
    assert low < mean == 11.5 < high
    assert high - mean == pytest.approx(3.18 * 1.2910 / 2, rel=1e-3)
    assert stats.describe([10.0, 12.0, 11.0, 13.0])["ci95"] == pytest.approx(high - mean)
    assert math.isnan(stats.describe([10.0])["ci95"])  # one sample says nothing of the spread


def test_kv_capacity_from_tokens_in_flight_and_usage():
    a = record(0, [10 * MS, 20 * MS, 30 * MS])
    b = record(5 * MS, [40 * MS, 50 * MS])
    running, tokens = stats.tokens_in_flight([(a, 32), (b, 32)], 25 * MS)
    assert running == 2 and tokens == (32 + 2) + (32 + 0)
    assert stats.kv_capacity_estimate([(1000, 0.10), (2000, 0.20), (5, 0.01)]) == pytest.approx(10_000)


def test_arrivals_constant_and_seeded_poisson():
    assert arrival_offsets(4, 2.0, "constant", 0) == [0.0, 0.5, 1.0, 1.5]
    assert arrival_offsets(3, float("inf"), "poisson", 0) == [0.0, 0.0, 0.0]
    p = arrival_offsets(2000, 10.0, "poisson", 7)
    assert p == arrival_offsets(2000, 10.0, "poisson", 7) != arrival_offsets(2000, 10.0, "poisson", 8)
    assert p[-1] / 1999 == pytest.approx(0.1, rel=0.1)


def test_prometheus_text_keeps_server_series_without_buckets():
    text = """# HELP tgi_queue_size Requests waiting
# TYPE tgi_queue_size gauge
tgi_queue_size 3.0
tgi_batch_inference_count_total{method="prefill"} 5.0
tgi_request_duration_bucket{le="0.1"} 2.0
tgi_request_duration_created 1.7e+09
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
python_gc_objects_collected_total{generation="0"} 1.0
"""
    assert parse_prometheus(text) == [("tgi_queue_size", "", 3.0),
                                      ("tgi_batch_inference_count_total", "method=prefill", 5.0),
                                      ("vllm:gpu_cache_usage_perc", "model_name=m", 0.25)]


def test_prometheus_text_keeps_the_written_names_of_counters_and_what_came_before_a_cut():
    # TGI's own exporter types `tgi_request_count` as a counter without `_total`; prometheus_client writes
    # `_total`: each keeps the name its server wrote. A scrape cut mid-line keeps the series read before it.
    text = """# TYPE tgi_request_count counter
tgi_request_count 4
# TYPE tgi_request_failure counter
tgi_request_failure_total{err="validation"} 2
tgi_request_failure_created 1.7e+09
# TYPE tgi_queue_size gauge
tgi_queue_size 1
tgi_batch_current_size{"""
    assert parse_prometheus(text) == [("tgi_request_count", "", 4.0),
                                      ("tgi_request_failure_total", "err=validation", 2.0),
                                      ("tgi_queue_size", "", 1.0)]


def test_client_bound_rule():
    assert not client_bound(0.3, 0.020)
    assert client_bound(8.0, 0.020)  # 8 ms of lag against a 20 ms inter-token latency
    assert not client_bound(8.0, 0.100)
    assert client_bound(0.3, 0.020, client_cpu=0.97)
    assert not client_bound(float("nan"), float("nan"))
    # one output token per request (ingestion): 8 ms of lag against 300 ms TTFTs is noise, against 20 ms it is not
    assert not client_bound(8.0, float("nan"), ttft_p50_s=0.300)
    assert client_bound(8.0, float("nan"), ttft_p50_s=0.020)
    assert client_bound(8.0, float("nan"))
    # With the loop thread's scheduler statistics: the case, 2.5 ms of lag p99 against a
    # 2 ms floor, while the loop ran 10 % of the time and waited 5 %: the machine, not the client.
    assert not client_bound(2.5, 0.006, loop_cpu=0.10, loop_wait=0.05)
    assert client_bound(2.5, 0.006, loop_cpu=0.45, loop_wait=0.50)  # never idle: events queued behind it
    assert client_bound(8.0, 0.020, loop_cpu=0.30, loop_wait=0.10)  # its own work made it lag
    assert not client_bound(0.3, 0.020, client_cpu=0.97, loop_cpu=0.05, loop_wait=0.93)  # waited, did not work
    # a crowded machine (measured: a flooding server with two spinning processes on 2 cores): the
    # saturated loop got 9 % of a core but blocked 10 times a second; a light loop there blocks 74
    assert client_bound(240.0, 0.001, loop_cpu=0.09, loop_wait=0.90, loop_blocks=9.6)
    assert not client_bound(37.0, 0.020, loop_cpu=0.03, loop_wait=0.68, loop_blocks=74.0)
    assert not client_bound(37.0, 0.020, loop_cpu=0.03, loop_wait=0.96, loop_blocks=2.0)  # its share is tiny


def test_machine_busy_rule():
    assert machine_busy(0.12, 0.0, 2)  # the loop waited for a core 12 % of the time
    assert machine_busy(0.0, 0.6, 2)  # others took 0.6 of 2 cores
    assert not machine_busy(0.02, 0.3, 2)
    assert not machine_busy(0.02, 3.0, 64)  # 3 of 64 cores: room left
    assert not machine_busy(float("nan"), float("nan"), 2)  # unknown: not flagged


def test_markdown_table_is_padded_like_seed_000():
    table = markdown_table(["Step", "Batch Size", "Average"], [["Prefill", "16", "958.80 ms"], ["Decode", "", "1 ms"]])
    lines = table.splitlines()
    assert lines[0] == "| Step    | Batch Size | Average   |"
    assert lines[1] == "|---------|------------|-----------|"
    assert re.fullmatch(r"\| Decode  \|            \| 1 ms      \|", lines[3])


def test_telemetry_window_reads_tgi_and_vllm_gauges():
    tgi = Telemetry("http://bench.invalid", 0, session=None, gpu=False)
    tgi.samples = [(0.5, "tgi_batch_max_total_tokens", "", 1000.0), (1.0, "tgi_batch_current_max_tokens", "", 250.0),
                   (1.5, "tgi_batch_current_size", "", 3.0), (1.5, "tgi_queue_size", "", 2.0),
                   (2.0, "tgi_batch_current_max_tokens", "", 500.0), (9.0, "tgi_queue_size", "", 7.0)]
    tgi.lag = [(1.0, 0.2), (1.2, 4.0), (20.0, 99.0)]
    w = tgi.window(0.0, 5.0)
    assert (w.kv_capacity_tokens, w.kv_usage_max, w.batch_size_max, w.queue_size_max) == (1000, 0.5, 3, 2)
    assert w.lag_max_ms == 4.0
    vllm = Telemetry("http://bench.invalid", 0, session=None, gpu=False)
    vllm.samples = [(1.0, "vllm:num_requests_running", "model_name=m", 8.0),
                    (1.0, "vllm:kv_cache_usage_perc", "model_name=m", 0.2)]
    w = vllm.window(0.0, 5.0)
    assert math.isnan(w.kv_capacity_tokens) and w.kv_usage == [(1.0, 0.2)] and w.batch_size_max == 8


def test_server_metric_names_are_the_schemas_and_what_telemetry_samples():
    from tgi_toolkit.bench import samplers, telemetry

    names = ("BATCH_SIZE_METRICS", "QUEUE_SIZE_METRICS", "KV_TOTAL_METRIC", "KV_USED_METRIC", "KV_USAGE_METRICS",
             "CLIENT_LOOP_LAG_MS", "CLIENT_CPU_PERCENT")
    assert all(getattr(telemetry, n) is getattr(S, n) for n in names)  # one definition, the schema's
    sampler_names = ("PROCESS_CPU_PERCENT", "PROCESS_RSS_BYTES", "GPU_UTILIZATION", "GPU_MEMORY_USED_BYTES")
    assert all(getattr(samplers, n) is getattr(S, n) for n in sampler_names)
    sampled = [metric for metric, _labels, _value in samplers.ProcessSampler(os.getpid()).sample()]
    assert sampled == [S.PROCESS_CPU_PERCENT, S.PROCESS_RSS_BYTES] == ["process_cpu_percent", "process_rss_bytes"]


def test_printed_prefill_throughput_is_text_generation_benchmarks_own_figure():
    # Seed 000: batch 16, prefill 958.80 ms -> "16.69 tokens/secs" (batch size / latency); the
    # schema's column keeps prompt tokens per second (x sequence length 500).
    from tgi_toolkit.bench.results import Results, frame

    row = {S.RUN_ID: "r", S.BATCH_SIZE: 16, S.SEQUENCE_LENGTH: 500, S.DECODE_LENGTH: 1000, S.REPEAT: 0,
           S.WARMUP: False, S.PREFILL_LATENCY_S: 0.9588, S.PREFILL_THROUGHPUT: 16 * 500 / 0.9588,
           S.DECODE_TOKEN_LATENCY_S: 0.12188, S.DECODE_TOTAL_LATENCY_S: 121.758,
           S.DECODE_THROUGHPUT: 16 * 999 / 121.758}
    results = Results(batch=frame([row], "batch"), runs=[{"run_id": "r", "scenario": "batch", "workload": {}}])
    tables = results.tables()
    assert re.search(r"\| Prefill \| 16 +\| 16\.69 tokens/secs", tables), tables
    assert "131.28 tokens/secs" in tables and "8344." not in tables
    assert S.PREFILL_THROUGHPUT in tables  # the note says where prompt tokens per second are
