"""The kernel timings `tgi-toolkit profile-gpu` (costs.profile) walks: a model's shapes on one shard, the clock, and one
method of a `Walk` per table (copies, GEMMs, compiled GEMMs, generation and context attention), each adding its rows
to a `Profile` until the budget's deadline."""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

GEMM_KERNEL = "torch.nn.functional.linear"
FP8_KERNEL = "torch._scaled_mm"
COMPILED_KERNEL = "torch.compile (inductor)"
COMPILED_PROJECTIONS = ("qkv", "o", "gate_up", "down")  # what the engine's compiled decode layers hold
HOST_CALLS = 400  # calls a host timing issues back to back (a CUDA launch queue holds about a thousand)
GRAPH_CALLS = 20  # compiled calls captured in one CUDA graph: a replay's time over them is one call's, launch-free
ATTENTION_KERNEL = "torch.nn.functional.scaled_dot_product_attention"
CONTEXT_TOKENS = 16384  # batch x isl at most: past it a prefill is chunked anyway
# A GEMM of fewer rows reads the same weight and less input, so one timed past this ratio of the next larger row
# count's is timed again after the walk (the H100's bf16 6144 x 4096 at 16 rows: 6.0x its 32 rows', while the engine's
# batch-16 step did not pay it); the lower of the two stands, so a kernel that is truly slower there stays slower.
RETIME_RATIO = 1.25
# On a card a kernel timed alone between two events also times its launch (the card idles while the host issues it),
# so one shorter than GRAPH_BELOW_MS is timed again as the engine's CUDA graphs run it, launch-free (`replay_ms`), as
# AIConfigurator's collectors time theirs; a GEMM's there over copies of its weight of L2_BYTES at least (each read
# from memory, as each layer's weight is in the engine's step; the card's L2 holds 50-60 MB), as its collector cycles
# six layers. The H200's eager one-row 4096 x 4096 GEMM read 29-47 us (three probes), compiled in a graph 9-12 us.
GRAPH_BELOW_MS = 0.5
L2_BYTES = 256 * 2**20
MAX_COPIES = 16  # a small model's weights (a 4096 x 4096 bf16 one takes 8 copies)
TIMING = f"under {GRAPH_BELOW_MS} ms a CUDA graph's replay, a GEMM's over {L2_BYTES >> 20} MiB of its weight's copies"


