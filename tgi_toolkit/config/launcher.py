"""`LauncherConfig`: every option of `text-generation-launcher`, its checks and its renderings.

One field per launcher flag, in the launcher's own order, each with TGI's default, its
environment variable, its `--flag` and a UI group. Two deliberate departures from TGI's defaults:
`hostname` is 127.0.0.1 (we serve on loopback unless told otherwise) and `model_id` is the
embedded engine's model. Both are therefore always written out by `to_cli()`/`to_env()`, so a real
launcher started from a rendering behaves like the config says.

Cross-field rules are not enforced at construction (a sweep may hold an unfinished config);
`problems()` lists them and `validate()` raises them all at once. Wrong types or values for a
single field raise `ConfigError` right away.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tgi_toolkit.config import options, rust_debug
from tgi_toolkit.config.errors import ConfigError, Problem
from tgi_toolkit.config.model_files import DEFAULT_MODEL_ID
from tgi_toolkit.config.options import COMMA_LISTS, OptionSpec, env_for, flag_for, suggest, text

DEFAULT_HOSTNAME = "127.0.0.1"
DOCKER_IMAGE = "ghcr.io/huggingface/text-generation-inference:latest"
CONTAINER_PORT = 80  # TGI's image sets PORT=80

Quantize = Literal["awq", "compressed-tensors", "eetq", "exl2", "gptq", "marlin", "bitsandbytes",
                   "bitsandbytes-nf4", "bitsandbytes-fp4", "fp8"]
# float32 is beyond TGI's launcher (float16, bfloat16): the embedded engine and vLLM take it, and it is
# the fast dtype on CPUs without native bf16.
Dtype = Literal["float16", "bfloat16", "float32"]
KvCacheDtype = Literal["fp8_e4m3fn", "fp8_e5m2"]
RopeScaling = Literal["linear", "dynamic"]
UsageStats = Literal["on", "off", "no-stack"]

QUANTIZE_VALUES: tuple[str, ...] = typing.get_args(Quantize)
DTYPE_VALUES: tuple[str, ...] = typing.get_args(Dtype)
KV_CACHE_DTYPE_VALUES: tuple[str, ...] = typing.get_args(KvCacheDtype)
BITSANDBYTES = ("bitsandbytes", "bitsandbytes-nf4", "bitsandbytes-fp4")

# The enum variant names the launcher prints in its `Args { ... }` line.
_VARIANTS: dict[str, str] = {
    "awq": "Awq", "compressed-tensors": "CompressedTensors", "eetq": "Eetq", "exl2": "Exl2", "gptq": "Gptq",
    "marlin": "Marlin", "bitsandbytes": "Bitsandbytes", "bitsandbytes-nf4": "BitsandbytesNf4",
    "bitsandbytes-fp4": "BitsandbytesFp4", "fp8": "Fp8", "float16": "Float16", "bfloat16": "BFloat16",
    "float32": "Float32",
    "fp8_e4m3fn": "Fp8e4m3fn", "fp8_e5m2": "Fp8e5m2", "linear": "Linear", "dynamic": "Dynamic",
    "on": "On", "off": "Off", "no-stack": "NoStack",
}
_SECRETS = frozenset({"api_key", "ngrok_authtoken"})
_ALWAYS_RENDERED = ("model_id", "hostname")  # our defaults differ from the launcher's
_UNSET: Any = object()

Group = Literal["model", "limits", "batching", "quantization", "network", "hardware", "telemetry", "other"]
GROUPS: tuple[str, ...] = typing.get_args(Group)


def _opt(default: Any, group: Group, help: str, *, tgi_default: Any = _UNSET, **constraints: Any) -> Any:
    extra: dict[str, Any] = {"group": group,
                             "tgi_default": default if tgi_default is _UNSET else tgi_default}
    factory = {"default_factory": list} if default == [] else {"default": default}
    return Field(**factory, description=help, json_schema_extra=extra, **constraints)


class LauncherConfig(BaseModel):
    """Every `text-generation-launcher` option. None means "let the server work it out"."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, validate_default=False)

    # -- the model --------------------------------------------------------------------------
    model_id: str = _opt(DEFAULT_MODEL_ID, "model", "Hub model id or local directory of the model to serve.",
                         tgi_default="bigscience/bloom-560m", min_length=1)
    revision: str | None = _opt(None, "model", "Hub revision: a branch, tag or commit of the model repository.")
    validation_workers: int = _opt(2, "limits", "Tokenizer workers the router uses to validate and "
                                   "truncate requests.", ge=0)
    sharded: bool | None = _opt(None, "hardware", "Shard the model across GPUs (true) or not (false); "
                                "unset lets the launcher count the visible GPUs.")
    num_shard: int | None = _opt(None, "hardware", "Number of shards (GPUs) to run; unset uses every "
                                 "visible GPU.", ge=0)
    quantize: Quantize | None = _opt(None, "quantization", "Weight quantization method; most need a "
                                     "checkpoint quantized that way, bitsandbytes* and eetq work on any model.")
    speculate: int | None = _opt(None, "model", "Tokens to speculate per step (Medusa heads when the "
                                 "model has them, n-gram otherwise).", ge=0)
    dtype: Dtype | None = _opt(None, "quantization", "Force the weights' dtype; only without quantization or "
                               "with a bitsandbytes one.")
    kv_cache_dtype: KvCacheDtype | None = _opt(None, "quantization", "Dtype of the KV cache; unset keeps the "
                                               "model's dtype (FP8 choices need a CUDA GPU).")
    trust_remote_code: bool = _opt(False, "model", "Run modelling code shipped with the model repository "
                                   "(pin --revision when you do).")
    max_concurrent_requests: int = _opt(128, "limits", "Requests in flight at once; beyond it the server "
                                        "answers 429 instead of queueing.", ge=0)
    max_best_of: int = _opt(2, "limits", "Largest `best_of` a client may ask for.", ge=0)
    max_stop_sequences: int = _opt(4, "limits", "Most stop sequences a client may send.", ge=0)
    max_top_n_tokens: int = _opt(5, "limits", "Largest `top_n_tokens` a client may ask for.", ge=0)
    max_input_tokens: int | None = _opt(None, "limits", "Longest prompt in tokens; unset: max_total_tokens - 1 "
                                        "(TGI 3).", ge=0)
    max_input_length: int | None = _opt(None, "limits", "Old name of --max-input-tokens; set only one of "
                                        "the two.", ge=0)
    max_total_tokens: int | None = _opt(None, "limits", "Per-request budget of prompt plus generated tokens; "
                                        "unset: min(KV capacity, the model's context) with prefill chunking "
                                        "(TGI 3).", ge=0)
    waiting_served_ratio: float = _opt(0.3, "batching", "Queued-to-running ratio at which waiting requests "
                                       "may pause the running batch for a prefill (ignored with prefill "
                                       "chunking).")
    max_batch_prefill_tokens: int | None = _opt(None, "batching", "Prompt tokens one forward may compute; "
                                                "unset: the launcher's FLOPs-based default (4096 on cards it "
                                                "does not know), capped at the context.", ge=0, le=2**32 - 1)
    max_batch_total_tokens: int | None = _opt(None, "batching", "Tokens all running requests may hold "
                                              "together (the KV-cache budget), inferred from free memory; "
                                              "TGI 3 ignores a given value, with a warning.", ge=0,
                                              le=2**32 - 1)
    max_waiting_tokens: int = _opt(20, "batching", "Decode steps after which waiting requests are let in "
                                   "even below the waiting-served ratio (ignored with prefill chunking).", ge=0)
    max_batch_size: int | None = _opt(None, "batching", "Most requests in one batch (for hardware without "
                                      "unpadded attention); with prefill chunking it caps only a batch "
                                      "started from idle.", ge=0)
    cuda_graphs: list[int] | None = _opt(None, "hardware", "Batch sizes to capture CUDA graphs for, e.g. "
                                         "1,2,4,8; 0 turns them off.")
    hostname: str = _opt(DEFAULT_HOSTNAME, "network", "Address the HTTP server listens on (TGI's default is "
                         "0.0.0.0; ours is loopback).", tgi_default="0.0.0.0", min_length=1)
    port: int = _opt(3000, "network", "Port of the HTTP server.")
    prometheus_port: int = _opt(9000, "network", "Port of the separate Prometheus endpoint (TGI 3.x).")
    shard_uds_path: str = _opt("/tmp/text-generation-server", "hardware", "Unix socket prefix for the "
                               "router-to-shard gRPC link.")
    master_addr: str = _opt("localhost", "hardware", "Address of the first shard for torch.distributed.")
    master_port: int = _opt(29500, "hardware", "Port of the first shard for torch.distributed.")
    huggingface_hub_cache: str | None = _opt(None, "other", "Directory of the Hugging Face hub cache.")
    weights_cache_override: str | None = _opt(None, "other", "Directory to read converted weights from "
                                              "instead of the hub cache.")
    disable_custom_kernels: bool = _opt(False, "hardware", "Turn off TGI's custom CUDA kernels (tested on "
                                        "A100 only).")
    cuda_memory_fraction: float = _opt(1.0, "hardware", "Share of each GPU's memory the server may use.")
    rope_scaling: RopeScaling | None = _opt(None, "model", "RoPE scaling kind for longer prompts on RoPE "
                                            "models.")
    rope_factor: float | None = _opt(None, "model", "RoPE scaling factor (see --rope-scaling).")
    json_output: bool = _opt(False, "telemetry", "Write logs as JSON lines.")
    otlp_endpoint: str | None = _opt(None, "telemetry", "OpenTelemetry collector to send traces to.")
    otlp_service_name: str = _opt("text-generation-inference.router", "telemetry", "Service name in the "
                                  "traces.")
    cors_allow_origin: list[str] = _opt([], "network", "Origins allowed by CORS; repeat the flag for "
                                        "several.")
    api_key: str | None = _opt(None, "network", "Bearer token required on the POST routes.")
    watermark_gamma: float | None = _opt(None, "other", "Watermarking: share of the vocabulary in the "
                                         "green list.")
    watermark_delta: float | None = _opt(None, "other", "Watermarking: logit bias given to green tokens.")
    ngrok: bool = _opt(False, "network", "Expose the server through an ngrok tunnel.")
    ngrok_authtoken: str | None = _opt(None, "network", "ngrok authentication token (needed with --ngrok).")
    ngrok_edge: str | None = _opt(None, "network", "ngrok edge (needed with --ngrok).")
    tokenizer_config_path: str | None = _opt(None, "model", "tokenizer_config.json to use instead of the "
                                             "model's (e.g. for its chat template).")
    disable_grammar_support: bool = _opt(False, "other", "Refuse grammar-constrained generation requests.")
    env: bool = _opt(False, "other", "Print details of the runtime environment at start.")
    max_client_batch_size: int = _opt(4, "limits", "Most inputs one client request may carry.", ge=0)
    lora_adapters: str | None = _opt(None, "model", "LoRA adapters to load at start, comma-separated "
                                     "(id, id@revision or name=path).")
    usage_stats: UsageStats = _opt("on", "telemetry", "Anonymous usage statistics sent to Hugging Face: "
                                   "on, off, or no-stack (no error details).")
    payload_limit: int = _opt(2_000_000, "limits", "Largest request body in bytes.", ge=0)
    enable_prefill_logprobs: bool = _opt(False, "other", "Allow clients to ask for prompt log-probabilities "
                                         "(costs memory on long prompts).")
    graceful_termination_timeout: int = _opt(90, "other", "Seconds to let shards finish on shutdown "
                                             "before killing them.", ge=0)

    # -- construction ------------------------------------------------------------------------
    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(_validation_problems(exc)) from None

    def __setattr__(self, name: str, value: Any) -> None:
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise ConfigError(_validation_problems(exc)) from None

    @field_validator("quantize", "dtype", "kv_cache_dtype", "rope_scaling", "usage_stats", mode="before")
    @classmethod
    def _enum_spelling(cls, value: Any, info: Any) -> Any:
        # Accept the launcher's log spelling (`Gptq`, `BitsandbytesNf4`, `NoStack`) for the same value.
        return _match_variant(info.field_name, value)

    @field_validator("cuda_graphs", "cors_allow_origin", mode="before")
    @classmethod
    def _split_lists(cls, value: Any, info: Any) -> Any:
        if isinstance(value, str):
            value = [item.strip() for item in value.split(",") if item.strip()]
        if info.field_name == "cuda_graphs" and value is not None:
            # TGI drops zeros ("0" disables); store the disabled state one way only.
            value = list(value) or [0]
        return value

    @field_validator("cuda_graphs")
    @classmethod
    def _non_negative(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and any(size < 0 for size in value):
            raise ValueError("batch sizes must be >= 0")
        return value

    @classmethod
    def create(cls, **kwargs: Any) -> LauncherConfig:
        """Build from keyword arguments; any bad field raises ConfigError naming its flag."""
        return cls(**kwargs)

    # -- checks ------------------------------------------------------------------------------
    def chunking(self, env: Mapping[str, str] | None = None, *, backend: str = "tgi") -> bool | None:
        """Whether the server would chunk prefills (TGI 3's F3), or None where the question does not apply (vLLM).

        TGI and the embedded engine read ATTENTION / PREFIX_CACHING / PREFILL_CHUNKING from their
        environment (`env`; None: this process's), and --speculate turns chunking off. Raises ConfigError
        for a bad value of one of those variables.
        """
        if backend == "vllm":
            return None
        from tgi_toolkit.config.scheduling import resolve_mode

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

    def check(self, env: Mapping[str, str] | None = None, *, backend: str = "tgi") -> LauncherConfig:
        """Raise ConfigError listing every problem; return self when there is none (see `problems`)."""
        problems = self.problems(env, backend=backend)
        if problems:
            raise ConfigError(problems)
        return self

    # Shadows pydantic's deprecated classmethod `BaseModel.validate`, which nothing here uses.
    def validate(self, env: Mapping[str, str] | None = None, *,  # type: ignore[override]
                 backend: str = "tgi") -> LauncherConfig:
        """Same as `check()`: raise ConfigError listing every problem."""
        return self.check(env, backend=backend)

    def resolved(self, max_position_embeddings: int, *, kv_capacity_tokens: int | None = None,
                 model_max_length: int | None = None, env: Mapping[str, str] | None = None,
                 backend: str = "tgi") -> LauncherConfig:
        """A validated copy with TGI 3's derived defaults filled for a model of this context length.

        Section 6 of docs/tgi-rules.md, without a GPU to measure:
        - max_batch_prefill_tokens <- the launcher's default for an unknown card: 4096, capped at
          max_position_embeddings (L1; `config.scheduling.launcher_max_batch_prefill_tokens` with a card);
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

    # -- renderings --------------------------------------------------------------------------
    def _rendered_fields(self) -> list[tuple[str, Any]]:
        defaults = _defaults()
        return [(name, value) for name, value in self._values()
                if name in _ALWAYS_RENDERED or value != defaults[name]]

    def _values(self) -> list[tuple[str, Any]]:
        return [(name, getattr(self, name)) for name in type(self).model_fields]

    def to_cli(self) -> list[str]:
        """Launcher arguments for the values that differ from the defaults (model and host always)."""
        argv: list[str] = []
        for name, value in self._rendered_fields():
            flag = flag_for(name)
            if value is None:
                continue
            if isinstance(value, bool) and _SPECS[name].kind == "flag":
                if value:
                    argv.append(flag)
            elif isinstance(value, list):
                if name in COMMA_LISTS:
                    argv += [flag, ",".join(str(item) for item in value)]
                else:
                    for item in value:
                        argv += [flag, str(item)]
            else:
                argv += [flag, text(value)]
        return argv

    def to_env(self) -> dict[str, str]:
        """Environment variables for the values that differ from the defaults (model and host always)."""
        env: dict[str, str] = {}
        for name, value in self._rendered_fields():
            var = env_for(name)
            if var is None or value is None:
                continue
            # List variables are comma-joined; the launcher splits only CUDA_GRAPHS, so give it
            # at most one CORS origin this way.
            env[var] = ",".join(str(item) for item in value) if isinstance(value, list) else text(value)
        return env

    def docker_command(self, image: str = DOCKER_IMAGE, gpus: str | None = "all", volume: str = "$PWD/data",
                       shm_size: str = "1g") -> list[str]:
        """`docker run` for TGI's image serving this config on the host at hostname:port.

        Inside the container the launcher listens on 0.0.0.0:80; the host side is published on
        the configured address and port. HF_TOKEN is passed by name only (docker copies it from
        the caller's environment), never by value. `huggingface_hub_cache`, a host path, becomes
        the mounted volume instead of an argument (the image keeps its cache in /data).
        """
        if self.huggingface_hub_cache and volume == "$PWD/data":
            volume = self.huggingface_hub_cache
        inside = self.model_copy(update={"hostname": "0.0.0.0", "port": CONTAINER_PORT,
                                         "huggingface_hub_cache": None})
        publish = (f"{self.port}:{CONTAINER_PORT}" if self.hostname in ("0.0.0.0", "::", "")
                   else f"{self.hostname}:{self.port}:{CONTAINER_PORT}")
        head = ["docker", "run"]
        if gpus:
            head += ["--gpus", gpus]
        head += ["--shm-size", shm_size, "-p", publish, "-v", f"{volume}:/data", "-e", "HF_TOKEN"]
        return [*head, image, *inside.to_cli()]

    def to_dict(self, non_default_only: bool = False, redact: bool = True) -> dict[str, Any]:
        """Plain field -> value mapping for provenance; secrets are shown as "***" unless redact=False."""
        defaults = _defaults()
        out = {}
        for name, value in self._values():
            if non_default_only and value == defaults[name]:
                continue
            if redact and name in _SECRETS and value is not None:
                value = "***"
            out[name] = list(value) if isinstance(value, list) else value
        return out

    def to_args_log(self, redact: bool = False) -> str:
        """The launcher's `Args { ... }` log line for this config (readable by `from_args_log`)."""
        parts = []
        for name, value in self._values():
            spec = _SPECS[name]
            if redact and name in _SECRETS and value is not None:
                value = "***"
            variant = _VARIANTS.get(value) if spec.choices and isinstance(value, str) else None
            parts.append(f"{name}: {rust_debug.render_value(value, optional=spec.optional, variant=variant)}")
        return "Args { " + ", ".join(parts) + " }"

    def to_deployment_arguments(self) -> str:
        """The "# Deployment Arguments" list of seed 000's model cards, for every field."""
        lines = ["# Deployment Arguments", "## Constant"]
        for name, value in self._values():
            lines.append(f"- {name}: {rust_debug.render_value(value, optional=False)}")
        return "\n".join(lines) + "\n"

    # -- readers -----------------------------------------------------------------------------
    @classmethod
    def from_cli(cls, argv: Sequence[str], environ: Mapping[str, str] | None = None) -> LauncherConfig:
        """Parse launcher arguments; `environ` supplies the launcher's variables as fallbacks.

        Takes `--flag value` and `--flag=value`, bare boolean flags, `-p`/`-e`/`-g`, and an optional
        leading `text-generation-launcher`. Like the launcher, a variable such as HOSTNAME or PORT
        in `environ` is used when its flag is absent. All problems are raised together.
        """
        values, origin, problems = options.parse_argv(list(argv), _SPECS)
        if environ is not None:
            for name, value in options.read_env(environ, _SPECS).items():
                if name not in values:
                    values[name] = value
                    origin[name] = f"${env_for(name)}"
        return _build(cls, values, origin, problems)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> LauncherConfig:
        """The launcher's environment variables (MODEL_ID, MAX_TOTAL_TOKENS, ...) found in `environ`."""
        values = options.read_env(environ, _SPECS)
        return _build(cls, values, {name: f"${env_for(name)}" for name in values}, [])

    @classmethod
    def from_args_log(cls, line: str, strict: bool = False) -> LauncherConfig:
        """Read the launcher's `Args { model_id: "...", quantize: Some(Gptq), ... }` log line.

        Fields of newer launchers that this config does not know are skipped unless strict=True.
        """
        try:
            raw = rust_debug.parse_args_struct(line)
        except rust_debug.DebugSyntaxError as exc:
            raise ConfigError([Problem((), f"cannot read the launcher's Args line: {exc}")]) from None
        return _from_mapping(cls, raw, strict=strict, source="Args line")

    @classmethod
    def from_deployment_arguments(cls, text: str) -> LauncherConfig:
        """Read a "# Deployment Arguments" list (`- max_total_tokens: 1512`, ...) as in seed 000."""
        lines = text.splitlines()
        start = next((i + 1 for i, line in enumerate(lines) if line.strip().lower() == "# deployment arguments"), 0)
        raw: dict[str, Any] = {}
        problems: list[Problem] = []
        for line in lines[start:]:
            if re.match(r"#\s", line) and start:  # the next top-level section ends the list
                break
            match = re.match(r"\s*[-*]\s+([a-z][a-z0-9_]*)\s*:\s*(.*?)\s*$", line)
            if not match:
                continue  # headings, and variables such as `CUDA_VISIBLE_DEVICES (...)`
            try:
                raw[match.group(1)] = rust_debug.parse_value(match.group(2))
            except rust_debug.DebugSyntaxError as exc:
                problems.append(Problem((match.group(1),), f"{match.group(1)}: cannot read {match.group(2)!r}: {exc}"))
        if problems:
            raise ConfigError(problems)
        return _from_mapping(cls, raw, strict=True, source="deployment arguments")

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        """Add every launcher flag to `parser` (for `--help`; parse with `from_cli`)."""
        return options.add_arguments(parser, _SPECS, GROUPS)

    @classmethod
    def argparse_parser(cls, prog: str = "text-generation-launcher") -> argparse.ArgumentParser:
        """A parser whose `--help` looks like the launcher's."""
        return cls.add_arguments(argparse.ArgumentParser(prog=prog, description="text-generation-launcher options"))


# -- field table -----------------------------------------------------------------------------------
_SPECS: dict[str, OptionSpec] = options.build_specs(LauncherConfig.model_fields)
OPTIONS: Mapping[str, OptionSpec] = _SPECS


def _defaults() -> dict[str, Any]:
    return {name: spec.default for name, spec in _SPECS.items()}


def _match_variant(name: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    choices = _SPECS[name].choices
    if value in choices:
        return value
    key = re.sub(r"[^a-z0-9]", "", value.lower())
    for choice in choices:
        if re.sub(r"[^a-z0-9]", "", choice.lower()) == key:
            return choice
    return value


def _validation_problems(exc: ValidationError) -> list[Problem]:
    problems = []
    for error in exc.errors():
        loc = error.get("loc") or ()
        name = str(loc[0]) if loc else ""
        if error["type"] == "extra_forbidden":
            problems.append(Problem((name,), f"unknown launcher option {name!r}"
                                    + suggest(name, list(LauncherConfig.model_fields))))
            continue
        spec = _SPECS.get(name)
        flag = spec.flag if spec else name
        given = "" if name in _SECRETS else f", got {error.get('input')!r}"
        if spec and spec.choices:
            message = f"{flag} must be one of: {', '.join(spec.choices)}{given}"
        else:
            kind = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
                    "list": "a list"}
            wanted = next((text for key, text in kind.items() if error["type"].startswith(key)), None)
            detail = f"expects {wanted}" if wanted else error["msg"][0].lower() + error["msg"][1:]
            message = f"{flag} {detail}{given}"
        problems.append(Problem((name,), message))
    return problems


def _build(cls: type[LauncherConfig], values: dict[str, Any], origin: dict[str, str],
           problems: list[Problem]) -> LauncherConfig:
    try:
        config = cls(**values)
    except ConfigError as exc:
        # Say where a bad value came from when it was not the flag itself (a variable, a log line).
        for problem in exc.problems:
            source = origin.get(problem.fields[0]) if len(problem.fields) == 1 else None
            if source and not source.startswith("--"):
                problem = Problem(problem.fields, f"{problem.message} (from {source})")
            problems = [*problems, problem]
        raise ConfigError(problems) from None
    if problems:
        raise ConfigError(problems)
    return config


def _from_mapping(cls: type[LauncherConfig], raw: dict[str, Any], *, strict: bool, source: str) -> LauncherConfig:
    values: dict[str, Any] = {}
    problems: list[Problem] = []
    for key, value in raw.items():
        if key not in _SPECS:
            if strict:
                problems.append(Problem((), f"{source}: unknown launcher option {key!r}"
                                        + suggest(key, list(_SPECS))))
            continue
        values[key] = value
    return _build(cls, values, {name: source for name in values}, problems)


