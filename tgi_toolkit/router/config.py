"""The router's configuration: TGI's batching limits and scheduling mode, in one frozen object."""

from __future__ import annotations

from dataclasses import dataclass

from tgi_toolkit.router.blocks import RadixAllocator, SimpleAllocator


@dataclass(frozen=True)
class SchedulerConfig:
    """The router's settings, as TGI's router starts with them: built once, by
    `tgi_toolkit.config.scheduling.scheduler_config` from the launcher's flags, the environment and the model
    (or directly, by the simulator and tests), and handed whole to the queue and the scheduler."""

    max_batch_prefill_tokens: int
    max_batch_total_tokens: int
    waiting_served_ratio: float = 0.3
    max_waiting_tokens: int = 20
    max_batch_size: int | None = None
    block_size: int = 1
    prefix_caching: bool = True
    chunking: bool = True
    speculate: int = 0
    # The lengths the router's validation holds a request to; None where nothing validates (the simulator).
    max_input_tokens: int | None = None
    max_total_tokens: int | None = None

    @property
    def slots(self) -> int:
        """Token slots the block allocator hands out, block 0 included (slot = block * block_size + offset):
        what a KV store indexed by slot holds."""
        return self.max_batch_total_tokens // self.block_size * self.block_size



def make_allocator(config: SchedulerConfig) -> SimpleAllocator:
    cls = RadixAllocator if config.prefix_caching else SimpleAllocator
    return cls(config.max_batch_total_tokens, config.block_size)


