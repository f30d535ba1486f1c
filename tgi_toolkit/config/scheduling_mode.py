"""TGI 3's scheduling mode (docs/tgi-rules.md section 1): `resolve_mode` reads ATTENTION, PREFIX_CACHING and
PREFILL_CHUNKING as the launcher (F1), the shard's globals (F2) and `Model.__init__` (F3) do; scheduling.py
derives the limits."""

from __future__ import annotations

from collections.abc import Mapping
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
