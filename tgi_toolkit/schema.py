"""The result tables: their columns, units and meaning. The contract between bench, sweep, plots,
report, planner and app: those modules name columns through the constants here, never by literal.

A results folder (one benchmark run, or a sweep of many runs) holds:

    requests.parquet            one row per request                       (REQUEST_COLUMNS)
    points.parquet              one row per measured point                (POINT_COLUMNS)
    batch.parquet               text-generation-benchmark parity, one row per batch size and run
                                                                          (BATCH_COLUMNS)
    server.parquet              the server's /metrics and process samples over time (SERVER_COLUMNS)
    runs/<run_id>.json          provenance of one run (PROVENANCE_KEYS)

Tables are appended to as points finish (a crash loses no finished point). Several runs share
one folder; `run_id` tells them apart, `config_id` groups runs made with the same launcher
settings (a sweep relaunches the server per configuration).

Units: times in seconds (`_s`), throughputs in tokens per second (`_tok_s`) or requests per second
(`_rps`), client event-loop lag in milliseconds (`_ms`). Timestamps (`sent_s`, `t_s`) are seconds
on the run's monotonic clock, 0 = the run's start, so requests and server samples join on them.

Definitions (docs/measurement.md), client-side, monotonic clock, t0 = request sent:
- ttft: first chunk carrying a token - t0.    e2e: last chunk - t0.
- tpot: (e2e - ttft) / (output_tokens - 1), per request (NaN with one output token).
- itl: every gap between consecutive token chunks; a chunk carrying k tokens counts k tokens,
  its gap split evenly. Pooled over the point's requests for percentiles.
- speed: per-request decode speed, (output_tokens - 1) / (e2e - ttft) tokens/s.
- output throughput: sum of output tokens / wall time of the point (first send to last token).
- goodput: requests meeting every objective (ttft <= slo_ttft_s and tpot <= slo_tpot_s) per second.
"""

from __future__ import annotations

# -- shared identification columns --------------------------------------------------------------
RUN_ID = "run_id"  # str: one call of a scenario
CONFIG_ID = "config_id"  # str: short hash of the launcher config's non-default fields ("" if unknown)
CONFIG_LABEL = "config_label"  # str: human label of the configuration, e.g. "max_batch_size=8"
BACKEND = "backend"  # str: embedded | tgi | tgi-docker | vllm | url
MODEL_ID = "model_id"  # str: from /info
SCENARIO = "scenario"  # str: batch | concurrency | rate | ingestion | shared_prefix | multi_turn | decode_stall
POINT_ID = "point_id"  # str: stable key of a point within its run, e.g. "users=16,prompt=128,output=128"

SCENARIOS = ("batch", "concurrency", "rate", "ingestion", "shared_prefix", "multi_turn", "decode_stall")

# -- workload columns (NaN/None where the scenario has no such knob) ----------------------------
USERS = "users"  # int: parallel users (concurrency)
BATCH_SIZE = "batch_size"  # int: simultaneous requests of the same lengths (batch)
RATE_RPS = "rate_rps"  # float: arrival rate (rate); inf = all at once
ARRIVAL = "arrival"  # str: constant | poisson (rate)
PROMPT_TOKENS = "prompt_tokens"  # int: requested prompt length (tokens)
MAX_NEW_TOKENS = "max_new_tokens"  # int: requested output length

WORKLOAD_COLUMNS = (USERS, BATCH_SIZE, RATE_RPS, ARRIVAL, PROMPT_TOKENS, MAX_NEW_TOKENS)
IDENTITY_COLUMNS = (RUN_ID, CONFIG_ID, CONFIG_LABEL, BACKEND, MODEL_ID, SCENARIO, POINT_ID)

