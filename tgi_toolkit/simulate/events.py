"""The discrete-event loop: the engine's own Queue and Scheduler on a virtual clock.

Nothing here decides what goes into a forward: `tgi_toolkit.router.scheduler` does, exactly as in the
server (chunked TGI 3 path or the non-chunking one, prefix cache, block allocator, all from its
`SchedulerConfig`), or for a vLLM V1 server `tgi_toolkit.router.vllm_v1` (from its `VllmConfig`). This module only
- keeps the virtual clock, which `SimBackend.forward` advances by the cost model's price of the forward;
- emits tokens: a row that emits gives its request one token at the clock's time after the forward,
  and the request stops after its workload's output length;
- delivers requests to the queue when the client sends them (plus the cost model's request overhead, and
  its front end's time per request one at a time),
  and tells the client when one ends, so closed-loop users send their next one at that moment;
- where the front end shares the engine's host (`frontend_stalls_forwards`: one Python process, one GIL), lengthens
  a forward by the front end's time spent within it (`stretched`);
- samples what the server's /metrics would show (batch size, queue size, KV tokens in use).

The scheduler polls its queue at the start of each iteration (`step()`), as TGI's router does: a request
arriving during a forward is seen at the next poll, and none between the two forwards of an admission.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tgi_toolkit import schema as S
from tgi_toolkit.costs.features import shape_of
from tgi_toolkit.costs.linear import CostModel
from tgi_toolkit.router import Entry, Observer, Scheduler
from tgi_toolkit.router.vllm_v1 import VllmConfig, VllmScheduler
from tgi_toolkit.simulate.drivers import Driver, SimRequest


class VirtualClock:
    """The scheduler's Clock: time only moves when the simulator says so."""

    def __init__(self, start: float = 0.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds

    def jump(self, t: float) -> None:
        self.t = max(self.t, t)


class SimBackend:
    """The router's ModelSide with a cost model instead of a model: `forward` advances the clock."""

    def __init__(self, clock: VirtualClock, cost: CostModel, on_finish: Callable[[SimRequest, float], None],
                 on_forward: Callable[[Any, float], None] | None = None, seed: int = 0,
                 stall: Callable[[float, float], float] | None = None) -> None:
        self.clock, self.cost, self.on_finish, self.on_forward = clock, cost, on_finish, on_forward
        self.stall = stall  # (start, seconds) -> the forward's seconds with the front end's time within it
        self.forwards = 0
        cv = cost.jitter_cv
        # log-normal with mean 1 and the model's coefficient of variation, seeded: runs repeat exactly
        self._sigma = math.sqrt(math.log1p(cv * cv))
        self._rng = random.Random(seed)

    def forward(self, forward: Any) -> None:
        seconds = self.cost.seconds(shape_of(forward))
        if self._sigma:
            seconds *= self._rng.lognormvariate(-self._sigma ** 2 / 2, self._sigma)
        if self.stall is not None:
            seconds = self.stall(self.clock.t, seconds)
        self.clock.advance(seconds)
        self.forwards += 1
        now = self.clock.t
        stamp = int(round(now * 1e9))
        for row in forward.rows:
            if not row.emits:
                continue
            entry = row.entry
            request: SimRequest = entry.request
            record = request.record
            record.token_ns.append(stamp)
            # the scheduler counts entry.generated after this call: this token is number generated + 1
            if entry.generated + 1 >= request.output_tokens:
                entry.finished = True
                record.output_tokens = len(record.token_ns)
                record.finish_reason = "length"
                record.status = 200
                request.done = True
                self.on_finish(request, now)
        if self.on_forward is not None:
            self.on_forward(forward, seconds)

    def release(self, entry: Any) -> None:
        pass


class _Observer(Observer):
    """Keeps what /metrics would show now, and the peaks."""

    def __init__(self) -> None:
        self.batch_size = self.queue_size = self.kv_tokens = 0
        self.lookup_tokens = self.hit_tokens = 0
        self.preemptions = 0  # as the scheduler made them
        # as vLLM's vllm:num_preemptions shows them: a preemption travels with its request's next output, so it
        # counts once that request emits again (docs/vllm-rules.md P3)
        self.reported_preemptions = 0
        self._unreported: dict[Any, int] = {}
        self.dropped_entries: list[Any] = []

    def preempted(self, entry: Any) -> None:
        self.preemptions += 1
        self._unreported[entry] = self._unreported.get(entry, 0) + 1

    def emitted(self, entry: Any, now: float) -> None:
        if self._unreported:
            self.reported_preemptions += self._unreported.pop(entry, 0)

    def prefix(self, lookup_tokens: int, hit_tokens: int) -> None:
        self.lookup_tokens += lookup_tokens
        self.hit_tokens += hit_tokens

    def queued(self, size: int) -> None:
        self.queue_size = size

    def batch_state(self, size: int, max_tokens: int, queue_size: int) -> None:
        self.batch_size, self.kv_tokens, self.queue_size = size, max_tokens, queue_size

    def dropped(self, entry: Any) -> None:
        self.dropped_entries.append(entry)


class SimulationError(RuntimeError):
    pass


@dataclass
class Sample:
    t: float
    batch_size: int
    queue_size: int
    kv_tokens: int
    preemptions: int = 0  # so far, as vllm:num_preemptions shows them (vLLM V1's rules; TGI never preempts)


class Simulator:
    """One simulated server: a scheduler built from `config` (TGI's SchedulerConfig or vLLM's VllmConfig), driven
    on a virtual clock.

    The clock and the prefix cache carry over from one `run` to the next, as a real server's do between
    the points of a benchmark.
    """

    def __init__(self, config: Any, cost: CostModel, *, scrape_interval: float = S.SCRAPE_INTERVAL,
                 max_forwards: int = 50_000_000, seed: int = 0) -> None:
        self.config, self.cost = config, cost
        self.clock = VirtualClock()
        self.observer = _Observer()
        self.driver: Driver | None = None
        # the front end's intake, [start, end) a request, while it can hold up a forward (`stretched`)
        self._intake: collections.deque[tuple[float, float]] | None = \
            collections.deque() if cost.frontend_stalls_forwards and cost.frontend_s > 0 else None
        self.backend = SimBackend(self.clock, cost, self._finished, seed=seed,
                                  stall=None if self._intake is None else self.stretched)
        # the server's own rules: vLLM V1's for a VllmConfig, TGI's for a SchedulerConfig
        rules = VllmScheduler if isinstance(config, VllmConfig) else Scheduler
        self.scheduler = rules(config, self.backend, observer=self.observer, clock=self.clock)
        self.queue = self.scheduler.queue
        self.scrape_interval = scrape_interval
        self.samples: list[Sample] = []
        self._next_sample = 0.0
        self._arrivals: list[tuple[float, int, SimRequest]] = []
        self._later: list[tuple[float, int, SimRequest]] = []  # sends whose time has not come
        self._requests: Sequence[SimRequest] = ()
        self._counted = 0
        self._frontend_free = -math.inf  # when the front end is done with the last request sent
        self._seq = itertools.count()
        self.max_forwards = max_forwards

    # -- arrivals ------------------------------------------------------------------------------------
    def _push(self, pairs: list[tuple[float, SimRequest]], until: float | None = None) -> None:
        """Requests the client sends. Each reaches the queue `request_overhead_s` after it was sent (requests sent
        together pay it side by side), and after the one sent before it plus `frontend_s`, the part of the
        overhead the server's front end spends on one request at a time: a burst of N requests reaches the queue
        over N - 1 front-end times, in the order sent: a send in the future waits in `_later` until the clock
        reaches it (or `until`), so that one made later for an earlier time (a ramp's user) goes first."""
        grown = len(self._requests) - self._counted  # requests the driver made as it went (a ramp's)
        self.in_flight += grown
        self._counted += grown
        for t, request in pairs:
            heapq.heappush(self._later, (t, next(self._seq), request))
        overhead = self.cost.request_overhead_s
        frontend = self.cost.frontend_s
        until = self.clock.t if until is None else until
        while self._later and self._later[0][0] <= until:
            t, _, request = heapq.heappop(self._later)
            request.record.sent_ns = int(round(t * 1e9))
            # Strictly after it was sent, and after the one before it, whatever the times: a request a client
            # sends when a token arrives cannot be in the queue when the scheduler polls it the instant that
            # token's forward ends (the engine's next forward starts 0.3 ms later, its trace shows; the reply
            # takes ms), and of a burst an idle scheduler sees only the first (so the engine's trace shows 4
            # users' first 512-token prompts as one forward of 512 tokens, then one of 1,100).
            entry = math.nextafter(max(t + overhead, self._frontend_free + frontend), math.inf)
            self._frontend_free = entry
            if self._intake is not None:
                self._intake.append((entry - frontend, entry))
            heapq.heappush(self._arrivals, (entry, next(self._seq), request))

    def stretched(self, start: float, seconds: float) -> float:
        """The seconds of a forward that needs `seconds` of the host from `start`, where the front end shares that
        host and goes first: each request's intake within the forward holds it up for as long. Why first: the
        engine's forward drops the GIL at every torch call, and its asyncio front end, holding it, keeps it up to
        the 5 ms switch interval; so a burst's intake ends before the forward it arrives in does (the probe's trace:
        the first prompt's forward of a batch of B took longer by the other B - 1 requests' intake). Intakes are in
        order and apart (one front end); the sends made before the forward ends are taken in as it goes, so those
        a longer forward lets in hold it up too. (A send a closed-loop user makes when a token arrives comes after
        its forward; one a ramp's driver makes later for a time within it is taken in after those already due.)"""
        intake = self._intake
        assert intake is not None
        while intake and intake[0][1] <= start:
            intake.popleft()
        end = start + seconds
        while True:
            self._push([], until=end)  # sends due before the forward ends: their intakes
            t, left = start, seconds
            for begin, done in intake:
                begin = max(begin, t)
                if begin >= t + left:  # the forward is done before this intake begins
                    break
                left -= begin - t
                t = max(done, t)
            if t + left <= end:
                return t + left - start
            end = t + left

    def _finished(self, request: SimRequest, t: float) -> None:
        self.in_flight -= 1
        if self.driver is not None:
            self._push(self.driver.finished(request, t))

    def _deliver(self) -> None:
        now = self.clock.t
        while self._arrivals and self._arrivals[0][0] <= now:
            t, _, request = heapq.heappop(self._arrivals)
            entry = Entry(request.input_ids, int(request.max_new_tokens), request=request,
                                lookup=request.lookup, queued_at=t)
            request.entry = entry
            request.record.input_tokens = len(request.input_ids)
            self.queue.append(entry)

    def _sample(self) -> None:
        while self.clock.t >= self._next_sample:
            obs = self.observer
            self.samples.append(Sample(self._next_sample, obs.batch_size, obs.queue_size, obs.kv_tokens,
                                       obs.reported_preemptions))
            self._next_sample += self.scrape_interval

    # -- the loop ------------------------------------------------------------------------------------
    def run(self, driver: Driver, requests: Sequence[SimRequest]) -> float:
        """Run until every request of `driver` has ended; returns the clock's time then."""
        self.driver = driver
        self.in_flight = len(requests)
        self._requests, self._counted = requests, len(requests)
        self._push(driver.start(self.clock.t))
        forwards = self.backend.forwards
        while self.in_flight > 0:
            self._push([])  # sends whose time has come
            self._deliver()
            progressed = self.scheduler.step()
            self._sample()
            self._push(driver.poll(self.clock.t))
            if progressed:
                if self.backend.forwards - forwards > self.max_forwards:
                    raise SimulationError(f"more than {self.max_forwards} forwards: the workload does not end")
                continue
            if self._arrivals or self._later:
                self.clock.jump(min(heap[0][0] for heap in (self._arrivals, self._later) if heap))
                self._sample()
                continue
            stuck = [r for r in requests if not r.done]
            raise SimulationError(f"{len(stuck)} request(s) can never be scheduled (a prompt of "
                                  f"{len(stuck[0].input_ids)} tokens with {stuck[0].max_new_tokens} new tokens "
                                  f"does not fit the KV-cache or batch limits)")
        self.driver = None
        return self.clock.t
