"""A plan's request limits: max_input_tokens, max_total_tokens and max_batch_prefill_tokens.

Given, from the workload, or TGI 3's defaults (docs/tgi-rules.md L1, L3), checked as TGI's router checks them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tgi_toolkit.planner.memory import num
from tgi_toolkit.planner.shape import ModelShape

TGI_DEFAULT_MAX_TOTAL_TOKENS = 4096  # TGI 2's default max_total_tokens; a fallback for plans with no KV room


def check_positive(name: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be a positive integer; got {value!r}")


@dataclass
class Lengths:
    """The request limits as the plan works them out, with the notes that say where each came from."""

    max_input: int
    max_total: int
    prefill: int
    prompt: int | None
    output: int | None
    notes: list[str]


def known_lengths(prompt_tokens: int | None, output_tokens: int | None, max_input_tokens: int | None,
                   max_total_tokens: int | None, max_batch_prefill_tokens: int | None) -> tuple[int | None, int | None]:
    """(max_input_tokens, max_total_tokens) known before the KV cache is sized: given, or from the workload."""
    for name, value in (("prompt_tokens", prompt_tokens), ("output_tokens", output_tokens),
                        ("max_input_tokens", max_input_tokens), ("max_total_tokens", max_total_tokens),
                        ("max_batch_prefill_tokens", max_batch_prefill_tokens)):
        check_positive(name, value)
    if (prompt_tokens is None) != (output_tokens is None):
        raise ValueError("prompt_tokens and output_tokens describe one workload: give both or neither")
    if prompt_tokens is None or output_tokens is None:
        if max_input_tokens is not None and max_total_tokens is not None and max_input_tokens >= max_total_tokens:
            raise ValueError(f"max_input_tokens ({max_input_tokens}) must be < max_total_tokens ({max_total_tokens})")
        return max_input_tokens, max_total_tokens
    total = max_total_tokens or prompt_tokens + output_tokens
    max_input = max_input_tokens or min(prompt_tokens, total - 1)
    if prompt_tokens + output_tokens > total:
        raise ValueError(f"max_total_tokens ({total}) is below the workload's prompt_tokens + output_tokens "
                         f"({prompt_tokens + output_tokens})")
    if prompt_tokens > max_input:
        raise ValueError(f"max_input_tokens ({max_input}) is below the workload's prompt_tokens ({prompt_tokens})")
    if max_input >= total:
        raise ValueError(f"max_input_tokens ({max_input}) must be < max_total_tokens ({total})")
    return max_input, total


def prefill_budget(given: int | None, default: int, default_steps: list[str], known_input: int | None,
                    chunking: bool) -> tuple[int, list[str]]:
    """max_batch_prefill_tokens: given, else the launcher's default (L1); without chunking at least the prompt limit."""
    if given is not None:
        return given, [f"max_batch_prefill_tokens {num(given)} as given"]
    notes = [f"max_batch_prefill_tokens = **{num(default)}**, the launcher's default: " + "; ".join(default_steps)]
    if not chunking and known_input is not None and known_input > default:
        notes.append(f"raised to max_input_tokens {num(known_input)}: without prefill chunking a whole prompt must "
                     "fit one prefill (the router refuses to start otherwise)")
        return known_input, notes
    return default, notes


def request_limits(shape: ModelShape, prompt_tokens: int | None, output_tokens: int | None, known_input: int | None,
             known_total: int | None, prefill: int, *, chunking: bool, kv_capacity_tokens: int,
             warmup_prompt_tokens: int, prefill_notes: list[str]) -> Lengths:
    """Request limits from the workload, or TGI 3's warm-up defaults (docs/tgi-rules.md L3).

    With chunking max_total_tokens = min(KV capacity, max_position_embeddings) (the tokenizer's
    model_max_length, which TGI also takes, is not in config.json); without, the warm-up batch's
    prompt tokens. max_input_tokens = max_total_tokens - 1.
    """
    notes = list(prefill_notes)
    max_pos = shape.max_position_embeddings
    total = known_total
    if prompt_tokens is not None:
        notes.append(f"max_total_tokens {num(known_total or 0)} and max_input_tokens {num(known_input or 0)} "
                     + (f"from the workload ({num(prompt_tokens)} prompt + {num(output_tokens or 0)} output tokens)"))
    elif total is None:
        if chunking:
            candidates = [kv_capacity_tokens] + ([max_pos] if max_pos else [])
            total = min(candidates)
            how = (f"min(KV capacity {num(kv_capacity_tokens)}, max_position_embeddings {num(max_pos)})" if max_pos
                   else f"the KV capacity {num(kv_capacity_tokens)}")
            if total < 2:
                total = max_pos or TGI_DEFAULT_MAX_TOTAL_TOKENS  # no KV room at all: the plan does not fit
            notes.append(f"max_total_tokens = {how} = {num(total)} (TGI 3's warm-up default with prefill chunking)")
        else:
            total = warmup_prompt_tokens
            notes.append(f"max_total_tokens = the warm-up batch's prompt tokens = {num(total)} (TGI 3's warm-up "
                         "default without prefill chunking)")
    assert total is not None
    max_input = known_input if known_input is not None else total - 1
    if known_input is None and prompt_tokens is None:
        notes.append(f"max_input_tokens = max_total_tokens - 1 = {num(max_input)}")
    if max_input >= total:
        raise ValueError(f"max_input_tokens ({max_input}) must be < max_total_tokens ({total}) (TGI's router "
                         "refuses it; without chunking the default max_total_tokens is the warm-up prompt, "
                         "max_batch_prefill_tokens)")
    if max_pos and total > max_pos:
        notes.append(f"warning: max_total_tokens {num(total)} exceeds the model's max_position_embeddings "
                     f"{num(max_pos)}")
    if not chunking and prefill < max_input:
        raise ValueError(f"max_batch_prefill_tokens ({prefill}) must be >= max_input_tokens ({max_input}) "
                         "without prefill chunking")
    return Lengths(max_input, total, prefill, prompt_tokens, output_tokens, notes)