# -- requests.parquet: one row per request ------------------------------------------------------
REQUEST_INDEX = "request_index"  # int: order of sending within the point
REPEAT = "repeat"  # int: repetition of the point (batch: run number), 0-based
WARMUP = "warmup"  # bool: a warm-up request (kept, excluded from statistics)
SENT_S = "sent_s"  # float: when the request was sent, run clock
INPUT_TOKENS = "input_tokens"  # int: prompt length the server reported (details.input_length / usage)
OUTPUT_TOKENS = "output_tokens"  # int: generated tokens, server-reported (fallback: token events)
TTFT_S = "ttft_s"
E2E_S = "e2e_s"
TPOT_S = "tpot_s"
SPEED_TOK_S = "speed_tok_s"  # per-request decode speed
ITL_S = "itl_s"  # list[float]: inter-token gaps of this request
FINISH_REASON = "finish_reason"  # str: length | eos_token | stop_sequence | None on error; "length" whenever
#                                   output_tokens reached max_new_tokens, whatever the server said
SERVER_FINISH_REASON = "server_finish_reason"  # str: the server's own word (OpenAI's "stop", TGI's "length", ...)
SHORT_OUTPUT = "short_output"  # bool: output_tokens < max_new_tokens (EOS could not be ignored)
ERROR = "error"  # str | None: error_type or exception class, None on success
ERROR_MESSAGE = "error_message"  # str | None
STATUS = "status"  # int: HTTP status (200 for a stream that ended in an error event)
# Workloads of scenarios.plans (NaN elsewhere); prompt_tokens is then each request's own length:
GROUP = "group"  # int: shared_prefix: the group; multi_turn: the conversation; decode_stall: 0 streams, 1 long prompt
TURN = "turn"  # int: position within the group, 0-based (multi_turn: the turn; shared_prefix: 0 = the group's first)

REQUEST_COLUMNS = (
    *IDENTITY_COLUMNS, *WORKLOAD_COLUMNS, REPEAT, WARMUP, REQUEST_INDEX, SENT_S, INPUT_TOKENS, OUTPUT_TOKENS,
    TTFT_S, E2E_S, TPOT_S, SPEED_TOK_S, ITL_S, FINISH_REASON, SHORT_OUTPUT, ERROR, ERROR_MESSAGE, STATUS,
    SERVER_FINISH_REASON, GROUP, TURN,
)

# -- points.parquet: one row per measured point ---------------------------------------------------
# ci95: half-width of the mean's 95 % confidence interval (mean ± ci95), since one run is noise
# (docs/measurement.md pitfall 6).
STATS = ("mean", "ci95", "min", "max", "p25", "p50", "p75", "p90", "p99")
PERCENTILES = tuple(s for s in STATS if s.startswith("p"))
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2e")  # columns f"{metric}_{stat}_s"
SPEED_METRIC = "speed"  # columns f"speed_{stat}_tok_s"


def stat_column(metric: str, stat: str) -> str:
    """`stat_column("ttft", "p50") == "ttft_p50_s"`; speed columns end in `_tok_s`."""
    unit = "tok_s" if metric == SPEED_METRIC else "s"
    return f"{metric}_{stat}_{unit}"


REQUESTS = "requests"  # int: measured requests (warm-ups excluded)
ERRORS = "errors"  # int
SHORT_OUTPUTS = "short_outputs"  # int
TOTAL_INPUT_TOKENS = "total_input_tokens"
TOTAL_OUTPUT_TOKENS = "total_output_tokens"
DURATION_S = "duration_s"  # wall time of the point: first send to last token
OUTPUT_THROUGHPUT = "output_throughput_tok_s"
INPUT_THROUGHPUT = "input_throughput_tok_s"
REQUEST_THROUGHPUT = "request_throughput_rps"
SLO_TTFT_S = "slo_ttft_s"  # objective used for goodput (NaN: none)
SLO_TPOT_S = "slo_tpot_s"
GOODPUT_RPS = "goodput_rps"
SLO_ATTAINMENT = "slo_attainment"  # fraction of requests meeting every objective
CLIENT_LAG_P99_MS = "client_lag_p99_ms"  # event-loop lag of the benchmark client
CLIENT_LAG_MAX_MS = "client_lag_max_ms"
CLIENT_BOUND = "client_bound"  # bool: the client, not the server, limited the point (its own CPU; telemetry.py)
MACHINE_BUSY = "machine_busy"  # bool: other processes took CPU during the point (the latencies are stretched)
CLIENT_LOOP_CPU = "client_loop_cpu"  # fraction of the point's wall time the client's event loop ran
CLIENT_LOOP_WAIT = "client_loop_wait"  # fraction it waited, runnable, for a core (others had them)
CLIENT_LOOP_BLOCKS = "client_loop_blocks_per_s"  # times a second the loop ran out of work and blocked
OTHER_CPU_CORES = "other_cpu_cores"  # cores used by processes other than the client and a local server
SERVER_BATCH_SIZE_MAX = "server_batch_size_max"  # from tgi_batch_current_size samples
SERVER_QUEUE_SIZE_MAX = "server_queue_size_max"  # from tgi_queue_size samples
KV_CAPACITY_TOKENS = "kv_capacity_tokens"  # tgi_batch_max_total_tokens, or vLLM's estimate
KV_USAGE_MAX = "kv_usage_max"  # peak fraction of the KV cache in use
# Prefix cache over the point (the embedded engine's own counters, TGI has none: NaN there):
# delta(tgi_toolkit_prefix_cache_hit_tokens_total) / delta(tgi_toolkit_prefix_cache_lookup_tokens_total)
PREFIX_HIT_RATE = "prefix_cache_hit_rate"
PREFIX_HIT_TOKENS = "prefix_cache_hit_tokens"  # prompt tokens served from the cache during the point
PREFIX_LOOKUP_TOKENS = "prefix_cache_lookup_tokens"  # prompt tokens of admitted requests that looked it up
# decode_stall: inter-token gaps of the running streams from the long prompt's send to its first token
STALL_MAX_GAP_S = "stall_max_gap_s"  # the largest such gap (over the point's measured repeats)
STALL_P99_GAP_S = "stall_p99_gap_s"  # p99 of those gaps, pooled
STALL_BASELINE_GAP_S = "stall_baseline_gap_s"  # median gap of the same streams before the long prompt was sent
LONG_PROMPT_TTFT_S = "long_prompt_ttft_s"  # the long prompt's TTFT, median over repeats
# Simulated on a GPU roofline: how far such predictions fell from published figures they were not fitted to
# (80th percentile of |predicted / published - 1|, leave-one-source-out; tgi_toolkit.costs.uncertainty).
# NaN for measured points and for cost models without a published corpus (a calibrated profile).
PREDICTION_ERRORS = {"ttft": "ttft_prediction_error", "tpot": "tpot_prediction_error",
                     OUTPUT_THROUGHPUT: "throughput_prediction_error"}
