"""vLLM's mixed steps, measured: steps that prefill a waiting prompt beside running decodes (docs/vllm-rules.md
section 1), which vLLM's chunked scheduler builds whenever a request arrives while others decode and TGI never runs.
Bench's decode-stall rounds time them; each step's shape is `fit.mixed_step`. A part of a vLLM's profile
(simulate.calibrate)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tgi_toolkit import schema as S
from tgi_toolkit.costs.features import Shape
from tgi_toolkit.simulate.fit import mixed_step

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

# A vLLM server's mixed steps (docs/vllm-rules.md section 1: decodes and a waiting prompt in one forward, which TGI
# never runs), timed by bench's decode-stall rounds: streams of `stream_prompt` tokens decoding `stream_tokens`, and
# one prompt of each length sent once each stream has `lead_tokens` (`mixed_prompts` keeps those vLLM takes whole),
# `repeats` rounds of each spread over a profile's passes (at least one a pass).
MIXED = {"prompt_tokens": (128, 512), "stream_prompt": 32, "stream_tokens": 24, "lead_tokens": 4, "repeats": 2}


def measure_mixed(server: Any, facts: Mapping[str, Any], batch_sizes: Sequence[int], limit: int,
                  progress: bool, rounds: int) -> list[tuple[Shape, float]]:
    """vLLM's mixed steps (MIXED): as many streams as the grid's largest batch within the cap, less one for the
    prompt that joins them; `mixed_steps` of each length's `rounds` rounds."""
    from tgi_toolkit.bench.api import run_decode_stall

    streams = max(1, min(max(int(b) for b in batch_sizes), int(facts.get("max_batch_size") or 10**9)) - 1)
    stream_prompt, stream_tokens = int(MIXED["stream_prompt"]), int(MIXED["stream_tokens"])
    out: list[tuple[Shape, float]] = []
    for prompt in mixed_prompts(MIXED["prompt_tokens"], streams, facts.get("max_batch_prefill_tokens"),
                                facts.get("max_batch_total_tokens"), limit, stream_prompt + stream_tokens):
        res = run_decode_stall(server, streams=streams, long_prompt=prompt, stream_prompt=stream_prompt,
                               stream_tokens=stream_tokens, long_max_new_tokens=1,
                               lead_tokens=int(MIXED["lead_tokens"]), repeats=rounds, warmups=1,
                               progress=progress)
        out += mixed_steps(res.requests, stream_prompt)
    return out


def mixed_prompts(prompts: Sequence[int], streams: int, budget: int | None, kv_tokens: int | None, limit: int,
                  stream_length: int) -> list[int]:
    """The prompt lengths of the mixed-step probe: each cut to what one step takes beside `streams` decodes (the
    budget less one token a stream) and to the server's `limit`, and only those that fit the KV cache beside the
    streams' `stream_length` tokens each (tokens, as `batches_within`): one step then prefills it whole."""
    room = min(limit, (budget or 10**9) - streams)
    cut = sorted({min(int(p), room) for p in prompts if room > 0})
    return [p for p in cut if kv_tokens is None or streams * stream_length + p + 1 <= kv_tokens]


def mixed_steps(requests: pd.DataFrame, stream_prompt: int) -> list[tuple[Shape, float]]:
    """The mixed steps of decode-stall rounds (bench's requests table, warm-ups and failures dropped): in each
    round, the step that emitted the long prompt's first token also emitted a token of every stream, so each
    stream's gap ending nearest that token (within half the gap) timed it. One sample a round: that step's shape
    (`mixed_step`: a stream's decode row after its prompt and all its tokens but the last) and the streams'
    median gap. Assumes the prompt was taken whole (`mixed_prompts`)."""
    df = requests
    if S.WARMUP in df.columns:
        df = df[~df[S.WARMUP].fillna(False).astype(bool)]
    if S.ERROR in df.columns:
        df = df[df[S.ERROR].isna()]
    out: list[tuple[Shape, float]] = []
    for _, part in df.groupby(S.REPEAT, sort=True):
        long = part[part[S.GROUP] == 1]
        if long.empty or not long[S.TTFT_S].iloc[0] == long[S.TTFT_S].iloc[0]:
            continue
        first = float(long[S.SENT_S].iloc[0]) + float(long[S.TTFT_S].iloc[0])
        starts, gaps = [], []
        for _, stream in part[part[S.GROUP] == 0].iterrows():
            gaps_of = [float(g) for g in stream[S.ITL_S]]
            # token k (1-based) arrives at sent + ttft + the first k - 1 gaps
            times = float(stream[S.SENT_S]) + float(stream[S.TTFT_S]) + np.cumsum([0.0, *gaps_of])
            k = int(np.argmin(np.abs(times - first))) + 1
            if k >= 2 and abs(times[k - 1] - first) <= gaps_of[k - 2] / 2:
                starts.append(stream_prompt + k - 2)  # its decode fed token k - 1, at position prompt + k - 2
                gaps.append(gaps_of[k - 2])
        if gaps:
            out.append((mixed_step(starts, int(long[S.PROMPT_TOKENS].iloc[0])), float(np.median(gaps))))
    return out
