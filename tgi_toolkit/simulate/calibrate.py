"""Calibrating the linear cost model against a running server, from timed requests over a small grid.

Two measurements, both with bench's own scenarios (real clients over HTTP, nothing simulated):
1. prefill: bench's ingestion scenario (one request at a time, one new token) over prompt lengths; each
   TTFT is the request overhead (HTTP, validation, tokenization: `request_overhead_s`) plus the forwards
   that computed its prompt: one, or one per chunk of `max_batch_prefill_tokens` with chunking;
2. batches: bench's batch scenario (text-generation-benchmark: B prompts at once) over batch sizes
   and prompt lengths. A run's prefill latency holds the forwards that computed B prompts together (several
   rows per prefill, which single prompts cannot show); its decode token latency is one forward of B
   decoding rows (what the client sees per step, scheduler and streaming included).

The fit (costs.fit_linear's non-negative least squares on relative error, with the overhead as one more
unknown, and the knee `free_tokens` and the tile `token_tile` chosen from FREE_TOKENS and TOKEN_TILES by the
same error) goes in two stages. First
the closed form: a TTFT is its prompt's chunks, a decode latency one forward. Then by replay: the same
scenarios run on the simulator, with TGI's scheduler deciding each forward as it did on the server, and
each measured time is fitted to the forwards it spans there (`replay_rows`), twice. Replay is what prices
a batch's prefill: how the scheduler splits B prompts into forwards under its budget is the scheduler's
business, not a formula's.

An embedded engine started with a forward trace (TGI_TOOLKIT_FORWARD_TRACE) adds a third measurement: every
forward the profile ran, its exact shape and seconds (`read_trace`), one more sample each beside the timed
requests, which alone still pin the request overhead. Fitted to a full profile's timed requests only, the
model underpriced the served workloads' prefills of up to 100 tokens by 30 % (mean log error -0.36) and of
100-400 tokens by 19 %; fitted with its trace as well, -2 % and +1 % (the same profile and workloads,
`simulate_accuracy.py --local`). The trace also times the front end (`frontend_s`): bursts of one-token
requests, where each forward holds what reached the queue during the one before (`frontend_seconds`).

The model remembers the server's limits and scheduling mode (`source.server`), so a simulation with it
stands for that server unless told otherwise; the measured points and the fit's error on each are in
`points`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tgi_toolkit.bench import schema as S
from tgi_toolkit.costs.features import Shape
from tgi_toolkit.costs.linear import TERMS, LinearCostModel, _nnls, uniform_shape

# The quick grid's prompts sit on both sides of the common 64-256-token prompts: with 16, 256 and 768 only, the
# line through them overpriced a 128-token prefill by 14-18 % on the embedded engine (its forward trace of
# served requests, `simulate_accuracy.py --local --quick`), where the cost per token bends below ~256.
QUICK = {"prompt_tokens": (16, 64, 128, 256, 768), "batch_sizes": (1, 4, 16), "contexts": (32, 384),
         "decode_length": 12, "repeats": 1}
# FULL's decode batches of 24 sit between two 16-row tiles of a CPU's bf16 matmul, which pins `token_tile`
# (costs.LinearCostModel): without a batch between the tiles, no fit can tell a tile from a straight line.
FULL = {"prompt_tokens": (16, 64, 256, 512, 1024, 1536), "batch_sizes": (1, 2, 4, 8, 16, 24, 32),
        "contexts": (32, 256, 1024), "decode_length": 24, "repeats": 3}


# Fits by replay after the closed form (the forwards a replay finds hardly depend on the prices: on the
# embedded engine the second gave the same coefficients as the first to 4 digits).
REPLAYS = 2


def prefill_forwards(length: int, budget: int | None) -> np.ndarray:
    """The features (one row per forward) of the forwards computing one prompt alone: chunks of `budget`
    tokens (the last one emits the first token), each a prefilling forward of one row."""
    step = length if not budget or budget >= length else budget
    return np.array([uniform_shape(1, min(step, length - start), start, prefilling=True).vector()
                     for start in range(0, length, step)])


def read_trace_lines(path: str, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The lines (one JSON object per forward: its end `t` on the wall clock, `seconds`, and its Shape's
    fields) an embedded engine started with TGI_TOOLKIT_FORWARD_TRACE=path wrote after byte `offset`, and
    the offset to read on from."""
    import json

    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1  # a line the engine is still writing waits for the next read
    return [json.loads(line) for line in data[:end].splitlines()], offset + end


