"""The decode step as CUDA graphs, captured at start-up for the batch sizes `--cuda-graphs` names, as TGI does.

A graph replays fixed kernels on fixed addresses, so a step's shapes must not change between replays. Two of a
decode step's do: its rows and its context. Rows are padded up to the next captured batch size (TGI's buckets:
the padded rows are free cache rows, writing at position 0 of rows no sequence holds, their logits dropped), and
the context up to a span bucket, a power of two from `SPAN_FLOOR` to the cache's positions, with a causal mask
built inside the graph from the rows' positions; so each (batch size, span bucket) pair is one graph, reading at
most twice the keys the step needs. Inputs are two small tensors (token ids, positions) copied in before a
replay; the logits are copied out after it (the graphs share one memory pool).

At the batch sizes `--compile-sizes` names (default 1), the graph holds the layers compiled by inductor
(`decode_step.CompiledDecode`: the elementwise ops fused, a one-row matmul as a reduction kernel streaming the
weight), compiled in the warm-up before the capture; a size whose compile or capture fails, or whose replay strays
from the eager step by more than bfloat16 rounding, is captured eagerly instead, with a warning: a start-up never
fails for the compiler.

`capture=False` runs the same padded, masked step eagerly: the CPU tests check it against the plain step there, and
run the capture's own logic (warm-up, compile, verification, fallbacks) with a stand-in for the graphs (`Capture`).
A cache re-laid as longer rows (`SlotCache.reserve`) moves the rows' addresses; its steps then run eagerly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from tgi_toolkit.engine.attention import causal_mask
from tgi_toolkit.engine.decode_step import CompiledDecode, decode_layers

log = logging.getLogger("tgi_toolkit.engine")

SPAN_FLOOR = 128
# The compiled step's logits against the eager step's, as a relative (2-norm) error: bfloat16 against float32 gave
# 1.3-2.1 % on random 32-layer Llamas (hidden 512 and 1024, on the CPU); a graph that baked in a wrong address is off
# by the order of 100 %.
COMPILED_TOLERANCE = 0.1


def span_buckets(positions: int, floor: int = SPAN_FLOOR) -> list[int]:
    """Context lengths a graph is captured for: powers of two from `floor`, then `positions` itself."""
    spans, span = [], floor
    while span < positions:
        spans.append(span)
        span *= 2
    return [*spans, positions]


class Graph(Protocol):
    def replay(self) -> None: ...


class Capture(Protocol):
    """How a step becomes a graph: `CudaCapture` on a card (the CPU tests stand in one that replays by running)."""

    def warm(self, run: Callable[[], None]) -> None:
        """Run `run` as the capture wants it run first."""

    def record(self, run: Callable[[], torch.Tensor]) -> tuple[Graph, torch.Tensor]:
        """`run` captured: the graph, and the output tensor each replay fills."""


class CudaCapture:
    """torch's CUDA graphs, all in one memory pool."""

    def __init__(self) -> None:
        self.pool: Any = None

    def warm(self, run: Callable[[], None]) -> None:
        # on a side stream first (cuBLAS picks its kernels, the allocator settles), as torch's docs ask
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            run()
        torch.cuda.current_stream().wait_stream(side)

    def record(self, run: Callable[[], torch.Tensor]) -> tuple[Graph, torch.Tensor]:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = run()
        self.pool = graph.pool()
        return graph, out


@dataclass
class _Step:
    """One (batch size, span) step: its input tensors, its output, and its graph (None: run eagerly)."""

    ids: torch.Tensor
    positions: torch.Tensor
    span: int
    logits: torch.Tensor | None = None
    graph: Graph | None = None


