"""A host-bound forward beside a thread that takes the GIL: how long the forward is held up by a second of that
thread's Python, and what each of its takings of the GIL costs beyond it.

    .venv/bin/python benchmarks/gil_contention.py [--repeats 20] [--layers 24]

The embedded engine is one process: its front end (HTTP, validation, tokenization, streaming) runs on the event loop's
thread, its forwards on the compute thread, under one GIL. On a card an eager forward's host issues every kernel from
Python, so the front end's Python holds the forward up; the simulator charges a forward the front end's seconds one
for one (simulate.events, `frontend_stalls_forwards`). On the H200 (2026-11-29) the first prompt's forward of a
batch grew about 5 ms when one other request came in during it (batch 2) and about 0.9 ms a request at batch 64: more
than the front end's Python a request takes on this 2-core CPU (0.43-0.53 ms, benchmarks/engine_host_rows.py).

Here the contender is a thread that, like the loop between two callbacks, sleeps with the GIL released and wakes to
run a slice of Python: `burn_s` of its own CPU every `every_s`. Each row: the forward's median wall time beside it,
its stretch over the forward alone, the contender's CPU seconds and slices during the forward, and the slices it
would have run unhindered (the forward's time over `every_s`; fewer is the contender kept waiting for the GIL).
The GPU probe runs it on the card's host (step 4); this script runs it on the tiny random model made `--layers` deep
(a forward of about 20 ms, the 8B's on an H200, spanning many slices) on this CPU, whose forward is host-bound too.
No target: it prints what it measured.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# (the Python seconds of one slice, the seconds from one slice's start to the next): short callbacks often, as the
# loop runs a request's intake; longer ones less often, as it tokenizes a long prompt
CONTENDERS = ((50e-6, 1e-3), (500e-6, 2e-3))


class Contender:
    """A thread running slices of `burn_s` of its own CPU in Python, sleeping `every_s - burn_s` between them (the
    GIL released meanwhile). Its CPU clock and its slice count are read from other threads."""

    def __init__(self, burn_s: float, every_s: float) -> None:
        self.burn_s, self.every_s = burn_s, every_s
        self.slices = 0
        self._clock: int | None = None
        self._stop, self._ready = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, name="contender", daemon=True)

    @property
    def label(self) -> str:
        return f"{self.burn_s * 1e6:.0f} us of Python every {self.every_s * 1e3:g} ms"

    def _run(self) -> None:
        self._clock = time.pthread_getcpuclockid(threading.get_ident())
        self._ready.set()
        while not self._stop.is_set():
            began = time.thread_time()
            while time.thread_time() - began < self.burn_s:
                sum(range(100))
            self.slices += 1
            time.sleep(max(0.0, self.every_s - self.burn_s))

    def cpu_s(self) -> float:
        assert self._clock is not None, "the contender has not started"
        return time.clock_gettime(self._clock)

    def __enter__(self) -> Contender:
        self._thread.start()
        self._ready.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def beside(forward: Callable[[], float], repeats: int,
           contenders: tuple[tuple[float, float], ...] = CONTENDERS) -> list[dict[str, Any]]:
    """`forward()` (one forward; its wall seconds) `repeats` times alone, then beside each contender: per contender
    the medians of the forward's wall time, of the contender's CPU and slices during it, and the stretch over the
    forward alone (milliseconds)."""
    if not hasattr(time, "pthread_getcpuclockid"):
        return []  # no per-thread CPU clock on this platform (macOS)
    forward()  # warm
    alone = statistics.median(forward() for _ in range(repeats))
    rows = []
    for burn_s, every_s in contenders:
        walls, cpus, slices = [], [], []
        with Contender(burn_s, every_s) as contender:
            time.sleep(every_s)  # its first slice is behind it
            for _ in range(repeats):
                cpu, count = contender.cpu_s(), contender.slices
                walls.append(forward())
                cpus.append(contender.cpu_s() - cpu)
                slices.append(contender.slices - count)
        wall = statistics.median(walls)
        rows.append({"beside": contender.label, "wall_ms": round(wall * 1e3, 3), "alone_ms": round(alone * 1e3, 3),
                     "stretch_ms": round((wall - alone) * 1e3, 3),
                     "other_cpu_ms": round(statistics.median(cpus) * 1e3, 3),
                     "slices": statistics.median(slices), "unhindered_slices": round(wall / every_s, 1)})
    return rows


def tiny_forward(layers: int, tokens: int = 128) -> Callable[[], float]:
    """A prompt forward of `tokens` on gpu_probe's tiny random Llama, `layers` deep, on this CPU, as the probe's
    "prompt x1"."""
    import json
    import tempfile

    import torch

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_probe

    from tgi_toolkit.engine.model import load_random
    from tgi_toolkit.engine.runner import LlamaRunner

    folder = Path(tempfile.mkdtemp(prefix="gil_contention-"))
    (folder / "config.json").write_text(json.dumps({**gpu_probe.TINY, "num_hidden_layers": layers}))
    loaded = load_random(str(folder), dtype="float32")
    runner = LlamaRunner(loaded.model, max_rows=1, max_positions=2 * tokens)

    def once() -> float:
        with torch.inference_mode():
            seq = runner.new_seq()
            began = time.perf_counter()
            runner.forward([(seq, list(range(tokens)))])
            seconds = time.perf_counter() - began
            runner.release(seq)
        return seconds

    return once


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--layers", type=int, default=24)
    args = parser.parse_args(argv)
    rows = beside(tiny_forward(args.layers), args.repeats)
    if not rows:
        print("gil_contention: this platform has no per-thread CPU clock")
        return 0
    print(f"a 128-token prompt forward of the tiny random model, {args.layers} layers, alone: "
          f"{rows[0]['alone_ms']:.3f} ms (median of {args.repeats})")
    for row in rows:
        per = row["stretch_ms"] / row["other_cpu_ms"] if row["other_cpu_ms"] else float("nan")
        print(f"beside {row['beside']}: {row['wall_ms']:.3f} ms, {row['stretch_ms']:+.3f} ms for "
              f"{row['other_cpu_ms']:.3f} ms of its CPU ({per:.2f} ms a ms) in {row['slices']} slices "
              f"({row['unhindered_slices']} unhindered)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
