"""Sending the workloads of scenarios.plans: shared prefixes, multi-turn conversations, a long
prompt joining running streams. `Run` (run.py) sends, records and saves; this module decides what
text each planned request carries and when it leaves, and reads the prefix-cache counters.

Texts are token-exact (PromptFactory.extend): a group's prompts start with the same prefix text, and
a turn's prompt starts with the previous turn's prompt and the answer the server gave. Each run
draws new texts (its run id seeds them): a server keeps its prefix cache between runs, and text of
an earlier run would make a "cold" first request warm.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np

from tgi_toolkit import schema as S
from tgi_toolkit.bench.client import StreamRecord, now_ns
from tgi_toolkit.bench.errors import BenchError
from tgi_toolkit.bench.prometheus import parse_prometheus
from tgi_toolkit.bench.prompts import PromptFactory
from tgi_toolkit.bench.run import Run
from tgi_toolkit.bench.run_requests import gather_all
from tgi_toolkit.scenarios.plans import DecodeStallScenario, MultiTurn, PlannedRequest, SharedPrefix

NO_COUNTERS = ("prefix-cache hit rate: the server exposes no tgi_toolkit_prefix_cache_*_tokens_total counters "
               "(TGI and vLLM have none; the embedded engine's prefix cache does): prefix_cache_hit_rate is NaN")
SKIPPED = "skipped"  # error of a request not sent because the one it follows failed


# -- prefix-cache counters ----------------------------------------------------------------------------------
async def prefix_counters(run: Run) -> tuple[float, float] | None:
    """(hit tokens, lookup tokens) from the server's /metrics now; None when it has no such counters."""
    client = run.sender.client
    headers = {k: v for k, v in client.headers.items() if k == "Authorization"}
    try:
        async with client.session.get(run.target.url + "/metrics", headers=headers) as response:
            text = await response.text() if response.status == 200 else ""
    except Exception:  # no /metrics at all: the same as no counters
        return None
    values = {name: value for name, _labels, value in parse_prometheus(text, ("tgi_toolkit_prefix_cache_",))}
    if S.PREFIX_HIT_METRIC not in values or S.PREFIX_LOOKUP_METRIC not in values:
        return None
    return values[S.PREFIX_HIT_METRIC], values[S.PREFIX_LOOKUP_METRIC]


def hit_rate_columns(before: tuple[float, float] | None, after: tuple[float, float] | None) -> dict[str, float]:
    """The point's hit rate: delta(hit) / delta(lookup) over the point (NaN without counters or lookups)."""
    if before is None or after is None:
        return {S.PREFIX_HIT_RATE: math.nan, S.PREFIX_HIT_TOKENS: math.nan, S.PREFIX_LOOKUP_TOKENS: math.nan}
    hit, lookup = after[0] - before[0], after[1] - before[1]
    return {S.PREFIX_HIT_RATE: hit / lookup if lookup > 0 else math.nan, S.PREFIX_HIT_TOKENS: hit,
            S.PREFIX_LOOKUP_TOKENS: lookup}


def note(run: Run, text: str) -> None:
    run.record.note(text)


# -- texts ------------------------------------------------------------------------------------------------
async def factory(run: Run) -> PromptFactory:
    """The run's prompts without its shared prefix: these workloads build their own shared text."""
    return await run.prompts.factory(with_prefix=False)


async def build(run: Run, make: Callable[[], Any]) -> Any:
    """Call a text builder off the event loop; the server's /tokenize failing is a clear error."""
    return await run.prompts.build(make)


def check_lengths(run: Run, plan: Sequence[PlannedRequest], records: Sequence[StreamRecord]) -> None:
    """Every prompt the server counted must have the planned length (docs/measurement.md pitfall 2)."""
    if run.target.api == "chat":
        note(run, "prompt lengths include the chat template (api=chat)")
        return
    for request, record in zip(plan, records, strict=True):
        reported = record.input_tokens
        if reported is None or reported == request.prompt_tokens:
            continue
        if run.prompts.accept_server_count:
            note(run, f"the server counted {reported} tokens for a planned {request.prompt_tokens}")
            continue
        raise BenchError("tokenizer", f"a prompt of {request.prompt_tokens} tokens by "
                                      f"{run.prompts.tokenizer_label} is "
                                      f"{reported} tokens for the server",
                         "the server's own tokenizer (no --tokenizer-name) or the served model's")


def shared_prefix_texts(prompts: PromptFactory, workload: SharedPrefix, salt: str) -> list[str]:
    """The plan's prompts: each group's prefix text (exactly `prefix_tokens`) extended by a suffix of its own."""
    heads = {g: prompts.extend("", workload.prefix_tokens, f"{salt}:prefix:{g}") for g in range(workload.groups)}
    return [prompts.extend(heads[r.group], r.prompt_tokens, f"{salt}:suffix:{r.group}:{r.turn}")
            for r in workload.requests()]


