"""Bench's scenarios as simulated clients: the same points, point ids, request counts and arrival
schedules as `tgi_toolkit.bench.scenarios`, with prompts as token ids instead of text.

Prompts are seeded random token ids of exactly the requested length; with `prefix_tokens` every prompt
of the run starts with the same ids (bench's shared prefix), so a scheduler with a prefix cache finds
it. A batch's prompts are distinct, as bench sends them (text-generation-benchmark's identical prompts
would be prefix-cache hits through a TGI 3 router: bench.scenarios.batch).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tgi_toolkit import schema as S
from tgi_toolkit.bench.phase import AUTO, resolve_ramp
from tgi_toolkit.bench.scenarios import batch_point_id, concurrency_point_id, ingestion_point_id
from tgi_toolkit.scenarios.kinds import BatchScenario, ConcurrencyScenario, IngestionScenario, RateScenario
from tgi_toolkit.scenarios.plans import DecodeStallScenario
from tgi_toolkit.scenarios.shapes import Lengths
from tgi_toolkit.simulate.drivers import Bursts, ClosedLoop, Driver, OpenLoop, PlanDriver, SimRequest

VOCAB = 32_000


class TokenPrompts:
    """Distinct prompts of exact lengths as token ids; `prefix_tokens` ids shared by every prompt."""

    def __init__(self, seed: int = 0, prefix_tokens: int = 0, vocab: int = VOCAB) -> None:
        self.rng = np.random.default_rng(seed)
        self.vocab = vocab
        self.prefix = self._ids(prefix_tokens)

    def _ids(self, n: int) -> list[int]:
        return self.rng.integers(3, self.vocab, size=n).tolist() if n > 0 else []

    def prompts(self, length: int, n: int) -> list[list[int]]:
        own = max(length - len(self.prefix), 0)
        head = self.prefix[:length]
        return [head + self._ids(own) for _ in range(n)]


@dataclass
class Phase:
    """Requests sent by one driver; the next phase starts when this one has ended (warm-up, then measure)."""

    driver: Driver
    requests: list[SimRequest]


@dataclass
class Point:
    point_id: str
    workload: dict[str, Any]  # the point's workload columns
    phases: list[Phase]
    windows: list[tuple[int, int]] | None = None  # filled by the runner for batch points
    batch: tuple[int, int, int] | None = None  # (batch size, sequence length, decode length)
    send_lag_s: list[float] = field(default_factory=list)
    columns: dict[str, Any] = field(default_factory=dict)  # the point's own columns, filled once it has run
    finish: Any = None  # called with (point, hit tokens, lookup tokens) once it has run, to fill `columns`

    @property
    def requests(self) -> list[SimRequest]:
        return [r for p in self.phases for r in p.requests]


def _tagged(prompts: Sequence[list[int]], output: int | Sequence[int], repeat: int, warmup: bool, start: int = 0,
            ) -> list[SimRequest]:
    """Requests of these prompts, each with its own new tokens (`output`: one for all, or one each)."""
    outputs = [output] * len(prompts) if isinstance(output, int) else list(output)
    return [SimRequest(list(p), o, tag=(repeat, warmup, start + i))
            for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))]


def _shaped(prompts: TokenPrompts, lengths: Lengths) -> list[list[int]]:
    """A point's prompts in send order: its distinct ones built by length (a plain point's as they always were),
    request i sending distinct prompt `prompt_of[i]` (a pool's repeats are the same token ids)."""
    distinct: list[list[int]] = [[] for _ in lengths.prompts]
    for length, indices in lengths.by_length().items():
        for index, ids in zip(indices, prompts.prompts(length, len(indices)), strict=True):
            distinct[index] = ids
    return [distinct[p] for p in lengths.prompt_of]


def _finish(scenario: ConcurrencyScenario | RateScenario, *then: Any) -> Any:
    """A point's `finish`: `then`'s, and the prefix cache's counts where a pool of prompts repeats them."""
    steps = [*then, *([_hit_rate] if scenario.prompt_pool else [])]
    return (lambda point, hit, lookup: [step(point, hit, lookup) for step in steps]) if steps else None


def batch_points(prompts: TokenPrompts, scenario: BatchScenario) -> list[Point]:
    sequence_length, decode_length = scenario.sequence_length, scenario.decode_length
    runs, warmups = scenario.runs, scenario.warmups
    out = []
    for size in scenario.batch_sizes:
        groups = []
        for step in range(warmups + runs):
            warm = step < warmups
            repeat = step if warm else step - warmups
            groups.append([SimRequest(prompt, decode_length, tag=(repeat, warm, i))
                           for i, prompt in enumerate(prompts.prompts(sequence_length, size))])
        out.append(Point(batch_point_id(size, sequence_length, decode_length),
                         {S.BATCH_SIZE: size, S.PROMPT_TOKENS: sequence_length, S.MAX_NEW_TOKENS: decode_length},
                         [Phase(Bursts(groups), [r for g in groups for r in g])],
                         batch=(size, sequence_length, decode_length)))
    return out


def concurrency_points(prompts: TokenPrompts, scenario: ConcurrencyScenario, seed: int = 0) -> list[Point]:
    """bench's concurrency points, with its ramp (bench.phase): for "auto" a request a user sent together
    (their mean duration is the ramp), then user i's first request i/N of the ramp after the start; requests
    sent before it ends are new unmeasured ones."""
    requests, warmup_requests, ramp_up = scenario.requests, scenario.warmup_requests, scenario.ramp_up
    out = []
    for prompt_tokens, max_new in scenario.grid:
        for n in scenario.users:
            total = requests if requests is not None else max(4 * n, 8)
            point_id = scenario.shaped(concurrency_point_id(n, prompt_tokens, max_new))
            lengths = scenario.lengths(prompt_tokens, max_new, warmup_requests + total, seed, point_id)
            texts = _shaped(prompts, lengths)
            phases = []
            if warmup_requests:
                warm = _tagged(texts[:warmup_requests], lengths.outputs[:warmup_requests], 0, True)
                phases.append(Phase(ClosedLoop(warm, n), warm))
            ramp = resolve_ramp(ramp_up, n)
            numbers = itertools.count(warmup_requests)  # unmeasured requests' indices, bench's numbering

            def extra(length: int = prompt_tokens, output: int = max_new, numbers: Any = numbers) -> SimRequest:
                return _tagged(prompts.prompts(length, 1), output, 0, True, next(numbers))[0]

            if ramp == AUTO:
                probes = [extra() for _ in range(n)]
                phases.append(Phase(ClosedLoop(probes, n), probes))
                ramp = probes
            measured = _tagged(texts[warmup_requests:], lengths.outputs[warmup_requests:], 0, False)

            sent = list(measured)  # and the ramp's requests, as they are made
            loop = ClosedLoop(measured, n, ramp, extra, sent)
            phases.append(Phase(loop, sent))
            out.append(Point(point_id, {S.USERS: n, S.PROMPT_TOKENS: prompt_tokens, S.MAX_NEW_TOKENS: max_new},
                             phases, finish=_finish(scenario, _ramp_used(loop))))
    return out


def _ramp_used(loop: ClosedLoop) -> Any:
    """A point's `finish`: the ramp its users had (for "auto", the probes' mean duration)."""
    return lambda point, hit, lookup: point.columns.update({S.RAMP_UP_S: loop.ramp_s})


def rate_points(prompts: TokenPrompts, scenario: RateScenario, seed: int) -> list[Point]:
    """bench's rate points (scenario.points: a rate's send times, or a schedule of stages')."""
    out = []
    for point in scenario.points(seed):
        lengths = scenario.lengths(point.prompt_tokens, point.max_new_tokens, len(point.offsets), seed,
                                   point.point_id)
        reqs = _tagged(_shaped(prompts, lengths), lengths.outputs, 0, False)
        out.append(Point(point.point_id, {S.RATE_RPS: point.rate, S.ARRIVAL: scenario.arrival,
                                          S.PROMPT_TOKENS: point.prompt_tokens, S.MAX_NEW_TOKENS: point.max_new_tokens},
                         [Phase(OpenLoop(reqs, list(point.offsets), scenario.max_concurrency), reqs)],
                         send_lag_s=[0.0] * len(reqs), finish=_finish(scenario)))
    return out


def ingestion_points(prompts: TokenPrompts, scenario: IngestionScenario) -> list[Point]:
    repeats = scenario.repeats
    out = []
    for length in scenario.prompt_tokens or ():
        reqs = _tagged(prompts.prompts(length, repeats), 1, 0, False)
        out.append(Point(ingestion_point_id(length), {S.USERS: 1, S.PROMPT_TOKENS: length, S.MAX_NEW_TOKENS: 1},
                         [Phase(ClosedLoop(reqs, 1), reqs)]))
    return out


# -- scenarios.plans: shared prefixes, multi-turn conversations, a long prompt joining streams --------------
def _planned(plan: Sequence[Any], repeat: int = 0, warmup: bool = False, salt: str = "") -> list[SimRequest]:
    from tgi_toolkit.scenarios.plans import synthetic_ids

    out = []
    for r in plan:
        ids = synthetic_ids(r)
        if salt:  # a run's own token ids: another run's cache must not make its first request warm
            ids = [(i + hash(salt) % 9973) % (VOCAB - 1) + 1 for i in ids]
        out.append(SimRequest(ids, r.max_new_tokens, tag=(repeat, warmup, r.index),
                              columns={S.GROUP: r.group, S.TURN: r.turn, S.PROMPT_TOKENS: r.prompt_tokens,
                                       S.MAX_NEW_TOKENS: r.max_new_tokens}))
    return out


def _hit_rate(point: Point, hit: float, lookup: float) -> None:
    point.columns.update({S.PREFIX_HIT_RATE: hit / lookup if lookup > 0 else float("nan"),
                          S.PREFIX_HIT_TOKENS: float(hit), S.PREFIX_LOOKUP_TOKENS: float(lookup)})


def shared_prefix_points(workload: Any) -> list[Point]:
    plan = workload.requests()
    reqs = _planned(plan)
    return [Point(workload.point_id, {S.USERS: workload.users, S.PROMPT_TOKENS: workload.prefix_tokens
                                      + workload.suffix_tokens, S.MAX_NEW_TOKENS: workload.max_new_tokens},
                  [Phase(PlanDriver(reqs, plan, workload.max_in_flight), reqs)], finish=_hit_rate)]


def multi_turn_points(workload: Any) -> list[Point]:
    plan = workload.requests()
    reqs = _planned(plan)
    return [Point(workload.point_id, {S.USERS: workload.max_in_flight, S.PROMPT_TOKENS: workload.prompt_tokens(0),
                                      S.MAX_NEW_TOKENS: workload.max_new_tokens},
                  [Phase(PlanDriver(reqs, plan, workload.max_in_flight), reqs)], finish=_hit_rate)]


def _stall(point: Point, hit: float, lookup: float) -> None:
    from tgi_toolkit.bench.play import stall_gaps

    inside: list[float] = []
    before: list[float] = []
    ttfts: list[float] = []
    steps: dict[int, list[SimRequest]] = {}
    for r in point.requests:
        repeat, warm, _ = r.tag
        if not warm:
            steps.setdefault(repeat, []).append(r)
    for step in steps.values():
        streams, long = [r.record for r in step[:-1]], step[-1].record
        gaps_in, gaps_before, _ = stall_gaps(streams, long)
        inside += gaps_in
        before += gaps_before
        if long.token_ns:
            ttfts.append((long.token_ns[0] - long.sent_ns) / 1e9)
    point.columns.update({S.STALL_MAX_GAP_S: max(inside) if inside else float("nan"),
                          S.STALL_P99_GAP_S: float(np.percentile(inside, 99)) if inside else float("nan"),
                          S.STALL_BASELINE_GAP_S: float(np.median(before)) if before else float("nan"),
                          S.LONG_PROMPT_TTFT_S: float(np.median(ttfts)) if ttfts else float("nan")})


def decode_stall_points(workload: DecodeStallScenario) -> list[Point]:
    repeats, warmups = workload.repeats, workload.warmups
    phases = []
    for step in range(warmups + repeats):
        warm = step < warmups
        plan = workload.requests(step)
        reqs = _planned(plan, step if warm else step - warmups, warm)
        phases.append(Phase(PlanDriver(reqs, plan, workload.max_in_flight), reqs))
    return [Point(workload.point_id, {S.USERS: workload.streams, S.PROMPT_TOKENS: workload.long_prompt,
                                      S.MAX_NEW_TOKENS: workload.stream_tokens}, phases, finish=_stall)]
