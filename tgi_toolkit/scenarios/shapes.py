"""Workload shapes as benchmark tools generate them (issue 40, 5), the same for the harness and the simulator:
length distributions of prompts and outputs (`LengthDistribution`), a pool of prompts cycled (`Lengths`), and
send times: a constant or seeded Poisson rate (`arrival_offsets`), or stages of rates in one run
(`Stage`, `stage_offsets`). Everything here is seeded plain data: no tokenizer, server or clock.

A length distribution has the point's length as its mean and a `spread`: uniform on mean +/- spread, normal
with that standard deviation, lognormal with that mean and standard deviation. Draws are rounded and clipped to
`bounds(mean)`: at least 1 token, at most the mean plus the spread (uniform) or three spreads (normal,
lognormal); the upper bound is what the server's limits are checked against, before anything starts.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from tgi_toolkit.bench.errors import BenchError

KINDS = ("fixed", "uniform", "normal", "lognormal")
ALLOWED = "fixed, or uniform|normal|lognormal:SPREAD (tokens > 0), e.g. normal:32"


def _problem(kind: str, spread: float) -> str:
    """What is wrong with a distribution ("" when nothing)."""
    if kind not in KINDS:
        return f"{kind!r} is not a distribution"
    if kind == "fixed" and spread:
        return "fixed lengths take no spread"
    if kind != "fixed" and not (spread > 0 and math.isfinite(spread)):
        return f"{kind} needs a spread > 0 tokens, not {spread!r}"
    return ""


@dataclasses.dataclass(frozen=True)
class LengthDistribution:
    """How a point's lengths spread around its own (its mean): `kind` in KINDS, `spread` in tokens."""

    kind: str = "fixed"
    spread: float = 0.0

    def __post_init__(self) -> None:
        if _problem(self.kind, self.spread):
            raise BenchError("length distribution", _problem(self.kind, self.spread), ALLOWED)

    @classmethod
    def of(cls, value: Any, field: str) -> LengthDistribution:
        """From "normal:32", {"kind": "normal", "spread": 32}, or a LengthDistribution; BenchError naming `field`."""
        if isinstance(value, LengthDistribution):
            return value
        try:
            if isinstance(value, Mapping):
                kind, spread = str(value.get("kind")), float(value.get("spread", 0.0))
            else:
                kind, _, text = str(value).partition(":")
                kind, spread = kind.strip().lower(), float(text) if text else 0.0
        except (TypeError, ValueError):
            raise BenchError(field, f"{value!r} is not a length distribution", ALLOWED) from None
        if _problem(kind, spread):  # checked here too, so that the error names the scenario's field
            raise BenchError(field, _problem(kind, spread), ALLOWED)
        return cls(kind, spread)

    def __str__(self) -> str:
        return self.kind if self.kind == "fixed" else f"{self.kind}:{self.spread:g}"

    def bounds(self, mean: int) -> tuple[int, int]:
        """The lowest and highest length a draw can take (after clipping)."""
        if self.kind == "fixed":
            return mean, mean
        high = mean + math.ceil(self.spread if self.kind == "uniform" else 3 * self.spread)
        low = max(1, mean - math.floor(self.spread)) if self.kind == "uniform" else 1
        return low, high

    def sample(self, mean: int, count: int, rng: random.Random) -> list[int]:
        """`count` lengths drawn around `mean`, rounded and clipped to `bounds(mean)`."""
        low, high = self.bounds(mean)
        if self.kind == "fixed":
            return [mean] * count
        if self.kind == "uniform":
            return [min(max(rng.randint(mean - math.floor(self.spread), mean + math.floor(self.spread)), low), high)
                    for _ in range(count)]
        if self.kind == "normal":
            draws = [rng.gauss(mean, self.spread) for _ in range(count)]
        else:  # lognormal with this mean and standard deviation: sigma^2 = ln(1 + s^2 / m^2), mu = ln m - sigma^2 / 2
            sigma = math.sqrt(math.log1p((self.spread / mean) ** 2))
            draws = [rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma) for _ in range(count)]
        return [min(max(int(round(d)), low), high) for d in draws]


FIXED = LengthDistribution()


