"""The rules a scenario's values are checked by before anything is sent or started (bad input is a BenchError
naming the field and what it takes): a server's length limits (`Limits`, `LaunchLimits` for one about to be
launched), counts, and the options every run takes. Each scenario's own checks are in its dataclass
(tgi_toolkit.scenarios), which the API, the simulator, the command line and sweeps all build."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tgi_toolkit.bench.errors import BenchError, check_positive_ints

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


def listed(value: Sequence[Any] | Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple, range)) else [value]


def count(name: str, value: int, minimum: int) -> int:
    return check_positive_ints(name, [value], minimum=minimum)[0]


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
