"""The simulated clients: a request as a client sends it (`SimRequest`), and when each is sent (`Driver`: open
loop at given times, closed-loop users with their ramp, bursts, and the plans of the shared-prefix and multi-turn
workloads). The event loop (tgi_toolkit.simulate.events) asks a driver what to send and tells it what ended."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tgi_toolkit.bench.client import StreamRecord
from tgi_toolkit.bench.phase import cycle_seconds, ramp_offsets


@dataclass(eq=False)
class SimRequest:
    """One request a simulated client sends: its prompt as token ids and how many tokens it gets."""

    input_ids: list[int]
    output_tokens: int
    max_new_tokens: int | None = None  # what the request asks for (default: output_tokens)
    lookup: bool = True  # False: no prefix-cache lookup (TGI's decoder_input_details requests)
    tag: Any = None  # the workload's own bookkeeping (repeat, warm-up, index)
    columns: dict[str, Any] = field(default_factory=dict)  # request columns of its own (group, turn, ...)
    record: StreamRecord = field(default_factory=StreamRecord)
    entry: Any = None
    done: bool = False

    def __post_init__(self) -> None:
        if self.max_new_tokens is None:
            self.max_new_tokens = self.output_tokens


class Driver:
    """How a workload's client sends requests: `start()` gives the first (send time, request) pairs,
    `finished(request, t)` the ones a finished request lets go."""

    def start(self, t0: float) -> list[tuple[float, SimRequest]]:
        raise NotImplementedError

    def finished(self, request: SimRequest, t: float) -> list[tuple[float, SimRequest]]:
        return []

    def poll(self, t: float) -> list[tuple[float, SimRequest]]:
        """Sends that wait on time passing rather than on a request ending (none by default)."""
        return []


class OpenLoop(Driver):
    """Requests leave at given times whatever is in flight; `max_concurrency` holds back the excess
    until one ends (a client-side cap, as bench's rate scenario)."""

    def __init__(self, requests: Sequence[SimRequest], send_times: Sequence[float],
                 max_concurrency: int | None = None) -> None:
        self.pending = sorted(zip(send_times, range(len(requests)), requests, strict=True))
        self.limit = max_concurrency
        self.held: list[tuple[float, int, SimRequest]] = []
        self.t0 = 0.0

    def start(self, t0: float) -> list[tuple[float, SimRequest]]:
        self.t0 = t0
        if self.limit is None:
            return [(t0 + t, r) for t, _, r in self.pending]
        out = [(t0 + t, r) for t, _, r in self.pending[:self.limit]]
        self.held = self.pending[self.limit:]
        return out

    def finished(self, request: SimRequest, t: float) -> list[tuple[float, SimRequest]]:
        if self.limit is None or not self.held:
            return []
        send, _, nxt = self.held.pop(0)
        return [(max(self.t0 + send, t), nxt)]


class ClosedLoop(Driver):
    """`users` users; each sends its next request (the next in the list) when its last one ends.

    With a ramp (bench.phase, as bench's concurrency scenario): user i sends its first request i/N of
    `ramp_s` after the start (a number, or the mean duration of `ramp_s`, probe requests that have run), and a
    request sent before the ramp has ended is a new unmeasured one from `extra()`, appended to `added`."""

    def __init__(self, requests: Sequence[SimRequest], users: int, ramp_s: float | Sequence[SimRequest] = 0.0,
                 extra: Callable[[], SimRequest] | None = None, added: list[SimRequest] | None = None) -> None:
        self.queue = list(requests)
        self.users = max(1, min(users, len(self.queue)))
        self.next = 0
        self.ramp, self.extra, self.added = ramp_s, extra, added if added is not None else []
        self.ramp_s = self.t0 = 0.0

    def _take(self, t: float) -> SimRequest | None:
        if t < self.t0 + self.ramp_s and self.extra is not None:
            self.added.append(self.extra())
            return self.added[-1]
        if self.next >= len(self.queue):
            return None
        request = self.queue[self.next]
        self.next += 1
        return request

    def start(self, t0: float) -> list[tuple[float, SimRequest]]:
        self.t0 = t0
        if isinstance(self.ramp, Sequence):
            self.ramp_s = cycle_seconds([r.record for r in self.ramp])
        else:
            self.ramp_s = float(self.ramp)
        sends = [(t0 + offset, self._take(t0 + offset)) for offset in ramp_offsets(self.users, self.ramp_s)]
        return [(t, r) for t, r in sends if r is not None]

    def finished(self, request: SimRequest, t: float) -> list[tuple[float, SimRequest]]:
        nxt = self._take(t)
        return [] if nxt is None else [(t, nxt)]


class Bursts(Driver):
    """Groups sent all at once, each when the previous group has ended (text-generation-benchmark's runs)."""

    def __init__(self, groups: Sequence[Sequence[SimRequest]]) -> None:
        self.groups = [list(g) for g in groups if g]
        self.current = 0
        self.left = 0

    def _send(self, t: float) -> list[tuple[float, SimRequest]]:
        group = self.groups[self.current]
        self.left = len(group)
        return [(t, r) for r in group]

    def start(self, t0: float) -> list[tuple[float, SimRequest]]:
        return self._send(t0) if self.groups else []

    def finished(self, request: SimRequest, t: float) -> list[tuple[float, SimRequest]]:
        self.left -= 1
        if self.left or self.current + 1 >= len(self.groups):
            return []
        self.current += 1
        return self._send(t)


class PlanDriver(Driver):
    """bench.play's rules for a list of scenarios.plans.PlannedRequest: a request leaves once the one it
    follows (`after`) has ended and every earlier request has `wait_tokens` tokens (or has ended), at most
    `users` in flight, in the plan's order."""

    def __init__(self, requests: Sequence[SimRequest], plan: Sequence[Any], users: int) -> None:
        self.requests, self.plan, self.users = list(requests), list(plan), max(1, users)
        self.sent = [False] * len(self.plan)
        self.ended = [False] * len(self.plan)
        self.in_flight = 0
        self.index = {id(r): i for i, r in enumerate(self.requests)}

    def _due(self, i: int) -> bool:
        planned = self.plan[i]
        if planned.after is not None and not self.ended[planned.after]:
            return False
        if planned.wait_tokens:
            return all(self.ended[j] or len(self.requests[j].record.token_ns) >= planned.wait_tokens
                       for j in range(i))
        return True

    def _release(self, t: float) -> list[tuple[float, SimRequest]]:
        out = []
        for i in range(len(self.plan)):
            if self.in_flight >= self.users:
                break
            if not self.sent[i] and self._due(i):
                self.sent[i] = True
                self.in_flight += 1
                out.append((t, self.requests[i]))
        return out

    def start(self, t0: float) -> list[tuple[float, SimRequest]]:
        return self._release(t0)

    def finished(self, request: SimRequest, t: float) -> list[tuple[float, SimRequest]]:
        self.ended[self.index[id(request)]] = True
        self.in_flight -= 1
        return self._release(t)

    def poll(self, t: float) -> list[tuple[float, SimRequest]]:
        return self._release(t) if any(p.wait_tokens for p in self.plan) and not all(self.sent) else []
