"""The model runner: a Llama-family forward pass over a slot KV cache.

Why not `model.generate` or a transformers cache: continuous batching needs requests of
different lengths to share one decode step, and to join or leave between steps without their
prompts being recomputed. Here every running sequence owns one row of a preallocated cache
`[layers, rows, kv_heads, positions, head_dim]` (`kv_cache.SlotCache`). Running sequences always occupy rows
`0..B-1`, so a decode step reads a plain view of the cache; a sequence that leaves is replaced by
the last row (one row copied, not the whole cache).

Every pass is `forward(rows)`, a mixed batch as TGI 3 schedules it: each row computes its tokens at positions
`seq.length ..` (a decode row one token, a prompt chunk many, possibly continuing an earlier chunk). The
linear layers see every row's tokens as one `[tokens, hidden]` matrix; attention (`attention`, planned once
per forward) runs per prompt chunk (one call for new prompts of one length side by side), plus one call for all
one-token rows over a view of the cache rows.
`decode` (every running row decodes one token) and `prefill` (new prompts, whole) are two such forwards; a
decode step's layers multiply the weights as tensors (`decode_step.decode_layers`, run as TorchScript; or
compiled by `compile_decode`).

The prefix cache (TGI 3's) adds `KVPool` (`runner.pool`, from `enable_pool`): keys and values at the token
slots of the scheduler's block allocator (slot = block_id * block_size + offset). A forward writes a prompt's
KV there as well (`store`), and `new_seq(cached_slots)` starts a later request that shares the prefix by
copying those slots into its row instead of computing them.

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

from tgi_toolkit.engine import attention
from tgi_toolkit.engine.decode_step import (
    CompiledDecode,
    Weight,
    decode_layers,
    layer_in,
    layer_out,
    rms,
    scripted_decode_layers,
    weight_of,
)
from tgi_toolkit.engine.graphs import GraphDecode
from tgi_toolkit.engine.kv_cache import KVPool, Seq, SlotCache
from tgi_toolkit.engine.linear import SkinnyLinear

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

    def __init__(self, model: Any, max_rows: int, max_positions: int, kv_capacity_tokens: int | None = None,
                 pool_slots: int | None = None) -> None:
        """`max_rows` sequences at once, each of at most `max_positions` tokens; `kv_capacity_tokens` positions of
        KV cache in all (default: enough for `max_rows` rows of `max_positions`), allocated now; with
        `pool_slots`, the prefix cache's KV pool of that many token slots (`enable_pool`)."""
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
        self.device = self.embed.device  # every tensor the runner makes lives beside the weights
        self.norm = inner.norm.weight
        self.lm_head = model.lm_head.weight
        self.head = SkinnyLinear.from_weight(self.lm_head)  # the LM head as a layer's linear: packed where it can be
        self.layers = [self._fuse(layer) for layer in inner.layers]
        # RoPE table from the model's own rotary module, so every rope scaling variant is honoured.
        positions = torch.arange(max_positions, device=self.device).unsqueeze(0)
        probe = torch.zeros(1, dtype=torch.float32, device=self.device)
        cos, sin = inner.rotary_emb(probe, positions)
        self.cos = cos[0].to(self.dtype)
        self.sin = sin[0].to(self.dtype)
        self.cache = SlotCache(len(self.layers), self.kv_heads, self.head_dim, self.dtype,
                               max_rows, max_positions, kv_capacity_tokens, device=self.device)
        self.pool: KVPool | None = None
        self.compiled: CompiledDecode | None = None  # see compile_decode()
        self.graphs: GraphDecode | None = None  # CUDA graphs of the decode step (compile_decode on a GPU)
        self.scripted = scripted_decode_layers()  # the decode step's layers as TorchScript (None: from Python)
        # step_weights' lists by `packed`, with the modules they were read from
        self._step_args: dict[bool, tuple[list[torch.nn.Module], tuple[list[Weight], list[torch.Tensor], bool]]] = {}
        self.last_logits = torch.empty(0, device=self.device)  # see forward()
        if pool_slots:
            self.enable_pool(pool_slots)

    @staticmethod
    def _fuse(layer: Any) -> _Layer:
        attn, mlp = layer.self_attn, layer.mlp
        # One GEMM for q, k and v, one for gate and up: fewer, larger calls matter most at batch 1.
        qkv = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
        bias = None
        if attn.q_proj.bias is not None:
            bias = torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias])
        gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
        layer_of = SkinnyLinear.from_weight
        return _Layer(layer.input_layernorm.weight, layer_of(qkv, bias), layer_of(attn.o_proj.weight),
                      layer.post_attention_layernorm.weight, layer_of(gate_up), layer_of(mlp.down_proj.weight))

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

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.head(rms(h, self.norm, self.eps)).float()

    @torch.inference_mode()
    def prefill(self, prompts: list[list[int]], all_logits: list[bool] | None = None
                ) -> tuple[list[Seq], list[torch.Tensor]]:
        """The prompts as new sequences, run by one `forward`; returns their seqs and logits: `[1, vocab]` for
        the last position, or `[n, vocab]` for every position where `all_logits[i]` (prefill logprobs).
        Start-up warm-up, tests and benchmarks use it; the server's prompts go through `forward`."""
        # room for the prompts and each one's first generated token
        self.cache.reserve(len(self.cache.seqs) + len(prompts), max(map(len, prompts), default=0) + 1)
        seqs = [self.new_seq() for _ in prompts]
        return seqs, self.forward(list(zip(seqs, prompts, strict=True)), all_logits)

    def compile_decode(self, rows: Sequence[int], compile_sizes: Sequence[int] = ()) -> float:
        """Compile the decode step's layer functions (`decode_step.CompiledDecode`) and warm them at these
        row counts, so that no later step compiles; returns the seconds taken. Layers only their own
        forward runs (bitsandbytes) keep the eager step. On a CUDA card the whole step (embedding to logits) is
        captured as CUDA graphs at these batch sizes instead (`graphs.GraphDecode`), as TGI captures them, with the
        layers compiled inside the graphs of `compile_sizes`."""
        if self.device.type == "cuda":
            self.graphs = GraphDecode(self, rows, capture=True, compile_sizes=compile_sizes)
            return self.graphs.seconds
        if not self.step_weights()[2]:
            log.info("Decode step not compiled: its quantized layers run their own kernels")
            return 0.0
        self.compiled = CompiledDecode()
        return self.compiled.warm(self, rows)

    @torch.inference_mode()
    def decode(self, tokens: list[int]) -> torch.Tensor:
        """One step for every running sequence, `tokens[i]` being row i's newest token: `forward` with every
        row decoding. Returns the `[rows, vocab]` logits."""
        seqs = self.cache.seqs
        assert len(tokens) == len(seqs), "one token per running sequence"
        if not seqs:
            return torch.empty(0, self.vocab_size, device=self.device)
        self.forward([(seq, [token]) for seq, token in zip(seqs, tokens, strict=True)])
        return self.last_logits

    @torch.inference_mode()
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
        # The decode step: every running row decodes one token, all emit. Its rows run in cache-row order (the
        # one-token rows read cache rows 0..b-1 as they are) and its layers multiply tensors (`decode_step`).
        step = store is None and all_logits is None and len(rows) == len(seqs) and max(ns) == 1 \
            and (emits is None or all(emits))
        order = None
        if step and any(seq.row != i for i, (seq, _) in enumerate(rows)):
            order = torch.tensor([seq.row for seq, _ in rows], device=self.device)
            rows = sorted(rows, key=lambda r: r[0].row)
        self.cache.reserve(len(seqs), max(seq.length + len(tokens) for seq, tokens in rows))
        if step:
            tokens = [ids[0] for _, ids in rows]
            # a CUDA graph of the whole step where one was captured for this batch and context (graphs.py)
            logits = self.graphs.step(tokens, [seq.length for seq, _ in rows]) if self.graphs is not None else None
            if logits is None:
                plan = attention.plan([(seq.row, seq.length, 1) for seq, _ in rows], self.sliding_window,
                                      device=self.device)
                logits = self.logits(self._layers(plan, tokens, step))
            self.last_logits = logits if order is None else logits[order]
            out_logits = list(self.last_logits.split(1))
        else:
            plan = attention.plan([(seq.row, seq.length, len(ids)) for seq, ids in rows], self.sliding_window,
                                  store, self.pool, device=self.device)
            h = self._layers(plan, [t for _, ids in rows for t in ids], step)
            out_logits = self._read_logits(h, ns, all_logits, emits)
        for (seq, _), n in zip(rows, ns, strict=True):
            seq.length += n
        return out_logits

    def _layers(self, plan: attention.AttentionPlan, tokens: list[int], step: bool) -> torch.Tensor:
        """The decoder layers over the forward's tokens: the hidden states after the last."""
        h = self.embed[torch.tensor(tokens, dtype=torch.long, device=self.device)]
        cos, sin = self.cos[plan.positions].unsqueeze(1), self.sin[plan.positions].unsqueeze(1)
        if step:  # the layers' tensors: compiled (`compile_decode`: the plain weights), else in TorchScript where it
            # can take them
            one = plan.one_token
            if self.compiled is not None:
                weights, norms, _ = self.step_weights(packed=False)
                run = self.compiled.layers
            else:
                weights, norms, tensors_only = self.step_weights()
                run = self.scripted if self.scripted and tensors_only else decode_layers
            return run(h, weights, norms, cos, sin, self.cache.k, self.cache.v, one.positions, one.span, one.mask,
                       self.eps, self.heads, self.kv_heads)
        # any other forward (prompt chunks: many rows) runs the layers' own forward (`F.linear` past a few rows)
        for index, layer in enumerate(self.layers):
            qkv, o, gate_up, down = layer.linears().values()
            q, k, v = layer_in(h, layer.input_norm, qkv, cos, sin, self.eps, self.heads, self.kv_heads)
            attn = attention.attend(plan, index, q, k, v, self.cache.k, self.cache.v, self.pool)
            h = layer_out(h, attn, o, layer.post_norm, gate_up, down, self.eps)
        return h

    def step_weights(self, packed: bool = True) -> tuple[list[Weight], list[torch.Tensor], bool]:
        """Every layer's weights as the decode step takes them (`packed` False: the plain ones, which inductor
        compiles) and its two norms, in layer order, and whether all are tensors (TorchScript takes no module).
        Kept between steps (building them was 1-2 % of a one-row step); built again when a layer's linear modules
        change (`quantization.quantize_runner` replaces them)."""
        modules = [m for layer in self.layers for m in layer.linears().values()]
        held = self._step_args.get(packed)
        if held is None or held[0] != modules:
            weights = [w for layer in self.layers for w in layer.weights(packed)]
            norms = [n for layer in self.layers for n in (layer.input_norm, layer.post_norm)]
            held = self._step_args[packed] = (modules, (weights, norms, all(isinstance(w, tuple) for w in weights)))
        return held[1]

    def _read_logits(self, h: torch.Tensor, ns: list[int], all_logits: list[bool] | None,
                     emits: list[bool] | None) -> list[torch.Tensor]:
        """`forward`'s per-row logits from the last hidden states; sets `self.last_logits`."""
        offsets = [0]
        for n in ns:
            offsets.append(offsets[-1] + n)
        emitting = [i for i in range(len(ns)) if emits is None or emits[i]]
        at = {i: j for j, i in enumerate(emitting)}
        last = self.logits(h[torch.tensor([offsets[i + 1] - 1 for i in emitting], dtype=torch.long,
                                          device=self.device)])
        out_logits = []
        for i, n in enumerate(ns):
            if all_logits is not None and all_logits[i]:
                full_logits = self.logits(h[offsets[i]:offsets[i] + n])
                if i in at:
                    last[at[i]] = full_logits[-1]  # one value per position whichever way it is read
                out_logits.append(full_logits)
            else:
                out_logits.append(last[at[i]:at[i] + 1] if i in at else last[:0])
        self.last_logits = last
        return out_logits

    @torch.inference_mode()
    def release(self, seq: Seq) -> None:
        self.cache.release(seq)

    # -- prefix cache ------------------------------------------------------------------------
    def enable_pool(self, n_slots: int) -> KVPool:
        """Create the KV pool (`self.pool`) with `n_slots` token slots; only prefix caching needs it."""
        if n_slots < 1:
            raise ValueError(f"n_slots must be a positive number of token slots; got {n_slots}")
        self.pool = KVPool(len(self.layers), n_slots, self.kv_heads, self.head_dim, self.dtype, self.device)
        return self.pool

    @torch.inference_mode()
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