def read_trace(path: str, offset: int = 0) -> tuple[list[tuple[Shape, float]], int]:
    """The traced forwards after byte `offset` as (features, measured seconds), as `costs.fit_linear` takes
    them; and the offset to read on from."""
    rows, offset = read_trace_lines(path, offset)
    names = [field.name for field in dataclasses.fields(Shape)]
    return [(Shape(**{n: row[n] for n in names}), float(row["seconds"])) for row in rows], offset


def _trace_end(path: str) -> int:
    """The trace's size: the offset from which `read_trace` returns what the server writes next."""
    return os.path.getsize(path) if os.path.exists(path) else 0


def frontend_seconds(forwards: Sequence[Mapping[str, Any]], requests: int) -> tuple[float | None, str]:
    """The front end's seconds per request, one request at a time, from the traced forwards (`read_trace_lines`)
    of one burst: `requests` one-token requests sent at once to an idle server, none of them capped by the
    batch's size or token budget. Returns (seconds or None, how it was found).

    Each forward then holds exactly the requests that reached the queue between the scheduler's two polls,
    its own start and the previous forward's: the idle scheduler takes what is there (the first, or a few when
    its thread wakes late), and each forward after what came in meanwhile. While more are still to come the
    front end was busy all along, so those windows' seconds over the requests they let in is the front end's
    time per request; the last window, in which the burst ran out, only bounds it. When the whole burst was in
    after the first forward, that bound is all there is (None)."""
    # the burst's own forwards: those at the end whose rows add up to it (bench checks a prompt length with a
    # request of its own first)
    rows = [int(f["rows"]) for f in forwards]
    tail = next((k for k in range(len(rows) - 1, -1, -1) if sum(rows[k:]) >= requests), None)
    if tail is None or sum(rows[tail:]) != requests:
        return None, f"the burst's {requests} requests ran as forwards of {rows} rows: not this burst's alone"
    rows, starts = rows[tail:], [float(f["t"]) - float(f["seconds"]) for f in forwards[tail:]]
    if len(rows) == 1:
        return None, f"all {requests} requests were in before the first forward"
    if len(rows) == 2:
        return None, (f"all {requests} requests were in after the first forward: at most "
                      f"{(starts[1] - starts[0]) / rows[1] * 1e3:.3g} ms a request")
    seconds = starts[-2] - starts[0]  # the windows before the last, when more were still to come
    admitted = sum(rows[1:-1])
    return seconds / admitted, (f"{admitted} of a burst of {requests} requests reached the queue in "
                                f"{seconds * 1e3:.4g} ms while more were still to come")


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
    from tgi_toolkit.config.scheduling_mode import resolve_mode

    mode = resolve_mode({k: v for k, v in environ.items() if k in ("ATTENTION", "PREFIX_CACHING",
                                                                     "PREFILL_CHUNKING")})
    return {"attention": mode.attention, "prefix_caching": mode.prefix_caching, "chunking": mode.chunking}


# prefill_forward_s is left out of a fit to timed requests alone: every TTFT of the grid holds one prefilling
# forward and one request overhead, so the two would be the same column; the overhead is what a client sees
# outside the server's forwards. A forward trace separates them (its forwards carry no overhead), and there the
# term is real: in one profile's trace the engine's one-row prefills of 6-16 tokens took 87-102 ms where a decode
# step took 70, and without the term the fit put that into the request overhead (12.4 ms, where the engine spends
# 3.5 ms outside a forward on a request: intake 2.2, wake 0.4, first token out 1.1).
PROFILE_TERMS = tuple(t for t in TERMS if t != "prefill_forward_s")