# concurrency (closed loop): how the users' phases were spread (bench.phase)
RAMP_UP_S = "ramp_up_s"  # user i's first request left i/N of this after the point's start (0: all at once)
ARRIVAL_SYNC_SHARE = "arrival_sync_share"  # measured requests sent within one ITL p50 of another's send
ARRIVAL_SYNC_CHANCE = "arrival_sync_chance"  # that share for sends at the same rate with independent phases
LOCKSTEP = "lockstep"  # bool: the users sent in step (the share well over chance): TTFT/ITL show a phase accident

POINT_COLUMNS = (
    *IDENTITY_COLUMNS, *WORKLOAD_COLUMNS, REQUESTS, ERRORS, SHORT_OUTPUTS, TOTAL_INPUT_TOKENS,
    TOTAL_OUTPUT_TOKENS, DURATION_S, OUTPUT_THROUGHPUT, INPUT_THROUGHPUT, REQUEST_THROUGHPUT,
    *(stat_column(m, s) for m in (*LATENCY_METRICS, SPEED_METRIC) for s in STATS),
    SLO_TTFT_S, SLO_TPOT_S, GOODPUT_RPS, SLO_ATTAINMENT, CLIENT_LAG_P99_MS, CLIENT_LAG_MAX_MS, CLIENT_BOUND,
    MACHINE_BUSY, CLIENT_LOOP_CPU, CLIENT_LOOP_WAIT, CLIENT_LOOP_BLOCKS, OTHER_CPU_CORES,
    SERVER_BATCH_SIZE_MAX, SERVER_QUEUE_SIZE_MAX, KV_CAPACITY_TOKENS, KV_USAGE_MAX,
    PREFIX_HIT_RATE, PREFIX_HIT_TOKENS, PREFIX_LOOKUP_TOKENS, STALL_MAX_GAP_S, STALL_P99_GAP_S, STALL_BASELINE_GAP_S,
    LONG_PROMPT_TTFT_S, RAMP_UP_S, ARRIVAL_SYNC_SHARE, ARRIVAL_SYNC_CHANCE, LOCKSTEP, *PREDICTION_ERRORS.values(),
)

# -- batch.parquet: text-generation-benchmark parity, one row per (batch size, run) ---------------
# B prompts of exactly S tokens sent at once, D tokens forced. Over HTTP:
#   prefill latency = the latest first token of the B requests - send time;
#   decode total latency = the latest last token - the latest first token; decode steps = D - 1;
#   decode token latency = decode total / steps; prefill throughput = B*S / prefill latency;
#   decode throughput = B * steps / decode total.
SEQUENCE_LENGTH = "sequence_length"
DECODE_LENGTH = "decode_length"
PREFILL_LATENCY_S = "prefill_latency_s"
PREFILL_THROUGHPUT = "prefill_throughput_tok_s"
DECODE_TOKEN_LATENCY_S = "decode_token_latency_s"
DECODE_TOTAL_LATENCY_S = "decode_total_latency_s"
DECODE_THROUGHPUT = "decode_throughput_tok_s"

