"""The seven scenarios (docs/measurement.md), one frozen dataclass each (shared-prefix, multi-turn and decode-stall,
which plan their requests, are in scenarios.plans): their parameters, defaults, checks and
what they generate. bench.api and simulate.api build one from their keywords; bench.scenarios / bench.play send
it, simulate.workloads plays it on the virtual clock; bench.cli makes its flags from the fields.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

from tgi_toolkit.bench.checks import ARRIVALS, Limits, count, listed
from tgi_toolkit.bench.errors import BenchError, check_positive_ints
from tgi_toolkit.bench.phase import check_ramp
from tgi_toolkit.scenarios.base import Scenario, param
from tgi_toolkit.scenarios.plans import DecodeStallScenario, MultiTurn, SharedPrefix
from tgi_toolkit.scenarios.shapes import FIXED, LengthDistribution, Lengths, Stage, arrival_offsets, stage_offsets

REPEAT = "repeat for several"


def _lengths(limits: Limits | None, prompt_tokens: int, max_new_tokens: int, field: str = "prompt_tokens") -> None:
    if limits is not None:
        limits.check_lengths(prompt_tokens, max_new_tokens, field)


def _ints(name: str, value: Any, minimum: int = 1) -> tuple[int, ...]:
    return tuple(check_positive_ints(name, listed(value), minimum=minimum))


@dataclasses.dataclass(frozen=True)
class BatchScenario(Scenario):
    """text-generation-benchmark over HTTP: B prompts of exactly `sequence_length` tokens at once, `decode_length`
    tokens forced, `warmups` then `runs` times per batch size (its defaults are the tool's own)."""

    name = "batch"
    batch_sizes: tuple[int, ...] = param((1, 2, 4, 8, 16, 32), f"{REPEAT} (default 1 2 4 8 16 32)",
                                         flag="--batch-size", short="-b", repeat=True)
    sequence_length: int = param(10, "prompt tokens (default 10)", short="-s")
    decode_length: int = param(8, "new tokens (default 8)", short="-d")
    runs: int = param(10, "measured runs per batch size (default 10)", short="-r")
    warmups: int = param(1, "warm-up runs per batch size (default 1)", short="-w")

    def __post_init__(self) -> None:
        self._set("batch_sizes", _ints("batch_size", self.batch_sizes))
        count("sequence_length", self.sequence_length, 1)
        count("decode_length", self.decode_length, 1)
        count("runs", self.runs, 1)
        count("warmups", self.warmups, 0)

    def check(self, limits: Limits | None) -> BatchScenario:
        limit = getattr(limits, "max_concurrent_requests", None)  # the server's, where known
        if limit is not None and max(self.batch_sizes) > limit:
            raise BenchError("batch_size", f"{max(self.batch_sizes)} is over the server's max_concurrent_requests "
                                           f"{limit} (it would answer 429)", f"1 to {limit}")
        _lengths(limits, self.sequence_length, self.decode_length, "sequence_length")
        return self

    def workload(self) -> dict[str, Any]:
        return {**super().workload(), "batch_sizes": list(self.batch_sizes)}


@dataclasses.dataclass(frozen=True)
class _LengthGrid(Scenario):
    """Every (prompt, output) length pair of a scenario (its `grid`), and the shape of each point's requests
    (scenarios.shapes): a pool of prompts cycled, prompt and output lengths spread around the pair's."""

    prompt_tokens: tuple[int, ...] = param((128,), f"{REPEAT} (default 128)", repeat=True)
    max_new_tokens: tuple[int, ...] = param((128,), f"{REPEAT} (default 128)", repeat=True)
    prompt_pool: int | None = param(None, "N distinct prompts a point cycles through, request i sending prompt "
                                          "i mod N (default none: every prompt new)", metavar="N")
    prompt_lengths: LengthDistribution = param(FIXED, "prompt lengths around each --prompt-tokens: fixed, or "
                                                      "uniform|normal|lognormal:SPREAD tokens (seeded; default fixed)",
                                               type=str, metavar="KIND[:SPREAD]")
    output_lengths: LengthDistribution = param(FIXED, "new tokens around each --max-new-tokens, as --prompt-lengths",
                                               type=str, metavar="KIND[:SPREAD]")

    SHAPES: ClassVar[tuple[str, ...]] = ("prompt_pool", "prompt_lengths", "output_lengths")

    def __post_init__(self) -> None:
        self._set("prompt_tokens", _ints("prompt_tokens", self.prompt_tokens))
        self._set("max_new_tokens", _ints("max_new_tokens", self.max_new_tokens))
        if self.prompt_pool is not None:
            count("prompt_pool", self.prompt_pool, 1)
        self._set("prompt_lengths", LengthDistribution.of(self.prompt_lengths, "prompt_lengths"))
        self._set("output_lengths", LengthDistribution.of(self.output_lengths, "output_lengths"))

    @property
    def grid(self) -> list[tuple[int, int]]:
        return [(p, o) for p in self.prompt_tokens for o in self.max_new_tokens]

    def check(self, limits: Limits | None) -> Any:
        """Each pair's longest prompt and output (the distributions' upper bounds) against the limits."""
        for p, o in self.grid:
            field = "prompt_tokens" if self.prompt_lengths == FIXED else "prompt_lengths"
            _lengths(limits, self.prompt_lengths.bounds(p)[1], self.output_lengths.bounds(o)[1], field)
        return self

    def shaped(self, point_id: str) -> str:
        """A point's id with its shape where it has one (a plain point keeps the id it always had)."""
        return point_id + "".join(f",{name}={getattr(self, name)}" for name in self.extras(self.SHAPES))

    def lengths(self, prompt_tokens: int, max_new_tokens: int, count: int, seed: int, point_id: str) -> Lengths:
        """What a point of `count` requests sends (seeded by the run's seed and the point)."""
        return Lengths.draw(prompt_tokens, max_new_tokens, count, pool=self.prompt_pool,
                            prompt_lengths=self.prompt_lengths, output_lengths=self.output_lengths, seed=seed,
                            point_id=point_id)


@dataclasses.dataclass(frozen=True)
class ConcurrencyScenario(_LengthGrid):
    """N closed-loop users for each N and (prompt, output) pair: each sends its next request when its last ends,
    started over a ramp (bench.phase)."""

    name = "concurrency"
    users: tuple[int, ...] = param((1, 2, 4, 8, 16, 32), f"{REPEAT} (default 1 2 4 8 16 32)", short="-u",
                                   repeat=True)
    requests: int | None = param(None, "measured requests per point (default 4 per user, at least 8)")
    warmup_requests: int = param(0, "unmeasured requests first (default 0)")
    ramp_up: float | str = param(
        "auto", "user i starts i/N of this after the point's start; requests sent before it ends are not measured. "
                "auto (default): one cycle at the point's load, the mean duration of a request a user sent together "
                "first; 0: all at once", type=str, metavar="SECONDS")

    def __post_init__(self) -> None:
        super().__post_init__()
        self._set("users", _ints("users", self.users))
        top = max(self.users)
        if self.requests is not None and count("requests", self.requests, 1) < top:
            raise BenchError("requests", f"{self.requests} is fewer than {top} users: the point would never have "
                                         f"them all in flight", f"integers >= {top}, or None (4 per user)")
        count("warmup_requests", self.warmup_requests, 0)
        self._set("ramp_up", check_ramp(self.ramp_up))

    def workload(self) -> dict[str, Any]:
        return {"users": list(self.users), "grid": self.grid, "requests": self.requests,
                "warmup_requests": self.warmup_requests, "ramp_up": self.ramp_up, **self.extras(self.SHAPES)}


def rate_point_id(rate: float, arrival: str, prompt_tokens: int, max_new_tokens: int) -> str:
    return f"rate={rate:g},arrival={arrival},prompt={prompt_tokens},output={max_new_tokens}"


@dataclasses.dataclass(frozen=True)
class RatePoint:
    """One point of the rate scenario: its id, its offered rate (a schedule's: requests over its duration), its
    lengths and its send times in seconds from its start."""

    point_id: str
    rate: float
    prompt_tokens: int
    max_new_tokens: int
    offsets: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class RateScenario(_LengthGrid):
    """Open loop: `requests` requests leaving on a constant or seeded Poisson schedule at each rate, whatever is
    in flight (`max_concurrency` caps it, hiding queueing in the client); or, with `stages`, one point per length
    pair whose rate changes stage by stage (5 req/s for 600 s, then 10 req/s for 600 s: 5:600 10:600)."""

    name = "rate"
    rates: tuple[float, ...] = param((1.0, 2.0, 4.0), "requests per second, repeat for several; inf = all at once "
                                     "(default 1 2 4)", flag="--rate", repeat=True, type=float)
    arrival: str = param("poisson", "constant or seeded Poisson send times (default poisson)", type=str,
                         choices=ARRIVALS)
    requests: int = param(64, "requests per point (default 64)")
    max_concurrency: int | None = param(None, "cap on requests in flight (default none)")
    stages: tuple[Stage, ...] = param((), "a stage of the rate schedule, RATE:SECONDS, repeat for the next ones "
                                          "(instead of --rate and --requests)", flag="--stage", repeat=True, type=str,
                                      metavar="RATE:SECONDS")
    burstiness: float | None = param(None, "Poisson arrivals' gaps drawn from a gamma of this shape, same mean "
                                           "(vLLM's --burstiness: 1 Poisson, < 1 burstier, > 1 steadier; default: "
                                           "exponential gaps)", type=float)

    SHAPES: ClassVar[tuple[str, ...]] = (*_LengthGrid.SHAPES, "burstiness")  # in a shaped point's id

    def __post_init__(self) -> None:
        super().__post_init__()
        rates = tuple(float(r) for r in listed(self.rates))
        bad = [r for r in rates if not r > 0]  # NaN fails this too
        if not rates or bad:
            raise BenchError("rate", f"{bad[0] if bad else 'no value'} is not allowed",
                             "request rates > 0 per second (inf: all at once)")
        self._set("rates", rates)
        if self.arrival not in ARRIVALS:
            raise BenchError("arrival", f"{self.arrival!r} is not known", ", ".join(ARRIVALS))
        count("requests", self.requests, 1)
        if self.max_concurrency is not None:
            count("max_concurrency", self.max_concurrency, 1)
        self._set("stages", tuple(Stage.of(s) for s in listed(self.stages)))
        if self.stages and (self.rates != self.default("rates") or self.requests != self.default("requests")):
            raise BenchError("stages", "a schedule of stages sets the rates and the number of requests itself",
                             "stages alone, or rates and requests")
        if self.burstiness is not None:
            self._set("burstiness", float(self.burstiness))  # 4 and 4.0: one point id
            if not (0 < self.burstiness < math.inf) or self.arrival != "poisson":
                raise BenchError("burstiness", f"{self.burstiness!r} is not allowed with {self.arrival} arrivals",
                                 "a number > 0 with poisson arrivals; none with constant ones")

    def points(self, seed: int) -> list[RatePoint]:
        """Every point's id, rate, lengths and send times (the same for the harness and the simulator)."""
        out = []
        for p, o in self.grid:
            if self.stages:
                offsets = stage_offsets(self.stages, self.arrival, seed, self.burstiness)
                seconds = sum(s.duration_s for s in self.stages)
                point_id = (f"stages={'+'.join(str(s) for s in self.stages)},arrival={self.arrival},prompt={p},"
                            f"output={o}")
                out.append(RatePoint(self.shaped(point_id), len(offsets) / seconds, p, o, tuple(offsets)))
                continue
            for r in self.rates:
                offsets = arrival_offsets(self.requests, r, self.arrival, seed, self.burstiness)
                out.append(RatePoint(self.shaped(rate_point_id(r, self.arrival, p, o)), r, p, o, tuple(offsets)))
        return out

    def workload(self) -> dict[str, Any]:
        return {"rates": list(self.rates), "arrival": self.arrival, "grid": self.grid, "requests": self.requests,
                "max_concurrency": self.max_concurrency, **self.extras((*self.SHAPES, "stages"))}


@dataclasses.dataclass(frozen=True)
class IngestionScenario(Scenario):
    """happy_vllm's prompt ingestion speed: one request at a time, one new token, `repeats` prompts of each length
    (None: spread up to 90 % of what the server takes, `with_lengths`)."""

    name = "ingestion"
    prompt_tokens: tuple[int, ...] | None = param(None, f"{REPEAT} (default 8 lengths up to 90%% of "
                                                        "max_input_tokens)", repeat=True)
    repeats: int = param(3, "requests per length (default 3)")

    def __post_init__(self) -> None:
        if self.prompt_tokens is not None:
            self._set("prompt_tokens", _ints("prompt_tokens", self.prompt_tokens))
            if len(set(self.prompt_tokens)) < 2:
                raise BenchError("prompt_tokens", "a fit needs at least two different lengths", "two or more lengths")
        count("repeats", self.repeats, 1)

    def with_lengths(self, lengths: list[int]) -> IngestionScenario:
        """This scenario with the server's default lengths where it gives none."""
        return self if self.prompt_tokens is not None else dataclasses.replace(self, prompt_tokens=tuple(lengths))

    def check(self, limits: Limits | None) -> IngestionScenario:
        for length in self.prompt_tokens or ():
            _lengths(limits, length, 1)
        return self

    def workload(self) -> dict[str, Any]:
        return {"prompt_tokens": list(self.prompt_tokens or []), "repeats": self.repeats}


SCENARIOS: dict[str, type[Scenario]] = {cls.name: cls for cls in (
    BatchScenario, ConcurrencyScenario, RateScenario, IngestionScenario, SharedPrefix, MultiTurn, DecodeStallScenario)}


def scenario_class(name: str) -> type[Scenario]:
    """The scenario class by name (`shared-prefix` or `shared_prefix`)."""
    try:
        return SCENARIOS[name.replace("-", "_")]
    except KeyError:
        raise BenchError("scenario", f"{name!r} is not known", ", ".join(SCENARIOS)) from None


def check_scenario(scenario: str, params: dict[str, Any], limits: Limits | None = None) -> Scenario:
    """A scenario's own parameters (others ignored: the common options are bench.checks.check_options') built and
    checked as its run will, before any server is started or reached (the command line and a sweep call this).
    Ingestion without lengths takes the server's, checked when it is reached."""
    cls = scenario_class(scenario)
    return cls.of({k: v for k, v in params.items() if k in cls.parameters()}).check(limits)
