"""LauncherConfig <-> vLLM: argv mapping, what cannot map and why, and happy_vllm tables read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tgi_toolkit.config import ConfigError, LauncherConfig, VllmArgs, from_vllm_table, to_vllm_args
from tgi_toolkit.config.vllm_args import NO_VLLM_EQUIVALENT, QUANTIZATION_TO_VLLM, parse_parameter_table

SEEDS = Path(__file__).resolve().parents[1].parent / "shared" / "seeds"


def seed(prefix: str) -> str:
    path = next(SEEDS.glob(f"{prefix}_*.txt"), None)
    if path is None:
        pytest.skip(f"a transcription check against the original document (seed {prefix}), which is not in {SEEDS} "
                    "(the shared/ folder beside this project's checkout)")
    return path.read_text()


def option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_defaults_give_model_host_and_port_only():
    args = to_vllm_args(LauncherConfig())
    assert isinstance(args, VllmArgs)
    assert args.argv == ["vllm", "serve", "HuggingFaceTB/SmolLM2-135M-Instruct", "--host", "127.0.0.1",
                         "--port", "3000"]
    assert args.unmapped == {} and args.env == {}


@pytest.mark.parametrize(("fields", "flag", "value"), [
    (dict(max_total_tokens=2048), "--max-model-len", "2048"),
    (dict(max_batch_prefill_tokens=8192), "--max-num-batched-tokens", "8192"),
    (dict(max_batch_size=32), "--max-num-seqs", "32"),
    (dict(dtype="bfloat16"), "--dtype", "bfloat16"),
    (dict(kv_cache_dtype="fp8_e4m3fn"), "--kv-cache-dtype", "fp8_e4m3"),
    (dict(kv_cache_dtype="fp8_e5m2"), "--kv-cache-dtype", "fp8_e5m2"),
    (dict(api_key="k"), "--api-key", "k"),
    (dict(hostname="0.0.0.0"), "--host", "0.0.0.0"),
    (dict(port=8001), "--port", "8001"),
    (dict(cuda_memory_fraction=0.8), "--gpu-memory-utilization", "0.8"),
    (dict(num_shard=4), "--tensor-parallel-size", "4"),
    (dict(revision="refs/pr/1"), "--revision", "refs/pr/1"),
    (dict(tokenizer_config_path="/models/tok/tokenizer_config.json"), "--tokenizer", "/models/tok"),
    (dict(max_top_n_tokens=10), "--max-logprobs", "10"),
    (dict(huggingface_hub_cache="/data"), "--download-dir", "/data"),
    (dict(otlp_endpoint="http://otel:4317"), "--otlp-traces-endpoint", "http://otel:4317"),
    (dict(cors_allow_origin=["https://a", "https://b"]), "--allowed-origins", '["https://a", "https://b"]'),
    (dict(rope_scaling="dynamic", rope_factor=2.0), "--rope-scaling", '{"rope_type": "dynamic", "factor": 2.0}'),
])
def test_each_mapped_field(fields, flag, value):
    args = to_vllm_args(LauncherConfig(**fields))
    assert option(args.argv, flag) == value
    assert not set(fields) & set(args.unmapped)


@pytest.mark.parametrize(("fields", "flag"), [
    (dict(trust_remote_code=True), "--trust-remote-code"),
    (dict(cuda_graphs=[0]), "--enforce-eager"),
])
def test_boolean_mappings(fields, flag):
    assert flag in to_vllm_args(LauncherConfig(**fields)).argv
    assert flag not in to_vllm_args(LauncherConfig()).argv


@pytest.mark.parametrize(("quantize", "method"), [
    ("gptq", "gptq"), ("awq", "awq"), ("marlin", "marlin"), ("fp8", "fp8"),
    ("compressed-tensors", "compressed-tensors"), ("bitsandbytes", "bitsandbytes"),
    ("bitsandbytes-nf4", "bitsandbytes"), ("bitsandbytes-fp4", "bitsandbytes"),
])
def test_quantization_names(quantize, method):
    args = to_vllm_args(LauncherConfig(quantize=quantize))
    assert option(args.argv, "--quantization") == method
    assert "quantize" not in args.unmapped
    if method == "bitsandbytes":
        assert option(args.argv, "--load-format") == "bitsandbytes"
        # vLLM's in-flight bitsandbytes is nf4: only the other two variants carry a caveat
        assert ("quantize" in args.notes) == (quantize != "bitsandbytes-nf4")


@pytest.mark.parametrize("quantize", ["eetq", "exl2"])
def test_quantization_without_vllm_counterpart_is_reported(quantize):
    args = to_vllm_args(LauncherConfig(quantize=quantize))
    assert "--quantization" not in args.argv
    assert quantize in args.unmapped["quantize"]


def test_every_quantize_value_has_a_decision():
    from tgi_toolkit.config import QUANTIZE_VALUES

    assert set(QUANTIZATION_TO_VLLM) == set(QUANTIZE_VALUES)


def test_unmapped_settings_are_listed_with_reasons():
    cfg = LauncherConfig(waiting_served_ratio=1.2, max_waiting_tokens=10, max_best_of=4, max_concurrent_requests=64,
                         max_input_tokens=1000, max_batch_total_tokens=100000, speculate=2, cuda_graphs=[1, 2])
    args = to_vllm_args(cfg)
    assert set(args.unmapped) == {"waiting_served_ratio", "max_waiting_tokens", "max_best_of",
                                  "max_concurrent_requests", "max_input_tokens", "max_batch_total_tokens",
                                  "speculate", "cuda_graphs"}
    assert all(reason for reason in args.unmapped.values())
    assert "--max-model-len" not in args.argv  # a prompt limit alone is not a context length


def test_settings_left_at_default_are_not_reported_unmapped():
    assert to_vllm_args(LauncherConfig(max_total_tokens=512)).unmapped == {}
    assert set(NO_VLLM_EQUIVALENT) <= set(LauncherConfig.model_fields)


def test_lora_usage_stats_and_service_name():
    args = to_vllm_args(LauncherConfig(lora_adapters="org/a, org/b@v2, mine=/adapters/x", usage_stats="off",
                                       otlp_service_name="svc"))
    i = args.argv.index("--lora-modules")
    assert "--enable-lora" in args.argv
    assert args.argv[i + 1: i + 4] == ["org/a=org/a", "org/b=org/b", "mine=/adapters/x"]
    assert "lora_adapters" in args.notes  # the revision could not be passed
    assert args.env == {"VLLM_NO_USAGE_STATS": "1", "OTEL_SERVICE_NAME": "svc"}


def test_seed_tables_are_read_back():
    cfg, extras = from_vllm_table(seed("001"))
    assert cfg.model_id == "CodeLlama-7b-Instruct-hf"
    assert (cfg.hostname, cfg.port, cfg.max_batch_size, cfg.num_shard) == ("0.0.0.0", 8501, 256, 1)
    assert (cfg.cuda_memory_fraction, cfg.max_total_tokens, cfg.quantize, cfg.dtype) == (0.9, None, None, None)
    assert (cfg.max_top_n_tokens, cfg.cors_allow_origin, cfg.trust_remote_code) == (5, ["*"], False)
    assert extras["vllm_version"] == "0.4.3" and extras["gpu_name"] == "A100-80g"
    assert extras["swap_space"] == 4 and extras["block_size"] == 16 and extras["enable_prefix_caching"] is False
    assert "max_num_seqs" not in extras and "model" not in extras

    cfg3, extras3 = from_vllm_table(seed("003"))
    assert (cfg3.model_id, cfg3.max_total_tokens, cfg3.trust_remote_code) == ("Phi-3-vision-128k-instruct", 100000,
                                                                              True)
    assert cfg3.max_top_n_tokens == 20 and extras3["ignore_patterns"] == [] and extras3["tool_parser_plugin"] == ""
    assert extras3["suite_id"] == "2024-11-19, 10:00:48" and extras3["enable_chunked_prefill"] is None
    assert cfg3.problems() == []


def test_seed_tables_map_back_to_the_same_vllm_options():
    table = parse_parameter_table(seed("003"))
    cfg, _ = from_vllm_table(seed("003"))
    args = to_vllm_args(cfg)
    for name, value in args.options.items():
        assert value == table[name], name
    assert args.model == table["model"]


def test_to_vllm_and_back_keeps_the_mapped_fields():
    cfg = LauncherConfig(model_id="org/m", max_total_tokens=4096, max_batch_prefill_tokens=8192, max_batch_size=64,
                         quantize="awq", dtype="float16", kv_cache_dtype="fp8_e4m3fn", hostname="0.0.0.0", port=8000,
                         cuda_memory_fraction=0.85, num_shard=2, revision="main", trust_remote_code=True,
                         max_top_n_tokens=7, cors_allow_origin=["*"], rope_scaling="linear", rope_factor=4.0,
                         cuda_graphs=[0])
    args = to_vllm_args(cfg)
    rows = ["|Parameter|Value|", "| :---: | :---: |", f"|model|{args.model}|"]
    for name, value in args.options.items():
        cell = repr(value) if isinstance(value, (list, dict)) else value
        rows.append(f"|{name}|{cell}|")
    back, extras = from_vllm_table("\n".join(rows))
    assert back == cfg
    assert extras == {}
    assert json.loads(option(args.argv, "--allowed-origins")) == ["*"]


def test_table_without_parameters_is_an_error():
    with pytest.raises(ConfigError, match="Parameter"):
        from_vllm_table("|Metric|Value|\n|---|---|\n|a|1|")
