"""TGI 3's scheduling mode and derived limits, shared by the embedded engine, the launcher checks and the planner.

Two halves, each following docs/tgi-rules.md (TGI 3.1.1 to 3.3.7):

- `resolve_mode` reads ATTENTION, PREFIX_CACHING and PREFILL_CHUNKING as TGI does (section 1: the
  launcher's `resolve_attention` (F1), the shard's globals (F2) and `Model.__init__` (F3)).
- The limits of section 6: the KV capacity after warm-up (L2), the default `max_total_tokens` /
  `max_input_tokens` (L3), the router's start-up checks (L4), and the launcher's default
  `max_batch_prefill_tokens` from the GPU's FLOPS (L1).

Nothing here imports torch or the engine: the numbers are plain arithmetic on config.json fields
and byte counts, so the planner can use them without loading a model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tgi_toolkit.config.errors import ConfigError, Problem

# -- section 1: the mode ----------------------------------------------------------------------------
ATTENTIONS: tuple[str, ...] = ("paged", "flashdecoding", "flashdecoding-ipex", "flashinfer")  # globals.py
BLOCK_SIZES: Mapping[str, int] = {"flashinfer": 1, "flashdecoding": 256, "flashdecoding-ipex": 64, "paged": 16}
# The attention kernels that can run chunked prefill and prefix caching (F2, F3).
FLASH_ATTENTIONS = frozenset({"flashinfer", "flashdecoding", "flashdecoding-ipex"})
# models/__init__.py builds these with support_chunking=False (F3).
NO_CHUNKING_MODEL_TYPES = frozenset({"gemma3", "qwen2_vl", "qwen2_5_vl", "mllama"})
_FLAG_VALUES = ("1", "true", "0", "false")

# TGI's own log lines, word for word, so a reader can grep one server's log against the other's.
CHUNKING_IGNORES_WARNING = ("Model supports prefill chunking. `waiting_served_ratio` and `max_waiting_tokens` "
                            "will be ignored.")  # backends/v3/src/backend.rs (B1)
SPECULATION_WARNING = ("Prefill chunking does not support speculation yet. Prefill chunking will be turned off")
ATTENTION_WARNING = ("Prefill chunking is only supported with `flashinfer` or `flashdecoding` or "
                     "`flashdecoding-ipex` attention types.")
DEPRECATED_BATCH_TOTAL_WARNING = "`--max-batch-total-tokens` is deprecated for Flash Attention models."


@dataclass(frozen=True)
class SchedulingMode:
    """How a TGI 3 server would schedule: attention kernel, KV block size, prefix cache, chunked prefill.

    `warnings` are the start-up warnings TGI logs for this mode (in its words); `notes` the launcher's
    info lines saying why a default was changed.
    """

    attention: str
    block_size: int
    prefix_caching: bool
    chunking: bool
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def model_head_dim(model_config: Mapping[str, Any]) -> int | None:
    """The head dim as TGI's launcher reads it (`Config::get_head_dim`), or None when it cannot tell.

    `head_dim`, else hidden_size (or n_embd) / num_attention_heads when that divides evenly, else
    `text_config.head_dim`, else 256 for gemma3.
    """
    head_dim = model_config.get("head_dim")
    if head_dim is None:
        hidden = model_config.get("hidden_size", model_config.get("n_embd"))
        heads = model_config.get("num_attention_heads")
        if isinstance(hidden, int) and isinstance(heads, int) and heads and hidden % heads == 0:
            head_dim = hidden // heads
    if head_dim is None:
        text = model_config.get("text_config")
        if isinstance(text, Mapping) and text.get("head_dim") is not None:
            head_dim = text["head_dim"]
    if head_dim is None and model_config.get("model_type") == "gemma3":
        head_dim = 256
    return int(head_dim) if head_dim is not None else None


def model_supports_chunking(model_config: Mapping[str, Any] | None) -> bool:
    """False for the model types TGI builds with support_chunking=False (Gemma3, Qwen2-VL, Qwen2.5-VL, Mllama)."""
    return model_config is None or model_config.get("model_type") not in NO_CHUNKING_MODEL_TYPES


def _resolve_attention(env: Mapping[str, str], model_config: Mapping[str, Any] | None, lora: bool,
                       cuda_capability: tuple[int, int] | None) -> tuple[str, str, list[str]]:
    """The launcher's `resolve_attention` (F1): (ATTENTION, PREFIX_CACHING) strings, and its info lines."""
    prefix = env.get("PREFIX_CACHING")
    attention = env.get("ATTENTION")
    notes: list[str] = []
    if model_config is not None:  # the launcher skips all of this when it cannot read config.json
        if prefix is None:
            if model_config.get("vision_config") is not None:
                notes.append("Disabling prefix caching because of VLM model")
                prefix = "0"
            elif model_config.get("is_encoder_decoder"):
                notes.append("Disabling prefix caching because of seq2seq model")
                prefix = "0"
        fallback = "paged" if cuda_capability is None or cuda_capability[0] < 8 else "flashdecoding"
        head_dim = model_head_dim(model_config)
        if head_dim in (64, 128, 256):
            if lora and prefix is None:
                notes.append("Disabling prefix caching because of lora adapters")
                prefix = "0"
            model_type = model_config.get("model_type")
            if model_type in ("falcon", "deepseek_v2"):
                if attention is None:
                    notes.append(f"Forcing attention to '{fallback}' because model {model_type} requires it")
                    attention = fallback
                if fallback == "paged" and prefix is None:
                    notes.append("Disabling prefix caching because it is not supported with 'paged' attention")
                    prefix = "0"
        else:
            if attention is None:
                notes.append(f"Forcing attention to '{fallback}' because head dim is not supported by flashinfer, "
                             "also disabling prefix caching")
                attention = fallback
            if prefix is None:
                prefix = "0"
    if attention == "paged" and prefix is None:
        notes.append("Disabling prefix caching on paged attention")
        prefix = "0"
    attention = "flashinfer" if attention is None else attention
    prefix = "true" if prefix is None else prefix
    notes.append(f"Using attention {attention} - Prefix caching {prefix}")
    return attention, prefix, notes


