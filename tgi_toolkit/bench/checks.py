"""Scenario workloads checked before anything is sent, the same for a measured run (bench.api) and a
simulated one (tgi_toolkit.simulate): bad input is a BenchError naming the field and what it takes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tgi_toolkit.bench.errors import BenchError, check_positive_ints
from tgi_toolkit.bench.phase import check_ramp

ARRIVALS = ("constant", "poisson")


def listed(value: Sequence[Any] | Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple, range)) else [value]


def count(name: str, value: int, minimum: int) -> int:
    return check_positive_ints(name, [value], minimum=minimum)[0]


def concurrency_workload(users: Sequence[int] | int, grid: list[tuple[int, int]], requests: int | None,
                         warmup_requests: int, ramp_up: float | str) -> dict[str, Any]:
    """The concurrency scenario's workload, checked (a measured run and a simulated one take the same)."""
    counts = check_positive_ints("users", listed(users))
    if requests is not None and count("requests", requests, 1) < max(counts):
        raise BenchError("requests", f"{requests} is fewer than {max(counts)} users: the point would never have "
                                     f"them all in flight", f"integers >= {max(counts)}, or None (4 per user)")
    count("warmup_requests", warmup_requests, 0)
    return {"users": counts, "grid": grid, "requests": requests, "warmup_requests": warmup_requests,
            "ramp_up": check_ramp(ramp_up)}


def rate_workload(rates: Sequence[float] | float, arrival: str, grid: list[tuple[int, int]], requests: int,
                  max_concurrency: int | None) -> dict[str, Any]:
    """The rate scenario's workload, checked (a measured run and a simulated one take the same)."""
    rates = [float(r) for r in listed(rates)]
    bad = [r for r in rates if not r > 0]  # NaN fails this too
    if not rates or bad:
        raise BenchError("rate", f"{bad[0] if bad else 'no value'} is not allowed",
                         "request rates > 0 per second (inf: all at once)")
    if arrival not in ARRIVALS:
        raise BenchError("arrival", f"{arrival!r} is not known", ", ".join(ARRIVALS))
    count("requests", requests, 1)
    if max_concurrency is not None:
        count("max_concurrency", max_concurrency, 1)
    return {"rates": rates, "arrival": arrival, "grid": grid, "requests": requests, "max_concurrency": max_concurrency}


def ingestion_workload(target: Any, prompt_tokens: Sequence[int] | None, repeats: int,
                       default_lengths: Callable[[Any], list[int]]) -> dict[str, Any]:
    """The ingestion scenario's workload, checked (a measured run and a simulated one take the same);
    `default_lengths(target)` when no lengths are given."""
    lengths = check_positive_ints("prompt_tokens", listed(prompt_tokens)) if prompt_tokens is not None \
        else default_lengths(target)
    if len(set(lengths)) < 2:
        raise BenchError("prompt_tokens", "a fit needs at least two different lengths", "two or more lengths")
    for length in lengths:
        target.check_lengths(length, 1)
    count("repeats", repeats, 1)
    return {"prompt_tokens": lengths, "repeats": repeats}
