"""The same serving intent for vLLM: `LauncherConfig` -> `vllm serve ...`, and back from a table.

TGI and vLLM name their knobs differently and not every knob has a partner. `to_vllm_args` says
what it could not carry over (`unmapped`, with the reason) instead of dropping it silently, and
`from_vllm_table` reads the launch-parameter tables of happy_vllm model cards (seeds 001 and 003)
into a LauncherConfig plus the vLLM-only parameters.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from tgi_toolkit.config.errors import ConfigError, Problem
from tgi_toolkit.config.launcher import OPTIONS, LauncherConfig

# TGI --quantize -> vLLM --quantization (None: vLLM has no such method; see the reason).
QUANTIZATION_TO_VLLM: dict[str, str | None] = {
    "gptq": "gptq", "awq": "awq", "marlin": "marlin", "fp8": "fp8", "compressed-tensors": "compressed-tensors",
    "bitsandbytes": "bitsandbytes", "bitsandbytes-nf4": "bitsandbytes", "bitsandbytes-fp4": "bitsandbytes",
    "eetq": None, "exl2": None,
}
_QUANTIZATION_REASONS = {
    "eetq": "vLLM has no EETQ int8 kernels; the nearest on-the-fly option is --quantization fp8 on GPUs that "
            "support it",
    "exl2": "vLLM cannot load ExLlamaV2 (exl2) checkpoints",
}
_QUANTIZATION_NOTES = {
    "bitsandbytes": "vLLM's in-flight bitsandbytes quantization is 4-bit (nf4), not TGI's 8-bit",
    "bitsandbytes-fp4": "vLLM's in-flight bitsandbytes quantization is nf4; fp4 is not offered",
    "marlin": "vLLM's `marlin` loads Marlin-format checkpoints; GPTQ/AWQ checkpoints get Marlin kernels "
              "automatically under --quantization gptq/awq",
}
# vLLM --quantization -> TGI --quantize, for reading tables back.
QUANTIZATION_FROM_VLLM: dict[str, str] = {
    "gptq": "gptq", "gptq_marlin": "gptq", "awq": "awq", "awq_marlin": "awq", "marlin": "marlin",
    "fp8": "fp8", "compressed-tensors": "compressed-tensors", "bitsandbytes": "bitsandbytes-nf4",
}
KV_CACHE_DTYPE_TO_VLLM = {"fp8_e4m3fn": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
KV_CACHE_DTYPE_FROM_VLLM = {"fp8": "fp8_e4m3fn", "fp8_e4m3": "fp8_e4m3fn", "fp8_e5m2": "fp8_e5m2"}

# Launcher settings and the `vllm serve` option that carries the same intent (to_vllm_args applies them; the
# simulator names them when a TGI flag is given for a vLLM server).
TGI_TO_VLLM: dict[str, str] = {
    "model_id": "model", "max_total_tokens": "max_model_len", "max_batch_prefill_tokens": "max_num_batched_tokens",
    "max_batch_size": "max_num_seqs", "cuda_memory_fraction": "gpu_memory_utilization", "dtype": "dtype",
    "quantize": "quantization", "kv_cache_dtype": "kv_cache_dtype", "api_key": "api_key", "hostname": "host",
    "port": "port", "num_shard": "tensor_parallel_size", "revision": "revision",
    "trust_remote_code": "trust_remote_code", "tokenizer_config_path": "tokenizer", "max_top_n_tokens": "max_logprobs",
    "huggingface_hub_cache": "download_dir", "rope_scaling": "rope_scaling", "rope_factor": "rope_scaling",
    "cuda_graphs": "enforce_eager", "lora_adapters": "lora_modules", "cors_allow_origin": "allowed_origins",
    "otlp_endpoint": "otlp_traces_endpoint",
}

# Launcher settings that vLLM has no counterpart for, and why.
NO_VLLM_EQUIVALENT: dict[str, str] = {
    "validation_workers": "vLLM tokenizes in its API process; there is no validation worker pool",
    "max_concurrent_requests": "vLLM queues every request; it never answers 429 at a concurrency limit",
    "max_best_of": "vLLM has no server-side cap on best_of (its V1 engine dropped best_of)",
    "max_stop_sequences": "vLLM does not limit the number of stop strings",
    "max_input_tokens": "vLLM has no separate prompt limit: prompt + output must fit --max-model-len",
    "max_input_length": "vLLM has no separate prompt limit: prompt + output must fit --max-model-len",
    "waiting_served_ratio": "vLLM's scheduler admits waiting requests at every step within "
                            "--max-num-batched-tokens; it has no waiting/served ratio",
    "max_waiting_tokens": "vLLM does not hold waiting requests back for a number of decode steps",
    "max_batch_total_tokens": "vLLM sizes the KV cache from --gpu-memory-utilization; the nearest knob is "
                              "--num-gpu-blocks-override (in blocks of --block-size tokens)",
    "speculate": "vLLM's n-gram speculation is configured per version (--speculative-config or "
                 "--speculative-model [ngram]); set it by hand",
    "prometheus_port": "vLLM serves /metrics on its API port",
    "shard_uds_path": "vLLM workers do not talk gRPC over a Unix socket",
    "master_addr": "vLLM sets up torch.distributed itself",
    "master_port": "vLLM sets up torch.distributed itself",
    "weights_cache_override": "vLLM reads weights from the hub cache or --download-dir only",
    "disable_custom_kernels": "vLLM has no switch for TGI's custom kernels",
    "json_output": "vLLM's log format is set through VLLM_LOGGING_CONFIG_PATH, not a flag",
    "watermark_gamma": "vLLM has no watermarking",
    "watermark_delta": "vLLM has no watermarking",
    "ngrok": "vLLM has no ngrok tunnel",
    "ngrok_authtoken": "vLLM has no ngrok tunnel",
    "ngrok_edge": "vLLM has no ngrok tunnel",
    "disable_grammar_support": "vLLM always accepts guided-decoding requests",
    "env": "vLLM prints its environment with `vllm collect-env`, not at start",
    "max_client_batch_size": "vLLM's OpenAI routes take one prompt list without a separate cap",
    "payload_limit": "vLLM has no request-body size limit flag",
    "enable_prefill_logprobs": "vLLM always allows prompt_logprobs per request",
    "graceful_termination_timeout": "vLLM has no shutdown-timeout flag",
    "sharded": "vLLM needs an explicit --tensor-parallel-size; set --num-shard",
}


@dataclass
class VllmArgs:
    """`vllm serve` arguments for a LauncherConfig, with what did not carry over."""

    model: str
    options: dict[str, Any] = field(default_factory=dict)  # vLLM option (snake_case) -> value
    env: dict[str, str] = field(default_factory=dict)  # variables to set for the vLLM process
    unmapped: dict[str, str] = field(default_factory=dict)  # launcher field -> why it was not applied
    notes: dict[str, str] = field(default_factory=dict)  # launcher field -> caveat of its mapping

    @property
    def argv(self) -> list[str]:
        argv = ["vllm", "serve", self.model]
        for name, value in self.options.items():
            flag = "--" + name.replace("_", "-")
            if value is True:
                argv.append(flag)
            elif isinstance(value, list) and name == "lora_modules":
                argv += [flag, *value]
            elif isinstance(value, (list, dict)):
                argv += [flag, json.dumps(value)]
            else:
                argv += [flag, str(value)]
        return argv


def to_vllm_args(cfg: LauncherConfig) -> VllmArgs:
    """The vLLM counterpart of `cfg`: settings left at their defaults are left to vLLM's defaults,
    except the model, host and port, which are always given."""
    defaults = {name: spec.default for name, spec in OPTIONS.items()}
    changed = {name for name in OPTIONS if getattr(cfg, name) != defaults[name]}
    out = VllmArgs(model=cfg.model_id)
    opts = out.options

    def put(name: str, value: Any) -> None:
        if name in changed:
            opts[TGI_TO_VLLM[name]] = value

    put("max_total_tokens", cfg.max_total_tokens)
    put("max_batch_prefill_tokens", cfg.max_batch_prefill_tokens)
    if "max_batch_prefill_tokens" in changed:
        out.notes["max_batch_prefill_tokens"] = ("vLLM's per-step token budget also counts decode tokens; "
                                                 "without chunked prefill it must be >= --max-model-len")
    put("max_batch_size", cfg.max_batch_size)
    if cfg.quantize is not None:
        method = QUANTIZATION_TO_VLLM[cfg.quantize]
        if method is None:
            out.unmapped["quantize"] = f"--quantize {cfg.quantize}: {_QUANTIZATION_REASONS[cfg.quantize]}"
        else:
            opts["quantization"] = method
            if method == "bitsandbytes":
                opts["load_format"] = "bitsandbytes"  # vLLM before 0.7 needs it spelled out
            if cfg.quantize in _QUANTIZATION_NOTES:
                out.notes["quantize"] = _QUANTIZATION_NOTES[cfg.quantize]
    put("dtype", cfg.dtype)
    if cfg.kv_cache_dtype is not None:
        opts["kv_cache_dtype"] = KV_CACHE_DTYPE_TO_VLLM[cfg.kv_cache_dtype]
    put("api_key", cfg.api_key)
    opts["host"] = cfg.hostname
    opts["port"] = cfg.port
    if "cuda_memory_fraction" in changed:
        opts["gpu_memory_utilization"] = cfg.cuda_memory_fraction
    else:
        out.notes["cuda_memory_fraction"] = ("TGI's default 1.0 is not passed on: vLLM keeps its own default "
                                             "--gpu-memory-utilization (0.9), since 1.0 would leave it no room "
                                             "outside its KV-cache pool")
    put("num_shard", cfg.num_shard)
    put("revision", cfg.revision)
    put("trust_remote_code", cfg.trust_remote_code)
    if cfg.tokenizer_config_path is not None:
        opts["tokenizer"] = str(PurePath(cfg.tokenizer_config_path).parent)
        out.notes["tokenizer_config_path"] = ("vLLM takes a tokenizer directory: the folder holding "
                                              f"{PurePath(cfg.tokenizer_config_path).name} is used")
    put("max_top_n_tokens", cfg.max_top_n_tokens)
    put("huggingface_hub_cache", cfg.huggingface_hub_cache)
    if cfg.rope_scaling is not None or cfg.rope_factor is not None:
        opts["rope_scaling"] = {"rope_type": cfg.rope_scaling or "linear",
                                "factor": cfg.rope_factor if cfg.rope_factor is not None else 1.0}
        out.notes["rope_scaling"] = "newer vLLM versions take this as --hf-overrides '{\"rope_scaling\": ...}'"
    if cfg.cuda_graphs is not None:
        if all(size == 0 for size in cfg.cuda_graphs):
            opts["enforce_eager"] = True
        else:
            out.unmapped["cuda_graphs"] = ("vLLM chooses its own CUDA-graph batch sizes (newer versions: "
                                           "--cuda-graph-sizes); only turning graphs off (0) carries over")
    if cfg.lora_adapters:
        opts["enable_lora"] = True
        modules = []
        for adapter in (a.strip() for a in cfg.lora_adapters.split(",") if a.strip()):
            if "=" in adapter:
                modules.append(adapter)
            else:
                adapter_id, _, revision = adapter.partition("@")
                modules.append(f"{adapter_id}={adapter_id}")
                if revision:
                    out.notes["lora_adapters"] = "vLLM's --lora-modules takes no revision: the default branch is used"
        opts["lora_modules"] = modules
    put("cors_allow_origin", list(cfg.cors_allow_origin))
    put("otlp_endpoint", cfg.otlp_endpoint)
    if "otlp_service_name" in changed:
        out.env["OTEL_SERVICE_NAME"] = cfg.otlp_service_name
    if cfg.usage_stats != "on":
        out.env["VLLM_NO_USAGE_STATS"] = "1"
        if cfg.usage_stats == "no-stack":
            out.notes["usage_stats"] = "vLLM has no stack-free mode: usage stats are turned off entirely"

    for name, reason in NO_VLLM_EQUIVALENT.items():
        value = getattr(cfg, name)
        if name in changed and value not in (None, False, []):
            out.unmapped[name] = reason
    return out



def vllm_equivalent(name: str) -> str:
    """For a TGI launcher setting: the `vllm serve` flag with the same intent, or that vLLM has none and why."""
    if name in TGI_TO_VLLM:
        return f"vLLM's is --{TGI_TO_VLLM[name].replace('_', '-')}"
    reason = NO_VLLM_EQUIVALENT.get(name)
    return f"vLLM has no equivalent ({reason})" if reason else "vLLM has no equivalent"


# -- reading happy_vllm launch tables -----------------------------------------------------------------
def _cell(text: str) -> Any:
    text = text.strip()
    if text == "":
        return ""
    if text in ("None", "True", "False") or re.fullmatch(r"[-+]?\d+(\.\d*)?([eE][-+]?\d+)?", text) \
            or text[:1] in "[{(":
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
    return text


def parse_parameter_table(markdown_text: str) -> dict[str, Any]:
    """Rows of every `|Parameter|Value|` table in the text, values parsed (None, True, 0.9, ['*'])."""
    rows: dict[str, Any] = {}
    in_table = False
    for line in markdown_text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("|"):
            in_table = False
            continue
        cells = [c.strip() for c in stripped.strip("|").split("|")]
        if len(cells) >= 2 and cells[0].lower() == "parameter" and cells[1].lower() == "value":
            in_table = True
            continue
        if not in_table or all(re.fullmatch(r":?-+:?", c) for c in cells if c):
            continue
        rows[cells[0]] = _cell("|".join(cells[1:]))
    return rows


def from_vllm_table(markdown_text: str) -> tuple[LauncherConfig, dict[str, Any]]:
    """A happy_vllm model card's launch table -> (LauncherConfig of the mapped settings, the other rows)."""
    rows = parse_parameter_table(markdown_text)
    if not rows:
        raise ConfigError([Problem((), "no |Parameter|Value| table found")])
    extras = dict(rows)
    values: dict[str, Any] = {}

    def take(vllm_name: str, field_name: str, convert: Any = None) -> None:
        if vllm_name not in extras:
            return
        value = extras.pop(vllm_name)
        if value is None:
            return
        converted = convert(value) if convert else value
        if converted is _KEEP:
            extras[vllm_name] = value  # no launcher counterpart for this value
        elif converted is not None:
            values[field_name] = converted

    take("model", "model_id", str)
    take("revision", "revision", str)
    take("trust_remote_code", "trust_remote_code")
    take("max_model_len", "max_total_tokens")
    take("max_num_batched_tokens", "max_batch_prefill_tokens")
    take("max_num_seqs", "max_batch_size")
    take("quantization", "quantize", lambda v: QUANTIZATION_FROM_VLLM.get(str(v), _KEEP))
    take("dtype", "dtype", lambda v: {"auto": None, "half": "float16", "float16": "float16",
                                       "bfloat16": "bfloat16", "float": "float32",
                                       "float32": "float32"}.get(str(v), _KEEP))
    take("kv_cache_dtype", "kv_cache_dtype",
         lambda v: None if v == "auto" else KV_CACHE_DTYPE_FROM_VLLM.get(str(v), _KEEP))
    take("api_key", "api_key", str)
    take("host", "hostname", str)
    take("port", "port")
    take("gpu_memory_utilization", "cuda_memory_fraction")
    take("tensor_parallel_size", "num_shard")
    take("max_logprobs", "max_top_n_tokens")
    take("download_dir", "huggingface_hub_cache", str)
    take("otlp_traces_endpoint", "otlp_endpoint", str)
    take("allowed_origins", "cors_allow_origin", list)
    take("enforce_eager", "cuda_graphs", lambda v: [0] if v else None)
    take("lora_modules", "lora_adapters", lambda v: ",".join(v) if isinstance(v, list) else str(v))
    if isinstance(extras.get("rope_scaling"), dict):
        rope = extras.pop("rope_scaling")
        kind = rope.get("rope_type") or rope.get("type")
        if kind in ("linear", "dynamic"):
            values["rope_scaling"] = kind
            if "factor" in rope:
                values["rope_factor"] = float(rope["factor"])
        else:
            extras["rope_scaling"] = rope
    elif "rope_scaling" in extras and extras["rope_scaling"] is None:
        extras.pop("rope_scaling")
    return LauncherConfig.create(**values), extras


_KEEP: Any = object()
