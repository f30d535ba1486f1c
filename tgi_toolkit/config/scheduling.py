"""TGI 3's derived limits, shared by the embedded engine, the launcher checks and the planner, and the one
place the engine's `SchedulerConfig` is built (`scheduler_config`).

The limits of section 6 of docs/tgi-rules.md (TGI 3.1.1 to 3.3.7): the KV capacity after warm-up (L2),
the default `max_total_tokens` / `max_input_tokens` (L3), the router's start-up checks (L4), and the
embedded engine's KV memory. The scheduling mode (section 1, `resolve_mode`) is in `scheduling_mode.py`,
the launcher's default `max_batch_prefill_tokens` from the GPU's FLOPS (L1) in `prefill_default.py`.

Nothing here imports torch or the engine: the numbers are plain arithmetic on config.json fields
and byte counts, so the planner can use them without loading a model.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tgi_toolkit.config.errors import ConfigError, Problem
from tgi_toolkit.config.prefill_default import launcher_max_batch_prefill_tokens
from tgi_toolkit.config.scheduling_mode import DEPRECATED_BATCH_TOTAL_WARNING, resolve_mode
from tgi_toolkit.router.config import SchedulerConfig

log = logging.getLogger(__name__)

# -- section 6 L2: KV capacity ------------------------------------------------------------------------
TGI_WIGGLE_ROOM = 0.90  # the shard's TGI_WIGGLE_ROOM (globals.py), used by warm-up (the launcher's: prefill_default)
DEFAULT_GENERATION_LENGTH = 1024  # router/src/validation.rs (L5)


def kv_bytes_per_block(block_size: int, *, num_layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """BLOCK_SIZE x KV heads (on one shard) x head size x layers x 2 (K and V) x dtype bytes (warm-up's size)."""
    return block_size * kv_heads * head_dim * num_layers * 2 * dtype_bytes


def warmup_kv_bytes(free_bytes: float, total_bytes: float, cuda_memory_fraction: float,
                    wiggle_room: float = TGI_WIGGLE_ROOM) -> int:
    """KV bytes TGI's warm-up finds: free memory after warm-up - (1 - fraction x 0.90) x total, at least 0."""
    return max(0, math.floor(free_bytes - (1 - cuda_memory_fraction * wiggle_room) * total_bytes))


def kv_num_blocks(kv_bytes: float, bytes_per_block: int, warmup_blocks: int = 0) -> int:
    """floor(KV bytes / bytes per block), plus the blocks the warm-up batch held while memory was measured."""
    if bytes_per_block <= 0:
        raise ValueError(f"bytes_per_block must be > 0; got {bytes_per_block}")
    return int(max(kv_bytes, 0) // bytes_per_block) + warmup_blocks


def kv_capacity_tokens(kv_bytes: float, bytes_per_block: int, block_size: int, warmup_blocks: int = 0) -> int:
    """`max_batch_total_tokens` as the shard returns it: num_blocks x BLOCK_SIZE (L2)."""
    return kv_num_blocks(kv_bytes, bytes_per_block, warmup_blocks) * block_size


def warmup_requests(max_batch_prefill_tokens: int, max_input_tokens: int | None = None,
                    max_total_tokens: int | None = None, max_batch_size: int | None = None) -> list[tuple[int, int]]:
    """(prompt tokens, max_new_tokens) of each warm-up request (the router's `warmup`).

    Requests of at most max_input_tokens until max_batch_prefill_tokens are used up, at most
    max_batch_size of them; each asks max_total_tokens - prompt new tokens, or 1 when max_total_tokens
    is not given.
    """
    out: list[tuple[int, int]] = []
    used = 0
    while used < max_batch_prefill_tokens:
        prompt = max_batch_prefill_tokens - used
        if max_input_tokens is not None:
            prompt = min(max_input_tokens, prompt)
        if prompt <= 0:
            break
        out.append((prompt, max_total_tokens - prompt if max_total_tokens is not None else 1))
        used += prompt
        if max_batch_size is not None and len(out) == max_batch_size:
            break
    return out


def warmup_blocks(requests: Sequence[tuple[int, int]], block_size: int, speculate: int = 0) -> int:
    """KV blocks the warm-up batch holds: ceil((prompt + max_new_tokens - 1 + speculate) / BLOCK_SIZE) each."""
    return sum(-(-(prompt + new - 1 + speculate) // block_size) for prompt, new in requests)


def max_batch_total_tokens(inferred: int, user_value: int | None = None) -> tuple[int, tuple[str, ...]]:
    """The value TGI uses for a flash model, and its warnings: a user's --max-batch-total-tokens is ignored."""
    if user_value is None:
        return inferred, ()
    return inferred, (DEPRECATED_BATCH_TOTAL_WARNING, f"Inferred max batch total tokens: {inferred}")


# -- section 6 L3: max_total_tokens / max_input_tokens defaults -----------------------------------------
def default_max_total_tokens(*, chunking: bool, kv_capacity_tokens: int, max_position_embeddings: int | None = None,
                             model_max_length: int | None = None,
                             warmup_prompt_tokens: int | None = None) -> int:
    """`max_total_tokens` when not given (warm-up, L3).

    With chunking: min(KV capacity in tokens, tokenizer model_max_length, config max_position_embeddings),
    skipping the ones that are unknown. Without: the warm-up batch's prompt tokens
    (about max_batch_prefill_tokens; see `warmup_requests`).
    """
    if chunking:
        return min(v for v in (kv_capacity_tokens, model_max_length, max_position_embeddings) if v is not None)
    if warmup_prompt_tokens is None:
        raise ValueError("without chunking the default max_total_tokens is the warm-up batch's prompt tokens: "
                         "pass warmup_prompt_tokens")
    return warmup_prompt_tokens


def default_max_input_tokens(max_total_tokens: int) -> int:
    """`max_input_tokens` when not given: max_total_tokens - 1 (L3)."""
    return max_total_tokens - 1


# -- section 6 L4: the router's start-up checks ---------------------------------------------------------
def router_problems(*, max_input_tokens: int, max_total_tokens: int, max_batch_prefill_tokens: int,
                    max_batch_total_tokens: int, chunking: bool) -> list[Problem]:
    """What the v3 router (and its connect_backend) refuses at start-up, with the values it runs with.

    `max_batch_total_tokens` is the value in use: for flash models the inferred KV capacity.
    `max_input_tokens <= max_batch_prefill_tokens` is checked only without chunking: chunking is what
    lets a prompt be longer than the prefill budget.
    """
    out: list[Problem] = []
    if max_input_tokens >= max_total_tokens:
        out.append(Problem(("max_input_tokens", "max_total_tokens"),
                           f"--max-input-tokens ({max_input_tokens}) must be < --max-total-tokens "
                           f"({max_total_tokens})"))
    if not chunking and max_input_tokens > max_batch_prefill_tokens:
        out.append(Problem(("max_batch_prefill_tokens", "max_input_tokens"),
                           f"--max-batch-prefill-tokens ({max_batch_prefill_tokens}) must be >= --max-input-tokens "
                           f"({max_input_tokens}) without prefill chunking (a whole prompt must fit one prefill)"))
    if max_batch_prefill_tokens > max_batch_total_tokens:
        out.append(Problem(("max_batch_prefill_tokens", "max_batch_total_tokens"),
                           f"--max-batch-prefill-tokens ({max_batch_prefill_tokens}) must be <= "
                           f"max_batch_total_tokens ({max_batch_total_tokens})"))
    if max_total_tokens > max_batch_total_tokens:
        out.append(Problem(("max_total_tokens", "max_batch_total_tokens"),
                           f"--max-total-tokens ({max_total_tokens}) must be <= max_batch_total_tokens "
                           f"({max_batch_total_tokens}): not enough KV memory for one request of that length"))
    return out


@dataclass(frozen=True)
class StartupLimits:
    """The limits a TGI 3 server starts with (section 6), and the warnings it logs on the way."""

    max_batch_total_tokens: int
    max_total_tokens: int
    max_input_tokens: int
    max_batch_prefill_tokens: int
    num_blocks: int
    block_size: int
    warnings: tuple[str, ...] = ()


def derive_limits(*, kv_bytes: float, bytes_per_block: int, block_size: int, chunking: bool,
                  max_batch_prefill_tokens: int, max_input_tokens: int | None = None,
                  max_total_tokens: int | None = None, user_max_batch_total_tokens: int | None = None,
                  warmup_blocks: int = 0, max_position_embeddings: int | None = None,
                  model_max_length: int | None = None, max_batch_size: int | None = None) -> StartupLimits:
    """Section 6 end to end for a flash model: KV capacity (L2), length defaults (L3), router checks (L4).

    `kv_bytes` is the KV memory (GPU: `warmup_kv_bytes(...)`; embedded engine: `embedded_kv_bytes(...)`),
    `warmup_blocks` the warm-up batch's blocks (GPU formula only; 0 for a fixed KV space). A user's
    max_batch_total_tokens is ignored with TGI's "deprecated" warning, after the launcher's own check
    that a given max_total_tokens does not exceed it. Raises ConfigError listing every broken rule.
    """
    num_blocks = kv_num_blocks(kv_bytes, bytes_per_block, warmup_blocks)
    batch_total, warnings = max_batch_total_tokens(num_blocks * block_size, user_max_batch_total_tokens)
    total = max_total_tokens
    if total is None:
        prompts = warmup_requests(max_batch_prefill_tokens, max_input_tokens, None, max_batch_size)
        total = default_max_total_tokens(chunking=chunking, kv_capacity_tokens=batch_total,
                                         max_position_embeddings=max_position_embeddings,
                                         model_max_length=model_max_length,
                                         warmup_prompt_tokens=sum(p for p, _ in prompts))
    inp = default_max_input_tokens(total) if max_input_tokens is None else max_input_tokens
    problems = []
    if max_total_tokens is not None and user_max_batch_total_tokens is not None \
            and max_total_tokens > user_max_batch_total_tokens:
        # The launcher checks the given value before starting anything, though the router then ignores it (L4).
        problems.append(Problem(("max_total_tokens", "max_batch_total_tokens"),
                                f"--max-total-tokens ({max_total_tokens}) must be <= --max-batch-total-tokens "
                                f"({user_max_batch_total_tokens})"))
    problems += router_problems(max_input_tokens=inp, max_total_tokens=total,
                                max_batch_prefill_tokens=max_batch_prefill_tokens,
                                max_batch_total_tokens=batch_total, chunking=chunking)
    if problems:
        raise ConfigError(problems)
    return StartupLimits(max_batch_total_tokens=batch_total, max_total_tokens=total, max_input_tokens=inp,
                  max_batch_prefill_tokens=max_batch_prefill_tokens, num_blocks=num_blocks, block_size=block_size,
                  warnings=warnings)


# -- the embedded engine's KV memory --------------------------------------------------------------------
KV_CACHE_ENV = "TGI_TOOLKIT_KV_CACHE_GIB"
DEFAULT_KV_CACHE_GIB = 2.0


def embedded_kv_bytes(env: Mapping[str, str], cuda_memory_fraction: float = 1.0) -> int:
    """Bytes of KV cache the embedded engine gives itself: TGI_TOOLKIT_KV_CACHE_GIB (default 2) GiB x fraction.

    A CPU has no "free memory after warm-up" to measure, so like vLLM's VLLM_CPU_KVCACHE_SPACE the
    space is a setting; --cuda-memory-fraction scales it as it scales TGI's GPU budget.
    """
    raw = env.get(KV_CACHE_ENV)
    gib = DEFAULT_KV_CACHE_GIB
    if raw is not None and raw.strip():
        try:
            gib = float(raw)
        except ValueError:
            gib = float("nan")
        if not gib > 0 or math.isinf(gib):
            raise ConfigError([Problem((KV_CACHE_ENV,), f"{KV_CACHE_ENV} must be a number of GiB > 0 "
                                                        f"(e.g. 2 or 0.5); got {raw!r}")])
    if not 0 < cuda_memory_fraction <= 1:
        raise ConfigError([Problem(("cuda_memory_fraction",), f"--cuda-memory-fraction ({cuda_memory_fraction}) "
                                                              "must be > 0 and <= 1")])
    return int(gib * 2**30 * cuda_memory_fraction)


# -- the engine's start-up: launcher flags + environment + model -> SchedulerConfig ----------------------
def scheduler_config(launcher: Any, env: Mapping[str, str], *, model_config: Mapping[str, Any],
                     kv_bytes_per_token: int, max_position_embeddings: int | None = None,
                     model_max_length: int | None = None, kv_bytes: int | None = None) -> SchedulerConfig:
    """The embedded engine's router settings for a model, derived and logged as TGI 3 derives and logs them.

    `launcher` is the LauncherConfig. The mode comes from ATTENTION, PREFIX_CACHING and PREFILL_CHUNKING in
    `env` as TGI reads them (the engine behaves as TGI on a CUDA GPU of compute capability 9.0);
    `max_batch_prefill_tokens` defaults as the launcher's does without a known card (L1);
    `max_batch_total_tokens` is the KV memory (TGI_TOOLKIT_KV_CACHE_GIB x --cuda-memory-fraction) in whole
    blocks (or `kv_bytes`, given: what a CUDA card left free, engine.device.cuda_kv_bytes), a user value being
    ignored with TGI's warning; `max_total_tokens` and `max_input_tokens` default as
    TGI's warm-up sets them. Raises ConfigError listing every start-up check the values fail (L4).
    """
    mode = resolve_mode(env, speculate=launcher.speculate or 0, model_config=model_config,
                        lora=bool(launcher.lora_adapters))
    for note in mode.notes:
        log.info("%s", note)
    for warning in mode.warnings:
        log.warning("%s", warning)
    prefill = launcher.max_batch_prefill_tokens
    if prefill is None:
        prefill, steps = launcher_max_batch_prefill_tokens(model_config, gpu_fp16_flops=None)
        log.info("Default `max_batch_prefill_tokens` to %d (%s)", prefill, "; ".join(steps))
    given_input = launcher.max_input_tokens if launcher.max_input_tokens is not None else launcher.max_input_length
    limits = derive_limits(
        kv_bytes=embedded_kv_bytes(env, launcher.cuda_memory_fraction or 1.0) if kv_bytes is None else kv_bytes,
        bytes_per_block=kv_bytes_per_token * mode.block_size, block_size=mode.block_size, chunking=mode.chunking,
        max_batch_prefill_tokens=prefill, max_input_tokens=given_input, max_total_tokens=launcher.max_total_tokens,
        user_max_batch_total_tokens=launcher.max_batch_total_tokens, max_position_embeddings=max_position_embeddings,
        model_max_length=model_max_length, max_batch_size=launcher.max_batch_size)
    for warning in limits.warnings:
        log.warning("%s", warning)
    log.info("Setting max batch total tokens to %d", limits.max_batch_total_tokens)
    log.info("Scheduling: attention %s, block size %d, prefix caching %s, prefill chunking %s", mode.attention,
             mode.block_size, "on" if mode.prefix_caching else "off", "on" if mode.chunking else "off")
    return SchedulerConfig(
        max_batch_prefill_tokens=limits.max_batch_prefill_tokens, max_batch_total_tokens=limits.max_batch_total_tokens,
        waiting_served_ratio=launcher.waiting_served_ratio, max_waiting_tokens=launcher.max_waiting_tokens,
        max_batch_size=launcher.max_batch_size, block_size=mode.block_size, prefix_caching=mode.prefix_caching,
        chunking=mode.chunking, speculate=launcher.speculate or 0, max_input_tokens=limits.max_input_tokens,
        max_total_tokens=limits.max_total_tokens)
