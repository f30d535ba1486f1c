"""Prometheus metrics under TGI's names, so dashboards and the benchmark's scraper work unchanged."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import logging
import sys
import time
from collections.abc import Iterator, Mapping
from typing import IO

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from tgi_toolkit.costs.features import shape_of
from tgi_toolkit.router import Entry, Forward, Observer

log = logging.getLogger("tgi_toolkit.engine")
# TGI's v3 allocator logs every allocation attempt at INFO under its router crate's target.
allocation_log = logging.getLogger("text_generation_router_v3::radix")

# TGI's buckets are exponential; these cover a CPU engine's milliseconds to minutes.
_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 120)
_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class CollectorClock:
    """The seconds the garbage collector's passes have taken in this process since `install`: each pass stops every
    thread, a forward with them, so the trace writes beside each forward the collector's share since the last."""

    seconds = 0.0
    _began = 0.0
    _installed = False
    _paused = False

    @classmethod
    def install(cls) -> None:
        if not cls._installed:
            gc.callbacks.append(cls._pass)
            cls._installed = True

    @classmethod
    @contextlib.contextmanager
    def paused(cls) -> Iterator[None]:
        """Passes made meanwhile are not counted (the start-up's own, before the engine serves)."""
        cls._paused = True
        try:
            yield
        finally:
            cls._paused = False

    @classmethod
    def _pass(cls, phase: str, info: Mapping[str, int]) -> None:
        if cls._paused:
            return
        if phase == "start":
            cls._began = time.perf_counter()
        else:
            cls.seconds += time.perf_counter() - cls._began


