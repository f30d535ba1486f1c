"""The load models (docs/measurement.md): what each scenario sends, and when. The scenario arrives built and
checked (a tgi_toolkit.scenarios dataclass, api.py); `Run` sends, records and saves.

- batch: B prompts of exactly S tokens at once, D tokens forced, `warmups` then `runs` times per batch
  size (text-generation-benchmark, over HTTP; each prompt new to the server, where the original's are
  identical: see `batch`).
- concurrency: N virtual users, each sends its next request when its last one ends (closed loop).
- rate: open loop: requests leave on a constant or Poisson schedule whatever is in flight, so
  queueing shows in TTFT instead of hiding in the client (pitfall 4).
- ingestion: one request at a time, one new token, prompts of many lengths: TTFT against length.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from tgi_toolkit import schema as S
from tgi_toolkit.bench import phase, stats
from tgi_toolkit.bench.client import StreamRecord, now_ns
from tgi_toolkit.bench.run import Run
from tgi_toolkit.bench.run_requests import gather_all
from tgi_toolkit.scenarios.kinds import BatchScenario, ConcurrencyScenario, IngestionScenario, RateScenario


def batch_point_id(batch_size: int, sequence_length: int, decode_length: int) -> str:
    return f"batch_size={batch_size},sequence_length={sequence_length},decode_length={decode_length}"


def concurrency_point_id(users: int, prompt_tokens: int, max_new_tokens: int) -> str:
    return f"users={users},prompt={prompt_tokens},output={max_new_tokens}"


def ingestion_point_id(prompt_tokens: int) -> str:
    return f"prompt={prompt_tokens},output=1"


def _tick(bar: Any) -> None:
    if bar is not None:
        bar.update(1)


def _close(bar: Any) -> None:
    if bar is not None:
        bar.close()


async def _send(run: Run, body: bytes, point_id: str, bar: Any, limit: asyncio.Semaphore | None = None,
                ) -> StreamRecord:
    if limit is None:
        record = await run.request(body, point_id)
    else:
        async with limit:
            record = await run.request(body, point_id)
    _tick(bar)
    return record


class _RampPrompts:
    """Bodies for the unmeasured requests of a ramp (the "auto" probe, and as many as the users send before
    the ramp ends): new prompts of the point's length, salted apart from the measured ones, built ahead
    (`fill`) so that no user waits for a tokenizer when its start comes."""

    def __init__(self, run: Run, prompt_tokens: int, max_new: int, point_id: str) -> None:
        self.run, self.prompt_tokens, self.max_new, self.point_id = run, prompt_tokens, max_new, point_id
        self.bodies: list[bytes] = []
        self.built = 0
        self.lock = asyncio.Lock()

    async def fill(self, count: int) -> None:
        async with self.lock:
            if len(self.bodies) < count:
                prompts = await self.run.prompt_list(self.prompt_tokens, count - len(self.bodies),
                                                     f"{self.point_id}:ramp{self.built}")
                self.bodies += [self.run.encode(p, self.max_new) for p in prompts]
                self.built += 1

    async def take(self, users: int) -> bytes:
        await self.fill(1 if self.bodies else users)  # more than one a user: the ramp is long
        return self.bodies.pop(0)


async def _ramped_users(run: Run, users: int, bodies: Sequence[bytes], ramp_s: float, extra: _RampPrompts,
                        point_id: str, bar: Any) -> tuple[list[tuple[StreamRecord, int]], list[StreamRecord]]:
    """Closed loop with a ramp (bench.phase): user i sends its first request i/N of `ramp_s` after the start;
    a request a user sends before the ramp has ended is one of `extra`'s (unmeasured, returned second, in the
    order sent); from then on users take `bodies` in turn until none is left."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    queue = iter(range(len(bodies)))
    done: list[tuple[StreamRecord, int]] = []
    ramped: list[StreamRecord] = []

    async def user(offset: float) -> None:
        await asyncio.sleep(max(start + offset - loop.time(), 0.0))
        while loop.time() - start < ramp_s:
            record = StreamRecord()
            ramped.append(record)  # listed when sent: the unmeasured requests' indices follow send order
            await run.request(await extra.take(users), point_id, record)
        for i in queue:
            done.append((await _send(run, bodies[i], point_id, bar), i))

    await gather_all(user(offset) for offset in phase.ramp_offsets(min(users, len(bodies)), ramp_s))
    return sorted(done, key=lambda item: item[1]), ramped


