"""What happens around the requests during a run: the server's `/metrics`, its process (CPU, RSS),
the GPUs, and the benchmark client itself (event-loop lag, CPU), gathered by `Telemetry` and judged by
`client_bound` and `machine_busy`; the samplers are in samplers.py, the `/metrics` parser in prometheus.py.

Every sample is `(t_s, metric, labels, value)` on the run clock, the rows of server.parquet, so
they join the request timeline on time. The metric names the toolkit writes or reads are the
schema's (`tgi_toolkit.schema`, server.parquet): client samples are `client_loop_lag_ms`
(worst lag of each interval) and `client_cpu_percent`.

The client watches itself (docs/measurement.md pitfall 4): a loop that wakes late stamps every token
late. But a loop also wakes late when other processes hold the cores, and then the client is not
what limits the point: the machine is. The two are told apart by the kernel's scheduler statistics
of the event loop's thread (/proc/.../schedstat): the time it ran and the time it waited, runnable,
for a core. Over a point's window:
- `client_bound`: the loop had work (it ran, or waited runnable to run) at least CPU_BOUND of the
  wall time, so events queued up behind it (one Python loop cannot do more than one core), or its
  own work made it lag past max(LAG_FLOOR_MS, LAG_SHARE of the median inter-token latency); in
  either case it ran at least LOOP_BOUND of the time itself, or at least LOOP_FLOOR while it
  blocked (ran out of work) fewer than BLOCK_RATE times a second: a saturated loop on a crowded
  machine gets only its fair share of a core but never waits for input. A loop that lags while it
  mostly sleeps, or waits for a core, is late because of the machine, not because of its own work.
- `machine_busy`: the loop waited for a core at least BUSY_WAIT of the time, or processes other than
  the client and the server used at least max(BUSY_OTHER_CORES, BUSY_OTHER_SHARE of the cores):
  latencies were stretched by the machine, whatever the server and the client did.
Without schedstat (another OS) the rule falls back on the client's CPU and the lag alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import psutil

from tgi_toolkit.bench.prometheus import parse_prometheus
from tgi_toolkit.bench.samplers import CpuSampler, ProcessSampler, gpu_sampler, is_local, listening_pid

# The metric names of server.parquet are the schema's (the gauges behind the point columns, and the
# toolkit's own samples).
from tgi_toolkit.schema import (
    BATCH_SIZE_METRICS,
    CLIENT_CPU_PERCENT,
    CLIENT_LOOP_LAG_MS,
    KV_TOTAL_METRIC,
    KV_USAGE_METRICS,
    KV_USED_METRIC,
    QUEUE_SIZE_METRICS,
    SCRAPE_INTERVAL,
)

MetricSample = tuple[float, str, str, float]  # (seconds, metric name, labels, value): one scraped value

LAG_FLOOR_MS = 2.0
LAG_SHARE = 0.25
CPU_BOUND = 0.9
LOOP_BOUND = 0.25
LOOP_FLOOR = 0.05
BLOCK_RATE = 20.0
BUSY_WAIT = 0.1
BUSY_OTHER_CORES = 0.5
BUSY_OTHER_SHARE = 0.25


@contextlib.contextmanager
def frozen_gc() -> Iterator[None]:
    """Keep what exists before a run out of the garbage collector's full passes during it.

    A full collection walks every tracked object: in a notebook full of DataFrames that stalls
    the event loop for tens of milliseconds, and every token arriving meanwhile is stamped late
    (measured with benchmarks/harness_capacity.py: 17-35 ms pauses, the p99 of the added latency).
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()



@dataclass
class Window:
    """Telemetry over one point's time window."""

    lag_p99_ms: float
    lag_max_ms: float
    client_cpu: float  # cores the client process used on average
    batch_size_max: float
    queue_size_max: float
    kv_capacity_tokens: float
    kv_usage_max: float
    kv_usage: list[tuple[float, float]]  # (t_s, fraction) samples, for capacity estimates
    loop_cpu: float = math.nan  # fraction of the wall time the event loop's thread ran
    loop_wait: float = math.nan  # fraction it waited, runnable, for a core
    loop_blocks: float = math.nan  # times a second the loop blocked, out of work (voluntary switches)
    other_cpu: float = math.nan  # cores used by processes other than the client and the server
    cores: int = 1