def graphs_compiled() -> int:
    """The graphs torch.compile has compiled in this process (0 where it never loaded). Warm-up compiles every shape
    the engine will run, so one compiled while serving is seconds a request paid."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    return int(dynamo.counters["stats"]["unique_graphs"]) if dynamo is not None else 0


class Metrics(Observer):
    """All of the engine's metrics in one registry; also the scheduler's `Observer`."""

    def __init__(self, trace: IO[str] | None = None, split: Mapping[str, float | None] | None = None) -> None:
        # trace (TGI_TOOLKIT_FORWARD_TRACE): a JSON line per forward, its features as the simulator's cost
        # models price them and its measured seconds; what /metrics' histograms cannot give a fit: each forward.
        # split: the backend's parts of its last forward (ModelBackend.split), written beside its seconds
        self._trace = trace
        self._split = split if split is not None else {}
        self._collected = 0.0  # CollectorClock.seconds at the last trace line
        self._compiled = graphs_compiled()  # built after warm-up: what it compiled is not a forward's
        if trace is not None:
            CollectorClock.install()
            self._collected = CollectorClock.seconds
        r = self.registry = CollectorRegistry()
        self.request_count = Counter("tgi_request_count", "Requests received", registry=r)
        self.request_success = Counter("tgi_request_success", "Requests that succeeded", registry=r)
        self.request_failure = Counter("tgi_request_failure", "Requests that failed", ["err"], registry=r)
        self.batch_inference_count = Counter("tgi_batch_inference_count", "Forward passes", ["method"],
                                             registry=r)
        self.batch_inference_success = Counter("tgi_batch_inference_success", "Forward passes that succeeded",
                                               ["method"], registry=r)
        self.request_duration = Histogram("tgi_request_duration", "End-to-end request seconds",
                                          buckets=_SECONDS, registry=r)
        self.request_validation_duration = Histogram("tgi_request_validation_duration", "Validation seconds",
                                                     buckets=_SECONDS, registry=r)
        self.request_queue_duration = Histogram("tgi_request_queue_duration", "Seconds in the queue",
                                                buckets=_SECONDS, registry=r)
        self.request_inference_duration = Histogram("tgi_request_inference_duration",
                                                    "Seconds from batching to the last token",
                                                    buckets=_SECONDS, registry=r)
        self.request_mean_time_per_token_duration = Histogram(
            "tgi_request_mean_time_per_token_duration", "Mean seconds per generated token",
            buckets=_SECONDS, registry=r)
        self.request_generated_tokens = Histogram("tgi_request_generated_tokens", "Generated tokens",
                                                  buckets=_TOKENS, registry=r)
        self.request_input_length = Histogram("tgi_request_input_length", "Input tokens", buckets=_TOKENS,
                                              registry=r)
        self.request_max_new_tokens = Histogram("tgi_request_max_new_tokens", "Requested max_new_tokens",
                                                buckets=_TOKENS, registry=r)
        self.batch_next_size = Histogram("tgi_batch_next_size", "Size of each new batch", buckets=_SIZES,
                                         registry=r)
        self.batch_forward_duration = Histogram("tgi_batch_forward_duration", "Seconds per forward pass",
                                                ["method"], buckets=_SECONDS, registry=r)
        self.batch_current_size = Gauge("tgi_batch_current_size", "Requests in the running batch", registry=r)
        self.batch_current_max_tokens = Gauge("tgi_batch_current_max_tokens",
                                              "Tokens reserved by the running batch", registry=r)
        self.queue_size = Gauge("tgi_queue_size", "Requests waiting", registry=r)
        self.batch_max_total_tokens = Gauge("tgi_batch_max_total_tokens", "Token budget of a batch",
                                            registry=r)
        self.batch_inference_failure = Counter("tgi_batch_inference_failure", "Forward passes that failed",
                                               ["method"], registry=r)
        self.batch_concat = Counter("tgi_batch_concat", "New groups joined to a running batch", ["reason"],
                                    registry=r)
        # The toolkit's own extension (TGI has no prefix-cache metric): what the cache saved.
        self.prefix_lookup_tokens = Counter(
            "tgi_toolkit_prefix_cache_lookup_tokens",
            "Prompt tokens of admitted requests that looked up the prefix cache (toolkit extension)", registry=r)
        self.prefix_hit_tokens = Counter(
            "tgi_toolkit_prefix_cache_hit_tokens",
            "Prompt tokens whose keys and values came from the prefix cache (toolkit extension)", registry=r)
        self.prefill_computed_tokens = Counter(
            "tgi_toolkit_prefill_computed_tokens", "Prompt tokens computed by forwards (toolkit extension)",
            registry=r)

    # -- scheduler Observer ------------------------------------------------------------
    def dropped(self, entry: Entry) -> None:
        self.request_failure.labels(err="dropped").inc()

    def queued(self, size: int) -> None:
        self.queue_size.set(size)

    def batch_state(self, size: int, max_tokens: int, queue_size: int) -> None:
        self.batch_current_size.set(size)
        self.batch_current_max_tokens.set(max_tokens)
        self.queue_size.set(queue_size)

    def forward(self, method: str, size: int, seconds: float, tokens: int = 0) -> None:
        self.batch_inference_count.labels(method=method).inc()
        self.batch_inference_success.labels(method=method).inc()
        self.batch_forward_duration.labels(method=method).observe(seconds)

    def ran(self, forward: Forward, seconds: float) -> None:
        compiled = graphs_compiled()
        compiles, self._compiled = compiled - self._compiled, compiled
        if compiles:
            log.warning("A %s forward of %d rows and %d tokens compiled %d graph(s) with torch.compile while serving "
                        "(%.1f s): warm-up did not cover its shape", forward.rpc, len(forward.rows), forward.tokens,
                        compiles, seconds)
        if self._trace is not None:  # Shape's fields, as simulate.trace.read_trace reads them back
            collected, self._collected = CollectorClock.seconds - self._collected, CollectorClock.seconds
            self._trace.write(json.dumps({"t": time.time(), "rpc": forward.rpc,
                                          **dataclasses.asdict(shape_of(forward)), "seconds": seconds,
                                          **self._split, "gc_s": collected, "compiles": compiles}) + "\n")

    def concat(self, reason: str) -> None:
        self.batch_concat.labels(reason=reason).inc()

    def allocation(self, prefix_len: int, suffix_len: int) -> None:
        allocation_log.info("Prefix %d - Suffix %d", prefix_len, suffix_len)

    def prefix(self, lookup_tokens: int, hit_tokens: int) -> None:
        self.prefix_lookup_tokens.inc(lookup_tokens)
        self.prefix_hit_tokens.inc(hit_tokens)

    def computed(self, prompt_tokens: int) -> None:
        self.prefill_computed_tokens.inc(prompt_tokens)

    def failed(self, entries: list[Entry], error: BaseException) -> None:
        self.batch_inference_failure.labels(method="prefill" if any(e.prefilling for e in entries)
                                            else "decode").inc()

    def next_batch(self, size: int) -> None:
        self.batch_next_size.observe(size)

    def render(self) -> bytes:
        return generate_latest(self.registry)
