"""The cross-field rules of the launcher and TGI 3's router (`LauncherRules`, a base of `LauncherConfig`).

Cross-field rules are not enforced at construction (a sweep may hold an unfinished config);
`problems()` lists them and `validate()` raises them all at once. Wrong types or values for a
single field raise `ConfigError` right away.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import TypeVar

from tgi_toolkit.config.errors import ConfigError, Problem
from tgi_toolkit.config.launcher_fields import DTYPE_VALUES, KV_CACHE_DTYPE_VALUES, QUANTIZE_VALUES, LauncherFields
from tgi_toolkit.config.options import flag_for

BITSANDBYTES = ("bitsandbytes", "bitsandbytes-nf4", "bitsandbytes-fp4")
_Config = TypeVar("_Config", bound="LauncherRules")


class LauncherRules(LauncherFields):
    """The launcher's fields with their cross-field checks and TGI 3's derived defaults."""

    def chunking(self, env: Mapping[str, str] | None = None, *, backend: str = "tgi") -> bool | None:
        """Whether the server would chunk prefills (TGI 3's F3), or None where the question does not apply (vLLM).

        TGI and the embedded engine read ATTENTION / PREFIX_CACHING / PREFILL_CHUNKING from their
        environment (`env`; None: this process's), and --speculate turns chunking off. Raises ConfigError
        for a bad value of one of those variables.
        """
        if backend == "vllm":
            return None
        from tgi_toolkit.config.scheduling_mode import resolve_mode

        mode = resolve_mode(os.environ if env is None else env, speculate=self.speculate or 0,
                            lora=self.lora_adapters is not None)
        return mode.chunking

    def problems(self, env: Mapping[str, str] | None = None, *, backend: str = "tgi") -> list[Problem]:
        """Every launcher and router rule this config breaks (rules on unset values are skipped).

        `env` and `backend` say which scheduling applies: the prompt limit must fit the prefill budget
        only without prefill chunking (TGI 3's router, section 6 L4 of docs/tgi-rules.md); see `chunking`.
        """
        out: list[Problem] = []

        def add(fields: tuple[str, ...], message: str) -> None:
            out.append(Problem(fields, message))

        for name, allowed in (("quantize", QUANTIZE_VALUES), ("dtype", DTYPE_VALUES),
                              ("kv_cache_dtype", KV_CACHE_DTYPE_VALUES), ("rope_scaling", ("linear", "dynamic")),
                              ("usage_stats", ("on", "off", "no-stack"))):
            value = getattr(self, name)
            if value is not None and value not in allowed:  # only reachable via model_construct
                add((name,), f"{flag_for(name)} {value!r} is not one of: {', '.join(allowed)}")

        mit, mil, total = self.max_input_tokens, self.max_input_length, self.max_total_tokens
        if mit is not None and mil is not None:
            add(("max_input_tokens", "max_input_length"),
                f"--max-input-tokens ({mit}) and the legacy --max-input-length ({mil}) are exclusive: "
                "set only --max-input-tokens")
        inp_name = "max_input_tokens" if mit is not None else "max_input_length"
        inp = mit if mit is not None else mil
        if inp is not None and total is not None and inp >= total:
            add((inp_name, "max_total_tokens"),
                f"{flag_for(inp_name)} ({inp}) must be < --max-total-tokens ({total})")
        batch_total, prefill = self.max_batch_total_tokens, self.max_batch_prefill_tokens
        if total is not None and batch_total is not None and total > batch_total:
            add(("max_total_tokens", "max_batch_total_tokens"),
                f"--max-total-tokens ({total}) must be <= --max-batch-total-tokens ({batch_total})")
        if prefill is not None and inp is not None and prefill < inp:
            try:
                chunking = self.chunking(env, backend=backend)
            except ConfigError as exc:
                out += exc.problems
                chunking = True  # the variable's own problem is reported; do not guess the mode
            if chunking is False:
                add(("max_batch_prefill_tokens", inp_name),
                    f"--max-batch-prefill-tokens ({prefill}) must be >= {flag_for(inp_name)} ({inp}) "
                    "(a whole prompt must fit one prefill without prefill chunking: PREFILL_CHUNKING=0, "
                    "ATTENTION=paged or --speculate)")
        # No `max_batch_prefill_tokens <= max_batch_total_tokens` check on the given value: TGI 3 ignores a
        # user's --max-batch-total-tokens on flash models (L2 step 5) and its router compares the prefill
        # budget with the KV capacity found at warm-up (L4; scheduling.router_problems).
        if self.max_batch_size is not None and self.max_batch_size <= 0:
            add(("max_batch_size",), f"--max-batch-size ({self.max_batch_size}) must be > 0")
        if self.validation_workers <= 0:
            add(("validation_workers",), f"--validation-workers ({self.validation_workers}) must be > 0")
        if math.isnan(self.waiting_served_ratio) or self.waiting_served_ratio < 0:
            add(("waiting_served_ratio",),
                f"--waiting-served-ratio ({self.waiting_served_ratio}) must be >= 0")

        if self.dtype is not None and self.quantize is not None and self.quantize not in BITSANDBYTES:
            add(("dtype", "quantize"),
                f"--dtype ({self.dtype}) cannot be combined with --quantize {self.quantize}: "
                f"--dtype works only without quantization or with {', '.join(BITSANDBYTES)}")
        if self.num_shard is not None and self.num_shard < 1:
            add(("num_shard",), f"--num-shard ({self.num_shard}) must be >= 1")
        if self.sharded is True and self.num_shard is not None and self.num_shard <= 1:
            add(("sharded", "num_shard"),
                f"--sharded true needs --num-shard > 1 (got {self.num_shard}); use --sharded false for one shard")
        if self.quantize == "exl2":
            if self.num_shard is not None and self.num_shard > 1:
                add(("quantize", "num_shard"),
                    f"--quantize exl2 does not support sharding: --num-shard must be 1 (got {self.num_shard})")
            elif self.sharded is True and self.num_shard is None:
                add(("quantize", "sharded"), "--quantize exl2 does not support sharding: drop --sharded true")
        if self.ngrok:
            if not self.ngrok_authtoken:
                add(("ngrok", "ngrok_authtoken"), "--ngrok needs --ngrok-authtoken")
            if not self.ngrok_edge:
                add(("ngrok", "ngrok_edge"), "--ngrok needs --ngrok-edge")

        for name in ("port", "prometheus_port", "master_port"):
            value = getattr(self, name)
            if not 1 <= value <= 65535:
                add((name,), f"{flag_for(name)} ({value}) must be between 1 and 65535")
        if not 0 < self.cuda_memory_fraction <= 1:
            add(("cuda_memory_fraction",),
                f"--cuda-memory-fraction ({self.cuda_memory_fraction}) must be > 0 and <= 1")
        if self.rope_factor is not None and not self.rope_factor > 0:
            add(("rope_factor",), f"--rope-factor ({self.rope_factor}) must be > 0")
        if self.lora_adapters is not None:
            for adapter in self.lora_adapters.split(","):
                adapter = adapter.strip()
                if not adapter or adapter.startswith(("@", "=")):
                    add(("lora_adapters",), f"--lora-adapters: missing adapter id in {self.lora_adapters!r}")
                elif "=" not in adapter and adapter.count("@") > 1:
                    add(("lora_adapters",),
                        f"--lora-adapters: {adapter!r} has more than one '@' (expected id or id@revision)")
        return out

    def check(self: _Config, env: Mapping[str, str] | None = None, *, backend: str = "tgi") -> _Config:
        """Raise ConfigError listing every problem; return self when there is none (see `problems`)."""
        problems = self.problems(env, backend=backend)
        if problems:
            raise ConfigError(problems)
        return self

    # Shadows pydantic's deprecated classmethod `BaseModel.validate`, which nothing here uses.
    def validate(self: _Config, env: Mapping[str, str] | None = None, *,  # type: ignore[override]
                 backend: str = "tgi") -> _Config:
        """Same as `check()`: raise ConfigError listing every problem."""
        return self.check(env, backend=backend)

    def resolved(self: _Config, max_position_embeddings: int, *, kv_capacity_tokens: int | None = None,
                 model_max_length: int | None = None, env: Mapping[str, str] | None = None,
                 backend: str = "tgi") -> _Config:
        """A validated copy with TGI 3's derived defaults filled for a model of this context length.

        Section 6 of docs/tgi-rules.md, without a GPU to measure:
        - max_batch_prefill_tokens <- the launcher's default for an unknown card: 4096, capped at
          max_position_embeddings (L1; `config.prefill_default.launcher_max_batch_prefill_tokens` with a card);
        - max_total_tokens <- with prefill chunking min(KV capacity, tokenizer model_max_length,
          max_position_embeddings), each when known; without chunking the warm-up batch's prompt tokens (L3);
        - max_input_tokens <- the legacy max_input_length if given, else max_total_tokens - 1 (L3);
        - max_batch_total_tokens stays as it is: the server infers it from free memory.
        Chunking follows `chunking(env, backend=backend)` (vLLM: as with chunking). Raises ConfigError when
        the result breaks a rule (e.g. a prompt limit beyond the context).
        """
        from tgi_toolkit.config.scheduling import default_max_total_tokens, warmup_requests

        if max_position_embeddings < 2:
            raise ConfigError([Problem((), f"max_position_embeddings ({max_position_embeddings}) must be >= 2")])
        self.check(env, backend=backend)
        chunking = self.chunking(env, backend=backend) is not False
        given_inp = self.max_input_tokens if self.max_input_tokens is not None else self.max_input_length
        prefill = self.max_batch_prefill_tokens
        if prefill is None:
            prefill = min(4096, max_position_embeddings)
        total = self.max_total_tokens
        if total is None:
            kv = kv_capacity_tokens if kv_capacity_tokens is not None else max_position_embeddings
            prompts = warmup_requests(prefill, given_inp, None, self.max_batch_size)
            total = default_max_total_tokens(chunking=chunking, kv_capacity_tokens=kv,
                                             max_position_embeddings=max_position_embeddings,
                                             model_max_length=model_max_length,
                                             warmup_prompt_tokens=sum(p for p, _ in prompts))
        inp = given_inp if given_inp is not None else total - 1
        update = {"max_input_tokens": inp, "max_input_length": None, "max_total_tokens": total,
                  "max_batch_prefill_tokens": prefill}
        return self.model_copy(update=update).check(env, backend=backend)
