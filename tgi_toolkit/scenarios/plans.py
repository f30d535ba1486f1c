"""Workloads that a prefix cache and chunked prefill change, as plain data: what a point sends, in
which order, with which lengths. No server, tokenizer or event loop is needed to build or read them,
so the harness (bench.play) and the simulator (simulate.workloads) play the same objects. SharedPrefix and
MultiTurn and DecodeStallScenario are scenarios themselves (scenarios.base: their fields are their parameters,
flags and checks).

- SharedPrefix: `groups` groups of `requests_per_group` requests; every prompt of a group starts with
  the group's prefix of `prefix_tokens` tokens and ends with its own suffix of `suffix_tokens`.
  A group's first request is sent alone; the others wait until it has ended, because TGI inserts a
  prompt into its radix cache only when the request is freed (docs/tgi-rules.md A5/A6): requests of
  a group in flight together share nothing.
- MultiTurn: `conversations` chats of `turns` turns. Turn 0 is an optional system prompt (shared by
  every conversation) plus a user message of `user_tokens`; turn t resends turn t-1's prompt, its
  answer (`max_new_tokens`) and a new user message, so its prompt is exactly
  `system_tokens + user_tokens + t * (max_new_tokens + user_tokens)` tokens.
- DecodeStallScenario: `streams` requests start decoding; once each has `lead_tokens` tokens, one prompt of
  `long_prompt` tokens arrives, in each of its rounds. The running streams' inter-token gaps around its prefill show how
  long they stalled (unchunked: the whole prefill; chunked: one chunk's forward).

A request's prompt is a sequence of `Segment`s: equal keys are equal tokens, so a simulator can give
each key its own token ids (`synthetic_ids`) and run a real radix cache over them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from tgi_toolkit.bench.checks import Limits, count
from tgi_toolkit.bench.errors import BenchError, check_positive_ints
from tgi_toolkit.scenarios.base import Scenario, param


@dataclass(frozen=True)
class Segment:
    """`tokens` tokens of one piece of text; equal `key`s are the same tokens."""

    key: str
    tokens: int


@dataclass(frozen=True)
class PlannedRequest:
    """One request of a workload.

    index: position in the point's list. group: shared-prefix group, conversation, or (decode-stall)
    0 for the running streams and 1 for the long prompt. turn: position within the group (0 = first).
    after: index of a request that must have ended before this one is sent (None: no such wait).
    wait_tokens: sent only once every request listed before it has emitted this many tokens (0: no wait).
    """

    index: int
    group: int
    turn: int
    segments: tuple[Segment, ...]
    max_new_tokens: int
    after: int | None = None
    wait_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        return sum(s.tokens for s in self.segments)


def common_prefix_tokens(a: Sequence[Segment], b: Sequence[Segment]) -> int:
    """Tokens at the start of two prompts that are the same (whole equal segments)."""
    total = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        total += x.tokens
    return total


def cached_tokens(plan: Sequence[PlannedRequest], index: int) -> int:
    """Prompt tokens of request `index` that a TGI radix cache (block size 1) holds when it is sent,
    counting only the requests it is known to follow (its `after` chain): the longest common prefix
    with one of their prompts (their answers are never cached, docs/tgi-rules.md A5). Requests that
    merely happened to end earlier may add hits in a real run, so this is a lower bound."""
    request = plan[index]
    best, seen = 0, set()
    after = request.after
    while after is not None and after not in seen:
        seen.add(after)
        best = max(best, common_prefix_tokens(request.segments, plan[after].segments))
        after = plan[after].after
    return best


def expected_hit_rate(plan: Sequence[PlannedRequest]) -> float:
    """Cached prompt tokens over all prompt tokens of the plan (`cached_tokens`; a lower bound)."""
    total = sum(r.prompt_tokens for r in plan)
    return sum(cached_tokens(plan, r.index) for r in plan) / total if total else float("nan")


def synthetic_ids(request: PlannedRequest, vocab: int = 32000) -> list[int]:
    """Token ids for a simulator: the same ids for the same segment key, different ones otherwise."""
    ids: list[int] = []
    for segment in request.segments:
        digest = hashlib.sha1(segment.key.encode()).digest()
        start = int.from_bytes(digest[:4], "little")
        ids += [(start + i * 7919) % (vocab - 1) + 1 for i in range(segment.tokens)]
    return ids


def _positive(name: str, value: int, minimum: int = 1) -> int:
    return check_positive_ints(name, [value], minimum=minimum)[0]


def _lengths(limits: Limits | None, prompt_tokens: int, max_new_tokens: int, field: str = "prompt_tokens") -> None:
    if limits is not None:
        limits.check_lengths(prompt_tokens, max_new_tokens, field)


@dataclass(frozen=True)
class SharedPrefix(Scenario):
    """Groups of requests sharing a prefix (a system prompt, a document, few-shot examples)."""

    name = "shared_prefix"
    groups: int = param(4, "groups, each with its own prefix (default 4)")
    requests_per_group: int = param(4, "requests per group; the first goes alone, the rest after it ended (default 4)")
    prefix_tokens: int = param(512, "tokens of each group's shared prefix (default 512)", common=True)
    suffix_tokens: int = param(32, "tokens each request adds (default 32)")
    max_new_tokens: int = param(16, "new tokens per request (default 16)")
    users: int = param(4, "requests in flight at most (default 4)", short="-u")  # closed loop

    def __post_init__(self) -> None:
        for name in ("groups", "requests_per_group", "prefix_tokens", "suffix_tokens", "max_new_tokens", "users"):
            _positive(name, getattr(self, name))

    def check(self, limits: Limits | None) -> SharedPrefix:
        _lengths(limits, self.prefix_tokens + self.suffix_tokens, self.max_new_tokens)
        return self

    @property
    def point_id(self) -> str:
        return (f"groups={self.groups},per_group={self.requests_per_group},prefix={self.prefix_tokens},"
                f"suffix={self.suffix_tokens},output={self.max_new_tokens},users={self.users}")

    @property
    def max_in_flight(self) -> int:
        return self.users

    def requests(self) -> list[PlannedRequest]:
        plan: list[PlannedRequest] = []
        for g in range(self.groups):
            first = len(plan)
            prefix = Segment(f"prefix/g{g}", self.prefix_tokens)
            for r in range(self.requests_per_group):
                plan.append(PlannedRequest(len(plan), g, r, (prefix, Segment(f"suffix/g{g}/r{r}", self.suffix_tokens)),
                                           self.max_new_tokens, after=None if r == 0 else first))
        return plan


@dataclass(frozen=True)
class MultiTurn(Scenario):
    """Conversations that resend their growing history each turn, as a chat client does."""

    name = "multi_turn"
    conversations: int = param(4, "conversations (default 4)")
    turns: int = param(4, "turns per conversation (default 4)")
    user_tokens: int = param(64, "tokens of each new user message (default 64)")
    max_new_tokens: int = param(32, "tokens of each answer (default 32)")
    system_tokens: int = param(0, "a system prompt every conversation starts with (default 0: none)")
    users: int | None = param(None, "conversations at once (default all)", short="-u")

    def __post_init__(self) -> None:
        for name in ("conversations", "turns", "user_tokens", "max_new_tokens"):
            _positive(name, getattr(self, name))
        _positive("system_tokens", self.system_tokens, 0)
        if self.users is not None:
            _positive("users", self.users)

    def check(self, limits: Limits | None) -> MultiTurn:
        _lengths(limits, self.prompt_tokens(self.turns - 1), self.max_new_tokens)  # the last turn's is the longest
        return self

    @property
    def point_id(self) -> str:
        users = self.users if self.users is not None else self.conversations
        return (f"conversations={self.conversations},turns={self.turns},system={self.system_tokens},"
                f"user={self.user_tokens},output={self.max_new_tokens},users={users}")

    @property
    def max_in_flight(self) -> int:
        return self.users if self.users is not None else self.conversations

    def prompt_tokens(self, turn: int) -> int:
        """Exact prompt length of `turn` (0-based)."""
        return self.system_tokens + self.user_tokens + turn * (self.max_new_tokens + self.user_tokens)

    def requests(self) -> list[PlannedRequest]:
        plan: list[PlannedRequest] = []
        for c in range(self.conversations):
            history: tuple[Segment, ...] = (Segment("system", self.system_tokens),) if self.system_tokens else ()
            for t in range(self.turns):
                if t:
                    history += (Segment(f"answer/c{c}/t{t - 1}", self.max_new_tokens),)
                history += (Segment(f"user/c{c}/t{t}", self.user_tokens),)
                plan.append(PlannedRequest(len(plan), c, t, history, self.max_new_tokens,
                                           after=None if t == 0 else len(plan) - 1))
        return plan


@dataclass(frozen=True)
class DecodeStallScenario(Scenario):
    """Streams decoding while one long prompt joins, `repeats` rounds after `warmups` (`requests(round)` plans one).
    The streams must outlast its prefill: with chunking that takes about 2 * ceil(long / max_batch_prefill_tokens)
    forwards, without it up to max_waiting_tokens (20) decode steps of waiting and one prefill, so `stream_tokens`
    should be well over `lead_tokens` plus either."""

    name = "decode_stall"
    streams: int = param(8, "streams decoding when the long prompt arrives (default 8)")
    long_prompt: int = param(2000, "tokens of the long prompt (default 2000)")
    stream_prompt: int = param(32, "tokens of each stream's prompt (default 32)")
    stream_tokens: int = param(128, "tokens each stream generates; enough to outlast the long prefill (default 128)")
    long_max_new_tokens: int = param(4, "tokens the long prompt generates (default 4)")
    lead_tokens: int = param(4, "tokens every stream has when the long prompt is sent (default 4)")
    repeats: int = param(3, "measured rounds (default 3)")
    warmups: int = param(1, "unmeasured rounds first (default 1)")

    def __post_init__(self) -> None:
        for name in ("streams", "stream_prompt", "stream_tokens", "long_prompt", "long_max_new_tokens", "lead_tokens"):
            _positive(name, getattr(self, name))
        if self.lead_tokens >= self.stream_tokens:
            raise BenchError("lead_tokens", f"{self.lead_tokens} leaves the streams no tokens to decode after the "
                                            f"long prompt arrives", f"integers < stream_tokens ({self.stream_tokens})")
        count("repeats", self.repeats, 1)
        count("warmups", self.warmups, 0)

    def check(self, limits: Limits | None) -> DecodeStallScenario:
        _lengths(limits, self.stream_prompt, self.stream_tokens, "stream_prompt")
        _lengths(limits, self.long_prompt, self.long_max_new_tokens, "long_prompt")
        return self

    @property
    def point_id(self) -> str:
        return (f"streams={self.streams},stream_prompt={self.stream_prompt},stream_output={self.stream_tokens},"
                f"long_prompt={self.long_prompt}")

    @property
    def max_in_flight(self) -> int:
        return self.streams + 1

    def requests(self, repeat: int = 0) -> list[PlannedRequest]:
        """One round: the streams (group 0), then the long prompt (group 1), sent once each stream has
        `lead_tokens` tokens; each round its own prompts."""
        plan = [PlannedRequest(i, 0, i, (Segment(f"stream/{repeat}/{i}", self.stream_prompt),), self.stream_tokens)
                for i in range(self.streams)]
        plan.append(PlannedRequest(self.streams, 1, 0, (Segment(f"long/{repeat}", self.long_prompt),),
                                   self.long_max_new_tokens, wait_tokens=self.lead_tokens))
        return plan
