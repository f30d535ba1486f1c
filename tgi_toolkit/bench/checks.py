"""Scenario workloads checked before anything is sent or started, the same for a measured run (bench.api),
a simulated one (tgi_toolkit.simulate), the command line before it launches a server (bench.cli) and a
sweep before it launches any (tgi_toolkit.sweep): bad input is a BenchError naming the field and what it
takes. `check_scenario` is the one entry point by scenario name; each scenario's own function below."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tgi_toolkit.bench.errors import BenchError, check_positive_ints
from tgi_toolkit.bench.phase import check_ramp

ARRIVALS = ("constant", "poisson")


class Limits(Protocol):
    """What refuses a request's lengths: a server reached (bench.target.Target), a simulated one, or the
    launcher settings of one about to start (LaunchLimits)."""

    def check_lengths(self, prompt_tokens: int, max_new_tokens: int, field_name: str = "prompt_tokens") -> None: ...


def length_rule(max_input_tokens: int | None, max_total_tokens: int | None, prompt_tokens: int,
                max_new_tokens: int, field_name: str = "prompt_tokens") -> None:
    """Refuse lengths a server with these limits (None: unknown) would refuse, naming the field and the range."""
    if max_input_tokens is not None and prompt_tokens > max_input_tokens:
        raise BenchError(field_name, f"{prompt_tokens} is over the server's max_input_tokens",
                         f"1 to {max_input_tokens}")
    if max_total_tokens is not None and prompt_tokens + max_new_tokens > max_total_tokens:
        raise BenchError(field_name, f"{prompt_tokens} prompt + {max_new_tokens} new tokens is over the "
                                     f"server's max_total_tokens {max_total_tokens}",
                         f"prompt + new tokens <= {max_total_tokens}")


@dataclass(frozen=True)
class LaunchLimits:
    """A server's limits from the launcher settings it is about to be started with; None where the server
    derives the value when it starts (TGI 3: from the model and its memory), which the run checks later."""

    max_input_tokens: int | None = None
    max_total_tokens: int | None = None
    max_concurrent_requests: int | None = None

    @classmethod
    def of(cls, config: Any) -> LaunchLimits:
        """From a LauncherConfig (with max_total_tokens alone, a prompt takes up to one token less)."""
        total = config.max_total_tokens
        given = config.max_input_tokens if config.max_input_tokens is not None else \
            (total - 1 if total is not None else None)
        return cls(given, total, config.max_concurrent_requests)

    def check_lengths(self, prompt_tokens: int, max_new_tokens: int, field_name: str = "prompt_tokens") -> None:
        length_rule(self.max_input_tokens, self.max_total_tokens, prompt_tokens, max_new_tokens, field_name)


def _lengths(limits: Limits | None, prompt_tokens: int, max_new_tokens: int, field_name: str = "prompt_tokens") -> None:
    if limits is not None:
        limits.check_lengths(prompt_tokens, max_new_tokens, field_name)


def listed(value: Sequence[Any] | Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple, range)) else [value]


def count(name: str, value: int, minimum: int) -> int:
    return check_positive_ints(name, [value], minimum=minimum)[0]


def length_grid(limits: Limits | None, prompt_tokens: Sequence[int] | int,
                max_new_tokens: Sequence[int] | int) -> list[tuple[int, int]]:
    """Every (prompt, output) length pair of a scenario, each checked against the server's limits."""
    prompts = check_positive_ints("prompt_tokens", listed(prompt_tokens))
    outputs = check_positive_ints("max_new_tokens", listed(max_new_tokens))
    for p in prompts:
        for o in outputs:
            _lengths(limits, p, o)
    return [(p, o) for p in prompts for o in outputs]


def batch_workload(limits: Limits | None, batch_sizes: Sequence[int] | int, sequence_length: int,
                   decode_length: int, runs: int, warmups: int, max_concurrent: int | None = None) -> dict[str, Any]:
    """The batch scenario's workload, checked (`max_concurrent`: the server's max_concurrent_requests)."""
    sizes = check_positive_ints("batch_size", listed(batch_sizes))
    limit = max_concurrent
    if limit is not None and max(sizes) > limit:
        raise BenchError("batch_size", f"{max(sizes)} is over the server's max_concurrent_requests {limit} "
                                       f"(it would answer 429)", f"1 to {limit}")
    count("sequence_length", sequence_length, 1)
    count("decode_length", decode_length, 1)
    count("runs", runs, 1)
    count("warmups", warmups, 0)
    _lengths(limits, sequence_length, decode_length, "sequence_length")
    return {"batch_sizes": sizes, "sequence_length": sequence_length, "decode_length": decode_length,
            "runs": runs, "warmups": warmups}


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


def ingestion_workload(target: Limits | None, prompt_tokens: Sequence[int] | None, repeats: int,
                       default_lengths: Callable[[Any], list[int]]) -> dict[str, Any]:
    """The ingestion scenario's workload, checked (a measured run and a simulated one take the same);
    `default_lengths(target)` when no lengths are given."""
    lengths = check_positive_ints("prompt_tokens", listed(prompt_tokens)) if prompt_tokens is not None \
        else default_lengths(target)
    if len(set(lengths)) < 2:
        raise BenchError("prompt_tokens", "a fit needs at least two different lengths", "two or more lengths")
    for length in lengths:
        _lengths(target, length, 1)
    count("repeats", repeats, 1)
    return {"prompt_tokens": lengths, "repeats": repeats}