def _flag(name: str, value: str) -> bool:
    # TGI reads anything but 1/true as off, so a typo silently turns the feature off there; we refuse it.
    if value.lower() not in _FLAG_VALUES:
        raise ConfigError([Problem((name,), f"{name} must be one of: 1, true, 0, false; got {value!r}")])
    return value.lower() in ("1", "true")


def resolve_mode(env: Mapping[str, str], *, speculate: int = 0, support_chunking: bool = True,
                 model_config: Mapping[str, Any] | None = None, lora: bool = False,
                 cuda_capability: tuple[int, int] | None = (9, 0)) -> SchedulingMode:
    """The scheduling mode TGI 3 would run with for these environment variables and this model.

    - ATTENTION / PREFIX_CACHING values set in `env` are kept; unset ones follow the launcher's
      `resolve_attention` (F1): a VLM or encoder-decoder `model_config` turns prefix caching off, a head
      dim outside {64, 128, 256} forces the fallback kernel (flashdecoding on sm >= 8, paged on older
      cards or `cuda_capability=None` (no CUDA device)) without prefix caching, LoRA adapters turn prefix
      caching off, falcon/deepseek_v2 take the fallback kernel, paged never caches prefixes. Defaults:
      flashinfer with prefix caching. Without `model_config` (config.json unreadable) the model rules
      are skipped, as in the launcher.
    - The shard's checks (F2): ATTENTION one of paged|flashdecoding|flashdecoding-ipex|flashinfer,
      block size 16/256/64/1; prefix caching with paged attention is a start-up error.
    - Chunking (F3) = support_chunking AND PREFILL_CHUNKING (default 1) AND speculate == 0 AND a flash
      kernel; the model types TGI builds without chunking (gemma3, qwen2_vl, qwen2_5_vl, mllama) count
      as support_chunking=False.

    The embedded engine calls it with the default cuda_capability (9, 0): it behaves as TGI on a modern
    GPU. Raises ConfigError naming the variable and its allowed values for a bad value.
    """
    attention, prefix, notes = _resolve_attention(env, model_config, lora, cuda_capability)
    if attention not in ATTENTIONS:
        raise ConfigError([Problem(("ATTENTION",), f"ATTENTION must be one of: {', '.join(ATTENTIONS)}; "
                                                   f"got {attention!r}")])
    prefix_caching = _flag("PREFIX_CACHING", prefix)
    if prefix_caching and attention not in FLASH_ATTENTIONS:
        raise ConfigError([Problem(("PREFIX_CACHING", "ATTENTION"),
                                   f"PREFIX_CACHING={prefix} needs ATTENTION flashinfer, flashdecoding or "
                                   f"flashdecoding-ipex (TGI refuses prefix caching with {attention} attention); "
                                   "set PREFIX_CACHING=0 or another ATTENTION")])
    chunking = support_chunking and model_supports_chunking(model_config)
    chunking = chunking and _flag("PREFILL_CHUNKING", env.get("PREFILL_CHUNKING", "1"))
    warnings: list[str] = []
    if speculate and chunking:
        warnings.append(SPECULATION_WARNING)
        chunking = False
    if attention not in FLASH_ATTENTIONS and chunking:
        warnings.append(ATTENTION_WARNING)
        chunking = False
    if chunking:
        warnings.append(CHUNKING_IGNORES_WARNING)
    return SchedulingMode(attention=attention, block_size=BLOCK_SIZES[attention], prefix_caching=prefix_caching,
                          chunking=chunking, warnings=tuple(warnings), notes=tuple(notes))


