"""Attention over the slot cache, one path for every forward: prompt chunks and one-token rows.

`plan` reads a forward's rows once (not once per layer): each prompt chunk (`Chunk`) attends to its own
cache row, causally within the chunk, and new prompts of one length side by side attend in one SDPA call; prompt
chunks of several lengths or starts attend in one call too, padded to the longest (`Padded`), where padding adds
little; the one-token rows (decode rows, one-token chunks; `OneTokenRows`) share one SDPA call over a view of cache
rows 0..width-1, as a decode step of the whole batch does: no gather. `attend` runs one layer's attention from that
plan; `causal_mask` is the one mask builder.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
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
# Prompt chunks the plan would attend in calls of their own are padded into one where the padded call computes at
# most this many times the query-key pairs their own masked calls would. Each call costs the host about 16 torch
# calls a layer: on the H200 the served batch of 64 prompts of 128 tokens, each a chunk of its own after a token or
# two the prefix cache held, issued 63 x 16 x 32 calls (0.28 s at 8.75 us) for a forward its card ran in 0.21 s.
PAD_LIMIT = 1.25


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
    masked: bool  # after cached positions, or longer than a sliding window: SDPA's is_causal is not its mask
    mask: torch.Tensor | None = None  # [n, start + n] where masked
    index: torch.Tensor | None = None  # the cache rows as a tensor; None where they run in order (one slice)


@dataclass
class Padded:
    """Prompt chunks of several lengths or starts attended by one SDPA call: `count` chunks, each padded to `n`
    queries (a pad repeats its chunk's last query, whose output is dropped) over cache positions 0..span-1 of its
    row, `mask` [count, 1, n, span] keeping each query to its own positions. Index tensors, one entry a token:
    `tokens` its place in the forward, `rows` and `positions` where its keys go, `slots` its query's place in the
    padded `[count * n]`; `gather` the forward's token each padded query takes, `cache_rows` each chunk's row."""

    count: int
    n: int
    span: int
    tokens: torch.Tensor
    rows: torch.Tensor
    positions: torch.Tensor
    slots: torch.Tensor
    gather: torch.Tensor
    cache_rows: torch.Tensor
    mask: torch.Tensor


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
    chunks: list[Chunk]  # empty where `padded` holds them
    padded: Padded | None
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
            # SDPA's is_causal aligns the mask top-left; a chunk after cached positions needs it bottom-right
            # (built below, for a chunk not padded)
            masked = bool(start or (window and n > window))
            last = chunks[-1] if chunks else None
            if not masked and last is not None and not last.masked and last.n == n \
                    and last.at + len(last.rows) * n == at:
                last.rows.append(row)  # a new prompt of the same length right after the last: one call for both
            else:
                chunks.append(Chunk(at, n, start, [row], masked))
            positions.extend(range(start, start + n))
        at += n
    prompted = bool(chunks)  # the one-token rows are some of the forward's tokens, not all
    padded = pad(chunks, window, tensor) if len(chunks) > 1 else None
    if padded is not None:
        chunks = []
    for chunk in chunks:
        if chunk.masked:
            chunk.mask = causal_mask(torch.arange(chunk.start, chunk.start + chunk.n, device=device),
                                     chunk.start + chunk.n, window)
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
        one_pos = tensor(starts) if prompted else pos
        mask = None
        if not dense or window or min(starts) < span - 1:
            seen = one_pos if dense else torch.zeros(width, dtype=torch.long, device=device).index_put_(
                (row_index,), one_pos)
            mask = causal_mask(seen, span, window)[:, None, None, :]
        index = tensor([a for a, _, _ in one]) if prompted else None
        one_token = OneTokenRows(index, row_index, one_pos, width, span, dense, mask)
    stored = None
    if store is not None:
        pairs = [(firsts[i] + j, slot) for i, slots in enumerate(store) if slots is not None
                 for j, slot in enumerate(slots)]
        stored = (tensor([p[0] for p in pairs]), pool.index([p[1] for p in pairs]))
    return AttentionPlan(at, pos, chunks, padded, one_token, stored)


def pad(chunks: Sequence[Chunk], window: int | None, tensor: Callable[[list[int]], torch.Tensor]) -> Padded | None:
    """`chunks` as one padded call (`Padded`), or None where its query-key pairs would pass PAD_LIMIT times those
    of their own calls (each masked: the whole rectangle of its queries by its positions)."""
    units = [(chunk.at + i * chunk.n, chunk.n, chunk.start, row) for chunk in chunks for i, row in
             enumerate(chunk.rows)]
    count, n, span = len(units), max(u[1] for u in units), max(u[1] + u[2] for u in units)
    if count * n * span > PAD_LIMIT * sum(m * (start + m) for _, m, start, _ in units):
        return None
    tokens, rows, positions, slots, gather, query_positions = [], [], [], [], [], []
    for u, (at, m, start, row) in enumerate(units):
        tokens.extend(range(at, at + m))
        rows.extend([row] * m)
        positions.extend(range(start, start + m))
        slots.extend(range(u * n, u * n + m))
        gather.extend([*range(at, at + m), *[at + m - 1] * (n - m)])
        query_positions.extend([*range(start, start + m), *[start + m - 1] * (n - m)])
    mask = causal_mask(tensor(query_positions), span, window).view(count, 1, n, span)
    return Padded(count, n, span, tensor(tokens), tensor(rows), tensor(positions), tensor(slots), tensor(gather),
                  tensor([u[3] for u in units]), mask)


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
    if plan.padded is not None:
        attn[plan.padded.tokens] = _padded(plan.padded, q, k, v, kc, vc)
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
    with contextlib.nullcontext() if chunk.masked else new_shapes(q):
        out = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=chunk.mask, is_causal=not chunk.masked,
                                             enable_gqa=q.shape[2] > 1)
    return out.transpose(1, 2).reshape(count * n, -1)


def _padded(p: Padded, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kc: torch.Tensor,
            vc: torch.Tensor) -> torch.Tensor:
    """The padded chunks' attention, `[tokens, heads * head_dim]` in `p.tokens`' order, after writing their keys
    and values to their rows. Its shape is new at nearly every forward, so off the CPU it takes NEW_SHAPE_BACKENDS;
    with a mask their one fused kernel, memory-efficient attention, takes no grouped queries (it falls to the math
    backend, as a masked chunk without cuDNN did on the H200), so the keys' heads are repeated for it."""
    kc[p.rows, :, p.positions] = k[p.tokens]
    vc[p.rows, :, p.positions] = v[p.tokens]
    qs = q[p.gather].flatten(1, 2).unflatten(0, (p.count, p.n)).transpose(1, 2)  # [count, heads, n, head_dim]
    ks, vs = kc[p.cache_rows, :, :p.span], vc[p.cache_rows, :, :p.span]
    group = q.shape[2]
    if q.device.type == "cpu":
        out = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=p.mask, enable_gqa=group > 1)
    else:
        if group > 1:
            ks, vs = ks.repeat_interleave(group, dim=1), vs.repeat_interleave(group, dim=1)
        with new_shapes(q):
            out = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=p.mask)
    return out.transpose(1, 2).reshape(p.count * p.n, -1)[p.slots]


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
