"""The model runner: a Llama-family forward pass over a slot KV cache.

Why not `model.generate` or a transformers cache: continuous batching needs requests of
different lengths to share one decode step, and to join or leave between steps without their
prompts being recomputed. Here every running sequence owns one row of a preallocated cache
`[layers, rows, kv_heads, positions, head_dim]`. Running sequences always occupy rows
`0..B-1`, so a decode step reads a plain view of the cache; a sequence that leaves is replaced by
the last row (one row copied, not the whole cache). Prefill packs the new prompts into one
`[tokens, hidden]` matrix, so the linear layers see all of them at once, and runs attention
per prompt.

Chunked prefill and the prefix cache (TGI 3's scheduling) use two more pieces:

* `forward(rows)`: one forward over a mixed batch, where each row computes its tokens at positions
  `seq.length ..` (a decode row one token, a prompt chunk many, possibly continuing an earlier
  chunk). The linear layers see every row's tokens as one `[tokens, hidden]` matrix; attention runs
  per prompt chunk, plus one call for all one-token rows over a view of the cache rows. A forward
  in which every running row decodes is handed to `decode`, the tuned step, unchanged.
* `KVPool` (`runner.pool`, from `enable_pool`): keys and values at the token slots of the
  scheduler's block allocator (slot = block_id * block_size + offset). A forward writes a prompt's
  KV there as well (`store`), and `new_seq(cached_slots)` starts a later request that shares the
  prefix by copying those slots into its row instead of computing them.

Why two stores rather than attention reading the pool directly, as TGI's paged kernels do: the
running batch computes attention with SDPA, which on CPU reads each row's keys as one strided
`[kv_heads, positions, head_dim]` tensor. Reading a row from scattered slots means gathering every
row's keys and values each decode step, one copy per layer of the whole batch's context: about a tenth
of a step (docs/engine.md, "Where the keys and values live"). The contiguous rows cost a copy only where it
pays: prompt tokens into the pool once (`store`), a cached prefix out of it once per hit (`new_seq`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from tgi_toolkit.engine.decode_step import CompiledDecode, Weight, layer_in, layer_out, rms, rope, weight_of
from tgi_toolkit.engine.kv_cache import KVPool, Seq, SlotCache
from tgi_toolkit.engine.linear import _linear

SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2")

log = logging.getLogger("tgi_toolkit.engine")


class UnsupportedModelError(RuntimeError):
    pass


@dataclass
class _Layer:
    input_norm: torch.Tensor
    qkv: torch.nn.Module  # linear layers: plain, or quantized by `quantization.quantize_runner`
    o: torch.nn.Module
    post_norm: torch.Tensor
    gate_up: torch.nn.Module
    down: torch.nn.Module

    def linears(self) -> dict[str, torch.nn.Module]:
        return {"qkv": self.qkv, "o": self.o, "gate_up": self.gate_up, "down": self.down}

    def weights(self, packed: bool = True) -> tuple[Weight, Weight, Weight, Weight]:
        """qkv, o, gate_up and down as the decode step's functions take them (`decode_step.project`);
        `packed` False gives the plain weights (what inductor can compile)."""
        return tuple(weight_of(m, packed) for m in (self.qkv, self.o, self.gate_up, self.down))


class LlamaRunner:
    """Forward passes for Llama-shaped decoders (Llama, Mistral, Qwen2, SmolLM)."""

    def __init__(self, model: Any, max_rows: int, max_positions: int, kv_capacity: int | None = None) -> None:
        """`max_rows` sequences at once, each of at most `max_positions` tokens; `kv_capacity` positions of
        KV cache in all (default: enough for `max_rows` rows of `max_positions`), allocated now."""
        cfg = model.config
        if cfg.model_type not in SUPPORTED_ARCHITECTURES:
            raise UnsupportedModelError(
                f"the embedded engine runs {', '.join(SUPPORTED_ARCHITECTURES)} architectures; "
                f"this model is {cfg.model_type!r}"
            )
        self.dtype = next(model.parameters()).dtype
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.eps = cfg.rms_norm_eps
        self.vocab_size = cfg.vocab_size
        self.sliding_window = getattr(cfg, "sliding_window", None) if cfg.model_type == "mistral" else None
        inner = model.model
        self.embed = inner.embed_tokens.weight
        self.norm = inner.norm.weight
        self.lm_head = model.lm_head.weight
        self.head = _linear(self.lm_head)  # the LM head as a layer's linear: packed where it can be
        self.layers = [self._fuse(layer) for layer in inner.layers]
        # RoPE table from the model's own rotary module, so every rope scaling variant is honoured.
        positions = torch.arange(max_positions).unsqueeze(0)
        probe = torch.zeros(1, dtype=torch.float32)
        cos, sin = inner.rotary_emb(probe, positions)
        self.cos = cos[0].to(self.dtype)
        self.sin = sin[0].to(self.dtype)
        self.cache = SlotCache(len(self.layers), self.kv_heads, self.head_dim, self.dtype,
                               max_rows, max_positions, kv_capacity)
        self.pool: KVPool | None = None
        self.compiled: CompiledDecode | None = None  # see compile_decode()
        self.last_logits = torch.empty(0)  # see forward()

    @staticmethod
    def _fuse(layer: Any) -> _Layer:
        attn, mlp = layer.self_attn, layer.mlp
        # One GEMM for q, k and v, one for gate and up: fewer, larger calls matter most at batch 1.
        qkv = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
        bias = None
        if attn.q_proj.bias is not None:
            bias = torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias])
        gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
        return _Layer(layer.input_layernorm.weight, _linear(qkv, bias), _linear(attn.o_proj.weight),
                      layer.post_attention_layernorm.weight, _linear(gate_up), _linear(mlp.down_proj.weight))

    def weight_bytes(self) -> int:
        """Bytes of every weight the forward pass reads (embeddings and lm_head counted once if tied)."""
        seen: dict[int, int] = {}
        tensors = [self.embed, self.norm, self.lm_head]
        for layer in self.layers:
            tensors += [layer.input_norm, layer.post_norm]
            for module in layer.linears().values():
                tensors += list(module.parameters()) + list(module.buffers())
        for t in tensors:
            seen[t.data_ptr()] = t.numel() * t.element_size()
        return sum(seen.values())

    # -- helpers ---------------------------------------------------------------------------
    def _mlp(self, layer: _Layer, h: torch.Tensor) -> torch.Tensor:
        gate_up = layer.gate_up(rms(h, layer.post_norm, self.eps))
        inter = gate_up.shape[-1] // 2
        return h + layer.down(F.silu(gate_up[:, :inter]) * gate_up[:, inter:])

    def _qkv(self, layer: _Layer, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """Queries and keys after RoPE (one call for both), and values: `[n, heads, head_dim]` each."""
        qkv = layer.qkv(rms(h, layer.input_norm, self.eps))
        n, split = h.shape[0], (self.heads + self.kv_heads) * self.head_dim
        qk = rope(qkv[:, :split].reshape(n, self.heads + self.kv_heads, self.head_dim), cos, sin)
        q = qk[:, :self.heads]
        if q.stride(-1) != 1:  # flash attention reads whole head_dim rows (else SDPA falls back to math)
            q = q.contiguous()
        return q, qk[:, self.heads:], qkv[:, split:].reshape(n, self.kv_heads, self.head_dim)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.head(rms(h, self.norm, self.eps)).float()

    # -- prefill -----------------------------------------------------------------------------
    @torch.no_grad()
    def prefill(self, prompts: list[list[int]], all_logits: list[bool] | None = None
                ) -> tuple[list[Seq], list[torch.Tensor]]:
        """Run the prompts, store their keys/values; return their seqs and logits.

        Logits are `[1, vocab]` for the last position, or `[n, vocab]` for every position where
        `all_logits[i]` (needed for prefill logprobs).
        """
        lengths = [len(p) for p in prompts]
        seqs = [self.cache.add(n) for n in lengths]
        tokens = torch.tensor([t for p in prompts for t in p], dtype=torch.long)
        pos = torch.cat([torch.arange(n) for n in lengths])
        h = self.embed[tokens]
        cos, sin = self.cos[pos].unsqueeze(1), self.sin[pos].unsqueeze(1)
        k_cache, v_cache = self.cache.k, self.cache.v
        for index, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, h, cos, sin)
            outs = []
            start = 0
            for seq, n in zip(seqs, lengths, strict=True):
                qs = q[start:start + n].transpose(0, 1).unsqueeze(0)
                ks = k[start:start + n].transpose(0, 1)
                vs = v[start:start + n].transpose(0, 1)
                k_cache[index, seq.row, :, :n] = ks
                v_cache[index, seq.row, :, :n] = vs
                outs.append(self._causal_attention(qs, ks.unsqueeze(0), vs.unsqueeze(0), n))
                start += n
            attn = torch.cat(outs, dim=0)
            h = h + layer.o(attn)
            h = self._mlp(layer, h)
        logits = []
        start = 0
        for i, n in enumerate(lengths):
            if all_logits and all_logits[i]:
                logits.append(self.logits(h[start:start + n]))
            else:
                logits.append(self.logits(h[start + n - 1:start + n]))
            start += n
        return seqs, logits

    def _causal_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n: int,
                          offset: int = 0, mask: torch.Tensor | None = None) -> torch.Tensor:
        """`n` queries at positions offset..offset+n-1 over keys 0..offset+n-1 (`mask`: from `_chunk_mask`,
        built once per forward rather than once per layer)."""
        if mask is None:
            mask = self._chunk_mask(n, offset)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=self.kv_heads != self.heads
        )
        return out[0].transpose(0, 1).reshape(n, self.heads * self.head_dim)

    def _chunk_mask(self, n: int, offset: int) -> torch.Tensor | None:
        """The attention mask of `n` queries after `offset` cached positions; None where SDPA's
        `is_causal` is that mask."""
        mask = None
        if offset:
            # SDPA's is_causal aligns the mask top-left; a chunk after cached positions needs it bottom-right.
            qpos, kpos = torch.arange(offset, offset + n)[:, None], torch.arange(offset + n)[None, :]
            mask = kpos <= qpos
            if self.sliding_window:
                mask &= qpos - kpos < self.sliding_window
        elif self.sliding_window and n > self.sliding_window:
            idx = torch.arange(n)
            mask = (idx[None, :] <= idx[:, None]) & (idx[:, None] - idx[None, :] < self.sliding_window)
        return mask

    # -- decode ------------------------------------------------------------------------------
    def compile_decode(self, rows: Sequence[int]) -> float:
        """Compile the decode step's layer functions (`decode_step.CompiledDecode`) and warm them at these
        row counts, so that no later step compiles; returns the seconds taken. Layers only their own
        forward runs (bitsandbytes) keep the eager step."""
        if any(isinstance(w, torch.nn.Module) for layer in self.layers for w in layer.weights()):
            log.info("Decode step not compiled: its quantized layers run their own kernels")
            return 0.0
        self.compiled = CompiledDecode()
        return self.compiled.warm(self, rows)

    @torch.no_grad()
    def decode(self, tokens: list[int]) -> torch.Tensor:
        """One step for every running sequence, `tokens[i]` being row i's newest token."""
        seqs = self.cache.seqs
        b = len(seqs)
        assert len(tokens) == b, "one token per running sequence"
        known = [s.length for s in seqs]
        lengths = torch.tensor(known, dtype=torch.long)
        span = max(known) + 1
        self.cache.reserve(b, span)
        k_cache, v_cache = self.cache.k, self.cache.v
        rows = torch.arange(b)
        mask = None  # rows of one length (a batch that started together) attend to every position
        if self.sliding_window or min(known) < span - 1:
            keep = torch.arange(span)[None, :] <= lengths[:, None]
            if self.sliding_window:
                keep &= torch.arange(span)[None, :] > lengths[:, None] - self.sliding_window
            mask = keep[:, None, None, :]  # [b, 1, 1, span]
        first, second = (self.compiled.layer_in, self.compiled.layer_out) if self.compiled else (layer_in, layer_out)
        cos, sin = self.cos[lengths].unsqueeze(1), self.sin[lengths].unsqueeze(1)
        h = self.embed[torch.tensor(tokens, dtype=torch.long)]
        for index, layer in enumerate(self.layers):
            qkv, o, gate_up, down = layer.weights(packed=self.compiled is None)
            q, k, v = first(h, layer.input_norm, qkv, cos, sin, self.eps, self.heads, self.kv_heads)
            kc, vc = k_cache[index], v_cache[index]
            kc[rows, :, lengths] = k
            vc[rows, :, lengths] = v
            attn = F.scaled_dot_product_attention(q, kc[:b, :, :span], vc[:b, :, :span], attn_mask=mask)
            h = second(h, attn.reshape(b, self.heads * self.head_dim), o, layer.post_norm, gate_up, down, self.eps)
        for seq in seqs:
            seq.length += 1
        return self.logits(h)

    # -- mixed forward (chunked prefill) -------------------------------------------------------
    @torch.no_grad()
    def forward(self, rows: list[tuple[Seq, list[int]]], all_logits: list[bool] | None = None,
                store: list[Sequence[int] | None] | None = None, emits: list[bool] | None = None
                ) -> list[torch.Tensor]:
        """One forward over a mixed batch: row i computes `rows[i][1]` at positions
        `seq.length .. seq.length + n - 1`, attending to its own cached positions (causal within
        the chunk); its keys/values join its cache row and `seq.length` advances by n.

        A decode row is `(seq, [last_token])`; a prompt chunk is `(seq, chunk_ids)`, possibly
        continuing an earlier chunk or a prefix copied by `new_seq`. `store[i]`, when given, is one
        pool slot per token of row i where its keys/values are also written (prompt tokens the
        prefix cache may keep). Returns per-row logits: `[1, vocab]` for the row's last token, or
        `[n, vocab]` for every token where `all_logits[i]`. `self.last_logits` is then the
        `[len(rows), vocab]` tensor of every row's last-token logits, in `rows` order: the `[1, vocab]`
        elements are views of it, so a caller that wants them stacked need not copy them again.
        With `emits`, only the rows where it is true (a decode row, a prompt's last chunk) go through the
        LM head (a sixth of the weights, 49152 x 576 for SmolLM2): the others return `[0, vocab]` (unless
        `all_logits[i]`), and `self.last_logits` holds the emitting rows' logits only, in `rows` order.
        """
        if not rows:
            return []
        seqs = self.cache.seqs
        ns = [len(tokens) for _, tokens in rows]
        for seq, tokens in rows:
            if not tokens:
                raise ValueError("forward: every row needs at least one token")
            if not 0 <= seq.row < len(seqs) or seqs[seq.row] is not seq:
                raise ValueError("forward: a row's seq was released (or belongs to another runner)")
        if len({seq.row for seq, _ in rows}) != len(rows):
            raise ValueError("forward: a seq appears in more than one row")
        if all_logits is not None and len(all_logits) != len(rows):
            raise ValueError(f"forward: all_logits has {len(all_logits)} entries for {len(rows)} rows")
        if store is not None:
            if len(store) != len(rows):
                raise ValueError(f"forward: store has {len(store)} entries for {len(rows)} rows")
            for slots, n in zip(store, ns, strict=True):
                if slots is not None and len(slots) != n:
                    raise ValueError(f"forward: store lists {len(slots)} slots for a row of {n} tokens")
            if self.pool is None and any(slots is not None for slots in store):
                raise RuntimeError("forward with store needs the KV pool: call enable_pool(n_slots) first")
            if all(slots is None for slots in store):
                store = None
        if all_logits is not None and not any(all_logits):
            all_logits = None
        if emits is not None and len(emits) != len(rows):
            raise ValueError(f"forward: emits has {len(emits)} entries for {len(rows)} rows")
        if store is None and all_logits is None and len(rows) == len(seqs) and max(ns) == 1 \
                and (emits is None or all(emits)):
            return self._forward_decode(rows)
        return self._forward_mixed(rows, ns, all_logits, store, emits)

    def _forward_decode(self, rows: list[tuple[Seq, list[int]]]) -> list[torch.Tensor]:
        """Every running seq decodes one token: the tuned `decode` step, in rows' order."""
        order = [seq.row for seq, _ in rows]
        if order == list(range(len(rows))):
            logits = self.decode([tokens[0] for _, tokens in rows])
        else:
            by_row = [0] * len(rows)
            for seq, tokens in rows:
                by_row[seq.row] = tokens[0]
            logits = self.decode(by_row)[torch.tensor(order)]
        self.last_logits = logits
        return list(logits.split(1))

    def _forward_mixed(self, rows: list[tuple[Seq, list[int]]], ns: list[int], all_logits: list[bool] | None,
                       store: list[Sequence[int] | None] | None, emits: list[bool] | None) -> list[torch.Tensor]:
        starts = [seq.length for seq, _ in rows]
        self.cache.reserve(len(self.cache.seqs), max(s + n for s, n in zip(starts, ns, strict=True)))
        k_cache, v_cache = self.cache.k, self.cache.v
        offsets = [0]
        for n in ns:
            offsets.append(offsets[-1] + n)
        total = offsets[-1]
        h = self.embed[torch.tensor([t for _, tokens in rows for t in tokens], dtype=torch.long)]
        pos = torch.tensor([p for s, n in zip(starts, ns, strict=True) for p in range(s, s + n)], dtype=torch.long)
        cos, sin = self.cos[pos].unsqueeze(1), self.sin[pos].unsqueeze(1)
        chunks = [i for i, n in enumerate(ns) if n > 1]
        masks = {i: self._chunk_mask(ns[i], starts[i]) for i in chunks}

        # Rows of one token (decode rows, 1-token chunks) share one attention call over cache rows
        # 0..width-1, as `decode` does: a view of the cache, no gather. Cache rows inside that range
        # that are not among them get a query of zeros that sees position 0 only, output dropped.
        single = [i for i, n in enumerate(ns) if n == 1]
        if single:
            s_tok = torch.tensor([offsets[i] for i in single], dtype=torch.long)
            s_rows = [rows[i][0].row for i in single]
            s_row = torch.tensor(s_rows, dtype=torch.long)
            s_pos = torch.tensor([starts[i] for i in single], dtype=torch.long)
            width, span = max(s_rows) + 1, int(s_pos.max()) + 1
            dense = s_rows == list(range(width))
            at = torch.zeros(width, dtype=torch.long)
            at[s_row] = s_pos
            s_mask = None
            if not dense or self.sliding_window or int(s_pos.min()) < span - 1:
                keep = torch.arange(span)[None, :] <= at[:, None]
                if self.sliding_window:
                    keep &= torch.arange(span)[None, :] > at[:, None] - self.sliding_window
                s_mask = keep[:, None, None, :]
        rep = self.heads // self.kv_heads
        if store is not None:
            pairs = [(offsets[i] + j, slot) for i, slots in enumerate(store) if slots is not None
                     for j, slot in enumerate(slots)]
            st_tok = torch.tensor([p[0] for p in pairs], dtype=torch.long)
            st_slot = self.pool.index([p[1] for p in pairs])

        for index, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, h, cos, sin)
            kc, vc = k_cache[index], v_cache[index]
            if store is not None:
                self.pool.k[index, st_slot] = k[st_tok]
                self.pool.v[index, st_slot] = v[st_tok]
            attn = h.new_empty(total, self.heads * self.head_dim)
            for i in chunks:
                o, n, s, row = offsets[i], ns[i], starts[i], rows[i][0].row
                ks, vs = k[o:o + n].transpose(0, 1), v[o:o + n].transpose(0, 1)
                kc[row, :, s:s + n] = ks
                vc[row, :, s:s + n] = vs
                qs = q[o:o + n].transpose(0, 1).unsqueeze(0)
                if s:
                    ks, vs = kc[row, :, :s + n], vc[row, :, :s + n]
                attn[o:o + n] = self._causal_attention(qs, ks.unsqueeze(0), vs.unsqueeze(0), n, s, masks[i])
            if single:
                kc[s_row, :, s_pos] = k[s_tok]
                vc[s_row, :, s_pos] = v[s_tok]
                qg = q[s_tok].view(len(single), self.kv_heads, rep, self.head_dim)
                if not dense:
                    full = qg.new_zeros(width, self.kv_heads, rep, self.head_dim)
                    full[s_row] = qg
                    qg = full
                out = F.scaled_dot_product_attention(qg, kc[:width, :, :span], vc[:width, :, :span],
                                                     attn_mask=s_mask).reshape(width, -1)
                attn[s_tok] = out if dense else out[s_row]
            h = h + layer.o(attn)
            h = self._mlp(layer, h)

        emitting = [i for i in range(len(rows)) if emits is None or emits[i]]
        at = {i: j for j, i in enumerate(emitting)}
        last = self.logits(h[torch.tensor([offsets[i + 1] - 1 for i in emitting], dtype=torch.long)])
        out_logits = []
        for i, n in enumerate(ns):
            if all_logits is not None and all_logits[i]:
                full_logits = self.logits(h[offsets[i]:offsets[i] + n])
                if i in at:
                    last[at[i]] = full_logits[-1]  # one value per position whichever way it is read
                out_logits.append(full_logits)
            else:
                out_logits.append(last[at[i]:at[i] + 1] if i in at else last[:0])
        for (seq, _), n in zip(rows, ns, strict=True):
            seq.length += n
        self.last_logits = last
        return out_logits

    def release(self, seq: Seq) -> None:
        self.cache.release(seq)

    # -- prefix cache ------------------------------------------------------------------------
    def enable_pool(self, n_slots: int) -> KVPool:
        """Create the KV pool (`self.pool`) with `n_slots` token slots; only prefix caching needs it."""
        if n_slots < 1:
            raise ValueError(f"n_slots must be a positive number of token slots; got {n_slots}")
        self.pool = KVPool(len(self.layers), n_slots, self.kv_heads, self.head_dim, self.dtype)
        return self.pool

    @torch.no_grad()
    def new_seq(self, cached_slots: Sequence[int] = ()) -> Seq:
        """A new row whose first `len(cached_slots)` positions are copied from those pool slots
        (a prefix-cache hit, no compute); `seq.length` is that count."""
        n = len(cached_slots)
        if n and self.pool is None:
            raise RuntimeError("new_seq with cached_slots needs the KV pool: call enable_pool(n_slots) first")
        idx = self.pool.index(cached_slots) if n else None
        seq = self.cache.add(n)
        if n:
            # pool [layers, n, kv_heads, d] -> row [layers, kv_heads, n, d]
            self.cache.k[:, seq.row, :, :n] = self.pool.k[:, idx].transpose(1, 2)
            self.cache.v[:, seq.row, :, :n] = self.pool.v[:, idx].transpose(1, 2)
        return seq
