"""The model backend: runs the scheduler's batches on a `LlamaRunner` in the compute thread and turns their logits
into token events (text, stop, finish), with the per-request state it keeps for that."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from tgi_toolkit.engine.events import Delivery, Event, Finish, Token
from tgi_toolkit.engine.kv_cache import Seq
from tgi_toolkit.engine.runner import LlamaRunner
from tgi_toolkit.engine.sampling import TokenChooser, choose_batch
from tgi_toolkit.engine.validation import ValidRequest
from tgi_toolkit.engine.watchdog import StallWatch
from tgi_toolkit.router import Entry, Forward, Row


@dataclass
class RequestState:
    """Per-request generation state owned by the batcher thread."""

    request: ValidRequest
    chooser: TokenChooser
    emit: Callable[[Any], None]
    seq: Seq | None = None
    entry: Entry | None = None  # the queue entry (segment) whose KV `seq` holds
    queued_at: float = 0.0
    batched_at: float | None = None  # when the request's first segment was admitted
    prefill_logits: list[torch.Tensor] = field(default_factory=list)  # chunks' logits, for prefill logprobs
    generated: list[int] = field(default_factory=list)
    tokens: list[Token] = field(default_factory=list)
    top_tokens: list[list[Token]] = field(default_factory=list)
    prefill: list[Token] = field(default_factory=list)
    logprob_sum: float = 0.0
    prefix_offset: int = 0
    read_offset: int = 0


class ModelBackend:
    """Runs the scheduler's batches on a `LlamaRunner` and turns logits into token events."""

    def __init__(self, runner: LlamaRunner, tokenizer: Any, eos_token_ids: set[int],
                 deliver: Delivery | None = None,
                 pace: Callable[[Forward], float] | None = None, watch: StallWatch | None = None) -> None:
        self.runner = runner
        self.watch = watch  # TGI_TOOLKIT_STALL_MS: a long forward's stack, logged while it runs
        # pace (TGI_TOOLKIT_PACE): the seconds a forward must last at least; its tokens are held until then.
        # A benchmark's control for a shared machine whose speed drifts: the model still computes every
        # token, and each forward then takes the time a cost model gives it, not the machine's time of the
        # moment.
        self.pace = pace
        self._deadline = 0.0
        self.deliver = deliver or Delivery()  # how a step's events reach their requests
        self.tokenizer = tokenizer
        self.eos = eos_token_ids
        self.special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])
        self._token_text: dict[int, str] = {}
        # A fast tokenizer's decode without clean-up is its Rust tokenizer's decode; called
        # directly it takes 0.5 us for a few ids against 2.3 us through transformers' wrapper
        # (two calls per token per step).
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._raw_decode = getattr(backend, "decode", None)
        # The last forward's seconds in the runner (on a card: launching its kernels or replaying its graph) and in
        # the token choice (on a card: with the wait for those kernels): the rest of it is the host's Python around
        # them, which the forward trace keeps apart (metrics.Metrics). And the CPU seconds the compute thread ran in
        # it and those the front end's thread ran beside it: one process, one GIL, so the second holds up a forward
        # whose host issues its kernels from Python (simulate.events' `frontend_stalls_forwards`)
        self.split: dict[str, float | None] = {"model_s": 0.0, "sample_s": 0.0, "cpu_s": 0.0, "frontend_cpu_s": None}

    # -- text ---------------------------------------------------------------------------
    def _decode(self, ids: list[int], skip_special: bool = False) -> str:
        if self._raw_decode is not None:
            return self._raw_decode(ids, skip_special_tokens=skip_special)
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special,
                                     clean_up_tokenization_spaces=False)

    def token_text(self, token_id: int) -> str:
        text = self._token_text.get(token_id)
        if text is None:
            text = self._token_text[token_id] = self._decode([token_id])
        return text

    def _incremental_text(self, state: RequestState) -> str:
        # TGI's decode_token: text of the new tokens, held back while they end in an
        # incomplete UTF-8 sequence, so streamed texts concatenate to the final text.
        ids = state.generated
        if ids[-1] in self.special_ids:
            return ""
        prefix = self._decode(ids[state.prefix_offset:state.read_offset])
        new = self._decode(ids[state.prefix_offset:])
        if len(new) > len(prefix) and not new.endswith("\ufffd"):
            state.prefix_offset, state.read_offset = state.read_offset, len(ids)
            return new[len(prefix):]
        return ""

    # -- scheduler ModelSide protocol ------------------------------------------------------
    def forward(self, forward: Forward) -> None:
        """Run one forward of the scheduler's batch: prompt chunks and decoding rows together."""
        if self.watch is None:
            return self._forward(forward)
        self.watch.begin(f"{forward.rpc} of {len(forward.rows)} rows, {forward.tokens} tokens")
        try:
            self._forward(forward)
        finally:
            self.watch.end()

    def _forward(self, forward: Forward) -> None:
        cpu, frontend = time.thread_time(), self.deliver.frontend_cpu_s()
        self._run(forward)
        self.split["cpu_s"] = time.thread_time() - cpu
        after = self.deliver.frontend_cpu_s()  # None before the first request streams (a bound loop stays bound)
        self.split["frontend_cpu_s"] = None if after is None or frontend is None else after - frontend

    def _run(self, forward: Forward) -> None:
        if self.pace is not None:
            self._deadline = time.perf_counter() + self.pace(forward)
        runner = self.runner
        rows = sorted(forward.rows, key=self._row_order)  # the runner's tuned decode wants row order
        inputs, store, all_logits = [], [], []
        for row in rows:
            entry, state = row.entry, row.entry.request
            if state.entry is not entry:  # the entry's first forward (or a continuation segment's)
                cached = entry.allocation.slots[:entry.cache_len] if entry.cache_len else ()
                state.entry = entry  # before new_seq: release() must find a row it may have taken
                # Room for the whole segment now: growing the cache chunk by chunk copies it each time
                # (twice as slow for a long chunked prompt; docs/engine.md).
                cache = runner.cache
                cache.reserve(len(cache.seqs) + 1,
                              min(entry.input_length + entry.max_new_tokens + 1, cache.max_positions))
                state.seq = runner.new_seq(cached)
                if state.batched_at is None:
                    state.queued_at, state.batched_at = entry.queued_at, entry.batched_at
            if row.prompt:
                ids = entry.input_ids[row.start:row.start + row.length]
                store.append(self._store_slots(entry, row) if runner.pool is not None else None)
                all_logits.append(state.request.decoder_input_details and not state.prefill)
            else:
                ids = [entry.output_ids[-1]]
                store.append(None)
                all_logits.append(False)
            inputs.append((state.seq, ids))
        # Rows that emit no token (a prompt's chunks before its last) skip the LM head.
        began = time.perf_counter()
        logits = runner.forward(inputs, all_logits if any(all_logits) else None,
                                store if any(s is not None for s in store) else None, [row.emits for row in rows])
        self.split["model_s"], self.split["sample_s"] = time.perf_counter() - began, 0.0
        emitting, last = [], []
        for i, (row, rows_logits) in enumerate(zip(rows, logits, strict=True)):
            state = row.entry.request
            if all_logits[i]:
                state.prefill_logits.append(rows_logits)
            if row.emits:
                if all_logits[i] or state.prefill_logits:
                    if not state.prefill:
                        state.prefill = self._prefill_tokens(state.request.input_ids,
                                                             torch.cat(state.prefill_logits))
                        state.prefill_logits = []
                emitting.append(row.entry)
                last.append(i)
        if emitting:
            self._advance(emitting, runner.last_logits if getattr(runner, "last_logits", None) is not None
                          else torch.cat([logits[i][-1:] for i in last]))
        self._hold()

    def _hold(self) -> None:
        """Wait out the paced forward's deadline (nothing without a pace, or once it has passed)."""
        if self.pace is not None:
            left = self._deadline - time.perf_counter()
            if left > 0:
                time.sleep(left)

    @staticmethod
    def _row_order(row: Row) -> int:
        seq = row.entry.request.seq
        return seq.row if seq is not None and row.entry.request.entry is row.entry else 1 << 30

    @staticmethod
    def _store_slots(entry: Entry, row: Row) -> list[int] | None:
        """Pool slots for the prompt tokens this row computes, where the prefix cache may keep them."""
        allocation = entry.allocation
        if allocation is None or allocation.lookup is None:
            return None
        if row.start < allocation.prefix_len:  # a full hit recomputes one token of a block the trie owns
            return None
        return allocation.slots[row.start:row.start + row.length]

    def release(self, entry: Entry) -> None:
        state: RequestState = entry.request
        if state.entry is entry:
            if state.seq is not None and state.seq.row >= 0:
                self.runner.release(state.seq)
            # the entry and its state refer to each other: unlinked, a finished request's objects (its tokens,
            # events, chooser) go when the last reference does, not at a pass of the collector that stops the engine
            state.seq = state.entry = None

    def _prefill_tokens(self, ids: list[int], logits: torch.Tensor) -> list[Token]:
        logprobs = logits.log_softmax(-1)
        out = [Token(ids[0], self.token_text(ids[0]), None, ids[0] in self.special_ids)]
        for i in range(1, len(ids)):
            out.append(Token(ids[i], self.token_text(ids[i]), float(logprobs[i - 1, ids[i]]),
                             ids[i] in self.special_ids))
        return out

    # -- tokens ------------------------------------------------------------------------
    def _advance(self, entries: list[Entry], logits: torch.Tensor) -> None:
        states: list[RequestState] = [e.request for e in entries]
        began = time.perf_counter()
        choices = choose_batch(logits, [s.chooser for s in states],
                               lambda i: states[i].request.input_ids + states[i].generated)
        now = time.perf_counter()
        self.split["sample_s"] = now - began
        events = []
        for entry, state, choice in zip(entries, states, choices, strict=True):
            if entry.cancelled:
                continue
            state.generated.append(choice.token_id)
            entry.output_ids.append(choice.token_id)
            special = choice.token_id in self.special_ids
            text = self._incremental_text(state)
            token = Token(choice.token_id, text if not special else self.token_text(choice.token_id),
                          choice.logprob, special)
            top = [Token(t, self.token_text(t), lp, t in self.special_ids) for t, lp in choice.top_tokens]
            state.tokens.append(token)
            state.top_tokens.append(top)
            state.logprob_sum += choice.logprob if math.isfinite(choice.logprob) else 0.0
            reason = self._stop_reason(state, choice.token_id)
            finish = None
            if reason is not None:
                entry.finished = True
                finish = self._finish(entry, state, reason, now)
            events.append((state.emit, Event(len(state.generated) - 1, token, top, finish)))
        self._hold()  # a paced forward's tokens leave at its deadline, as the simulator stamps them
        self.deliver(events)

    def _stop_reason(self, state: RequestState, token_id: int) -> str | None:
        request = state.request
        if len(state.generated) >= request.max_new_tokens:
            return "length"
        if token_id in self.eos and not request.ignore_eos:
            return "eos_token"
        if request.stop:
            tail = self._decode(state.generated[-16:])
            if any(tail.endswith(stop) for stop in request.stop):
                return "stop_sequence"
        return None

    def _finish(self, entry: Entry, state: RequestState, reason: str, now: float) -> Finish:
        text = self._decode(state.generated, skip_special=True)
        if state.request.return_full_text:
            text = state.request.inputs + text
        queued_at = state.queued_at or entry.queued_at
        batched = state.batched_at or entry.batched_at or queued_at
        return Finish(
            reason=reason, generated_text=text, generated_tokens=len(state.generated),
            seed=state.chooser.seed, input_length=len(state.request.input_ids),
            queued=batched - queued_at, inference=now - batched, prefill=state.prefill,
            tokens=state.tokens, top_tokens=state.top_tokens, logprob_sum=state.logprob_sum,
        )
