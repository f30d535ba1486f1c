"""How far a plan was from the KV capacity a server reported at start-up (`compare`).

What the server reported is read by `tgi_toolkit.server.capacity_log` (`parse_reported_capacity`,
`ReportedCapacity`), the same patterns the backends read as a server starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tgi_toolkit.planner.capacity_plan import Plan
from tgi_toolkit.server.capacity_log import ReportedCapacity

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.server.base import ServerHandle


def _tokens(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a token count, a Plan or a parsed log; got {value!r}")
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, Mapping):
        for key in ("kv_capacity_tokens", "max_batch_total_tokens"):
            if value.get(key) is not None:
                return int(value[key])
        raise ValueError(f"{what} has no kv_capacity_tokens or max_batch_total_tokens")
    if isinstance(value, Plan):
        return value.capacity.kv_capacity_tokens
    if isinstance(value, ReportedCapacity) and value.kv_capacity_tokens is None:
        raise ValueError(f"{what}: the log states no KV capacity (no max batch total tokens, no KV cache size)")
    for attr in ("kv_capacity_tokens", "max_batch_total_tokens"):
        if getattr(value, attr, None) is not None:
            return int(getattr(value, attr))
    raise ValueError(f"{what} must be a token count, a Plan, a parsed log or a Server; got {type(value).__name__}")


def compare(plan: Plan | float, reported: float | ReportedCapacity | Mapping[str, Any] | ServerHandle) -> float:
    """Relative error of the plan's KV capacity against the reported one: (plan - reported) / reported.

    `plan` is a Plan or a token count; `reported` a token count, what `parse_reported_capacity` read, a Server's
    `facts`, or a started Server.
    """
    predicted = _tokens(plan, "plan")
    actual = _tokens(reported, "reported")
    if actual <= 0:
        raise ValueError(f"reported tokens must be positive; got {actual}")
    return (predicted - actual) / actual