class GraphDecode:
    """Decode steps for `sizes` rows (each padded to the next size) over every span bucket of the runner's cache."""

    def __init__(self, runner: Any, sizes: Sequence[int], capture: bool, compile_sizes: Sequence[int] = (),
                 capturer: Capture | None = None) -> None:
        """`capture` False: no graphs, the steps run eagerly; else captured by `capturer` (default `CudaCapture`)."""
        started = time.perf_counter()
        cache = runner.cache
        if cache.seqs:
            raise RuntimeError("capture the decode step's graphs before any sequence runs")
        self.runner = runner
        self.view = (cache.rows, cache.positions)
        self.sizes = sorted({n for n in sizes if 0 < n <= cache.rows})
        self.spans = span_buckets(cache.positions)
        self.capturer = (capturer or CudaCapture()) if capture else None
        self.steps: dict[tuple[int, int], _Step] = {}
        self.compiled: CompiledDecode | None = None
        self.compiled_sizes = {n for n in compile_sizes if n in self.sizes}  # those whose graphs run it
        self.not_compiled: dict[int, str] = {}  # a size asked for and captured eagerly: why
        if self.compiled_sizes and not runner.step_weights()[2]:
            log.info("Decode step not compiled: its quantized layers run their own kernels")
            self.compiled_sizes = set()
        if self.compiled_sizes:
            self.compiled = CompiledDecode(runner.device.type)
        # Largest first: the smaller graphs then fit in the pool's blocks the larger ones left (as vLLM captures).
        for size in reversed(self.sizes):
            for span in reversed(self.spans):
                step = _Step(torch.zeros(size, dtype=torch.long, device=runner.device),
                             torch.zeros(size, dtype=torch.long, device=runner.device), span)
                # in inference mode, as the forwards that run the steps (so the compiled layers' guards hold there)
                with torch.inference_mode():
                    if capture:
                        self._capture(step)
                    elif size in self.compiled_sizes:
                        self._warm(step)  # compiled now, as before a capture, not by a request
                self.steps[(size, span)] = step
        if capture and self.steps:
            with torch.inference_mode():
                self._verify()
        self.seconds = time.perf_counter() - started
        if capture:
            sizes = ", ".join(map(str, sorted(self.compiled_sizes)))
            compiled = f"; layers compiled by inductor at batch sizes {sizes}" if sizes else ""
            log.info("Decode step captured as %d CUDA graphs (batch sizes %s, spans %s%s) in %.1f s", len(self.steps),
                     ", ".join(map(str, self.sizes)), ", ".join(map(str, self.spans)), compiled, self.seconds)

    def _run(self, step: _Step, compiled: bool = True) -> torch.Tensor:
        """The step's logits; through the compiled layers where its size has them, unless `compiled` is False."""
        r = self.runner
        h = r.embed[step.ids]
        cos, sin = r.cos[step.positions].unsqueeze(1), r.sin[step.positions].unsqueeze(1)
        mask = causal_mask(step.positions, step.span, r.sliding_window)[:, None, None, :]
        # the compiled layers multiply the plain weights: inductor takes no oneDNN-packed one (a CPU's)
        compiled = compiled and self.compiled is not None and step.ids.shape[0] in self.compiled_sizes
        weights, norms, _ = r.step_weights(packed=not compiled)
        layers = self.compiled.layers if compiled else decode_layers
        h = layers(h, weights, norms, cos, sin, r.cache.k, r.cache.v, step.positions, step.span, mask,
                   r.eps, r.heads, r.kv_heads)
        return r.logits(h)

    def _eager_instead(self, size: int, why: str) -> None:
        """Run `size`'s steps without the compiled layers from now on, saying why (a warning in the log)."""
        self.compiled_sizes.discard(size)
        self.not_compiled[size] = why
        log.warning("Decode step at batch size %d captured without inductor: %s", size, why)

    def _capture(self, step: _Step) -> None:
        def warm() -> None:
            for _ in range(2):
                self._warm(step)

        self.capturer.warm(warm)
        try:
            step.graph, step.logits = self.capturer.record(lambda: self._run(step))
        except Exception as exc:  # compiled code a graph cannot hold: the size's eager layers, captured instead
            size = step.ids.shape[0]
            if size not in self.compiled_sizes:
                raise
            self._eager_instead(size, f"its capture failed ({failure(exc)})")
            self._capture(step)

    def _warm(self, step: _Step) -> None:
        """One run before the capture: inductor compiles on a size's first; a compile that fails leaves the size to
        the eager step."""
        size = step.ids.shape[0]
        if size not in self.compiled_sizes:
            self._run(step)
            return
        try:
            self._run(step)
        except Exception as exc:  # inductor's and Triton's failures have many types; the eager step still serves
            self._eager_instead(size, f"the compile failed ({failure(exc)})")
            self._run(step)

    def _verify(self) -> None:
        """A replay against the same step run eagerly, at start-up: the largest size, and each compiled size. A
        capture that baked in a host value (or a kernel that misbehaves inside a graph) stops the server here, with
        this message, not its tokens later; a compiled size that strays is captured again, eagerly."""
        for size in sorted({self.sizes[-1], *self.compiled_sizes}, reverse=True):
            step = self.steps[(size, self.spans[0])]
            step.ids.copy_(torch.arange(size) % self.runner.vocab_size)
            step.positions.copy_(torch.arange(size) % step.span)
            step.graph.replay()
            replayed = step.logits.float().clone()
            eager = self._run(step, compiled=False).float()
            if size in self.compiled_sizes:
                error = relative_error(replayed, eager)
                if error <= COMPILED_TOLERANCE:
                    continue
                self._eager_instead(size, f"its logits were {error:.1%} off the eager step's (relative 2-norm)")
                for span in self.spans:
                    self._capture(self.steps[(size, span)])
                step.graph.replay()
                replayed = step.logits.float().clone()
            if not torch.allclose(replayed, eager, rtol=2e-2, atol=2e-2):
                raise RuntimeError(f"the decode step's CUDA graph ({size} rows, {step.span} positions) gives other "
                                   f"logits than the same step run eagerly (largest difference "
                                   f"{float((replayed - eager).abs().max()):.3g}); start with --cuda-graphs 0")

    def pick(self, rows: int, span: int) -> _Step | None:
        """The step that runs `rows` rows over `span` positions: the smallest size and span bucket that hold them."""
        size = next((n for n in self.sizes if n >= rows), None)
        bucket = next((s for s in self.spans if s >= span), None)
        return None if size is None or bucket is None else self.steps[(size, bucket)]

    def step(self, tokens: list[int], positions: list[int]) -> torch.Tensor | None:
        """Logits `[rows, vocab]` of a decode step whose row i (cache row i) takes `tokens[i]` at `positions[i]`,
        or None where no captured step holds it (the runner then runs its eager step)."""
        cache = self.runner.cache
        if (cache.rows, cache.positions) != self.view:
            return None
        step = self.pick(len(tokens), max(positions) + 1)
        if step is None:
            return None
        pad = step.ids.shape[0] - len(tokens)
        step.ids.copy_(torch.tensor(tokens + [0] * pad, dtype=torch.long))
        step.positions.copy_(torch.tensor(positions + [0] * pad, dtype=torch.long))
        if step.graph is None:
            return self._run(step)[:len(tokens)]
        step.graph.replay()
        return step.logits[:len(tokens)].clone()


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """|got - want| / |want| in the 2-norm (0 where both are zero)."""
    scale = float(want.norm())
    return float((got - want).norm()) / scale if scale else float(got.norm() != 0)


def failure(exc: BaseException) -> str:
    """An exception in one line: its type and its message's first line (inductor's run to many)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"