class Telemetry:
    """Background samplers for one run; `clock_ns` is the run clock's zero (monotonic ns)."""

    def __init__(self, url: str, clock_ns: int, *, session: Any, headers: dict[str, str] | None = None,
                 interval: float = SCRAPE_INTERVAL, pid: int | None = None, gpu: bool = True,
                 lag_interval: float = 0.005, alive: Callable[[], bool] | None = None) -> None:
        self.url, self.clock_ns, self.session = url.rstrip("/"), clock_ns, session
        self.headers = headers or {}
        self.interval, self.lag_interval = interval, lag_interval
        self.samples: list[MetricSample] = []
        self.lag: list[tuple[float, float]] = []  # (t_s, lag ms), every lag_interval
        self._cpu: list[tuple[float, float]] = []  # (t_s, client process seconds)
        self._flushed = 0
        self._tasks: list[asyncio.Task] = []
        self._process: ProcessSampler | None = None
        if pid is None:
            pid = listening_pid(url)
        if pid is not None:
            with contextlib.suppress(psutil.Error):
                self._process = ProcessSampler(pid)
        self._gpu = gpu_sampler() if gpu and is_local(url) else None
        self.metrics_ok = True
        self._server_pid = pid
        self.cpu: CpuSampler | None = None

    def now_s(self) -> float:
        return (time.monotonic_ns() - self.clock_ns) / 1e9

    async def start(self) -> None:
        # started from the loop's own thread: the thread whose scheduling the client's timing depends on
        with contextlib.suppress(Exception):
            self.cpu = CpuSampler(self.now_s, threading.get_native_id(), self._server_pid)
            self.cpu.start()
        self._tasks = [asyncio.create_task(self._lag_loop(), name="bench-lag"),
                       asyncio.create_task(self._scrape_loop(), name="bench-scrape")]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        if self.cpu is not None:
            self.cpu.stop()
        if self._gpu is not None:
            self._gpu.close()

    def drain(self) -> list[MetricSample]:
        """Samples taken since the last drain (to append to server.parquet)."""
        new = self.samples[self._flushed:]
        self._flushed = len(self.samples)
        return new

    # -- loops --------------------------------------------------------------------------------
    async def _lag_loop(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.lag_interval
        worst, worst_since = 0.0, loop.time()
        expected = loop.time() + interval
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            lag_ms = max(now - expected, 0.0) * 1000
            self.lag.append((self.now_s(), lag_ms))
            worst = max(worst, lag_ms)
            if now - worst_since >= self.interval:
                self.samples.append((self.now_s(), CLIENT_LOOP_LAG_MS, "", worst))
                worst, worst_since = 0.0, now
            expected = now + interval

    async def _scrape_loop(self) -> None:
        last_cpu, last_t = time.process_time(), time.monotonic()
        while True:
            t = self.now_s()
            await self.scrape_once(t)
            cpu, wall = time.process_time(), time.monotonic()
            self._cpu.append((t, cpu))
            if wall > last_t:
                self.samples.append((t, CLIENT_CPU_PERCENT, "", 100 * (cpu - last_cpu) / (wall - last_t)))
            last_cpu, last_t = cpu, wall
            await asyncio.sleep(self.interval)

    async def scrape_once(self, t: float | None = None) -> None:
        t = self.now_s() if t is None else t
        try:
            async with self.session.get(self.url + "/metrics", headers=self.headers) as response:
                text = await response.text() if response.status == 200 else ""
            self.metrics_ok = True
        except Exception:  # a server that went away: the run notices through its requests
            text, self.metrics_ok = "", False
        series = await asyncio.to_thread(self._sample_host, text)
        self.samples.extend((t, name, labels, value) for name, labels, value in series)

    def _sample_host(self, text: str) -> list[tuple[str, str, float]]:
        # In a worker thread: /proc reads, NVML calls and parsing stay off the timing loop.
        series = parse_prometheus(text) if text else []
        if self._process is not None:
            try:
                series += self._process.sample()
            except psutil.Error:
                self._process = None
        if self._gpu is not None:
            with contextlib.suppress(Exception):
                series += self._gpu.sample()
        return series

    # -- summaries -----------------------------------------------------------------------------
    def window(self, t0: float, t1: float) -> Window:
        lags = [lag for t, lag in self.lag if t0 <= t <= t1]
        lag_p99 = float(np.percentile(lags, 99)) if lags else math.nan
        cpu = [(t, c) for t, c in self._cpu if t0 <= t <= t1]
        client_cpu = (cpu[-1][1] - cpu[0][1]) / (cpu[-1][0] - cpu[0][0]) if len(cpu) >= 2 and cpu[-1][0] > cpu[0][0] \
            else math.nan
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        values: dict[str, list[tuple[float, float]]] = {}
        for t, name, _labels, value in inside:
            values.setdefault(name, []).append((t, value))

        def peak(names: tuple[str, ...]) -> float:
            for name in names:
                if name in values:
                    return max(v for _, v in values[name])
            return math.nan

        capacity = peak((KV_TOTAL_METRIC,))
        if math.isnan(capacity):
            capacity = self.last(KV_TOTAL_METRIC)
        usage: list[tuple[float, float]] = []
        if KV_USED_METRIC in values and capacity and not math.isnan(capacity):
            usage = [(t, v / capacity) for t, v in values[KV_USED_METRIC]]
        else:
            for name in KV_USAGE_METRICS:
                if name in values:
                    usage = values[name]
                    break
        rates = self.cpu.window(t0, t1) if self.cpu is not None else {}
        if math.isfinite(rates.get("client_cpu", math.nan)):
            client_cpu = rates["client_cpu"]
        return Window(lag_p99_ms=lag_p99, lag_max_ms=max(lags) if lags else math.nan, client_cpu=client_cpu,
                      loop_cpu=rates.get("loop_cpu", math.nan), loop_wait=rates.get("loop_wait", math.nan),
                      loop_blocks=rates.get("loop_blocks", math.nan),
                      other_cpu=rates.get("other_cpu", math.nan), cores=self.cpu.cores if self.cpu else 1,
                      batch_size_max=peak(BATCH_SIZE_METRICS), queue_size_max=peak(QUEUE_SIZE_METRICS),
                      kv_capacity_tokens=capacity, kv_usage_max=max((u for _, u in usage), default=math.nan),
                      kv_usage=usage)

    def last(self, metric: str) -> float:
        for _t, name, _labels, value in reversed(self.samples):
            if name == metric:
                return value
        return math.nan


def client_bound(lag_p99_ms: float, itl_p50_s: float, client_cpu: float = math.nan,
                 ttft_p50_s: float = math.nan, loop_cpu: float = math.nan, loop_wait: float = math.nan,
                 loop_blocks: float = math.nan) -> bool:
    """The client's own work limited the point (module docstring); a loop that lagged while it
    mostly waited for a core (a busy machine) is not client-bound.

    The latency the lag is weighed against is the median inter-token gap; a point without gaps (one
    output token each, as prompt ingestion measures) reports only TTFTs, so it is weighed against those.
    """
    lagged = False
    if not math.isnan(lag_p99_ms):
        latency_s = ttft_p50_s if math.isnan(itl_p50_s) else itl_p50_s
        threshold = LAG_FLOOR_MS
        if not math.isnan(latency_s):
            threshold = max(threshold, LAG_SHARE * latency_s * 1000)
        lagged = lag_p99_ms > threshold
    if not math.isnan(loop_cpu) and not math.isnan(loop_wait):
        # On a crowded machine a saturated loop gets only its fair share of a core, but it never
        # runs out of work (it hardly ever blocks): that, with a floor on its share, still tells it
        # from a light loop that is merely kept waiting.
        backlog = loop_cpu >= LOOP_FLOOR and loop_blocks < BLOCK_RATE
        if loop_cpu < LOOP_BOUND and not backlog:
            return False  # the loop mostly slept or waited for the machine: not its own work
        return loop_cpu + loop_wait >= CPU_BOUND or lagged
    return client_cpu >= CPU_BOUND or lagged


def machine_busy(loop_wait: float, other_cpu: float, cores: int) -> bool:
    """Other processes took CPU during the point (module docstring); False when unknown."""
    if loop_wait >= BUSY_WAIT:
        return True
    return other_cpu >= max(BUSY_OTHER_CORES, BUSY_OTHER_SHARE * cores)
