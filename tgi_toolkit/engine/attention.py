"""Attention over the slot cache, one path for every forward: prompt chunks and one-token rows.

`plan` reads a forward's rows once (not once per layer): each prompt chunk (`Chunk`) attends to its own
cache row, causally within the chunk, and new prompts of one length side by side attend in one SDPA call; the
one-token rows (decode rows, one-token chunks; `OneTokenRows`) share one SDPA call over a view of cache rows
0..width-1, as a decode step of the whole batch does: no gather. `attend` runs one layer's attention from that
plan; `causal_mask` is the one mask builder.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tgi_toolkit.engine.kv_cache import KVPool

# SDPA calls whose shapes are new at nearly every forward: one-token rows beside prompts (a new span) and new prompts
# (a new count of a new length). On an H200 (torch 2.11) SDPA took cuDNN there, which builds a plan per new shape
# (38-44 ms a one-token span, the process's first ones 0.6-1.3 s) and, planned, took 0.34-0.36 ms a masked call
# where memory-efficient attention took 0.09-0.11 ms at a new span; a forward of 3 new prompts ran 36-43 ms with
# cuDNN and 20-22 ms with flash (benchmarks/gpu_sdpa_mask.py; docs/gpu-probe.md, "The third lease"). A masked
# prompt chunk (after cached positions, grouped queries) keeps torch's choice: without cuDNN, batch 64's prefill,
# its forwards' stacks in those chunks, took 849 ms against 412. The captured decode step keeps it: shapes fixed.
NEW_SHAPE_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def causal_mask(positions: torch.Tensor, span: int, window: int | None) -> torch.Tensor:
    """`[queries, span]` on `positions`' device, True where the query at `positions[i]` sees key position j: every
    position up to its own, or with a sliding `window` the last `window` of them."""
    keys = torch.arange(span, device=positions.device)[None, :]
    keep = keys <= positions[:, None]
    if window:
        keep &= keys > positions[:, None] - window
    return keep


@dataclass
class Chunk:
    """Prompt chunks of `n` tokens each, side by side in the forward from its token `at`: chunk i is at positions
    `start ..` of cache row `rows[i]`. Several only where each starts its row and needs no mask (`plan` groups
    them: the new prompts of a batch, attended by one SDPA call, not one each)."""

    at: int
    n: int
    start: int
    rows: list[int]
    mask: torch.Tensor | None  # [n, start + n]; None where SDPA's is_causal is that mask
    index: torch.Tensor | None = None  # the cache rows as a tensor; None where they run in order (one slice)


@dataclass
class OneTokenRows:
    """The rows of one token, attending together over cache rows 0..width-1, positions 0..span-1."""

    at: torch.Tensor | None  # their tokens' places in the forward; None: every token, in this order
    rows: torch.Tensor  # cache rows
    positions: torch.Tensor
    width: int
    span: int
    dense: bool  # rows are 0..width-1 in order; else the other cache rows get a query of zeros, output dropped
    mask: torch.Tensor | None  # [width, 1, 1, span]; None: every row sees every position (one length, no window)


@dataclass
class AttentionPlan:
    """What a forward's attention reads and writes, the same for every layer."""

    tokens: int
    positions: torch.Tensor  # each token's position (RoPE)
    chunks: list[Chunk]
    one_token: OneTokenRows | None
    store: tuple[torch.Tensor, torch.Tensor] | None  # (tokens, pool slots) whose keys/values the pool keeps


