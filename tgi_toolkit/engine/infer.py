"""From a validated request to a stream of token events: the engine and its batcher thread, over the model
backend (backend.py).

The scheduler and the model run in one background thread, the `ComputeThread`, which also loaded the
model (torch releases the GIL inside its kernels); the HTTP side lives on the asyncio loop. The
token events of one forward pass cross over together (`events.Delivery`).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import torch

from tgi_toolkit.engine.backend import ModelBackend, RequestState
from tgi_toolkit.engine.events import Event, Finish, GenerationError
from tgi_toolkit.engine.sampling import TokenChooser
from tgi_toolkit.engine.validation import ValidRequest
from tgi_toolkit.router import Entry, Observer, Scheduler, SchedulerConfig, segment

log = logging.getLogger(__name__)


class ComputeThread:
    """The one thread that runs every torch computation of the engine process: load, warm-up, batches.

    Why one: PyTorch's OpenMP runtime (libgomp) gives each thread that starts parallel regions a
    team of workers of its own. Once a process holds more of those workers than it has CPUs (the
    main thread loaded the model, the batcher thread runs it), libgomp "throttles" them: between
    two parallel regions they sleep instead of spinning, and each of the ~120 small matmuls of a
    decode step pays a wake-up. On the 2-core CPU a bfloat16 one-row decode step took 48-50 ms
    that way, against 28 ms with loading and batching in one thread.
    """

    def __init__(self, name: str = "batcher") -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], queue.SimpleQueue[Any]] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        # Inference mode: no autograd bookkeeping (version counters, views' metadata) on any of the ~600 ops of a
        # decode step, 1-2 ms of a 1-row step on the 2-core CPU (docs/engine.md, "The decode step's speed").
        with torch.inference_mode():
            while (job := self._jobs.get()) is not None:
                fn, answer = job
                try:
                    answer.put((True, fn()))
                except BaseException as exc:  # handed to the caller, who raises it
                    answer.put((False, exc))

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run fn(*args, **kwargs) in the compute thread; return its result or raise its exception."""
        answer: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._jobs.put((lambda: fn(*args, **kwargs), answer))
        ok, value = answer.get()
        if not ok:
            raise value
        return value

    def hand_over(self, fn: Callable[[], Any]) -> None:
        """Give the thread its last job (the batching loop); it ends when fn returns."""
        self._jobs.put((fn, queue.SimpleQueue()))
        self._jobs.put(None)

    def close(self) -> None:
        """End the thread once its current job is done (when nothing was handed over)."""
        self._jobs.put(None)


class Engine:
    """Owns the queue, the scheduler thread and the model backend; the API's only dependency."""

    def __init__(self, backend: ModelBackend, config: SchedulerConfig, observer: Observer | None = None):
        self.backend = backend
        self.config = config
        self.observer = observer or Observer()
        self.scheduler = Scheduler(config, backend, observer=self.observer, on_failure=self._fail)
        self.queue = self.scheduler.queue
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None  # set when the compute side died
        self.on_death: Callable[[BaseException], None] | None = None

    @property
    def healthy(self) -> bool:
        return self.failure is None

    def _fail(self, entries: list[Entry], error: BaseException) -> None:
        """Each request of a failed forward ends with TGI's 424 `generation` error."""
        message = str(error) or type(error).__name__
        self.backend.deliver([(entry.request.emit, GenerationError(message)) for entry in entries
                              if entry.request is not None])

    def _loop(self) -> None:
        """The batching loop; if it dies, every request ends with an error and the owner is told."""
        try:
            self.scheduler.run()
        except BaseException as exc:  # the compute side is gone: nothing may hang on it
            log.critical("the batching loop died; the engine cannot serve", exc_info=exc)
            self.failure = exc
            try:
                self.scheduler.abort_all(exc)
            finally:
                if self.on_death is not None:
                    self.on_death(exc)

    def start(self, compute: ComputeThread | None = None) -> None:
        """Run the batching loop in `compute` (the thread that loaded the model), or a new thread."""
        compute = compute or ComputeThread()
        compute.hand_over(self._loop)
        self._thread = compute.thread

    def stop(self) -> None:
        self.scheduler.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def submit(self, request: ValidRequest, emit: Callable[[Any], None]) -> Entry:
        if self.failure is not None:
            raise GenerationError(f"the engine's compute side died: {self.failure}")
        state = RequestState(request=request, chooser=TokenChooser(request.sampling), emit=emit)
        entry = segment(request.input_ids, request.max_new_tokens, request=state,
                        lookup=request.prefix_cache and not request.decoder_input_details)
        self.queue.append(entry)
        return entry

    async def stream(self, request: ValidRequest) -> AsyncIterator[Event]:
        """Token events of one request; leaving the iterator early cancels the request."""
        self.backend.deliver.bind(asyncio.get_running_loop())
        events: asyncio.Queue[Any] = asyncio.Queue()
        entry = self.submit(request, events.put_nowait)
        try:
            while True:
                event = await events.get()
                if isinstance(event, BaseException):
                    raise event
                yield event
                if event.finish is not None:
                    return
        finally:
            if not entry.finished:
                entry.cancelled = True
                self.queue.notify.set()

    async def generate(self, request: ValidRequest) -> Finish:
        async for event in self.stream(request):
            if event.finish is not None:
                return event.finish
        raise GenerationError("generation ended without a final token")