BATCH_COLUMNS = (
    *IDENTITY_COLUMNS, BATCH_SIZE, SEQUENCE_LENGTH, DECODE_LENGTH, REPEAT, WARMUP, PREFILL_LATENCY_S,
    PREFILL_THROUGHPUT, DECODE_TOKEN_LATENCY_S, DECODE_TOTAL_LATENCY_S, DECODE_THROUGHPUT,
)
# text-generation-benchmark's statistics and their names in its tables (seed 000).
BATCH_STATS = {"average": "Average", "lowest": "Lowest", "highest": "Highest", "p50": "p50", "p90": "p90",
               "p99": "p99"}
# Summary tables (a published reference's batch rows, `Reference.batch_stats`) hold one row per statistic,
# named in this column by a BATCH_STATS key.
STAT = "stat"

# -- server.parquet: samples of the server during a run ------------------------------------------
T_S = "t_s"  # float: sample time, run clock
METRIC = "metric"  # str: a server's Prometheus name (every tgi_*, vllm:*, sglang:* series, as published)
#                     or one of the toolkit's own samples below
LABELS = "labels"  # str: Prometheus labels as "k=v,k=v" ("" when none)
VALUE = "value"  # float

SERVER_COLUMNS = (RUN_ID, CONFIG_ID, T_S, METRIC, LABELS, VALUE)

# Seconds between /metrics scrapes: gauges (the running batch, the queue) are sampled, and a run of a few
# seconds scraped once a second can miss its peak batch (seen: 1 instead of 2 on a 1.5 s run).
SCRAPE_INTERVAL = 0.25

# METRIC values the points' server columns are read from, TGI's (and the embedded engine's) name
# first, then vLLM's (old and new names):
BATCH_SIZE_METRICS = ("tgi_batch_current_size", "vllm:num_requests_running")  # -> SERVER_BATCH_SIZE_MAX
QUEUE_SIZE_METRICS = ("tgi_queue_size", "vllm:num_requests_waiting")  # -> SERVER_QUEUE_SIZE_MAX
KV_TOTAL_METRIC = "tgi_batch_max_total_tokens"  # TGI's KV token budget -> KV_CAPACITY_TOKENS
KV_USED_METRIC = "tgi_batch_current_max_tokens"  # tokens the running batch holds; / budget -> KV_USAGE_MAX
KV_USAGE_METRICS = ("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc")  # vLLM's fraction -> KV_USAGE_MAX
PREFIX_HIT_METRIC = "tgi_toolkit_prefix_cache_hit_tokens_total"  # -> PREFIX_HIT_TOKENS (counter)
PREFIX_LOOKUP_METRIC = "tgi_toolkit_prefix_cache_lookup_tokens_total"  # -> PREFIX_LOOKUP_TOKENS (counter)
# METRIC values the toolkit samples itself (LABELS "" unless said):
PROCESS_CPU_PERCENT = "process_cpu_percent"  # the server process and all its descendants
PROCESS_RSS_BYTES = "process_rss_bytes"  # the same processes' resident memory
GPU_UTILIZATION = "gpu_utilization"  # percent, LABELS "gpu=<index>" (nvidia-ml-py, local servers)
GPU_MEMORY_USED_BYTES = "gpu_memory_used_bytes"  # LABELS "gpu=<index>"
CLIENT_LOOP_LAG_MS = "client_loop_lag_ms"  # the benchmark client's worst event-loop lag of each interval
CLIENT_CPU_PERCENT = "client_cpu_percent"  # the benchmark client's own CPU

# -- runs/<run_id>.json ------------------------------------------------------------------------------
PROVENANCE_KEYS = (
    "run_id", "config_id", "scenario", "started_at", "finished_at", "status",  # running | complete | failed
    "launcher_config",  # LauncherConfig.to_dict(redact=True), or None when attached to a URL
    "backend", "url", "info",  # the server's /info
    "workload",  # the scenario's own parameters
    "versions",  # tgi_toolkit, python, torch, transformers, ... as installed
    "hardware",  # cpu model, cores, memory, gpus
    "git",  # revision and dirty flag of the toolkit's checkout, when there is one
    "command",  # argv when run from the CLI
)