def plan(spans: Sequence[tuple[int, int, int]], window: int | None,
         store: Sequence[Sequence[int] | None] | None = None, pool: KVPool | None = None,
         device: torch.device | str = "cpu") -> AttentionPlan:
    """The plan of a forward whose rows are `spans`, each (cache row, first position, tokens), in the forward's
    token order; `store[i]`, where given, the pool slots of row i's tokens. Its tensors are on `device` (the
    cache's), built from host lists once per forward."""

    def tensor(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    at, chunks, one, positions, firsts = 0, [], [], [], []
    for row, start, n in spans:
        firsts.append(at)
        if n == 1:
            one.append((at, row, start))
            positions.append(start)
        else:
            mask = None
            # SDPA's is_causal aligns the mask top-left; a chunk after cached positions needs it bottom-right.
            if start or (window and n > window):
                mask = causal_mask(torch.arange(start, start + n, device=device), start + n, window)
            last = chunks[-1] if chunks else None
            if mask is None and last is not None and last.mask is None and last.start == 0 and last.n == n \
                    and last.at + len(last.rows) * n == at:
                last.rows.append(row)  # a new prompt of the same length right after the last: one call for both
            else:
                chunks.append(Chunk(at, n, start, [row], mask))
            positions.extend(range(start, start + n))
        at += n
    for chunk in chunks:
        if chunk.rows != list(range(chunk.rows[0], chunk.rows[0] + len(chunk.rows))):
            chunk.index = tensor(chunk.rows)
    pos = tensor(positions)
    one_token = None
    if one:
        rows = [row for _, row, _ in one]
        starts = [start for _, _, start in one]
        width, span = max(rows) + 1, max(starts) + 1
        dense = rows == list(range(width))
        row_index = torch.arange(width, device=device) if dense else tensor(rows)
        one_pos = pos if not chunks else tensor(starts)
        mask = None
        if not dense or window or min(starts) < span - 1:
            seen = one_pos if dense else torch.zeros(width, dtype=torch.long, device=device).index_put_(
                (row_index,), one_pos)
            mask = causal_mask(seen, span, window)[:, None, None, :]
        index = tensor([a for a, _, _ in one]) if chunks else None
        one_token = OneTokenRows(index, row_index, one_pos, width, span, dense, mask)
    stored = None
    if store is not None:
        pairs = [(firsts[i] + j, slot) for i, slots in enumerate(store) if slots is not None
                 for j, slot in enumerate(slots)]
        stored = (tensor([p[0] for p in pairs]), pool.index([p[1] for p in pairs]))
    return AttentionPlan(at, pos, chunks, one_token, stored)


def attend(plan: AttentionPlan, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           k_cache: torch.Tensor, v_cache: torch.Tensor, pool: KVPool | None) -> torch.Tensor:
    """One layer's attention for a planned forward: writes the tokens' keys and values (their cache rows, and
    the pool slots the plan stores) and returns `[tokens, heads * head_dim]`. `q` is grouped
    `[tokens, kv_heads, heads / kv_heads, head_dim]` (`decode_step.layer_in`), `k` and `v` `[tokens, kv_heads,
    head_dim]`; the caches are `SlotCache.k` and `.v`."""
    kc, vc = k_cache[layer], v_cache[layer]
    if plan.store is not None:
        tokens, slots = plan.store
        pool.k[layer, slots] = k[tokens]
        pool.v[layer, slots] = v[tokens]
    one = plan.one_token
    if one is not None and one.at is None:  # every token a one-token row (a decode step): no copies
        return _one_token_rows(one, q, k, v, kc, vc)
    attn = q.new_empty(plan.tokens, q.shape[1] * q.shape[2] * q.shape[3])
    for chunk in plan.chunks:
        attn[chunk.at:chunk.at + len(chunk.rows) * chunk.n] = _chunk(chunk, q, k, v, kc, vc)
    if one is not None:
        attn[one.at] = _one_token_rows(one, q[one.at], k[one.at], v[one.at], kc, vc)
    return attn


def new_shapes(q: torch.Tensor) -> contextlib.AbstractContextManager:
    """SDPA's backends for a call of a shape new at nearly every forward: NEW_SHAPE_BACKENDS off the CPU (a CPU has
    no cuDNN backend; its choice stays torch's)."""
    return contextlib.nullcontext() if q.device.type == "cpu" else sdpa_kernel(NEW_SHAPE_BACKENDS)


def _chunk(chunk: Chunk, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kc: torch.Tensor,
           vc: torch.Tensor) -> torch.Tensor:
    """The chunks' attention, `[count * n, heads * head_dim]`, after writing their keys and values to their rows."""
    at, n, start, count = chunk.at, chunk.n, chunk.start, len(chunk.rows)
    end = at + count * n
    ks = k[at:end].unflatten(0, (count, n)).transpose(1, 2)  # [count, kv_heads, n, head_dim]
    vs = v[at:end].unflatten(0, (count, n)).transpose(1, 2)
    rows = slice(chunk.rows[0], chunk.rows[0] + count) if chunk.index is None else chunk.index
    kc[rows, :, start:start + n] = ks
    vc[rows, :, start:start + n] = vs
    if start:  # one chunk after its row's cached positions
        ks, vs = kc[rows, :, :start + n], vc[rows, :, :start + n]
    qs = q[at:end].flatten(1, 2).unflatten(0, (count, n)).transpose(1, 2)  # [count, heads, n, head_dim]
    with new_shapes(q) if chunk.mask is None else contextlib.nullcontext():
        out = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=chunk.mask, is_causal=chunk.mask is None,
                                             enable_gqa=q.shape[2] > 1)
    return out.transpose(1, 2).reshape(count * n, -1)


def _one_token_rows(one: OneTokenRows, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kc: torch.Tensor,
                    vc: torch.Tensor) -> torch.Tensor:
    """`q`, `k`, `v`: the rows' own, in their order."""
    with new_shapes(q):
        if one.dense:
            return one_token_attention(q, k, v, kc, vc, one.rows, one.positions, one.span, one.mask)
        full = q.new_zeros(one.width, *q.shape[1:])
        full[one.rows] = q
        return one_token_attention(full, k, v, kc, vc, one.rows, one.positions, one.span, one.mask)[one.rows]


def one_token_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor,
                        rows: torch.Tensor, positions: torch.Tensor, span: int, mask: torch.Tensor | None
                        ) -> torch.Tensor:
    """Cache rows 0..width-1 (`q`'s rows) attending over positions 0..span-1, after each of `rows` writes its
    token's keys and values at its position: `[width, heads * head_dim]`. The query heads that share a key
    head are that head's query positions, so SDPA reads each row's keys once, with no copied heads. A decode
    step runs it as TorchScript (`decode_step.decode_layers`)."""
    kc[rows, :, positions] = k
    vc[rows, :, positions] = v
    width = q.shape[0]
    out = F.scaled_dot_product_attention(q, kc[:width, :, :span], vc[:width, :, :span], attn_mask=mask)
    return out.reshape(width, -1)
