"""benchmarks/gil_contention.py: the contender thread the GPU probe sets beside a forward (its slices of its own CPU,
read from another thread), and the rows `beside` makes of a forward alone and beside each contender."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gil_contention  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(time, "pthread_getcpuclockid"), reason="no per-thread CPU clock here")


def test_the_contender_runs_slices_of_its_own_cpu_and_sleeps_between_them():
    """Over 0.3 s of wall time, a contender of 2 ms slices every 10 ms runs at least one slice, and its CPU clock (read
    from this thread) holds at least every whole slice that ended in the window but the one that began before it;
    while it sleeps its clock stands still, so the caller's own CPU is not on it."""
    with gil_contention.Contender(0.002, 0.010) as contender:
        cpu, count = contender.cpu_s(), contender.slices
        time.sleep(0.3)
        used, slices = contender.cpu_s() - cpu, contender.slices - count
    assert slices >= 1
    assert used >= (slices - 1) * 0.002
    assert contender.label == "2000 us of Python every 10 ms"


def test_beside_times_the_forward_alone_then_beside_each_contender():
    calls = []

    def forward() -> float:
        began = time.perf_counter()
        while time.perf_counter() - began < 0.004:  # 4 ms of this thread's Python
            sum(range(100))
        calls.append(1)
        return time.perf_counter() - began

    rows = gil_contention.beside(forward, repeats=3, contenders=((50e-6, 1e-3), (500e-6, 2e-3)))
    assert len(calls) == 1 + 3 * 3  # warm, alone, and beside each of two contenders
    assert [row["beside"] for row in rows] == ["50 us of Python every 1 ms", "500 us of Python every 2 ms"]
    assert rows[0]["alone_ms"] == rows[1]["alone_ms"] >= 4.0
    assert all(row["wall_ms"] >= 4.0 and row["slices"] >= 0 and row["other_cpu_ms"] >= 0 for row in rows)
    # the slices it would have run unhindered: the forward's wall time over the interval between slices
    assert all(row["unhindered_slices"] >= 4.0 / every for row, every in zip(rows, (1.0, 2.0), strict=True))