async def batch(run: Run, scenario: BatchScenario) -> None:
    batch_sizes, sequence_length, decode_length = scenario.batch_sizes, scenario.sequence_length, scenario.decode_length
    runs, warmups = scenario.runs, scenario.warmups
    ids = [batch_point_id(b, sequence_length, decode_length) for b in batch_sizes]
    run.plan(ids)
    todo = [(b, p) for b, p in zip(batch_sizes, ids, strict=True) if not run.skip(p)]
    if not todo:
        return
    for size, point_id in todo:
        # text-generation-benchmark sends B identical prompts straight to the shards, where no prefix cache
        # is. Through a TGI 3 router they would be cache hits whenever the prefill budget spreads their
        # admission past the first request's end (simulated, 16 x 384 tokens at a 256-token budget: 3,447
        # of 6,144 prompt tokens from the cache): each request gets a prompt of its own, of the same length.
        prompts = await run.prompt_list(sequence_length, size * (warmups + runs), point_id)
        bar = run.request_bar(size * (warmups + runs), f"batch size {size}")
        requests: list[tuple[StreamRecord, int, bool, int]] = []
        batch_rows, windows = [], []
        for step in range(warmups + runs):
            warm = step < warmups
            repeat = step if warm else step - warmups
            bodies = [run.encode(p, decode_length) for p in prompts[step * size:(step + 1) * size]]
            records = await gather_all(_send(run, body, point_id, bar) for body in bodies)
            requests += [(r, repeat, warm, i) for i, r in enumerate(records)]
            metrics = stats.batch_run(records, sequence_length)
            batch_rows.append({S.BATCH_SIZE: size, S.SEQUENCE_LENGTH: sequence_length,
                               S.DECODE_LENGTH: decode_length, S.REPEAT: repeat, S.WARMUP: warm, **metrics})
            ended = [r.token_ns[-1] for r in records if r.token_ns]
            if not warm and ended:
                windows.append((min(r.sent_ns for r in records), max(ended)))
        _close(bar)
        await run.save_point(point_id, {S.BATCH_SIZE: size, S.PROMPT_TOKENS: sequence_length,
                                        S.MAX_NEW_TOKENS: decode_length},
                             requests, windows=windows, batch_rows=batch_rows)


async def _bodies(run: Run, scenario: ConcurrencyScenario | RateScenario, prompt_tokens: int, max_new: int,
                  count: int, point_id: str) -> list[bytes]:
    """A point's request bodies in send order: its distinct prompts (token-exact, built together by length) and
    each request's new tokens, as the scenario's shape draws them (scenarios.shapes.Lengths)."""
    lengths = scenario.lengths(prompt_tokens, max_new, count, int(run.workload.get("seed", 0)), point_id)
    by_length = lengths.by_length()
    texts = [""] * len(lengths.prompts)
    for length, indices in by_length.items():  # one length: the prompts a plain point always had
        salt = point_id if len(by_length) == 1 else f"{point_id}:{length}"
        for index, text in zip(indices, await run.prompt_list(length, len(indices), salt), strict=True):
            texts[index] = text
    return [run.encode(texts[p], o) for p, o in zip(lengths.prompt_of, lengths.outputs, strict=True)]


async def _counters(run: Run, scenario: ConcurrencyScenario | RateScenario) -> tuple[float, float] | None:
    """The prefix cache's counters now, where a pool of prompts makes them the point's business."""
    from tgi_toolkit.bench.play import prefix_counters

    return await prefix_counters(run) if scenario.prompt_pool else None


def _hits(scenario: ConcurrencyScenario | RateScenario, before: tuple[float, float] | None,
          after: tuple[float, float] | None) -> dict[str, float]:
    from tgi_toolkit.bench.play import hit_rate_columns

    return hit_rate_columns(before, after) if scenario.prompt_pool else {}


