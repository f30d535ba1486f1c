"""Calibrating the linear cost model against a running server, from timed requests over a small grid.

Two measurements, both with bench's own scenarios (real clients over HTTP, nothing simulated):
1. prefill: bench's ingestion scenario (one request at a time, one new token) over prompt lengths; each
   TTFT is the request overhead (HTTP, validation, tokenization: `request_overhead_s`) plus the forwards
   that computed its prompt: one, or one per chunk of `max_batch_prefill_tokens` with chunking;
2. decode: bench's batch scenario (text-generation-benchmark: B identical prompts at once) over batch sizes
   and prompt lengths; the decode token latency of a run is one forward of B decoding rows whose context
   is about prompt + decode_length / 2 (what the client sees per step, scheduler and streaming included).

The fit (costs.fit_linear with the overhead as one more unknown) minimises relative error with every
coefficient >= 0. The model remembers the server's limits and scheduling mode (`source.server`), so a
simulation with it stands for that server unless told otherwise; the measured points and the fit's
error on each are in `points`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tgi_toolkit.bench import schema as S
from tgi_toolkit.simulate.costs import TERMS, LinearCostModel, Shape, _nnls, uniform_shape

QUICK = {"prompt_tokens": (16, 256, 768), "batch_sizes": (1, 4, 16), "contexts": (32, 384),
         "decode_length": 12, "repeats": 1}
FULL = {"prompt_tokens": (16, 64, 256, 512, 1024, 1536), "batch_sizes": (1, 2, 4, 8, 16, 32),
        "contexts": (32, 256, 1024), "decode_length": 24, "repeats": 3}


def prefill_vector(length: int, budget: int | None) -> np.ndarray:
    """The summed features of the forwards computing one prompt alone: chunks of `budget` tokens
    (the last one emits the first token), each a prefilling forward of one row."""
    step = length if not budget or budget >= length else budget
    total = np.zeros(len(TERMS))
    start = 0
    while start < length:
        n = min(step, length - start)
        total += np.array(uniform_shape(1, n, start, prefilling=True).vector())
        start += n
    return total


def _server_facts(server: Any) -> dict[str, Any]:
    from tgi_toolkit.bench.api import kv_capacity
    from tgi_toolkit.bench.target import resolve

    target = resolve(server)
    info = dict(target.info or {})
    facts = {"model_id": target.model_id, "max_input_tokens": target.max_input_tokens,
             "max_total_tokens": target.max_total_tokens}
    for key in ("max_batch_prefill_tokens", "max_batch_size", "waiting_served_ratio", "max_waiting_tokens"):
        value = info.get(key, target.facts.get(key))
        if value is not None:
            facts[key] = value
    capacity = kv_capacity(server)
    if math.isfinite(capacity):
        facts["max_batch_total_tokens"] = int(capacity)
    config = getattr(server, "config", None)  # a Server we started: its launcher settings
    if getattr(config, "cuda_memory_fraction", None) is not None:
        facts["cuda_memory_fraction"] = float(config.cuda_memory_fraction)
    return {k: v for k, v in facts.items() if v is not None}


def _mode(environ: Mapping[str, str]) -> dict[str, Any]:
    from tgi_toolkit.config.scheduling import resolve_mode

    mode = resolve_mode({k: v for k, v in environ.items() if k in ("ATTENTION", "PREFIX_CACHING",
                                                                     "PREFILL_CHUNKING")})
    return {"attention": mode.attention, "prefix_caching": mode.prefix_caching, "chunking": mode.chunking}


# prefill_forward_s is left out: every TTFT of the grid holds one prefilling forward and one request overhead,
# so the two would be the same column; the overhead is what a client sees outside the server's forwards.
PROFILE_TERMS = tuple(t for t in TERMS if t != "prefill_forward_s")


def fit_profile(ingestion: Sequence[tuple[int, float]], decode: Sequence[tuple[Shape, float]], *,
                prefill_budget: int | None = None, terms: Sequence[str] = PROFILE_TERMS, name: str = "calibrated",
                source: Mapping[str, Any] | None = None) -> LinearCostModel:
    """The linear model from (prompt length, TTFT) and (decode forward shape, seconds) samples; the
    request overhead is fitted with it (it appears in every TTFT and in no decode step)."""
    rows, times, overhead = [], [], []
    for length, ttft in ingestion:
        rows.append(prefill_vector(length, prefill_budget))
        times.append(ttft)
        overhead.append(1.0)
    for shape, seconds in decode:
        rows.append(np.array(shape.vector()))
        times.append(seconds)
        overhead.append(0.0)
    keep = [TERMS.index(t) for t in terms]
    x = np.column_stack([np.array(rows)[:, keep], np.array(overhead)])
    y = np.array(times, dtype=float)
    if not len(y) or np.any(~np.isfinite(y)) or np.any(y <= 0):
        raise ValueError("profile: every measured time must be a positive number of seconds")
    w = 1 / y
    scale = np.maximum(np.abs(x).max(axis=0), 1e-30)
    coef = _nnls(x * w[:, None] / scale, y * w) / scale
    model = LinearCostModel(request_overhead_s=float(coef[-1]), name=name, source=dict(source or {}))
    for i, term in zip(keep, terms, strict=True):
        setattr(model, TERMS[i], float(coef[terms.index(term)]))
    fitted = x @ coef
    model.points = [{"kind": "ttft" if o else "decode", "measured_s": float(t), "fitted_s": float(f),
                     "ratio": float(f / t)} for o, t, f in zip(overhead, times, fitted, strict=True)]
    # the decode steps' spread around the fit: how much one forward's time varied on that machine
    spread = [math.log(p["measured_s"] / p["fitted_s"]) for p in model.points if p["kind"] == "decode"
              and p["fitted_s"] > 0]
    if len(spread) >= 2:
        model.jitter_cv = float(math.sqrt(math.expm1(float(np.var(spread)))))
    for point, (length, _) in zip(model.points, ingestion, strict=False):
        point["prompt_tokens"] = length
    for point, (shape, _) in zip(model.points[len(ingestion):], decode, strict=True):
        point.update(rows=shape.rows, context=shape.context)
    return model


def profile(server: Any, *, quick: bool = True, prompt_tokens: Sequence[int] | None = None,
            batch_sizes: Sequence[int] | None = None, contexts: Sequence[int] | None = None,
            decode_length: int | None = None, repeats: int | None = None, environ: Mapping[str, str] | None = None,
            progress: bool = False, output: str | None = None) -> LinearCostModel:
    """Measure `server` (a URL or a started Server) over a small grid and fit the calibrated model.

    quick: the small grid (about a minute on the embedded engine on 2 cores), else a fuller one.
    environ: the scheduling variables the server runs with (default: this process's, which an embedded
    server started from here inherits). output: also save the model as JSON there.
    """
    from tgi_toolkit.bench.api import measure_ingestion, run_batch

    grid = dict(QUICK if quick else FULL)
    for key, value in (("prompt_tokens", prompt_tokens), ("batch_sizes", batch_sizes), ("contexts", contexts),
                       ("decode_length", decode_length), ("repeats", repeats)):
        if value is not None:
            grid[key] = value
    facts = _server_facts(server)
    limit = min(facts.get("max_input_tokens") or 10**9, (facts.get("max_total_tokens") or 10**9) - 1)
    lengths = sorted({min(int(p), limit) for p in grid["prompt_tokens"]})
    contexts_ok = sorted({min(int(c), limit - int(grid["decode_length"])) for c in grid["contexts"]})
    mode = _mode(os.environ if environ is None else environ)
    budget = facts.get("max_batch_prefill_tokens") if mode["chunking"] else None

    # A fresh server's first requests pay one-off costs (lazy initialisation, the KV cache growing): a
    # few unmeasured requests of the grid's shapes first, or the first TTFTs come out 2-3x too long.
    run_batch(server, batch_sizes=[max(grid["batch_sizes"])], sequence_length=max(lengths), decode_length=4,
              runs=1, warmups=1, progress=progress)
    measure_ingestion(server, prompt_tokens=lengths[-2:] if len(lengths) > 1 else lengths * 2, repeats=1,
                      progress=progress)
    ing = measure_ingestion(server, prompt_tokens=lengths, repeats=int(grid["repeats"]), progress=progress)
    rows = ing.requests[~ing.requests[S.WARMUP] & ing.requests[S.ERROR].isna()]
    ingestion = [(int(p), float(t)) for p, t in zip(rows[S.PROMPT_TOKENS], rows[S.TTFT_S], strict=True)]

    decode: list[tuple[Shape, float]] = []
    d = int(grid["decode_length"])
    for ctx in contexts_ok:
        res = run_batch(server, batch_sizes=list(grid["batch_sizes"]), sequence_length=ctx, decode_length=d,
                        runs=int(grid["repeats"]), warmups=1, progress=progress)
        batch = res.batch[~res.batch[S.WARMUP]]
        for size, latency in zip(batch[S.BATCH_SIZE], batch[S.DECODE_TOKEN_LATENCY_S], strict=True):
            if latency == latency and latency > 0:
                decode.append((uniform_shape(int(size), 1, ctx + d // 2, prefilling=False), float(latency)))

    from tgi_toolkit.bench import provenance

    source = {"profiled": facts.get("model_id"), "grid": {k: list(v) if isinstance(v, (list, tuple)) else v
                                                          for k, v in grid.items()},
              "server": {**facts, **mode}, "hardware": provenance.hardware(), "versions": provenance.versions()}
    model = fit_profile(ingestion, decode, prefill_budget=budget, name=f"calibrated {facts.get('model_id', '')}"
                        .strip(), source=source)
    if output:
        model.save(output)
    return model
