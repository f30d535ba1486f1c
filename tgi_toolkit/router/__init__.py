"""TGI's router in Python: the queue, the batching loop and the KV block allocator with its prefix cache.

Pure Python with no torch and no clock of its own, so one copy of the rules serves the embedded engine
(its model behind `ModelSide`, `time.perf_counter` as the clock) and the simulator (a cost model and a
virtual clock). The engine sits above it; so does `tgi_toolkit.simulate`.

Modules: `batch` (an entry, a row, a forward), `config` (SchedulerConfig), `hooks` (ModelSide, Clock,
Observer), `queue` (admission), `scheduler` (the batching loop), `blocks` (the allocator and prefix cache).
Beside them, `vllm_v1`: vLLM V1's scheduler, block pool and prefix cache under the same hooks, which the simulator
runs for a vLLM V1 server (docs/vllm-rules.md).
"""

from tgi_toolkit.router.batch import SEGMENT_TOKENS, Entry, Forward, Row, segment
from tgi_toolkit.router.blocks import Allocation, RadixAllocator, SimpleAllocator
from tgi_toolkit.router.config import SchedulerConfig, make_allocator
from tgi_toolkit.router.hooks import WALL, Clock, ModelSide, MonotonicClock, Observer
from tgi_toolkit.router.queue import Queue
from tgi_toolkit.router.scheduler import Scheduler

__all__ = ["SEGMENT_TOKENS", "WALL", "Allocation", "Clock", "Entry", "Forward", "ModelSide", "MonotonicClock",
           "Observer", "Queue", "RadixAllocator", "Row", "Scheduler", "SchedulerConfig", "SimpleAllocator",
           "make_allocator", "segment"]
