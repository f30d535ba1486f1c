"""The engine's KV store: `SlotCache`, one contiguous row of keys and values per running sequence (`Seq`), and
`KVPool`, keys and values at the scheduler's token slots for the prefix cache; the runner and its attention read and
write both.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

log = logging.getLogger("tgi_toolkit.engine")


def kv_bytes_per_token(config: Any, dtype: torch.dtype) -> int:
    """Bytes of keys and values one token takes in the cache of a model with this config."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * torch.finfo(dtype).bits // 8


@dataclass
class Seq:
    """A sequence's place in the cache. `row` changes when rows are compacted."""

    row: int
    length: int  # tokens whose keys/values are in the cache


class SlotCache:
    """Keys and values for every running sequence, one row each, in one buffer allocated at start-up.

    The buffer holds `capacity` token positions per layer (by default `max_rows x max_positions`; the
    engine passes the scheduler's KV budget) and is written once when built, so its pages are resident
    before the first request, as TGI allocates its KV blocks at the end of warm-up: no forward pays for
    fresh memory (a lazily grown cache took 4.4 s inside one forward here, growing to 64 rows x 1101
    positions). It is seen as `[layers, rows, kv_heads, positions, head_dim]`; when `rows x
    positions` cannot cover every shape the scheduler may ask for within the budget, a longer sequence
    re-lays the same buffer as fewer, longer rows (copying the rows in use, no new memory).
    """

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
                 max_rows: int, max_positions: int, capacity: int | None = None,
                 device: torch.device | str = "cpu") -> None:
        self.layers, self.kv_heads, self.head_dim, self.dtype = layers, kv_heads, head_dim, dtype
        self.max_rows, self.max_positions = max_rows, max_positions
        self.capacity = max(capacity or max_rows * max_positions, max_positions)
        size = layers * self.capacity * kv_heads * head_dim
        self._k = torch.empty(size, dtype=dtype, device=device).zero_()  # zero_ touches every page now
        self._v = torch.empty(size, dtype=dtype, device=device).zero_()
        self.seqs: list[Seq] = []  # seqs[i].row == i
        # a budget below max_rows positions (the tuner's one-request KV rung) starts as rows of one position
        positions = max(1, min(max_positions, self.capacity // max_rows)) if max_rows * max_positions > self.capacity \
            else max_positions
        self._view(min(max_rows, self.capacity // positions), positions)

    def _view(self, rows: int, positions: int) -> None:
        shape = (self.layers, rows, self.kv_heads, positions, self.head_dim)
        n = self.layers * rows * self.kv_heads * positions * self.head_dim
        self.k, self.v = self._k[:n].view(shape), self._v[:n].view(shape)
        self.rows, self.positions = rows, positions

    def bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * torch.finfo(self.dtype).bits // 8

    def reserve(self, rows: int, positions: int) -> None:
        """Room for `rows` rows of `positions` positions: nothing to do within the current view; else the
        buffer is re-laid as rows long enough (doubling, as far as the rows in use allow)."""
        if rows <= self.rows and positions <= self.positions:
            return
        positions = max([positions] + [seq.length + 1 for seq in self.seqs])  # no row in use loses keys
        if rows > self.max_rows or positions > self.max_positions or rows * positions > self.capacity:
            raise RuntimeError(
                f"KV cache limit exceeded: {rows} rows x {positions} positions (limits {self.max_rows} rows, "
                f"{self.max_positions} positions, {self.capacity} positions in all: TGI_TOOLKIT_KV_CACHE_GIB)")
        want = max(positions, min(2 * self.positions, self.max_positions)) if positions > self.positions \
            else self.positions
        new_positions = max(positions, min(want, self.capacity // rows))
        used, kept = len(self.seqs), min(self.positions, new_positions)
        k, v = self.k[:, :used, :, :kept].clone(), self.v[:, :used, :, :kept].clone()
        self._view(min(self.max_rows, self.capacity // new_positions), new_positions)
        self.k[:, :used, :, :kept] = k
        self.v[:, :used, :, :kept] = v
        log.debug("KV cache re-laid as %d rows x %d positions", self.rows, self.positions)

    def add(self, length: int) -> Seq:
        self.reserve(len(self.seqs) + 1, length + 1)
        seq = Seq(row=len(self.seqs), length=length)
        self.seqs.append(seq)
        return seq

    def release(self, seq: Seq) -> None:
        last = self.seqs.pop()
        if last is not seq:
            row, n = seq.row, last.length
            self.k[:, row, :, :n] = self.k[:, last.row, :, :n]
            self.v[:, row, :, :n] = self.v[:, last.row, :, :n]
            last.row = row
            self.seqs[row] = last
        seq.row = -1

    def clear(self) -> None:
        self.seqs.clear()


class KVPool:
    """Keys and values at token slots `[layers, n_slots, kv_heads, head_dim]`: the physical store
    behind the scheduler's block allocator (slot = block_id * block_size + offset).

    `torch.empty`, not `zeros`: the pool is sized for `max_batch_total_tokens` (~90k tokens, ~2 GiB
    in bfloat16 for the default model) and pages nobody has written stay unresident.
    """

    def __init__(self, layers: int, n_slots: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device | str = "cpu") -> None:
        self.n_slots = n_slots
        self.k = torch.empty((layers, n_slots, kv_heads, head_dim), dtype=dtype, device=device)
        self.v = torch.empty((layers, n_slots, kv_heads, head_dim), dtype=dtype, device=device)

    def index(self, slots: Sequence[int]) -> torch.Tensor:
        """The slots as an index on the pool's device, checked on the host first (no device sync)."""
        if len(slots) and (min(slots) < 0 or max(slots) >= self.n_slots):
            raise ValueError(f"pool slots must lie in 0..{self.n_slots - 1}; got {min(slots)}..{max(slots)}")
        return torch.as_tensor(slots, dtype=torch.long, device=self.k.device)