# Knees a fit may try (costs.LinearCostModel.free_tokens). The knee is the CPU's (or GPU's), not the engine's:
# on one 2-core machine here the runner's forwards showed it clearly (1 to 32 tokens 48-52 ms, then ~0.7 ms a
# token); on another (AMD EPYC, AVX-512 bf16), fitted to the engine's own forward trace of a profile and
# tested on the forwards of the served workloads that followed, no knee overpriced prefills of up to 100
# tokens by 7 % (mean log error +0.072) and a knee of 16 did not (-0.008), prefills of 400+ tokens and decode
# steps as well either way. The profile searches small knees only (FREE_TOKENS): with the knee free up to 128,
# a noisy profile once traded a knee of 96 tokens against a 49 ms request overhead (15-20 ms in every other
# fit). Its quick grid has prompts either side of them (16, 64, 128, ...), which is what pins a knee.
KNEES = (0, 8, 16, 24, 32, 48, 64, 96, 128)
FREE_TOKENS = (0, 8, 16, 24, 32)
# Tiles a fit may try (costs.LinearCostModel.token_tile), 1 (none) first so that a grid that cannot tell them
# apart keeps the straight line.
TOKEN_TILES = (1, 8, 16, 32)
TOKENS = TERMS.index("token_s")


@dataclass
class Sample:
    """One measured time and the forwards it spans (their features at no knee, one row each, divided by
    `per`: a decode latency is the mean of its steps), plus the request overheads it includes."""

    kind: str  # ttft | prefill | decode
    forwards: np.ndarray  # [forwards, len(TERMS)]
    overheads: float
    seconds: float
    about: dict[str, Any]  # what was measured (prompt tokens, rows, context), copied into model.points
    per: float = 1.0

    def features(self, free_tokens: int = 0, token_tile: int = 1) -> np.ndarray:
        """The summed features with the knee and the tile applied forward by forward."""
        f = self.forwards.copy()  # features.billed_tokens over the forwards at once
        f[:, TOKENS] = np.ceil(np.maximum(f[:, TOKENS] - free_tokens, 0) / token_tile) * token_tile
        return f.sum(axis=0) / self.per


def forward_samples(forwards: Sequence[tuple[Shape, float]]) -> list[Sample]:
    """Traced forwards (`read_trace`) as fit samples: one forward each, no request overhead."""
    return [Sample("forward", np.array([shape.vector()]), 0.0, seconds, {}) for shape, seconds in forwards
            if seconds > 0]


def fit_profile(ingestion: Sequence[tuple[int, float]], decode: Sequence[tuple[Shape, float]], *,
                prefill_budget: int | None = None, terms: Sequence[str] = PROFILE_TERMS, name: str = "calibrated",
                source: Mapping[str, Any] | None = None, free_tokens: Sequence[int] = FREE_TOKENS,
                frontend_s: float = 0.0, token_tiles: Sequence[int] = TOKEN_TILES) -> LinearCostModel:
    """The linear model from (prompt length, TTFT) and (decode forward shape, seconds) samples; the
    request overhead is fitted with it (it appears in every TTFT and in no decode step)."""
    samples = [Sample("ttft", prefill_forwards(length, prefill_budget), 1.0, ttft, {"prompt_tokens": length})
               for length, ttft in ingestion]
    samples += [Sample("decode", np.array([shape.vector()]), 0.0, seconds,
                       {"rows": shape.rows, "context": shape.context}) for shape, seconds in decode]
    return fit_samples(samples, terms=terms, name=name, source=source, free_tokens=free_tokens,
                       frontend_s=frontend_s, token_tiles=token_tiles)