def turn_text(prompts: PromptFactory, history: str, request: PlannedRequest, salt: str) -> str:
    """A turn's prompt: the history (system prompt, or the last prompt and its answer) and a new user
    message, exactly `request.prompt_tokens` long; the message absorbs an answer of another length."""
    return prompts.extend(history, request.prompt_tokens, f"{salt}:user:{request.group}:{request.turn}")


# -- sending ----------------------------------------------------------------------------------------------
# A request's body, from the records so far (a conversation's next turn resends the answer it got); None: not sent.
BodyFor = Callable[[PlannedRequest, list[StreamRecord]], Awaitable[bytes | None]]


async def play(run: Run, plan: Sequence[PlannedRequest], body_for: BodyFor, *, users: int, point_id: str,
               bar: Any = None) -> list[StreamRecord]:
    """Send `plan`: each request after the one it follows has ended (`after`) and once every earlier
    request has its `wait_tokens` tokens, at most `users` in flight. `body_for` builds a body when
    the request is due (None: it set the record's error and nothing is sent)."""
    records = [StreamRecord() for _ in plan]
    ended = [asyncio.Event() for _ in plan]
    limit = asyncio.Semaphore(users)

    async def one(request: PlannedRequest) -> None:
        record = records[request.index]
        try:
            if request.after is not None:
                await ended[request.after].wait()
                if not records[request.after].ok:
                    record.sent_ns = now_ns()
                    record.error, record.error_message = SKIPPED, f"request {request.after}, which it follows, failed"
                    return
            if request.wait_tokens:
                while any(len(records[i].token_ns) < request.wait_tokens and not ended[i].is_set()
                          for i in range(request.index)):
                    await asyncio.sleep(0.001)
            async with limit:
                body = await body_for(request, records)
                if body is None:
                    if not record.sent_ns:
                        record.sent_ns = now_ns()
                    return
                await run.request(body, point_id, record)
        finally:
            ended[request.index].set()
            if bar is not None:
                bar.update(1)

    await gather_all(one(r) for r in plan)
    return records


def _columns(plan: Sequence[PlannedRequest]) -> list[dict[str, Any]]:
    return [{S.GROUP: r.group, S.TURN: r.turn, S.PROMPT_TOKENS: r.prompt_tokens, S.MAX_NEW_TOKENS: r.max_new_tokens}
            for r in plan]


async def play_cached(run: Run, plan: list[PlannedRequest], body_for: BodyFor, users: int, point_id: str, desc: str,
                      operating_point: dict[str, Any]) -> None:
    """Send a plan whose point is judged by the prefix cache (shared-prefix, multi-turn): the server's prefix counters
    read before and after it, the lengths checked, and the point saved with its hit rate."""
    bar = run.request_bar(len(plan), desc)
    before = await prefix_counters(run)
    records = await play(run, plan, body_for, users=users, point_id=point_id, bar=bar)
    after = await prefix_counters(run)
    check_lengths(run, plan, records)
    if before is None:
        note(run, NO_COUNTERS)
    await run.save_point(point_id, operating_point, [(rec, 0, False, i) for i, rec in enumerate(records)],
                         request_columns=_columns(plan), point_columns=hit_rate_columns(before, after))


async def shared_prefix(run: Run, workload: SharedPrefix) -> None:
    point_id = workload.point_id
    run.plan([point_id])
    if run.skip(point_id):
        return
    plan = workload.requests()
    prompts = await factory(run)
    salt = f"{run.run_id}:{point_id}"

    texts = await build(run, lambda: shared_prefix_texts(prompts, workload, salt))
    bodies = [run.encode(text, r.max_new_tokens) for text, r in zip(texts, plan, strict=True)]

    async def body_for(request: PlannedRequest, _records: list[StreamRecord]) -> bytes:
        return bodies[request.index]

    await play_cached(run, plan, body_for, workload.max_in_flight, point_id,
                      f"{workload.groups} groups sharing {workload.prefix_tokens} tokens",
                      {S.USERS: workload.users, S.PROMPT_TOKENS: workload.prefix_tokens + workload.suffix_tokens,
                       S.MAX_NEW_TOKENS: workload.max_new_tokens})


