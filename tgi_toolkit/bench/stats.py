"""From stream records to the schema's numbers: per-request metrics, per-point summaries, the
text-generation-benchmark batch metrics, and the happy_vllm fits. Definitions: tgi_toolkit/schema.py.

Percentiles are numpy's linear interpolation; text-generation-benchmark's own tables (seed 000)
use another rule (its p50 of ten runs equals the highest), so with few runs they may differ.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

import numpy as np

from tgi_toolkit import schema as S
from tgi_toolkit.bench.client import StreamRecord

NAN = float("nan")
_QUANTILES = {"p25": 25, "p50": 50, "p75": 75, "p90": 90, "p99": 99}


def describe(values: Iterable[float], stats: Sequence[str] = S.STATS) -> dict[str, float]:
    """mean, ci95 (the half-width of the mean's 95 % interval), min, max and percentiles of the
    finite values (NaN for all when there are none)."""
    arr = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if arr.size == 0:
        return {s: NAN for s in stats}
    out = {}
    for s in stats:
        if s in ("mean", "average"):
            out[s] = float(arr.mean())
        elif s == "ci95":
            mean, _, high = mean_ci(arr)
            out[s] = high - mean
        elif s in ("min", "lowest"):
            out[s] = float(arr.min())
        elif s in ("max", "highest"):
            out[s] = float(arr.max())
        else:
            out[s] = float(np.percentile(arr, _QUANTILES[s]))
    return out


def mean_ci(values: Iterable[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean and its confidence interval (Student t; normal beyond 30 samples): (mean, low, high)."""
    arr = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if arr.size == 0:
        return NAN, NAN, NAN
    mean = float(arr.mean())
    if arr.size == 1:
        return mean, NAN, NAN
    # two-sided t quantiles for 95 %, small n; a normal 1.96 from 30 on (no scipy needed)
    t95 = (12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14, 2.13,
           2.12, 2.11, 2.10, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05, 2.05)
    if confidence != 0.95:
        from statistics import NormalDist

        t = NormalDist().inv_cdf(0.5 + confidence / 2)
    else:
        t = t95[arr.size - 2] if arr.size - 2 < len(t95) else 1.96
    half = t * float(arr.std(ddof=1)) / math.sqrt(arr.size)
    return mean, mean - half, mean + half


def request_metrics(record: StreamRecord, clock_ns: int) -> dict[str, Any]:
    """The per-request columns of requests.parquet (times in seconds; `clock_ns` is the run's zero)."""
    sent = record.sent_ns
    row: dict[str, Any] = {
        S.SENT_S: (sent - clock_ns) / 1e9, S.INPUT_TOKENS: record.input_tokens,
        S.OUTPUT_TOKENS: record.output_tokens if record.output_tokens is not None else 0,
        S.TTFT_S: NAN, S.E2E_S: NAN, S.TPOT_S: NAN, S.SPEED_TOK_S: NAN, S.ITL_S: [],
        S.FINISH_REASON: record.finish_reason if record.ok else None,
        S.SERVER_FINISH_REASON: record.server_finish_reason,
        S.ERROR: record.error, S.ERROR_MESSAGE: record.error_message, S.STATUS: record.status,
    }
    times = record.token_ns
    if not times:
        return row
    ttft = (times[0] - sent) / 1e9
    e2e = (times[-1] - sent) / 1e9
    row[S.TTFT_S], row[S.E2E_S] = ttft, e2e
    row[S.ITL_S] = inter_token_gaps(times, record.token_counts)
    out = row[S.OUTPUT_TOKENS]
    if out > 1 and e2e > ttft:
        row[S.TPOT_S] = (e2e - ttft) / (out - 1)
        row[S.SPEED_TOK_S] = (out - 1) / (e2e - ttft)
    return row


def inter_token_gaps(times: Sequence[int], counts: Sequence[int] | None) -> list[float]:
    """Gaps between consecutive token chunks in seconds; a chunk of k tokens adds k gaps of gap/k
    (pitfall 5: count tokens, not chunks)."""
    if counts is None:
        return [(b - a) / 1e9 for a, b in zip(times, times[1:], strict=False)]
    gaps: list[float] = []
    for i in range(1, len(times)):
        k = max(counts[i], 1)
        gaps.extend([(times[i] - times[i - 1]) / 1e9 / k] * k)
    return gaps


def measured_point(measured: Sequence[tuple[dict[str, Any], Any]], windows: Sequence[tuple[int, int]] | None, *,
                   slo_ttft_s: float | None = None, slo_tpot_s: float | None = None
                   ) -> tuple[list[tuple[int, int]], dict[str, Any]]:
    """A point's measured (start, end) ns windows and its summary, from its measured (row, record) pairs:
    `windows` as given, or by default the first measured send to the last token."""
    if windows is None:
        recs = [rec for _, rec in measured if rec.token_ns]
        windows = [(min(r.sent_ns for r in recs), max(r.token_ns[-1] for r in recs))] if recs else []
    duration = sum(end - start for start, end in windows) / 1e9
    summary = point_summary([r for r, _ in measured], duration_s=duration, slo_ttft_s=slo_ttft_s,
                            slo_tpot_s=slo_tpot_s)
    return list(windows), summary


def point_summary(rows: Sequence[dict[str, Any]], *, duration_s: float, slo_ttft_s: float | None = None,
                  slo_tpot_s: float | None = None) -> dict[str, Any]:
    """The measured columns of points.parquet from a point's request rows (warm-ups already excluded)."""
    ok = [r for r in rows if r[S.ERROR] is None]
    out: dict[str, Any] = {
        S.REQUESTS: len(rows), S.ERRORS: len(rows) - len(ok),
        S.SHORT_OUTPUTS: sum(bool(r[S.SHORT_OUTPUT]) for r in ok),
        S.TOTAL_INPUT_TOKENS: int(sum(r[S.INPUT_TOKENS] or 0 for r in ok)),
        S.TOTAL_OUTPUT_TOKENS: int(sum(r[S.OUTPUT_TOKENS] or 0 for r in ok)),
        S.DURATION_S: duration_s,
    }
    per_s = (lambda n: n / duration_s) if duration_s > 0 else (lambda n: NAN)
    out[S.OUTPUT_THROUGHPUT] = per_s(out[S.TOTAL_OUTPUT_TOKENS])
    out[S.INPUT_THROUGHPUT] = per_s(out[S.TOTAL_INPUT_TOKENS])
    out[S.REQUEST_THROUGHPUT] = per_s(len(ok))
    series = {"ttft": [r[S.TTFT_S] for r in ok], "tpot": [r[S.TPOT_S] for r in ok],
              "e2e": [r[S.E2E_S] for r in ok], "itl": [g for r in ok for g in r[S.ITL_S]],
              S.SPEED_METRIC: [r[S.SPEED_TOK_S] for r in ok]}
    for metric, values in series.items():
        for stat, value in describe(values).items():
            out[S.stat_column(metric, stat)] = value
    out.update(goodput(ok, len(rows), duration_s, slo_ttft_s, slo_tpot_s))
    return out


def meets_slo(row: dict[str, Any], slo_ttft_s: float | None, slo_tpot_s: float | None) -> bool:
    if slo_ttft_s is not None and not row[S.TTFT_S] <= slo_ttft_s:
        return False
    # A one-token answer has no TPOT: it meets any TPOT objective.
    tpot = row[S.TPOT_S]
    return not (slo_tpot_s is not None and math.isfinite(tpot) and tpot > slo_tpot_s)


def goodput(ok: Sequence[dict[str, Any]], total: int, duration_s: float, slo_ttft_s: float | None,
            slo_tpot_s: float | None) -> dict[str, Any]:
    """Goodput (requests meeting every objective per second) and attainment; NaN without objectives."""
    out = {S.SLO_TTFT_S: NAN if slo_ttft_s is None else slo_ttft_s,
           S.SLO_TPOT_S: NAN if slo_tpot_s is None else slo_tpot_s, S.GOODPUT_RPS: NAN, S.SLO_ATTAINMENT: NAN}
    if slo_ttft_s is None and slo_tpot_s is None:
        return out
    good = sum(meets_slo(r, slo_ttft_s, slo_tpot_s) for r in ok)
    out[S.GOODPUT_RPS] = good / duration_s if duration_s > 0 else NAN
    out[S.SLO_ATTAINMENT] = good / total if total else NAN
    return out


def batch_run(records: Sequence[StreamRecord], sequence_length: int) -> dict[str, float]:
    """text-generation-benchmark's numbers for one run of B simultaneous requests (schema.py).

    Decode steps are D - 1 when every request produced D tokens; when EOS could not be ignored,
    the real lengths are used (steps = longest output - 1, tokens = sum of outputs - 1 each).
    """
    ok = [r for r in records if r.ok and r.token_ns]
    nan = {S.PREFILL_LATENCY_S: NAN, S.PREFILL_THROUGHPUT: NAN, S.DECODE_TOKEN_LATENCY_S: NAN,
           S.DECODE_TOTAL_LATENCY_S: NAN, S.DECODE_THROUGHPUT: NAN}
    if len(ok) != len(records) or not ok:
        return nan
    sent = min(r.sent_ns for r in ok)
    first = max(r.token_ns[0] for r in ok)
    last = max(r.token_ns[-1] for r in ok)
    prefill = (first - sent) / 1e9
    out = dict(nan)
    out[S.PREFILL_LATENCY_S] = prefill
    out[S.PREFILL_THROUGHPUT] = len(ok) * sequence_length / prefill if prefill > 0 else NAN
    steps = max(r.output_tokens or 0 for r in ok) - 1
    decode_tokens = sum(max((r.output_tokens or 0) - 1, 0) for r in ok)
    total = (last - first) / 1e9
    if steps > 0 and total > 0:
        out[S.DECODE_TOTAL_LATENCY_S] = total
        out[S.DECODE_TOKEN_LATENCY_S] = total / steps
        out[S.DECODE_THROUGHPUT] = decode_tokens / total
    return out


class IngestionFit(TypedDict):
    """`ingestion_fit`'s result: the line, its quality, and which requests it was fitted to."""

    speed_tok_s: float  # 1 / slope (NaN unless the slope is positive)
    slope_s_per_tok: float
    intercept_s: float
    r2: float  # over the requests fitted
    r2_all: float  # the same line over every measured request, outliers included
    n: float  # requests kept (kept.sum())
    measured: float  # requests with a length and a TTFT (n of them fitted, the rest trimmed as outliers)
    kept: Any  # bool per request given, in their order: fitted (False: an outlier, or a NaN length/TTFT)
    lengths: float  # distinct prompt lengths among the kept requests
    unreliable: str | None  # why 1/slope is not to be quoted (`ingestion_unreliable`), None when it may be


# A fitted ingestion speed is quoted as a number only when the line explains TTFT well over enough
# requests: on a busy machine TTFT scatters and 1/slope is noise (r² 0.69 gave ~1250 t/s and r² 0.20
# ~1560 t/s where the idle machine's r² 0.99 gave ~3400 t/s, data/examples/README.md and issue 15).
INGESTION_MIN_R2 = 0.9
INGESTION_MIN_REQUESTS = 5
INGESTION_MIN_LENGTHS = 3
# Trimming more than this share means the line fits a chosen few: on a loaded machine 4 of 10 requests were
# trimmed and the 6 left fitted well, where r² over all 10 was 0.07 (notebook 02, issue 26).
INGESTION_MAX_TRIMMED = 0.25


def ingestion_unreliable(r2: float, n: float, lengths: float, measured: float | None = None) -> str | None:
    """Why 1 / slope of a fit of TTFT against prompt length is not to be quoted, in plain words ("not to be
    quoted: 4 of the 5 requests needed (2 of 6 trimmed as outliers)"), or None when it may be.

    n: requests fitted; measured: requests with a TTFT (the others were trimmed as outliers)."""
    if not n or lengths < 2:
        return None  # no fit at all: the caller says so
    trimmed = int(measured - n) if measured is not None and measured > n else 0
    reasons = []
    if n < INGESTION_MIN_REQUESTS:
        reasons.append(f"{n:.0f} of the {INGESTION_MIN_REQUESTS} requests needed"
                       + (f" ({trimmed} of {measured:.0f} trimmed as outliers)" if trimmed else ""))
    elif measured and trimmed > INGESTION_MAX_TRIMMED * measured:
        reasons.append(f"{trimmed} of {measured:.0f} requests trimmed as outliers (a quarter at most)")
    if lengths < INGESTION_MIN_LENGTHS:
        reasons.append(f"{lengths:.0f} of the {INGESTION_MIN_LENGTHS} prompt lengths needed")
    if not r2 >= INGESTION_MIN_R2:
        reasons.append(f"TTFT scatters around the line (r\u00b2 {r2:.2f} over the {n:.0f} requests fitted, "
                       f"{INGESTION_MIN_R2} needed)")
    return "not to be quoted: " + "; ".join(reasons) if reasons else None


def ingestion_fit(prompt_tokens: Sequence[float], ttft_s: Sequence[float]) -> IngestionFit:
    """happy_vllm's prompt ingestion speed: 1 / slope of TTFT against prompt length.

    Outliers (a request that met a busy server) are the points whose residual from a robust
    Theil-Sen line is beyond 3 scaled MADs; a least-squares line through the rest gives the
    speed. Returns speed_tok_s, slope_s_per_tok, intercept_s, r2, n (points kept) and kept (a
    boolean array over the requests given: True for those the line was fitted to).
    """
    x_all = np.asarray(prompt_tokens, dtype=float)
    y_all = np.asarray(ttft_s, dtype=float)
    kept = np.isfinite(x_all) & np.isfinite(y_all)
    x, y = x_all[kept], y_all[kept]
    out: IngestionFit = {"speed_tok_s": NAN, "slope_s_per_tok": NAN, "intercept_s": NAN, "r2": NAN, "r2_all": NAN,
                         "n": float(x.size), "measured": float(x.size), "kept": kept,
                         "lengths": float(np.unique(x).size), "unreliable": None}
    x_measured, y_measured = x, y
    if x.size < 2 or np.unique(x).size < 2:
        return out
    i, j = np.triu_indices(x.size, 1)
    apart = x[i] != x[j]
    slope = np.median((y[j] - y[i])[apart] / (x[j] - x[i])[apart])
    intercept = np.median(y - slope * x)
    residual = y - (slope * x + intercept)
    # scaled MAD, floored at 1 % of the typical TTFT so that near-perfect data keeps its points
    mad = max(float(np.median(np.abs(residual - np.median(residual)))) * 1.4826, 0.01 * float(np.median(np.abs(y))))
    inliers = np.abs(residual) <= 3 * mad
    if inliers.sum() >= 2 and np.unique(x[inliers]).size >= 2:
        x, y = x[inliers], y[inliers]
        kept[np.flatnonzero(kept)[~inliers]] = False
    slope, intercept = np.polyfit(x, y, 1)
    fitted = slope * x + intercept
    ss_tot = float(((y - y.mean()) ** 2).sum())
    out.update(slope_s_per_tok=float(slope), intercept_s=float(intercept), n=float(x.size),
               speed_tok_s=float(1 / slope) if slope > 0 else NAN,
               r2=1 - float(((y - fitted) ** 2).sum()) / ss_tot if ss_tot > 0 else NAN,
               lengths=float(np.unique(x).size))
    ss_all = float(((y_measured - y_measured.mean()) ** 2).sum())
    out["r2_all"] = (1 - float(((y_measured - (slope * x_measured + intercept)) ** 2).sum()) / ss_all
                     if ss_all > 0 else NAN)
    out["unreliable"] = ingestion_unreliable(out["r2"], out["n"], out["lengths"], out["measured"])
    return out


def tokens_in_flight(records: Sequence[tuple[StreamRecord, int]], t_ns: int) -> tuple[int, int]:
    """(requests in flight, their tokens in the KV cache) at `t_ns`: each request from its send to
    its last token holds its prompt (`int` of the pair) plus the tokens received so far."""
    running = tokens = 0
    for record, prompt in records:
        if not record.token_ns or not record.sent_ns <= t_ns <= record.token_ns[-1]:
            continue
        running += 1
        tokens += (record.input_tokens or prompt) + sum(1 for t in record.token_ns if t <= t_ns)
    return running, tokens


def kv_capacity_estimate(samples: Sequence[tuple[float, float]], min_usage: float = 0.05) -> float:
    """happy_vllm's KV-cache capacity: tokens held / cache usage fraction, the median over samples
    of (tokens in flight, usage fraction) with at least `min_usage` of the cache in use."""
    ratios = [tokens / usage for tokens, usage in samples if usage >= min_usage and tokens > 0]
    return float(np.median(ratios)) if ratios else NAN