async def concurrency(run: Run, scenario: ConcurrencyScenario) -> None:
    users, grid, requests = scenario.users, scenario.grid, scenario.requests
    warmup_requests, ramp_up = scenario.warmup_requests, scenario.ramp_up
    points = [(n, p, o) for p, o in grid for n in users]
    ids = [scenario.shaped(concurrency_point_id(n, p, o)) for n, p, o in points]
    run.plan(ids)
    for (n, prompt_tokens, max_new), point_id in zip(points, ids, strict=True):
        if run.skip(point_id):
            continue
        total = requests if requests is not None else max(4 * n, 8)
        bodies = await _bodies(run, scenario, prompt_tokens, max_new, warmup_requests + total, point_id)
        bar = run.request_bar(warmup_requests + total, f"{n} users, {prompt_tokens}+{max_new} tokens")
        done: list[tuple[StreamRecord, int, bool, int]] = []
        extra = _RampPrompts(run, prompt_tokens, max_new, point_id)
        before = await _counters(run, scenario)
        if warmup_requests:
            warm, _ = await _ramped_users(run, n, bodies[:warmup_requests], 0.0, extra, point_id, bar)
            done += [(r, 0, True, i) for r, i in warm]
        unmeasured: list[StreamRecord] = []
        ramp_s = phase.resolve_ramp(ramp_up, n)
        if ramp_s:
            await extra.fill(2 * n if ramp_s == phase.AUTO else n)
        if ramp_s == phase.AUTO:  # a request a user, sent together: their mean duration is the ramp
            probe_bodies = [await extra.take(n) for _ in range(n)]
            probes = await gather_all(run.request(body, point_id) for body in probe_bodies)
            unmeasured += probes
            ramp_s = phase.cycle_seconds(probes)
        measured, ramped = await _ramped_users(run, n, bodies[warmup_requests:], float(ramp_s), extra, point_id, bar)
        unmeasured += ramped
        done += [(r, 0, True, warmup_requests + k) for k, r in enumerate(unmeasured)]
        done += [(r, 0, False, i) for r, i in measured]
        _close(bar)
        hits = _hits(scenario, before, await _counters(run, scenario))
        run.provenance.setdefault("ramp_up_s", {})[point_id] = float(ramp_s)
        await run.save_point(point_id, {S.USERS: n, S.PROMPT_TOKENS: prompt_tokens, S.MAX_NEW_TOKENS: max_new},
                             done, point_columns={S.RAMP_UP_S: float(ramp_s), **hits})


async def rate(run: Run, scenario: RateScenario, seed: int) -> None:
    """Each point's requests leave at its send times (scenario.points: a rate's, or a schedule of stages')."""
    points = scenario.points(seed)
    run.plan([p.point_id for p in points])
    loop = asyncio.get_running_loop()
    for point in points:
        point_id, r, prompt_tokens, max_new, offsets = (point.point_id, point.rate, point.prompt_tokens,
                                                        point.max_new_tokens, point.offsets)
        if run.skip(point_id):
            continue
        bodies = await _bodies(run, scenario, prompt_tokens, max_new, len(offsets), point_id)
        bar = run.request_bar(len(offsets), f"{r:g} req/s {scenario.arrival}, {prompt_tokens}+{max_new} tokens")
        limit = asyncio.Semaphore(scenario.max_concurrency) if scenario.max_concurrency else None
        lags: list[float] = []
        before = await _counters(run, scenario)
        start_ns = now_ns()
        start = loop.time()
        tasks: list[asyncio.Future] = []
        try:
            for i, offset in enumerate(offsets):
                delay = start + offset - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                lags.append(max((now_ns() - start_ns) / 1e9 - offset, 0.0))
                tasks.append(asyncio.ensure_future(_send(run, bodies[i], point_id, bar, limit)))
            records = await gather_all(tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        _close(bar)
        hits = _hits(scenario, before, await _counters(run, scenario))
        await run.save_point(point_id, {S.RATE_RPS: r, S.ARRIVAL: scenario.arrival, S.PROMPT_TOKENS: prompt_tokens,
                                        S.MAX_NEW_TOKENS: max_new},
                             [(record, 0, False, i) for i, record in enumerate(records)], send_lag_s=lags,
                             point_columns=hits or None)


async def ingestion(run: Run, scenario: IngestionScenario) -> None:
    prompt_lengths, repeats = scenario.prompt_tokens or (), scenario.repeats
    ids = [ingestion_point_id(p) for p in prompt_lengths]
    run.plan(ids)
    for length, point_id in zip(prompt_lengths, ids, strict=True):
        if run.skip(point_id):
            continue
        prompts = await run.prompt_list(length, repeats, point_id)
        bar = run.request_bar(repeats, f"prompt {length}")
        done = []
        for i, prompt in enumerate(prompts):
            done.append((await run.request(run.encode(prompt, 1), point_id), 0, False, i))
            _tick(bar)
        _close(bar)
        await run.save_point(point_id, {S.USERS: 1, S.PROMPT_TOKENS: length, S.MAX_NEW_TOKENS: 1}, done)