async def multi_turn(run: Run, workload: MultiTurn) -> None:
    point_id = workload.point_id
    run.plan([point_id])
    if run.skip(point_id):
        return
    plan = workload.requests()
    prompts = await factory(run)
    salt = f"{run.run_id}:{point_id}"
    system = await build(run, lambda: prompts.extend("", workload.system_tokens, f"{salt}:system")) \
        if workload.system_tokens else ""
    sent: dict[int, str] = {}

    async def body_for(request: PlannedRequest, records: list[StreamRecord]) -> bytes | None:
        # the history a chat client resends: the last prompt and the answer it got, then a new message
        head = system if request.after is None else sent[request.after] + (records[request.after].text or "")
        try:
            text = await build(run, lambda: turn_text(prompts, head, request, salt))
        except BenchError:
            record = records[request.index]
            record.sent_ns = now_ns()
            record.error = "history_too_long"
            record.error_message = (f"the history is already {request.prompt_tokens} tokens or more: the answer "
                                    f"was longer than max_new_tokens + user_tokens")
            return None
        sent[request.index] = text
        return run.encode(text, request.max_new_tokens)

    await play_cached(run, plan, body_for, workload.max_in_flight, point_id,
                      f"{workload.conversations} conversations x {workload.turns} turns",
                      {S.USERS: workload.max_in_flight, S.PROMPT_TOKENS: workload.prompt_tokens(0),
                       S.MAX_NEW_TOKENS: workload.max_new_tokens})


# -- decode stall ---------------------------------------------------------------------------------------------
def stall_gaps(streams: Sequence[StreamRecord], long: StreamRecord) -> tuple[list[float], list[float], int]:
    """The streams' inter-token gaps (seconds) that overlap the long prompt's wait, from its send to
    its first token; the gaps wholly before its send (the baseline); and how many streams had tokens
    on both sides of that window (a stream that ended inside it under-reports the stall)."""
    if not long.token_ns:
        return [], [], 0
    start, end = long.sent_ns, long.token_ns[0]
    inside: list[float] = []
    before: list[float] = []
    spanning = 0
    for record in streams:
        times = record.token_ns
        spanning += bool(times) and times[0] <= start and times[-1] >= end
        for a, b in zip(times, times[1:], strict=False):
            if b > start and a < end:
                inside.append((b - a) / 1e9)
            elif b <= start:
                before.append((b - a) / 1e9)
    return inside, before, spanning


async def decode_stall(run: Run, workload: DecodeStallScenario) -> None:
    point_id, repeats, warmups = workload.point_id, workload.repeats, workload.warmups
    run.plan([point_id])
    if run.skip(point_id):
        return
    prompts = await factory(run)
    salt = f"{run.run_id}:{point_id}"
    bar = run.request_bar((warmups + repeats) * (workload.streams + 1), f"{workload.streams} streams + one long prompt")
    done: list[tuple[StreamRecord, int, bool, int]] = []
    columns: list[dict[str, Any]] = []
    inside: list[float] = []
    before: list[float] = []
    ttfts: list[float] = []
    short = 0
    for step in range(warmups + repeats):
        warm = step < warmups
        plan = workload.requests(step)

        def texts(plan: list[PlannedRequest] = plan, step: int = step) -> list[str]:
            return [prompts.extend("", r.prompt_tokens, f"{salt}:{step}:{r.group}:{r.turn}") for r in plan]

        bodies = [run.encode(t, r.max_new_tokens) for t, r in zip(await build(run, texts), plan, strict=True)]

        async def body_for(request: PlannedRequest, _records: list[StreamRecord], bodies: list[bytes] = bodies,
                           ) -> bytes:
            return bodies[request.index]

        records = await play(run, plan, body_for, users=workload.max_in_flight, point_id=point_id, bar=bar)
        check_lengths(run, plan, records)
        done += [(rec, step if warm else step - warmups, warm, i) for i, rec in enumerate(records)]
        columns += _columns(plan)
        if warm:
            continue
        streams, long = records[:-1], records[-1]
        gaps_in, gaps_before, spanning = stall_gaps(streams, long)
        inside += gaps_in
        before += gaps_before
        short += workload.streams - spanning
        if long.token_ns:
            ttfts.append((long.token_ns[0] - long.sent_ns) / 1e9)
    if short:
        note(run, f"decode_stall: {short} stream(s) had no token on one side of the long prompt's wait: raise "
                  f"stream_tokens so that they outlast its prefill")
    point = {S.STALL_MAX_GAP_S: max(inside) if inside else math.nan,
             S.STALL_P99_GAP_S: float(np.percentile(inside, 99)) if inside else math.nan,
             S.STALL_BASELINE_GAP_S: float(np.median(before)) if before else math.nan,
             S.LONG_PROMPT_TTFT_S: float(np.median(ttfts)) if ttfts else math.nan}
    await run.save_point(point_id, {S.USERS: workload.streams, S.PROMPT_TOKENS: workload.long_prompt,
                                    S.MAX_NEW_TOKENS: workload.stream_tokens}, done, request_columns=columns,
                         point_columns=point)
