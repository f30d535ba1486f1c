"""The search space: which launcher fields are knobs, their ladders bounded by the plan and the workload, and
the router rules every candidate is repaired to before it runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.planner import Plan
    from tgi_toolkit.tune.sizing import Demand, KvSizing

KV_KNOB = "cuda_memory_fraction"
DEFAULT_KNOBS = ("max_batch_size", KV_KNOB, "max_batch_prefill_tokens")
SCHEDULER_LADDERS: dict[str, list[float | int]] = {"waiting_served_ratio": [0.0, 0.3, 1.2, 3.0],
                                                  "max_waiting_tokens": [1, 5, 20, 50]}
LADDER_KNOBS = (*DEFAULT_KNOBS, *SCHEDULER_LADDERS)
# Fields a server never acts on, whatever the backend: searching them measures one configuration many times.
IGNORED_KNOBS = {
    "max_batch_total_tokens": "TGI 3 ignores a given --max-batch-total-tokens on flash models (\"deprecated\" "
                              "warning; the KV capacity is inferred from the memory after warm-up, "
                              "docs/tgi-rules.md L2), the embedded engine likewise, and vLLM has no such flag; "
                              "tune cuda_memory_fraction (the KV memory) instead",
}
CHUNKING_IGNORES = ("waiting_served_ratio", "max_waiting_tokens")


@dataclass
class Knob:
    """One searched field: its ordered candidate values and why those."""

    name: str
    values: list[Any]
    source: str

    def index(self, value: Any) -> int:
        """Position of `value` on the ladder (the nearest one for a number between two rungs)."""
        if value in self.values:
            return self.values.index(value)
        if isinstance(value, (int, float)) and all(isinstance(v, (int, float)) for v in self.values):
            return min(range(len(self.values)), key=lambda i: (abs(self.values[i] - value), i))
        raise ValueError(f"{self.name}={value!r} is not one of the candidates {self.values}")

    def to_dict(self) -> dict[str, Any]:
        return {"values": self.values, "source": self.source}


def _doubling(unit: int, low: int, high: int) -> list[int]:
    """unit x 1, 2, 4, ... within [low, high], with both ends."""
    values = {low, high}
    step = unit
    while step <= high:
        if step >= low:
            values.add(step)
        step *= 2
    return sorted(values)


def check_knob(name: str, kv: KvSizing | None) -> None:
    """Refuse a field the server would not act on, in one line naming it and the knobs that have ladders."""
    allowed = f"knobs with a ladder: {', '.join(LADDER_KNOBS)}; any other launcher field with given values"
    if name in IGNORED_KNOBS:
        raise ValueError(f"knob {name!r}: {IGNORED_KNOBS[name]} ({allowed})")
    backend = kv.backend if kv is not None else None
    if backend == "vllm":
        from tgi_toolkit.config.vllm_args import NO_VLLM_EQUIVALENT

        if name in NO_VLLM_EQUIVALENT:
            raise ValueError(f"knob {name!r}: no vLLM counterpart ({NO_VLLM_EQUIVALENT[name]}); {allowed}")
    if name in CHUNKING_IGNORES and kv is not None and kv.chunking:
        raise ValueError(f"knob {name!r}: ignored with prefill chunking, TGI 3's default (\"Model supports prefill "
                         "chunking. `waiting_served_ratio` and `max_waiting_tokens` will be ignored.\"); set "
                         f"PREFILL_CHUNKING=0 to tune the older path; {allowed}")


def build_space(base: LauncherConfig, demand: Demand, plan: Plan, knobs: Sequence[str] = DEFAULT_KNOBS,
                given: Mapping[str, Sequence[Any]] | None = None, kv: KvSizing | None = None) -> dict[str, Knob]:
    """Candidate ladders for `knobs` (plus every field in `given`), bounded by the plan and the workload.

    `kv` (from `kv_sizing`) turns the KV ladder into cuda_memory_fraction values and says which
    scheduler fields the server ignores; without it only the other ladders can be built.
    """
    given = {k: list(v) for k, v in (given or {}).items()}
    for name in [*knobs, *given]:
        check_knob(name, kv)
    users = max(1, min(demand.concurrency, plan.capacity.concurrent_users))
    fit = plan.capacity.concurrent_users
    why_users = (f"the workload's {demand.concurrency} requests in flight"
                 + (f", capped at the {fit} that fit" if fit < demand.concurrency else ""))
    per_request = plan.capacity.tokens_per_request
    total_high = max(plan.limits.max_total_tokens, min(plan.capacity.kv_capacity_tokens, users * per_request))
    prefill_low = plan.limits.max_input_tokens
    derived: dict[str, tuple[list[Any], str]] = {
        "max_batch_size": (_doubling(1, 1, users), f"1 to {users}: {why_users}"),
        "max_batch_prefill_tokens": (
            _doubling(demand.prompt_tokens, prefill_low, max(prefill_low, min(users * demand.prompt_tokens,
                                                                              total_high))),
            f"{prefill_low} (one prompt in one forward: max_input_tokens; with chunking a smaller budget is "
            f"allowed and cuts a prompt in chunks, give it in `space`) to every concurrent prompt in one prefill, "
            f"at most {total_high}"),
    }
    if kv is not None:
        tokens = _doubling(per_request, plan.limits.max_total_tokens, total_high)
        fractions = [kv.fraction_for(t) for t in tokens]
        pairs = ", ".join(f"{f:g} -> {kv.tokens(f):,}" for f in dict.fromkeys(fractions))
        derived[KV_KNOB] = (sorted(set(fractions)), (
            f"KV capacities {tokens[0]} (one request: max_total_tokens) to {total_high} = min(KV capacity "
            f"{plan.capacity.kv_capacity_tokens}, {users} x {per_request} tokens per request), as the smallest "
            f"fraction giving each (capacity = {kv.rule}): {pairs} tokens"))
    space: dict[str, Knob] = {}
    for name in [*knobs, *(k for k in given if k not in knobs)]:
        if name in given:
            values = given[name]
            if not values:
                raise ValueError(f"space: {name!r} has no values")
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                values = sorted(set(values))
            space[name] = Knob(name, values, "given")
        elif name in derived:
            space[name] = Knob(name, *derived[name])
        elif name == KV_KNOB:
            raise ValueError(f"space: the {KV_KNOB} ladder needs kv=kv_sizing(...) (how the KV capacity follows it)")
        elif name in SCHEDULER_LADDERS:
            space[name] = Knob(name, list(SCHEDULER_LADDERS[name]), "default ladder (around TGI's default)")
        else:
            raise ValueError(f"space: no ladder is known for {name!r}; give its values, e.g. space={{{name!r}: [...]}}")
    return space


def repair(candidate: dict[str, Any], base: LauncherConfig, kv: KvSizing | None = None) -> dict[str, Any]:
    """Keep a combination within TGI 3's router rules (docs/tgi-rules.md L4), as the server will check them.

    - max_batch_prefill_tokens <= max_batch_total_tokens, the capacity the server infers from the
      candidate's KV memory (`kv`): a larger budget, given or the launcher's default (its FLOPs formula,
      4096 where the card is unknown, capped at the context), is lowered to the capacity.
    - max_input_tokens <= max_batch_prefill_tokens only without prefill chunking: there a smaller
      budget is raised to one prompt; with chunking (TGI 3's default) a prompt longer than the budget
      is cut in chunks, so nothing is required.
    Without `kv` (or on vLLM, which has neither rule) the candidate is returned as it is.
    """
    out = dict(candidate)
    if kv is None or kv.backend == "vllm":
        return out
    fraction = out.get(KV_KNOB, base.cuda_memory_fraction)
    prefill = out.get("max_batch_prefill_tokens", base.max_batch_prefill_tokens)
    capacity = kv.tokens(fraction, prefill)
    budget = prefill if prefill is not None else kv.default_prefill(fraction)
    if budget is not None and budget > capacity:
        out["max_batch_prefill_tokens"] = budget = capacity
    prompt = base.max_input_tokens or base.max_input_length
    if kv.chunking is False and prompt is not None and budget is not None and budget < prompt:
        out["max_batch_prefill_tokens"] = prompt  # may now exceed a tiny capacity: the server refuses it, as TGI
    return out
