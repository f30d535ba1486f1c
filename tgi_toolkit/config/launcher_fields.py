"""The launcher's options as pydantic fields (`LauncherFields`), the base of `LauncherConfig`.

One field per launcher flag, in the launcher's own order, each with TGI's default, its
environment variable, its `--flag` and a UI group. Two deliberate departures from TGI's defaults:
`hostname` is 127.0.0.1 (we serve on loopback unless told otherwise) and `model_id` is the
embedded engine's model. Both are therefore always written out by `to_cli()`/`to_env()`, so a real
launcher started from a rendering behaves like the config says.
"""

from __future__ import annotations

import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tgi_toolkit.models.files import DEFAULT_MODEL_ID

DEFAULT_HOSTNAME = "127.0.0.1"

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
_UNSET: Any = object()

Group = Literal["model", "limits", "batching", "quantization", "network", "hardware", "telemetry", "other"]
GROUPS: tuple[str, ...] = typing.get_args(Group)


def _opt(default: Any, group: Group, help: str, *, tgi_default: Any = _UNSET, **constraints: Any) -> Any:
    extra: dict[str, Any] = {"group": group,
                             "tgi_default": default if tgi_default is _UNSET else tgi_default}
    factory = {"default_factory": list} if default == [] else {"default": default}
    return Field(**factory, description=help, json_schema_extra=extra, **constraints)


class LauncherFields(BaseModel):
    """Every launcher option as a field; `tgi_toolkit.config.LauncherConfig` adds their checks, renderings and
    readers."""

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