@dataclass(frozen=True)
class Shard:
    """The sizes one shard computes: heads and KV heads on it, and each projection's (n, k)."""

    heads: int
    kv_heads: int
    head_dim: int
    gemms: dict[str, tuple[int, int]]

    @classmethod
    def of(cls, config: Mapping[str, Any], num_shard: int = 1) -> Shard:
        """Column-parallel QKV and gate/up split n, row-parallel O and down split k, the LM head splits the vocab
        (as TGI shards them); KV heads fewer than shards are replicated, one per shard."""
        heads = int(config["num_attention_heads"])
        kv = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
        hidden, inter = int(config["hidden_size"]), int(config["intermediate_size"])
        if heads % num_shard:
            raise ValueError(f"--num-shard {num_shard} must divide the model's {heads} attention heads")
        h, k = heads // num_shard, max(1, kv // num_shard)
        gemms = {"qkv": ((h + 2 * k) * head_dim, hidden), "o": (hidden, h * head_dim),
                 "gate_up": (2 * inter // num_shard, hidden), "down": (hidden, inter // num_shard),
                 "lm_head": (math.ceil(int(config["vocab_size"]) / num_shard), hidden)}
        return cls(h, k, head_dim, gemms)


@dataclass
class Clock:
    """Median milliseconds of a call: CUDA events around each call on a card, perf_counter on a CPU."""

    device: str
    warmup: int = 3
    repeats: int = 10

    def median_ms(self, call: Callable[[], Any]) -> float:
        import torch

        for _ in range(self.warmup):
            call()
        times = []
        if self.device == "cuda":
            torch.cuda.synchronize()
            for _ in range(self.repeats):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                call()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
        else:
            for _ in range(self.repeats):
                began = time.perf_counter()
                call()
                times.append((time.perf_counter() - began) * 1e3)
        return float(statistics.median(times))

    def kernel_ms(self, call: Callable[[], Any], rounds: Callable[[], Any] | None = None, per_round: int = 1
                  ) -> float:
        """Median milliseconds of a kernel's call: `median_ms`, and on a card where that is under GRAPH_BELOW_MS,
        `replay_ms` of `rounds` (default `call`) over its `per_round` calls instead."""
        ms = self.median_ms(call)
        if self.device != "cuda" or ms >= GRAPH_BELOW_MS:
            return ms
        return self.replay_ms(rounds or call) / per_round

    def replay_ms(self, call: Callable[[], Any]) -> float:
        """Median milliseconds of `call` as a CUDA graph replays it (GRAPH_CALLS captured back to back, after the
        warm-up, which is where a compiled call compiles); on a CPU, `median_ms`."""

        if self.device != "cuda":
            return self.median_ms(call)
        return self.median_ms(captured(call, GRAPH_CALLS, max(self.warmup, 1)).replay) / GRAPH_CALLS


def captured(call: Callable[[], Any], calls: int, warmup: int) -> Any:
    """A CUDA graph of `calls` calls of `call` back to back, captured after `warmup` calls on a side stream (where a
    compiled call compiles and cuBLAS picks its kernels), as torch.cuda.graphs asks."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    return graph


@dataclass
class Profile:
    """The rows measured so far, table by table, and what the budget left out."""

    device_name: str
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    retimed: dict[str, tuple[float, float]] = field(default_factory=dict)  # row: (first ms, second ms)

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.rows.setdefault(table, []).append(row)


def _each(calls: list[Callable[[], Any]]) -> None:
    for call in calls:
        call()


def _linear(x: Any, weight: Any) -> Any:
    import torch.nn.functional as F

    return F.linear(x, weight)  # a Python function for torch.compile to trace (F.linear itself is a builtin)


@dataclass
class Walk:
    """One profile's walk over its tables: the shard's shapes on `device` in `dtype`, timed by `clock` until
    `deadline` (time.perf_counter), each row into `result` with the `common` columns."""

    result: Profile
    shard: Shard
    device: str
    dtype: str
    clock: Clock
    deadline: float
    common: dict[str, Any]

    @property
    def torch_dtype(self) -> Any:
        import torch

        return getattr(torch, self.dtype)

    def within(self, table: str) -> bool:
        """Whether time is left for one more of `table`'s rows; counts the row left out if not."""
        if time.perf_counter() < self.deadline:
            return True
        self.result.skipped[table] = self.result.skipped.get(table, 0) + 1
        return False

    def copies(self, sizes: tuple[int, ...]) -> None:
        import torch

        for size in sizes:
            if not self.within("mem_perf"):
                continue
            src = torch.empty(size, dtype=torch.uint8, device=self.device)
            dst = torch.empty_like(src)
            ms = self.clock.median_ms(partial(dst.copy_, src))
            self.result.add("mem_perf", {"device": self.result.device_name, "op_name": "copy", "bytes": size,
                                         "latency": ms})

    def gemms(self, tokens: tuple[int, ...]) -> None:
        """F.linear (and fp8's _scaled_mm where the card has it) at each shard projection's (n, k) and `tokens`
        rows; then `retime_gemms`."""
        from tgi_toolkit.config.embedded import has_fp8

        kernels = (GEMM_KERNEL, FP8_KERNEL) if has_fp8(self.device) else (GEMM_KERNEL,)
        for n, k in dict.fromkeys(self.shard.gemms.values()):  # O and down share (n, k) when hidden == intermediate
            weights = self._weights(n, k, kernels)
            for m in tokens:
                for kernel in kernels:
                    if not self.within("gemm_perf"):
                        break
                    try:
                        ms = self._gemm_ms(kernel, m, weights[kernel])
                    except RuntimeError as exc:  # a shape cuBLASLt's fp8 kernels refuse: the bf16 row stands
                        self.result.skipped[f"fp8 m={m} n={n} k={k}: {exc}"[:120]] = 1
                        continue
                    dtype = "fp8" if kernel == FP8_KERNEL else self.dtype
                    self.result.add("gemm_perf", self._gemm_row(kernel, dtype, m, n, k, ms))
            del weights  # the LM head's is a gigabyte: freed before the next shape's
        self.retime_gemms()

    def retime_gemms(self) -> None:
        """Time again each GEMM row slower than RETIME_RATIO x the next larger row count's of its kernel and shape;
        the lower time stands, and `result.retimed` keeps both."""
        rows = self.result.rows.get("gemm_perf", [])
        shapes: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
        for row in rows:
            shapes.setdefault((row["kernel_source"], row["n"], row["k"]), []).append(row)
        for (kernel, n, k), same in shapes.items():
            same.sort(key=lambda row: row["m"])
            weights = None  # built for the shape's first row timed again, if any
            for row, larger in reversed(list(itertools.pairwise(same))):  # from the largest: its time is final
                # past the deadline a row keeps its one time (and is no row left out: `within` would count it)
                if row["latency"] > RETIME_RATIO * larger["latency"] and time.perf_counter() < self.deadline:
                    weights = self._weights(n, k, (kernel,))[kernel] if weights is None else weights
                    again = self._gemm_ms(kernel, row["m"], weights)
                    self.result.retimed[f"{kernel} m={row['m']} n={n} k={k}"] = (row["latency"], again)
                    row["latency"] = min(row["latency"], again)

    def _weights(self, n: int, k: int, kernels: tuple[str, ...]) -> dict[str, list[Any]]:
        """A random `[n, k]` weight, as each of `kernels` multiplies it (fp8's converted once), in copies of
        L2_BYTES at least (MAX_COPIES at most) where the clock is a card's (`Clock.kernel_ms`), else one."""
        import torch

        weight = torch.randn(n, k, device=self.device, dtype=self.torch_dtype) * 0.02
        out = {}
        for kernel in kernels:
            w = weight.to(torch.float8_e4m3fn) if kernel == FP8_KERNEL else weight
            copies = min(math.ceil(L2_BYTES / (w.numel() * w.element_size())), MAX_COPIES) \
                if self.clock.device == "cuda" else 1
            out[kernel] = [w, *(w.clone() for _ in range(copies - 1))]
        return out

    def _gemm_ms(self, kernel: str, m: int, weights: list[Any]) -> float:
        """`kernel`'s median time for `m` rows against `weights` (copies of one, from `_weights`): the first's
        alone, or in a graph over all where short (`Clock.kernel_ms`)."""
        import torch
        import torch.nn.functional as F

        x = torch.randn(m, weights[0].shape[1], device=self.device, dtype=self.torch_dtype)
        if kernel == GEMM_KERNEL:
            calls = [partial(F.linear, x, w) for w in weights]
        else:
            one = torch.ones((), device=self.device)
            x8 = x.to(torch.float8_e4m3fn)
            calls = [partial(torch._scaled_mm, x8, w.t(), one, one, out_dtype=self.torch_dtype) for w in weights]
        return self.clock.kernel_ms(calls[0], partial(_each, calls), len(calls))

    def compiled_gemms(self, sizes: tuple[int, ...]) -> None:
        """The compiled decode layers' GEMMs (COMPILED_PROJECTIONS) at `sizes` rows. A compile or capture that fails
        is recorded in `skipped` with its error, and that shape is left out: the engine then runs that size's layers
        eagerly too, and the cost model prices them from `gemm_perf`."""
        import torch

        from tgi_toolkit.config.embedded import CUDA_COMPILE_OPTIONS

        options = dict(CUDA_COMPILE_OPTIONS) if self.device == "cuda" else None
        for n, k in dict.fromkeys(self.shard.gemms[name] for name in COMPILED_PROJECTIONS):
            weight = torch.randn(n, k, device=self.device, dtype=self.torch_dtype) * 0.02
            for m in sizes:
                if not self.within("compiled_gemm_perf"):
                    continue
                x = torch.randn(m, k, device=self.device, dtype=self.torch_dtype)
                torch.compiler.reset()  # each shape its own compile: no recompile limit reached, no stale guard
                compiled = torch.compile(_linear, fullgraph=True, dynamic=False, options=options)
                try:
                    ms = self.clock.replay_ms(partial(compiled, x, weight))
                except Exception as exc:  # inductor's and the capture's errors have no common base
                    self.result.skipped[f"compiled m={m} n={n} k={k}: {type(exc).__name__}: {exc}"[:160]] = 1
                    continue
                self.result.add("compiled_gemm_perf", self._gemm_row(COMPILED_KERNEL, self.dtype, m, n, k, ms))
        if sizes:
            torch.compiler.reset()

    def generation_attention(self, batches: tuple[int, ...], steps: tuple[int, ...]) -> None:
        import torch
        import torch.nn.functional as F

        shard, dtype = self.shard, self.torch_dtype
        group = shard.heads // shard.kv_heads
        for step in steps:
            for batch in batches:
                if not self.within("generation_attention_perf"):
                    continue
                q = torch.randn(batch, shard.kv_heads, group, shard.head_dim, device=self.device, dtype=dtype)
                k = torch.randn(batch, shard.kv_heads, step, shard.head_dim, device=self.device, dtype=dtype)
                v = torch.randn_like(k)
                ms = self.clock.kernel_ms(partial(F.scaled_dot_product_attention, q, k, v))
                self.result.add("generation_attention_perf",
                                self._attention_row("generation_attention", batch, 1, step, ms))

    def context_attention(self, batches: tuple[int, ...], lengths: tuple[int, ...]) -> None:
        import torch
        import torch.nn.functional as F

        shard, dtype = self.shard, self.torch_dtype
        gqa = shard.heads != shard.kv_heads
        for isl in lengths:
            for batch in batches:
                if batch * isl > CONTEXT_TOKENS or not self.within("context_attention_perf"):
                    continue
                q = torch.randn(batch, shard.heads, isl, shard.head_dim, device=self.device, dtype=dtype)
                k = torch.randn(batch, shard.kv_heads, isl, shard.head_dim, device=self.device, dtype=dtype)
                v = torch.randn_like(k)
                ms = self.clock.kernel_ms(partial(F.scaled_dot_product_attention, q, k, v, is_causal=True,
                                                  enable_gqa=gqa))
                self.result.add("context_attention_perf", self._attention_row("context_attention", batch, isl, 0, ms))

    def host(self, calls: int = HOST_CALLS) -> None:
        """The host's seconds to issue one small kernel from Python (`torch_call`: `torch.add` on 256 elements,
        the device not waited on between calls: what each of an eager forward's calls costs the host beside its
        kernel), and on a card to launch a captured CUDA graph (`graph_replay`); each the median over 5 runs of
        `calls` calls."""
        import torch

        if not self.within("host_perf"):
            return
        a = torch.ones(256, device=self.device, dtype=self.torch_dtype)
        out = torch.empty_like(a)
        self.result.add("host_perf", self._host_row("torch_call", calls, partial(torch.add, a, a, out=out)))
        if self.device == "cuda":
            graph = captured(partial(torch.add, a, a, out=out), 1, 1)
            self.result.add("host_perf", self._host_row("graph_replay", calls, graph.replay))

    def _host_row(self, op: str, calls: int, call: Callable[[], Any]) -> dict[str, Any]:
        return {**self.common, "op_name": op, "calls": calls,
                "latency": per_call_ms(call, calls, self.device, max(self.clock.warmup, 1) * 10)}

    def _gemm_row(self, kernel: str, dtype: str, m: int, n: int, k: int, ms: float) -> dict[str, Any]:
        return {**self.common, "op_name": "gemm", "kernel_source": kernel, "gemm_dtype": dtype, "m": m, "n": n,
                "k": k, "latency": ms}

    def _attention_row(self, op: str, batch: int, isl: int, step: int, ms: float) -> dict[str, Any]:
        shard = self.shard
        return {**self.common, "op_name": op, "kernel_source": ATTENTION_KERNEL, "batch_size": batch, "isl": isl,
                "num_heads": shard.heads, "num_key_value_heads": shard.kv_heads, "head_dim": shard.head_dim,
                "beam_width": 1, "attn_dtype": self.dtype, "kv_cache_dtype": self.dtype, "step": step,
                "window_size": 0, "latency": ms}


def per_call_ms(call: Callable[[], Any], calls: int = HOST_CALLS, device: str = "cpu", warmup: int = 10) -> float:
    """Milliseconds a call of `call` costs the host, issued `calls` times back to back without waiting on the
    device: the median of 5 runs after `warmup` calls (profile-gpu's host_perf rows)."""
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(warmup):
        call()
    runs = []
    for _ in range(5):
        sync()
        began = time.perf_counter()
        for _ in range(calls):
            call()
        runs.append((time.perf_counter() - began) / calls * 1e3)
    sync()
    return float(statistics.median(runs))