def fit_samples(samples: Sequence[Sample], *, terms: Sequence[str] = PROFILE_TERMS, name: str = "calibrated",
                source: Mapping[str, Any] | None = None, free_tokens: Sequence[int] = FREE_TOKENS,
                frontend_s: float = 0.0, token_tiles: Sequence[int] = TOKEN_TILES) -> LinearCostModel:
    """Non-negative coefficients of `terms` and the request overhead minimising relative error, at the knee
    of `free_tokens` and the tile of `token_tiles` that fit best; `frontend_s`, measured apart
    (`frontend_seconds`), goes into the model."""
    keep = [TERMS.index(t) for t in terms]
    y = np.array([s.seconds for s in samples], dtype=float)
    if not len(y) or np.any(~np.isfinite(y)) or np.any(y <= 0):
        raise ValueError("profile: every measured time must be a positive number of seconds")
    w = 1 / y
    best: tuple[float, int, int, np.ndarray, np.ndarray] | None = None
    for tile in token_tiles:  # every knee untiled first: a tie keeps the simpler model
        for knee in free_tokens:
            x = np.column_stack([np.array([s.features(knee, tile) for s in samples])[:, keep],
                                 [s.overheads for s in samples]])
            scale = np.maximum(np.abs(x).max(axis=0), 1e-30)
            coef = _nnls(x * w[:, None] / scale, y * w) / scale
            err = float(np.sum(((x @ coef - y) * w) ** 2))
            if best is None or err < best[0] - 1e-12:
                best = (err, knee, tile, coef, x)
    assert best is not None
    _, knee, tile, coef, x = best
    pays_tokens = coef[keep.index(TOKENS)] > 0
    model = LinearCostModel(request_overhead_s=float(coef[-1]), frontend_s=frontend_s, name=name,
                            source=dict(source or {}), free_tokens=int(knee) if pays_tokens else 0,
                            token_tile=int(tile) if pays_tokens else 1)
    for i, term in zip(keep, terms, strict=True):
        setattr(model, TERMS[i], float(coef[terms.index(term)]))
    fitted = x @ coef
    # traced forwards are fitted too but not listed: a profile's trace holds thousands
    model.points = [{"kind": s.kind, "measured_s": float(s.seconds), "fitted_s": float(f),
                     "ratio": float(f / s.seconds), **s.about} for s, f in zip(samples, fitted, strict=True)
                    if s.kind != "forward"]
    # the decode steps' spread around the fit: how much one forward's time varied on that machine
    spread = [math.log(p["measured_s"] / p["fitted_s"]) for p in model.points if p["kind"] == "decode"
              and p["fitted_s"] > 0]
    if len(spread) >= 2:
        model.jitter_cv = float(math.sqrt(math.expm1(float(np.var(spread)))))
    return model