def shared_prefix_workload(limits: Limits | None, **params: Any) -> Any:
    """The shared-prefix workload (bench.workloads.SharedPrefix, which checks its counts), its longest prompt
    checked against the server's limits."""
    from tgi_toolkit.bench.workloads import SharedPrefix

    workload = SharedPrefix(**params)
    _lengths(limits, workload.prefix_tokens + workload.suffix_tokens, workload.max_new_tokens)
    return workload


def multi_turn_workload(limits: Limits | None, **params: Any) -> Any:
    """The multi-turn workload (bench.workloads.MultiTurn), its last turn's prompt checked against the limits."""
    from tgi_toolkit.bench.workloads import MultiTurn

    workload = MultiTurn(**params)
    _lengths(limits, workload.prompt_tokens(workload.turns - 1), workload.max_new_tokens)
    return workload


def decode_stall_workload(limits: Limits | None, *, streams: int = 8, long_prompt: int = 2000,
                          stream_prompt: int = 32, stream_tokens: int = 128, long_max_new_tokens: int = 4,
                          lead_tokens: int = 4, repeats: int = 3, warmups: int = 1) -> Any:
    """The decode-stall workload (bench.workloads.DecodeStall) and its rounds, checked."""
    from tgi_toolkit.bench.workloads import DecodeStall

    workload = DecodeStall(streams=streams, stream_prompt_tokens=stream_prompt, stream_tokens=stream_tokens,
                           long_prompt_tokens=long_prompt, long_max_new_tokens=long_max_new_tokens,
                           lead_tokens=lead_tokens)
    _lengths(limits, stream_prompt, stream_tokens, "stream_prompt")
    _lengths(limits, long_prompt, long_max_new_tokens, "long_prompt")
    count("repeats", repeats, 1)
    count("warmups", warmups, 0)
    return workload


def check_options(options: Mapping[str, Any]) -> None:
    """The options every scenario takes (bench.api's docstring), those that can be checked before a server
    is reached: objectives, scrape interval, request timeout, shared prefix, sampling parameters' names."""
    from tgi_toolkit.bench.client import SAMPLING_KEYS

    unknown = set(options.get("sampling") or {}) - set(SAMPLING_KEYS)
    if unknown:
        raise BenchError("sampling", f"unknown parameter(s) {sorted(unknown)}", ", ".join(SAMPLING_KEYS))
    for name in ("slo_ttft_s", "slo_tpot_s"):
        value = options.get(name)
        if value is not None and not value > 0:
            raise BenchError(name, f"{value!r} is not a positive number of seconds", "numbers > 0, or None")
    for name in ("scrape_interval", "request_timeout"):
        value = options.get(name)
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise BenchError(name, f"{value!r} is not allowed", "numbers of seconds > 0")
    if options.get("prefix_tokens") is not None:
        count("prefix_tokens", options["prefix_tokens"], 0)


def check_scenario(scenario: str, params: Mapping[str, Any], limits: LaunchLimits | None = None) -> None:
    """A scenario's parameters (bench.api's `run_<scenario>` keywords; the common options are left to
    `check_options`) checked as its run will check them, before any server is started or reached: what
    the command line and a sweep call. `limits`: the server's, where known before it starts."""
    own = {k: v for k, v in params.items() if k in SCENARIO_PARAMETERS.get(scenario, ())}
    if scenario == "batch":
        batch_workload(limits, **{"batch_sizes": (1, 2, 4, 8, 16, 32), "sequence_length": 10, "decode_length": 8,
                                   "runs": 10, "warmups": 1, **own},
                       max_concurrent=limits.max_concurrent_requests if limits is not None else None)
    elif scenario in ("concurrency", "rate"):
        grid = length_grid(limits, own.pop("prompt_tokens", 128), own.pop("max_new_tokens", 128))
        if scenario == "concurrency":
            concurrency_workload(own.pop("users", (1, 2, 4, 8, 16, 32)), grid, own.get("requests"),
                                 own.get("warmup_requests", 0), own.get("ramp_up", "auto"))
        else:
            rate_workload(own.get("rates", (1.0, 2.0, 4.0)), own.get("arrival", "poisson"), grid,
                          own.get("requests", 64), own.get("max_concurrency"))
    elif scenario == "ingestion":  # without lengths, the server's limits give them (default_ingestion_lengths)
        if own.get("prompt_tokens") is None:
            count("repeats", own.get("repeats", 3), 1)
        else:
            ingestion_workload(limits, own["prompt_tokens"], own.get("repeats", 3), lambda _: [])
    elif scenario == "shared_prefix":
        shared_prefix_workload(limits, **own)
    elif scenario == "multi_turn":
        multi_turn_workload(limits, **own)
    elif scenario == "decode_stall":
        decode_stall_workload(limits, **own)
    else:
        raise BenchError("scenario", f"{scenario!r} is not known", ", ".join(SCENARIO_PARAMETERS))


# Each scenario's own parameters (bench.api's `run_<scenario>` keywords, besides the common options).
SCENARIO_PARAMETERS = {
    "batch": ("batch_sizes", "sequence_length", "decode_length", "runs", "warmups"),
    "concurrency": ("users", "prompt_tokens", "max_new_tokens", "requests", "warmup_requests", "ramp_up"),
    "rate": ("rates", "arrival", "prompt_tokens", "max_new_tokens", "requests", "max_concurrency"),
    "ingestion": ("prompt_tokens", "repeats"),
    "shared_prefix": ("groups", "requests_per_group", "prefix_tokens", "suffix_tokens", "max_new_tokens", "users"),
    "multi_turn": ("conversations", "turns", "user_tokens", "max_new_tokens", "system_tokens", "users"),
    "decode_stall": ("streams", "long_prompt", "stream_prompt", "stream_tokens", "long_max_new_tokens",
                     "lead_tokens", "repeats", "warmups"),
}