# -- section 6 L2: KV capacity ------------------------------------------------------------------------
TGI_WIGGLE_ROOM = 0.90  # the shard's TGI_WIGGLE_ROOM (globals.py), used by warm-up
LAUNCHER_WIGGLE_ROOM = 0.95  # the launcher's default for the same variable, used by its VRAM estimate (L1)
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
class Limits:
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
                  model_max_length: int | None = None, max_batch_size: int | None = None) -> Limits:
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
    return Limits(max_batch_total_tokens=batch_total, max_total_tokens=total, max_input_tokens=inp,
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


# -- section 6 L1: the launcher's default max_batch_prefill_tokens ---------------------------------------
# fp16 dense FLOPS per card, the launcher's `ComputeType::f16_flop` (keyed by the planner's card names).
GPU_FP16_FLOPS: Mapping[str, int] = {
    "RTX-4090": 82 * 10**12, "T4": 65 * 10**12, "L4": 121 * 10**12, "L40": 181 * 10**12, "L40S": 363 * 10**12,
    "A10G": 125 * 10**12, "A40": 149 * 10**12, "A100-80GB": 312 * 10**12, "A100-40GB": 312 * 10**12,
    "H100-80GB": 900 * 10**12, "H100-NVL": 900 * 10**12, "H200": 989 * 10**12,
}
_DEFAULT_OPTIMAL = {"qwen2_vl": 10_000, "qwen2_5_vl": 10_000, "gemma3": 8000}


def _int(cfg: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = cfg.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _launcher_shape(model_config: Mapping[str, Any]) -> tuple[int, int, int, int, int, int] | None:
    """(heads, kv_heads, head_dim, hidden, intermediate, layers) as the launcher reads them; None if one is missing."""
    shape = (_int(model_config, "num_attention_heads"),
             _int(model_config, "num_key_value_heads", "num_attention_heads"), model_head_dim(model_config),
             _int(model_config, "hidden_size", "n_embd"),
             _int(model_config, "intermediate_size"), _int(model_config, "num_hidden_layers"))
    return None if None in shape else shape  # type: ignore[return-value]


def model_flops_per_token(model_config: Mapping[str, Any]) -> int | None:
    """The launcher's `Config::flop`: layers x (2 hidden head_dim (3 heads + 2 kv_heads) + 6 hidden inter (k + shared)).

    k is num_experts_per_tok (1 when absent), shared n_shared_experts (0). None for a VLM or when a
    field is missing, as in the launcher.
    """
    if model_config.get("vision_config") is not None:
        return None
    shape = _launcher_shape(model_config)
    if shape is None:
        return None
    heads, kv_heads, head_dim, hidden, inter, layers = shape
    experts = (_int(model_config, "num_experts_per_tok") or 1) + (_int(model_config, "n_shared_experts") or 0)
    attention = 2 * heads * head_dim * hidden * 3 + 2 * kv_heads * head_dim * hidden * 2  # q, attn, o + k, v
    mlp = 2 * 3 * hidden * inter * experts
    return (attention + mlp) * layers  # type: ignore[operator]


def launcher_vram_tokens(model_config: Mapping[str, Any], gpu_memory_bytes: int, *, num_shard: int = 1,
                         cuda_memory_fraction: float = 1.0, wiggle_room: float = LAUNCHER_WIGGLE_ROOM) -> int | None:
    """The launcher's `vram_maximum`: tokens the VRAM left after its rough model size allows, or None.

    available = memory x num_shard x fraction x 0.95 (in f32, as the launcher computes it);
    model = 2 B x (layers x (3 inter experts hidden + (heads + 2 kv) head_dim + heads head_dim hidden)
    + 2 vocab hidden); per token = KV (kv_heads x 2 x head_dim x 2 B x layers) + (inter + inter/2) x experts
    x 2 B x 3. None for a checkpoint quantized in its config.json, a missing field, or weights above memory.
    """
    import numpy as np

    if model_config.get("quantization_config") is not None:
        return None
    shape = _launcher_shape(model_config)
    vocab = _int(model_config, "vocab_size")
    if shape is None or vocab is None:
        return None
    heads, kv_heads, head_dim, hidden, inter, layers = shape
    experts = _int(model_config, "num_local_experts") or 1
    layer = 3 * inter * experts * hidden + (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden  # type: ignore
    model = (layer * layers + 2 * vocab * hidden) * 2  # type: ignore[operator]
    per_token = kv_heads * 2 * head_dim * 2 * layers + (inter + inter // 2) * experts * 2 * 3  # type: ignore
    with np.errstate(over="ignore"):
        available = int(np.float32(gpu_memory_bytes * num_shard) * np.float32(cuda_memory_fraction)
                        * np.float32(wiggle_room))
    if available < model:
        return None
    return (available - model) // per_token


def launcher_max_batch_prefill_tokens(model_config: Mapping[str, Any] | None, *, gpu_fp16_flops: int | None,
                                      gpu_memory_bytes: int | None = None, num_shard: int = 1,
                                      cuda_memory_fraction: float = 1.0) -> tuple[int, list[str]]:
    """The launcher's default `max_batch_prefill_tokens` (L1), and the sentences that show how.

    compute_optimal = floor(fp16 FLOPS x num_shard / model FLOPs per token), used when > 100 (unknown
    card, VLM or missing field: unused); else 10000 for qwen2_vl/qwen2_5_vl, 8000 for gemma3, 4096
    otherwise; capped at max_position_embeddings (or max_seq_len, n_positions) and at the VRAM estimate.
    """
    steps: list[str] = []
    cfg = model_config or {}
    default = _DEFAULT_OPTIMAL.get(str(cfg.get("model_type")), 4096) if model_config is not None else 4096
    flops = model_flops_per_token(cfg) if model_config is not None else None
    value = default
    if gpu_fp16_flops is None:
        steps.append(f"card not in the launcher's FLOPS table: default {default:,}")
    elif flops is None:
        steps.append(f"model FLOPs per token unknown (VLM or missing field): default {default:,}")
    else:
        optimal = gpu_fp16_flops * num_shard // flops
        shards = f" x {num_shard} shards" if num_shard > 1 else ""
        if optimal > 100:
            value = optimal
            steps.append(f"compute_optimal = floor({gpu_fp16_flops / 1e12:g} TFLOPS{shards} / {flops:,} FLOPs "
                         f"per token) = {optimal:,}")
        else:
            steps.append(f"compute_optimal {optimal} <= 100 is ignored: default {default:,}")
    mpe = _int(cfg, "max_position_embeddings", "max_seq_len", "n_positions")
    if mpe is not None and mpe < value:
        steps.append(f"capped at max_position_embeddings {mpe:,}")
        value = mpe
    if gpu_memory_bytes is not None and model_config is not None:
        vram = launcher_vram_tokens(cfg, gpu_memory_bytes, num_shard=num_shard,
                                    cuda_memory_fraction=cuda_memory_fraction)
        if vram is not None and vram < value:
            steps.append(f"capped at the launcher's VRAM estimate {vram:,} tokens")
            value = vram
    return value, steps