def replay_rows(model: LinearCostModel, ingestion: Any, batches: Sequence[Any], *, repeats: int,
                warmups: int = 1) -> list[Sample]:
    """Every measured time of the profile (`ingestion`: bench's ingestion Results; `batches`: run_batch
    Results, one per prompt length, each of `repeats` runs after `warmups`) with the features of the
    forwards it spans when the same scenarios run on the simulator priced by `model` (whose
    `source.server` gives the limits and scheduling mode)."""
    from bisect import bisect_right

    from tgi_toolkit.costs.features import shape_of
    from tgi_toolkit.simulate.events import Simulator
    from tgi_toolkit.simulate.target import make_target
    from tgi_toolkit.simulate.workloads import TokenPrompts, batch_points, ingestion_points

    target = make_target(dataclasses.replace(model, jitter_cv=0.0), environ={})
    prompts = TokenPrompts(0)
    points = ingestion_points(prompts, sorted({int(p) for p in ingestion.requests[S.PROMPT_TOKENS]}), repeats)
    for res in batches:
        b = res.batch
        points += batch_points(prompts, sorted({int(v) for v in b[S.BATCH_SIZE]}), int(b[S.SEQUENCE_LENGTH].iloc[0]),
                               int(b[S.DECODE_LENGTH].iloc[0]), repeats, warmups)
    sim = Simulator(target.scheduler, target.cost)
    ends: list[int] = []
    vectors: list[list[float]] = []

    def on_forward(forward: Any, seconds: float) -> None:
        ends.append(int(round(sim.clock.t * 1e9)))  # the stamp its emitted tokens carry
        vectors.append(shape_of(forward).vector())

    sim.backend.on_forward = on_forward
    for point in points:
        for phase in point.phases:
            sim.run(phase.driver, phase.requests)
    every = np.array(vectors).reshape(-1, len(TERMS))

    def span(after_ns: int, until_ns: int) -> np.ndarray:
        return every[bisect_right(ends, after_ns):bisect_right(ends, until_ns)]

    simulated_ttft: dict[tuple[str, int], np.ndarray] = {}
    simulated_batch: dict[tuple[int, int, int, bool], tuple[np.ndarray, np.ndarray, int]] = {}
    for point in points:
        if point.batch is None:
            for r in point.requests:
                simulated_ttft[(point.point_id, r.tag[2])] = span(r.record.sent_ns, r.record.token_ns[0])
            continue
        runs: dict[tuple[int, bool], list[Any]] = {}
        for r in point.requests:
            runs.setdefault((r.tag[0], r.tag[1]), []).append(r.record)
        for (repeat, warm), records in runs.items():
            first = max(rec.token_ns[0] for rec in records)
            steps = max(len(rec.token_ns) for rec in records) - 1
            simulated_batch[(*point.batch[:2], repeat, warm)] = (
                span(min(rec.sent_ns for rec in records), first),
                span(first, max(rec.token_ns[-1] for rec in records)), max(steps, 1))

    samples = []
    req = ingestion.requests
    req = req[~req[S.WARMUP] & req[S.ERROR].isna()]
    for pid, index, length, ttft in zip(req[S.POINT_ID], req[S.REQUEST_INDEX], req[S.PROMPT_TOKENS], req[S.TTFT_S],
                                        strict=True):
        if (pid, int(index)) in simulated_ttft and ttft == ttft and ttft > 0:
            samples.append(Sample("ttft", simulated_ttft[(pid, int(index))], 1.0, float(ttft),
                                  {"prompt_tokens": int(length)}))
    for res in batches:
        b = res.batch[~res.batch[S.WARMUP]]
        for size, ctx, d, repeat, prefill, latency in zip(b[S.BATCH_SIZE], b[S.SEQUENCE_LENGTH], b[S.DECODE_LENGTH],
                                                          b[S.REPEAT], b[S.PREFILL_LATENCY_S],
                                                          b[S.DECODE_TOKEN_LATENCY_S], strict=True):
            key = (int(size), int(ctx), int(repeat), False)
            if key not in simulated_batch:
                continue
            pre, steps, per = simulated_batch[key]
            if prefill == prefill and prefill > 0:
                samples.append(Sample("prefill", pre, 1.0, float(prefill),
                                      {"rows": int(size), "prompt_tokens": int(ctx)}))
            if latency == latency and latency > 0:
                samples.append(Sample("decode", steps, 0.0, float(latency),
                                      {"rows": int(size), "context": int(size) * (int(ctx) + int(d) // 2)}, per))
    return samples


# Bursts of one-token requests of BURST_PROMPT tokens that time the front end (frontend_seconds): as many as one
# forward can take whole, at most BURST, so that no forward is capped by the batch's size or token budget.
BURST, BURST_PROMPT, BURSTS = 64, 8, 3


def _measure_frontend(server: Any, trace: str, facts: Mapping[str, Any], progress: bool) -> tuple[float, str]:
    """The front end's seconds per request (`frontend_seconds`, the mean over BURSTS bursts), and a note of how
    it was found; 0 when every burst was in after its first forward."""
    from tgi_toolkit.bench.api import run_batch

    size = min(BURST, (facts.get("max_batch_prefill_tokens") or 4096) // (2 * BURST_PROMPT),
               facts.get("max_batch_size") or BURST)
    found, notes = [], []
    for _ in range(BURSTS if size >= 3 else 0):
        offset = _trace_end(trace)
        run_batch(server, batch_sizes=[size], sequence_length=BURST_PROMPT, decode_length=1, runs=1, warmups=0,
                  progress=progress)
        seconds, note = frontend_seconds(read_trace_lines(trace, offset)[0], size)
        notes.append(note)
        if seconds is not None:
            found.append(seconds)
    if not notes:
        return 0.0, "no burst fits the server's limits"
    value = float(np.mean(found)) if found else 0.0
    return value, (f"{value * 1e3:.3g} ms a request, the mean of {len(found)} of {len(notes)} bursts: "
                   + "; ".join(notes))


def profile(server: Any, *, quick: bool = True, prompt_tokens: Sequence[int] | None = None,
            batch_sizes: Sequence[int] | None = None, contexts: Sequence[int] | None = None,
            decode_length: int | None = None, repeats: int | None = None, environ: Mapping[str, str] | None = None,
            free_tokens: Sequence[int] = FREE_TOKENS, trace: str | None = None,
            progress: bool = False, output: str | None = None) -> LinearCostModel:
    """Measure `server` (a URL or a started Server) over a small grid and fit the calibrated model.

    quick: the small grid (about a minute on the embedded engine on 2 cores), else a fuller one.
    environ: the scheduling variables the server runs with (default: this process's, which an embedded
    server started from here inherits). free_tokens: the knees to try (FREE_TOKENS, the small ones, by
    default; KNEES tries more; (0,) fits a straight line). trace: the forward trace the server writes
    (TGI_TOOLKIT_FORWARD_TRACE; default: the one an embedded Server was started with), whose forwards join
    the fit and time the front end (`frontend_s`; 0 without a trace). output: also save the model as JSON there.
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
    trace = trace or (getattr(server, "env", None) or {}).get("TGI_TOOLKIT_FORWARD_TRACE")

    # A fresh server's first requests pay one-off costs (lazy initialisation, the KV cache growing): a
    # few unmeasured requests of the grid's shapes first, or the first TTFTs come out 2-3x too long.
    run_batch(server, batch_sizes=[max(grid["batch_sizes"])], sequence_length=max(lengths), decode_length=4,
              runs=1, warmups=1, progress=progress)
    measure_ingestion(server, prompt_tokens=lengths[-2:] if len(lengths) > 1 else lengths * 2, repeats=1,
                      progress=progress)
    frontend, frontend_note = _measure_frontend(server, trace, facts, progress) if trace else (0.0, None)
    # the trace from here on: the warm-up's forwards (a cache growth among them) are not the machine's speed
    offset = _trace_end(trace) if trace else 0
    ing = measure_ingestion(server, prompt_tokens=lengths, repeats=int(grid["repeats"]), progress=progress)
    rows = ing.requests[~ing.requests[S.WARMUP] & ing.requests[S.ERROR].isna()]
    ingestion = [(int(p), float(t)) for p, t in zip(rows[S.PROMPT_TOKENS], rows[S.TTFT_S], strict=True)]

    decode: list[tuple[Shape, float]] = []
    batches = []
    d = int(grid["decode_length"])
    for ctx in contexts_ok:
        res = run_batch(server, batch_sizes=list(grid["batch_sizes"]), sequence_length=ctx, decode_length=d,
                        runs=int(grid["repeats"]), warmups=1, progress=progress)
        batches.append(res)
        batch = res.batch[~res.batch[S.WARMUP]]
        for size, latency in zip(batch[S.BATCH_SIZE], batch[S.DECODE_TOKEN_LATENCY_S], strict=True):
            if latency == latency and latency > 0:
                decode.append((uniform_shape(int(size), 1, ctx + d // 2, prefilling=False), float(latency)))

    from tgi_toolkit.bench import provenance

    source = {"profiled": facts.get("model_id"), "grid": {k: list(v) if isinstance(v, (list, tuple)) else v
                                                          for k, v in grid.items()},
              "server": {**facts, **mode}, "hardware": provenance.hardware(), "versions": provenance.versions()}
    name = f"calibrated {facts.get('model_id', '')}".strip()
    traced = forward_samples(read_trace(trace, offset)[0]) if trace else []
    if traced:
        source["traced_forwards"] = len(traced)
    if frontend_note:
        source["frontend"] = frontend_note
    # the front end goes in before the replays: it decides which forward each request of a burst joins
    model = fit_profile(ingestion, decode, prefill_budget=budget, name=name, source=source, free_tokens=free_tokens,
                        frontend_s=frontend)
    for _ in range(REPLAYS):
        model = fit_samples(replay_rows(model, ing, batches, repeats=int(grid["repeats"])) + traced, name=name,
                            source=source, free_tokens=free_tokens, frontend_s=frontend,
                            terms=TERMS if traced else PROFILE_TERMS)
    if output:
        model.save(output)
    return model
