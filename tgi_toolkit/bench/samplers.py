"""What the telemetry samples on this machine besides `/metrics`: the server's process tree (CPU, RSS), the
GPUs, and where the CPU went (host, client, server, the event loop's thread); kept apart from the scraper."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from urllib.parse import urlparse

import psutil

from tgi_toolkit.schema import GPU_MEMORY_USED_BYTES, GPU_UTILIZATION, PROCESS_CPU_PERCENT, PROCESS_RSS_BYTES


def is_local(url: str) -> bool:
    host = urlparse(url).hostname or ""
    return host in ("localhost", "127.0.0.1", "::1", "0.0.0.0") or host.startswith("127.")


def listening_pid(url: str) -> int | None:
    """The process listening on a local URL's port (None when unknown or not permitted)."""
    if not is_local(url):
        return None
    port = urlparse(url).port or 80
    with contextlib.suppress(psutil.Error, OSError):
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                return conn.pid
    return None


class ProcessSampler:
    """CPU percent and RSS of a process and all its descendants (TGI's shards, vLLM's workers)."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self._procs: dict[int, psutil.Process] = {}
        self.sample()  # psutil's first cpu_percent() of a process is always 0

    def sample(self) -> list[tuple[str, str, float]]:
        procs = [self.root, *self.root.children(recursive=True)]
        cpu = rss = 0.0
        for proc in procs:
            proc = self._procs.setdefault(proc.pid, proc)
            with contextlib.suppress(psutil.Error):
                cpu += proc.cpu_percent(None)
                rss += proc.memory_info().rss
        return [(PROCESS_CPU_PERCENT, "", cpu), (PROCESS_RSS_BYTES, "", rss)]


class GpuSampler:
    """GPU utilisation and memory through nvidia-ml-py, when it is installed and a GPU is present."""

    def __init__(self) -> None:
        import pynvml  # optional: `pip install nvidia-ml-py`

        pynvml.nvmlInit()
        self._nvml = pynvml
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        if not self.handles:
            raise RuntimeError("no GPU")

    def sample(self) -> list[tuple[str, str, float]]:
        out = []
        for i, handle in enumerate(self.handles):
            util = self._nvml.nvmlDeviceGetUtilizationRates(handle)
            mem = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            out += [(GPU_UTILIZATION, f"gpu={i}", float(util.gpu)),
                    (GPU_MEMORY_USED_BYTES, f"gpu={i}", float(mem.used))]
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()


def gpu_sampler() -> GpuSampler | None:
    try:
        return GpuSampler()
    except Exception:  # no package, no driver, no device: GPU telemetry is optional
        return None


def _schedstat(path: str) -> tuple[int, int] | None:
    """(ns run on a core, ns waited runnable for one) of a thread, from the kernel's schedstat."""
    try:
        with open(path) as handle:
            run, wait, _ = handle.read().split()
        return int(run), int(wait)
    except (OSError, ValueError):
        return None


def _voluntary_switches(path: str) -> float:
    """Times a thread gave up its core to wait (for I/O, a timer): how often the loop ran out of work."""
    try:
        with open(path) as handle:
            for line in handle:
                if line.startswith("voluntary_ctxt_switches:"):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return math.nan


class CpuSampler:
    """Where the CPU went, sampled every `period` s on its own thread (off the timing loop).

    Each sample: (t_s, host busy core-seconds, client process CPU seconds, server process tree CPU
    seconds, loop thread run ns, loop thread wait ns); differences over a window give rates.
    """

    def __init__(self, now_s: Callable[[], float], loop_tid: int, server_pid: int | None,
                 period: float = 0.05) -> None:
        self.now_s, self.period = now_s, period
        self.samples: list[tuple[float, float, float, float, float, float, float]] = []
        self.cores = psutil.cpu_count() or 1
        self._path = f"/proc/self/task/{loop_tid}/schedstat"
        self._status = f"/proc/self/task/{loop_tid}/status"
        self.has_schedstat = _schedstat(self._path) is not None
        self._me = psutil.Process()
        self._server: psutil.Process | None = None
        if server_pid is not None:
            with contextlib.suppress(psutil.Error):
                self._server = psutil.Process(server_pid)
        self._tree: list[psutil.Process] = []
        self._tree_at = -math.inf
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="bench-cpu", daemon=True)

    def start(self) -> None:
        self.sample()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            with contextlib.suppress(Exception):  # telemetry never stops a run
                self.sample()

    def _server_cpu(self) -> float:
        if self._server is None:
            return 0.0
        now = time.monotonic()
        if now - self._tree_at > 2.0:  # the tree changes rarely; listing it costs a /proc walk
            with contextlib.suppress(psutil.Error):
                self._tree = [self._server, *self._server.children(recursive=True)]
            self._tree_at = now
        total = 0.0
        for proc in self._tree:
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                total += times.user + times.system
        return total

    def sample(self) -> None:
        host = psutil.cpu_times()
        idle = host.idle + getattr(host, "iowait", 0.0)
        busy = sum(host) - idle - getattr(host, "guest", 0.0) - getattr(host, "guest_nice", 0.0)
        mine = self._me.cpu_times()
        loop = _schedstat(self._path) or (math.nan, math.nan)
        row = (self.now_s(), busy, mine.user + mine.system, self._server_cpu(), float(loop[0]), float(loop[1]),
               _voluntary_switches(self._status))
        with self._lock:
            self.samples.append(row)

    def window(self, t0: float, t1: float) -> dict[str, float]:
        """Rates over [t0, t1]: loop_cpu and loop_wait (fractions of the wall time), client_cpu,
        server_cpu, other_cpu (cores), NaN where fewer than two samples fall in the window."""
        slack = 2 * self.period
        with self._lock:
            inside = [r for r in self.samples if t0 - slack <= r[0] <= t1 + slack]
        out = dict.fromkeys(("loop_cpu", "loop_wait", "loop_blocks", "client_cpu", "server_cpu", "other_cpu"),
                            math.nan)
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return out
        a, b = inside[0], inside[-1]
        wall = b[0] - a[0]
        client, server = (b[2] - a[2]) / wall, (b[3] - a[3]) / wall
        out.update(loop_cpu=(b[4] - a[4]) / 1e9 / wall, loop_wait=(b[5] - a[5]) / 1e9 / wall,
                   loop_blocks=(b[6] - a[6]) / wall, client_cpu=client,
                   server_cpu=server, other_cpu=max((b[1] - a[1]) / wall - client - server, 0.0))
        return out