@dataclasses.dataclass(frozen=True)
class Lengths:
    """What one point sends: the lengths of its distinct prompts, which of them request i sends (a pool of N
    cycles 0, 1, ..., N-1, 0, ...), and request i's new tokens."""

    prompts: tuple[int, ...]
    prompt_of: tuple[int, ...]
    outputs: tuple[int, ...]

    @classmethod
    def draw(cls, prompt_tokens: int, max_new_tokens: int, count: int, *, pool: int | None,
             prompt_lengths: LengthDistribution, output_lengths: LengthDistribution, seed: int,
             point_id: str) -> Lengths:
        distinct = min(pool, count) if pool else count
        prompts = prompt_lengths.sample(prompt_tokens, distinct, random.Random(f"{seed}:{point_id}:prompt"))
        outputs = output_lengths.sample(max_new_tokens, count, random.Random(f"{seed}:{point_id}:output"))
        return cls(tuple(prompts), tuple(i % distinct for i in range(count)), tuple(outputs))

    def by_length(self) -> dict[int, list[int]]:
        """The distinct prompts' indices by length, in order (each length's prompts are built together)."""
        out: dict[int, list[int]] = {}
        for index, length in enumerate(self.prompts):
            out.setdefault(length, []).append(index)
        return out


@dataclasses.dataclass(frozen=True)
class Stage:
    """`rate` requests per second for `duration_s` seconds, one stage of a rate schedule."""

    rate: float
    duration_s: float

    @classmethod
    def of(cls, value: Any) -> Stage:
        """From "5:600", (5, 600), {"rate": 5, "duration_s": 600} or a Stage; BenchError naming `stages`."""
        try:
            if isinstance(value, Stage):
                stage = value
            elif isinstance(value, Mapping):
                stage = cls(float(value["rate"]), float(value["duration_s"]))
            elif isinstance(value, str):
                rate, _, seconds = value.partition(":")
                stage = cls(float(rate), float(seconds))
            else:
                rate, seconds = value
                stage = cls(float(rate), float(seconds))
        except (KeyError, TypeError, ValueError):
            stage = None
        if stage is None or not (0 < stage.rate < math.inf and 0 < stage.duration_s < math.inf):
            raise BenchError("stages", f"{value!r} is not a stage",
                             "RATE:SECONDS with a finite rate > 0 per second and seconds > 0, e.g. 5:600")
        return stage

    def __str__(self) -> str:
        return f"{self.rate:g}x{self.duration_s:g}s"


def _gap(rng: random.Random, rate: float, burstiness: float | None) -> float:
    """A seeded gap between arrivals at `rate`: exponential (Poisson), or gamma of shape `burstiness` with the same
    mean, as vLLM's benchmark draws them (< 1 burstier, > 1 steadier)."""
    if burstiness is None:
        return rng.expovariate(rate)
    return rng.gammavariate(burstiness, 1 / (rate * burstiness))


def arrival_offsets(count: int, rate: float, arrival: str, seed: int, burstiness: float | None = None,
                    ) -> list[float]:
    """Send times (seconds from the point's start): constant spacing, or a seeded Poisson process (gamma gaps
    with a `burstiness`)."""
    if math.isinf(rate):
        return [0.0] * count
    if arrival == "constant":
        return [i / rate for i in range(count)]
    rng = random.Random(f"{seed}:poisson:{rate}")
    out, t = [], 0.0
    for _ in range(count):
        out.append(t)
        t += _gap(rng, rate, burstiness)
    return out


def stage_offsets(stages: Sequence[Stage], arrival: str, seed: int, burstiness: float | None = None,
                  ) -> list[float]:
    """Send times of a schedule of stages, one after the other: in a stage starting at T, constant arrivals at
    T + i / rate for every i / rate < duration, or a seeded Poisson process at that rate until the duration ends."""
    out: list[float] = []
    start = 0.0
    for k, stage in enumerate(stages):
        if arrival == "constant":
            times = [i / stage.rate for i in range(math.ceil(stage.rate * stage.duration_s - 1e-9))]
        else:
            rng = random.Random(f"{seed}:poisson:stage{k}:{stage.rate}")
            times, t = [], 0.0
            while t < stage.duration_s:
                times.append(t)
                t += _gap(rng, stage.rate, burstiness)
        out += [start + t for t in times]
        start += stage.duration_s
    return out
