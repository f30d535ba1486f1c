"""LauncherConfig: fields, launcher/router checks, readers and renderers (no server involved)."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from tgi_toolkit.config import OPTIONS, ConfigError, LauncherConfig, Problem

SEEDS = Path(__file__).resolve().parents[1].parent / "shared" / "seeds"


def seed(prefix: str) -> str:
    path = next(SEEDS.glob(f"{prefix}_*.txt"), None)
    if path is None:
        pytest.skip(f"a transcription check against the original document (seed {prefix}), which is not in {SEEDS} "
                    "(the shared/ folder beside this project's checkout)")
    return path.read_text()


def args_line() -> str:
    return next(line for line in seed("004").splitlines() if "Args {" in line)


def problem_fields(cfg: LauncherConfig, env: dict[str, str] | None = None) -> list[tuple[str, ...]]:
    return [p.fields for p in cfg.problems(env)]


# -- fields ---------------------------------------------------------------------------------------
def test_every_launcher_flag_of_the_help_text_is_a_field():
    help_text = seed("004")
    flags = set(re.findall(r"(?m)^ +(?:-\w, )?(--[a-z][a-z0-9-]+)\b", help_text))
    assert len(flags) == 51  # the v2.2 help: 49 options plus --help and --version
    flags -= {"--help", "--version"}
    known = {spec.flag for spec in OPTIONS.values()}
    assert flags - known == set()
    # the options newer than v2.2
    for name in ("kv_cache_dtype", "payload_limit", "enable_prefill_logprobs", "prometheus_port",
                 "graceful_termination_timeout", "usage_stats", "max_client_batch_size", "lora_adapters"):
        assert name in OPTIONS


def test_defaults_follow_tgi_except_host_and_model():
    cfg = LauncherConfig()
    assert cfg.hostname == "127.0.0.1" and OPTIONS["hostname"].tgi_default == "0.0.0.0"
    assert cfg.model_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert OPTIONS["model_id"].tgi_default == "bigscience/bloom-560m"
    assert (cfg.port, cfg.max_concurrent_requests, cfg.max_best_of, cfg.max_stop_sequences) == (3000, 128, 2, 4)
    assert (cfg.waiting_served_ratio, cfg.max_waiting_tokens, cfg.max_client_batch_size) == (0.3, 20, 4)
    assert cfg.max_total_tokens is None and cfg.max_batch_total_tokens is None
    assert cfg.usage_stats == "on" and cfg.payload_limit == 2_000_000
    assert cfg.problems() == []


def test_json_schema_carries_group_flag_and_env_for_every_field():
    props = LauncherConfig.model_json_schema()["properties"]
    assert set(props) == set(OPTIONS)
    for name, prop in props.items():
        assert prop["group"] in ("model", "limits", "batching", "quantization", "network", "hardware",
                                 "telemetry", "other")
        assert prop["flag"] == "--" + name.replace("_", "-")
        assert prop["env"] == (None if name == "env" else name.upper())
        assert prop["description"]
    assert props["quantize"]["anyOf"][0]["enum"][0] == "awq"


# -- checks -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("fields", "expected"), [
    (dict(max_input_tokens=100, max_input_length=100), ("max_input_tokens", "max_input_length")),
    (dict(max_input_tokens=512, max_total_tokens=512), ("max_input_tokens", "max_total_tokens")),
    (dict(max_input_length=600, max_total_tokens=512), ("max_input_length", "max_total_tokens")),
    (dict(max_total_tokens=4096, max_batch_total_tokens=2048), ("max_total_tokens", "max_batch_total_tokens")),
    # prefill < input is a problem only without chunking, and prefill > a given max_batch_total_tokens is none
    # on TGI 3 (docs/tgi-rules.md L2 step 5, L4): see test_prefill_budget_rule_depends_on_chunking.
    (dict(max_batch_size=0), ("max_batch_size",)),
    (dict(validation_workers=0), ("validation_workers",)),
    (dict(waiting_served_ratio=-0.1), ("waiting_served_ratio",)),
    (dict(waiting_served_ratio=float("nan")), ("waiting_served_ratio",)),
    (dict(dtype="float16", quantize="gptq"), ("dtype", "quantize")),
    (dict(num_shard=0), ("num_shard",)),
    (dict(sharded=True, num_shard=1), ("sharded", "num_shard")),
    (dict(quantize="exl2", num_shard=2), ("quantize", "num_shard")),
    (dict(quantize="exl2", sharded=True), ("quantize", "sharded")),
    (dict(ngrok=True, ngrok_edge="e"), ("ngrok", "ngrok_authtoken")),
    (dict(ngrok=True, ngrok_authtoken="t"), ("ngrok", "ngrok_edge")),
    (dict(port=0), ("port",)),
    (dict(port=70000), ("port",)),
    (dict(prometheus_port=0), ("prometheus_port",)),
    (dict(master_port=65536), ("master_port",)),
    (dict(cuda_memory_fraction=0.0), ("cuda_memory_fraction",)),
    (dict(cuda_memory_fraction=1.5), ("cuda_memory_fraction",)),
    (dict(rope_factor=0.0), ("rope_factor",)),
    (dict(lora_adapters="org/a@v1@v2"), ("lora_adapters",)),
    (dict(lora_adapters="org/a,,org/b"), ("lora_adapters",)),
])
def test_each_rule_reports_its_fields(fields, expected):
    cfg = LauncherConfig(**fields)  # construction never enforces cross-field rules
    assert problem_fields(cfg) == [expected]
    with pytest.raises(ConfigError) as caught:
        cfg.validate()
    assert caught.value.problems == cfg.problems()
    for name in expected:
        assert OPTIONS[name].flag in str(caught.value)


@pytest.mark.parametrize("fields", [
    dict(max_input_tokens=511, max_total_tokens=512, max_batch_prefill_tokens=511, max_batch_total_tokens=512),
    dict(dtype="bfloat16", quantize="bitsandbytes-nf4"),
    dict(dtype="float16"),
    dict(sharded=True, num_shard=2),
    dict(sharded=False, num_shard=1),
    dict(quantize="exl2", num_shard=1),
    dict(ngrok=True, ngrok_authtoken="t", ngrok_edge="e"),
    dict(lora_adapters="org/a@v1,name=/path/with@two@ats"),
    dict(max_input_length=1000, max_total_tokens=1512),
])
def test_valid_combinations_have_no_problem(fields):
    assert LauncherConfig(**fields).validate() is not None


def test_prefill_budget_rule_depends_on_chunking():
    # docs/tgi-rules.md L4: the router checks max_input_tokens <= max_batch_prefill_tokens only without
    # chunking; chunking (the default, F3) is what lets a 1000-token prompt through a 999-token budget.
    cfg = LauncherConfig(max_input_tokens=1000, max_batch_prefill_tokens=999)
    assert cfg.chunking({}) is True and cfg.problems({}) == []
    cfg.validate({})
    # Chunking off: PREFILL_CHUNKING=0, paged attention (F3), or speculation (F3).
    for env, speculate in (({"PREFILL_CHUNKING": "0"}, None), ({"ATTENTION": "paged"}, None), ({}, 2)):
        off = cfg.model_copy(update={"speculate": speculate})
        assert off.chunking(env) is False
        assert problem_fields(off, env) == [("max_batch_prefill_tokens", "max_input_tokens")]
        with pytest.raises(ConfigError, match=r"--max-batch-prefill-tokens \(999\) must be >= --max-input-tokens "
                                              r"\(1000\).*without prefill chunking"):
            off.validate(env)
    # The legacy --max-input-length is checked the same way.
    legacy = LauncherConfig(max_input_length=1000, max_batch_prefill_tokens=999)
    assert problem_fields(legacy, {"PREFILL_CHUNKING": "0"}) == [("max_batch_prefill_tokens", "max_input_length")]
    # vLLM: TGI's chunking question does not apply (its V1 engine always chunks prefills).
    assert cfg.chunking({"PREFILL_CHUNKING": "0"}, backend="vllm") is None
    assert cfg.problems({"PREFILL_CHUNKING": "0"}, backend="vllm") == []
    # A bad scheduling variable is reported as such, naming its allowed values.
    (problem,) = cfg.problems({"PREFILL_CHUNKING": "maybe"})
    assert problem.fields == ("PREFILL_CHUNKING",) and "1, true, 0, false" in str(problem)
    # The process's own environment when none is given (as TGI reads its own).
    import os

    assert cfg.problems() == cfg.problems(dict(os.environ))


def test_a_given_max_batch_total_tokens_does_not_bound_the_prefill_budget():
    # docs/tgi-rules.md L2 step 5: flash models ignore --max-batch-total-tokens (with a "deprecated" warning)
    # and the router compares the prefill budget with the KV capacity found at warm-up, not with it.
    assert LauncherConfig(max_batch_prefill_tokens=5000, max_batch_total_tokens=4000).problems({}) == []
    # The launcher itself still checks max_total_tokens against the given value (L4, launcher).
    assert problem_fields(LauncherConfig(max_total_tokens=4096, max_batch_total_tokens=2048), {}) == [
        ("max_total_tokens", "max_batch_total_tokens")]


def test_all_problems_are_reported_together():
    cfg = LauncherConfig(max_input_tokens=2048, max_input_length=10, max_total_tokens=1024,
                         max_batch_total_tokens=512, validation_workers=0, ngrok=True)
    with pytest.raises(ConfigError) as caught:
        cfg.check()
    err = caught.value
    assert len(err.problems) >= 5
    text = str(err)
    assert len(text.splitlines()) == len(err.problems) + 1  # a heading, then one line per problem
    assert "--max-input-tokens (2048) must be < --max-total-tokens (1024)" in text
    assert "--validation-workers (0) must be > 0" in text
    assert isinstance(err, ValueError) and all(isinstance(p, Problem) for p in err.problems)


def test_unset_values_are_not_checked():
    # None means "the server works it out": no relation involving it can fail.
    assert LauncherConfig(max_batch_prefill_tokens=10).problems() == []
    assert LauncherConfig(max_total_tokens=10).problems() == []


@pytest.mark.parametrize(("kwargs", "flag", "hint"), [
    (dict(quantize="foo"), "--quantize", "awq, compressed-tensors, eetq, exl2, gptq, marlin"),
    (dict(dtype="float64"), "--dtype", "float16, bfloat16, float32"),
    (dict(kv_cache_dtype="fp8"), "--kv-cache-dtype", "fp8_e4m3fn, fp8_e5m2"),
    (dict(usage_stats="maybe"), "--usage-stats", "on, off, no-stack"),
    (dict(port="abc"), "--port", "integer"),
    (dict(max_total_tokens=-1), "--max-total-tokens", "greater than or equal to 0"),
    (dict(trust_remote_code="perhaps"), "--trust-remote-code", "true or false"),
    (dict(cuda_graphs=[1, -2]), "--cuda-graphs", ">= 0"),
])
def test_field_errors_are_config_errors_naming_flag_and_allowed_values(kwargs, flag, hint):
    with pytest.raises(ConfigError) as caught:
        LauncherConfig.create(**kwargs)
    assert flag in str(caught.value) and hint in str(caught.value)
    assert caught.value.problems[0].fields == (next(iter(kwargs)),)


def test_field_errors_are_collected_and_unknown_keywords_suggested():
    with pytest.raises(ConfigError) as caught:
        LauncherConfig.create(quantize="foo", port="abc", max_totl_tokens=3)
    assert {p.fields for p in caught.value.problems} == {("quantize",), ("port",), ("max_totl_tokens",)}
    assert "did you mean max_total_tokens?" in str(caught.value)


def test_assignment_is_validated_too():
    cfg = LauncherConfig()
    with pytest.raises(ConfigError, match="--port expects an integer"):
        cfg.port = "abc"
    cfg.port = 8080
    assert cfg.port == 8080


def test_secrets_are_not_echoed_in_errors():
    with pytest.raises(ConfigError) as caught:
        LauncherConfig.create(api_key=["s3cret-value"])
    assert "s3cret-value" not in str(caught.value)


# -- resolved ---------------------------------------------------------------------------------------
# TGI 3's defaults (docs/tgi-rules.md section 6), chunking on (env {}): the launcher's prefill budget for an
# unknown card is 4096 capped at the context (L1); max_total_tokens = min(KV capacity, model_max_length,
# max_position_embeddings) (L3); max_input_tokens = max_total_tokens - 1 (L3). The TGI 2 rules these rows
# encoded before (min(mpe, 4096) totals, max_input_tokens + 50 prefill budgets) are gone.
@pytest.mark.parametrize(("fields", "mpe", "kwargs", "expected"), [
    ({}, 8192, {}, (8191, 8192, 4096)),  # no KV figure: min(8192 positions) = 8192; prefill min(4096, 8192)
    ({}, 2048, {}, (2047, 2048, 2048)),  # prefill min(4096, 2048) = 2048
    ({}, 131_072, dict(kv_capacity_tokens=46_603), (46_602, 46_603, 4096)),  # min(46,603 KV, 131,072)
    ({}, 131_072, dict(kv_capacity_tokens=450_907, model_max_length=100_000), (99_999, 100_000, 4096)),
    (dict(max_input_length=1000, max_total_tokens=1512), 8192, {}, (1000, 1512, 4096)),
    (dict(max_input_tokens=100, max_batch_prefill_tokens=300), 8192, {}, (100, 8192, 300)),
    (dict(max_total_tokens=512), 8192, {}, (511, 512, 4096)),  # the prompt limit follows the total
    (dict(max_input_tokens=5000), 8192, {}, (5000, 8192, 4096)),  # a prompt over the budget: chunked
    (dict(max_input_tokens=1000, max_total_tokens=1024, max_batch_total_tokens=1024), 8192, {}, (1000, 1024, 4096)),
    # Without chunking max_total_tokens is the warm-up prompt: one request of max_batch_prefill_tokens
    # 4096 tokens -> 4096, max_input 4095; with --max-input-tokens 1000 and budget 4096: 1000 x 4 + 96 = 4096.
    ({}, 8192, dict(env={"PREFILL_CHUNKING": "0"}), (4095, 4096, 4096)),
    (dict(max_input_tokens=1000), 8192, dict(env={"PREFILL_CHUNKING": "0"}), (1000, 4096, 4096)),
])
def test_resolved_fills_tgi_derived_defaults(fields, mpe, kwargs, expected):
    kwargs.setdefault("env", {})
    cfg = LauncherConfig(**fields).resolved(mpe, **kwargs)
    assert (cfg.max_input_tokens, cfg.max_total_tokens, cfg.max_batch_prefill_tokens) == expected
    assert cfg.max_input_length is None
    assert cfg.max_batch_total_tokens == fields.get("max_batch_total_tokens")  # left to the server


def test_resolved_refuses_what_the_launcher_refuses():
    with pytest.raises(ConfigError, match="--max-input-tokens \\(9000\\) must be < --max-total-tokens \\(8192\\)"):
        LauncherConfig(max_input_tokens=9000).resolved(8192)
    with pytest.raises(ConfigError) as caught:
        LauncherConfig(max_input_tokens=10, max_input_length=10).resolved(8192)
    assert caught.value.problems[0].fields == ("max_input_tokens", "max_input_length")


def test_resolved_does_not_change_the_original():
    cfg = LauncherConfig()
    cfg.resolved(1024)
    assert cfg.max_input_tokens is None and cfg.max_total_tokens is None


# -- command line and environment -------------------------------------------------------------------
def test_to_cli_renders_only_changes_plus_model_and_host():
    assert LauncherConfig().to_cli() == ["--model-id", "HuggingFaceTB/SmolLM2-135M-Instruct",
                                         "--hostname", "127.0.0.1"]
    argv = LauncherConfig(max_total_tokens=512, trust_remote_code=True, sharded=False, cuda_graphs=[1, 2],
                          cors_allow_origin=["a", "b"]).to_cli()
    joined = " ".join(argv)
    assert "--max-total-tokens 512" in joined
    assert "--trust-remote-code --" in joined  # a bare flag, as clap wants it
    assert "--sharded false" in joined  # Option<bool> takes a value
    assert "--cuda-graphs 1,2" in joined
    assert "--cors-allow-origin a --cors-allow-origin b" in joined
    assert "--port" not in argv and "--json-output" not in argv


MANY = dict(model_id="org/model", revision="refs/pr/2", validation_workers=3, sharded=True, num_shard=4,
            quantize="bitsandbytes-nf4", speculate=2, dtype="bfloat16", kv_cache_dtype="fp8_e5m2",
            trust_remote_code=True, max_concurrent_requests=64, max_best_of=1, max_stop_sequences=8,
            max_top_n_tokens=10, max_input_tokens=1024, max_total_tokens=2048, waiting_served_ratio=1.2,
            max_batch_prefill_tokens=4096, max_batch_total_tokens=65536, max_waiting_tokens=10,
            max_batch_size=16, cuda_graphs=[1, 2, 4], hostname="0.0.0.0", port=8080, prometheus_port=9100,
            huggingface_hub_cache="/data/hub", cuda_memory_fraction=0.85, rope_scaling="linear",
            rope_factor=2.0, json_output=True, otlp_endpoint="http://otel:4317", cors_allow_origin=["https://x"],
            api_key="secret", watermark_gamma=0.5, watermark_delta=2.0, tokenizer_config_path="/t/tc.json",
            disable_grammar_support=True, max_client_batch_size=8, lora_adapters="org/a,org/b@v1",
            usage_stats="no-stack", payload_limit=1000, enable_prefill_logprobs=True,
            graceful_termination_timeout=30)


def test_cli_round_trip_with_many_fields():
    cfg = LauncherConfig(**MANY)
    assert cfg.problems() == []
    back = LauncherConfig.from_cli(cfg.to_cli())
    assert back == cfg
    assert back.model_fields_set == set(MANY)  # only what was given counts as set


def test_env_round_trip_with_many_fields():
    cfg = LauncherConfig(**MANY)
    env = cfg.to_env()
    assert env["MAX_TOTAL_TOKENS"] == "2048" and env["TRUST_REMOTE_CODE"] == "true" and env["CUDA_GRAPHS"] == "1,2,4"
    assert LauncherConfig.from_env(env) == cfg


def test_cli_accepts_both_value_styles_short_flags_and_the_program_name():
    cfg = LauncherConfig.from_cli(shlex.split(
        "text-generation-launcher --model-id=org/m --max-total-tokens 512 -p 8080 --trust-remote-code "
        "--num_shard 2 --sharded=true --cors-allow-origin a --cors-allow-origin=b --cuda-graphs 1 --cuda-graphs 2,4 "
        "--waiting-served-ratio=-0"))
    assert (cfg.model_id, cfg.max_total_tokens, cfg.port, cfg.trust_remote_code) == ("org/m", 512, 8080, True)
    assert (cfg.num_shard, cfg.sharded, cfg.cors_allow_origin, cfg.cuda_graphs) == (2, True, ["a", "b"], [1, 2, 4])


def test_cli_wins_over_environment_which_wins_over_defaults():
    environ = {"MAX_TOTAL_TOKENS": "1024", "MAX_BATCH_SIZE": "8", "PORT": "9999", "UNRELATED": "x"}
    cfg = LauncherConfig.from_cli(["--max-total-tokens", "512"], environ=environ)
    assert (cfg.max_total_tokens, cfg.max_batch_size, cfg.port) == (512, 8, 9999)
    assert cfg.max_concurrent_requests == 128
    assert LauncherConfig.from_cli(["--max-total-tokens", "512"]).port == 3000  # no environ: no fallback
    assert cfg.model_fields_set == {"max_total_tokens", "max_batch_size", "port"}


def test_unknown_flag_names_it_and_suggests_the_closest():
    with pytest.raises(ConfigError) as caught:
        LauncherConfig.from_cli(["--max-totl-tokens", "5", "--model-id", "m"])
    assert "unknown flag --max-totl-tokens; did you mean --max-total-tokens?" in str(caught.value)


def test_cli_problems_are_collected_with_their_origin():
    with pytest.raises(ConfigError) as caught:
        LauncherConfig.from_cli(["--quantize", "gptqq", "--port=x", "--max-batch-size", "--dtype"],
                                environ={"MAX_INPUT_TOKENS": "lots"})
    text = str(caught.value)
    assert "--max-batch-size expects a value" in text and "--dtype expects a value" in text
    assert "--quantize must be one of" in text and "got 'gptqq'" in text
    assert "--port expects an integer, got 'x'" in text
    assert "--max-input-tokens expects an integer, got 'lots' (from $MAX_INPUT_TOKENS)" in text
    assert len(caught.value.problems) == 5


def test_cli_refuses_repeated_scalars_and_positionals():
    with pytest.raises(ConfigError, match="--port given more than once"):
        LauncherConfig.from_cli(["--port", "1", "--port", "2"])
    with pytest.raises(ConfigError, match="unexpected argument 'gpt2'"):
        LauncherConfig.from_cli(["gpt2"])


def test_argparse_help_lists_every_flag_with_env_and_default():
    parser = LauncherConfig.argparse_parser()
    text = parser.format_help()
    for spec in OPTIONS.values():
        assert spec.flag in text
    assert "MAX_TOTAL_TOKENS" in text and "TGI's default: 0.0.0.0" in text
    into = LauncherConfig.add_arguments(argparse.ArgumentParser(add_help=False))
    assert isinstance(into, argparse.ArgumentParser)
    namespace = parser.parse_args(["--max-total-tokens", "5", "--trust-remote-code"])
    assert vars(namespace) == {"max_total_tokens": "5", "trust_remote_code": True}


# -- docker -----------------------------------------------------------------------------------------
def test_docker_command_publishes_the_port_and_passes_hf_token_by_name_only(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_sEcReT_value")
    cfg = LauncherConfig(model_id="org/m", port=8080, max_total_tokens=512)
    cmd = cfg.docker_command()
    assert cmd[:2] == ["docker", "run"]
    assert cmd[cmd.index("-e") + 1] == "HF_TOKEN"
    assert not any("hf_sEcReT_value" in part for part in cmd)
    assert cmd[cmd.index("-p") + 1] == "127.0.0.1:8080:80"  # loopback on the host side
    assert cmd[cmd.index("--gpus") + 1] == "all" and cmd[cmd.index("--shm-size") + 1] == "1g"
    assert cmd[cmd.index("-v") + 1] == "$PWD/data:/data"
    image = cmd.index("ghcr.io/huggingface/text-generation-inference:latest")
    inside = LauncherConfig.from_cli(cmd[image + 1:])
    assert (inside.hostname, inside.port, inside.max_total_tokens) == ("0.0.0.0", 80, 512)
    public = LauncherConfig(hostname="0.0.0.0", port=8080).docker_command(gpus=None, image="img:1")
    assert public[public.index("-p") + 1] == "8080:80" and "--gpus" not in public and "img:1" in public


def test_docker_command_mounts_the_hub_cache_instead_of_passing_it():
    cmd = LauncherConfig(huggingface_hub_cache="/mnt/hub").docker_command()
    assert cmd[cmd.index("-v") + 1] == "/mnt/hub:/data" and "--huggingface-hub-cache" not in cmd


# -- logs and seeds ---------------------------------------------------------------------------------
def test_args_line_of_seed_004():
    cfg = LauncherConfig.from_args_log(args_line())
    assert cfg.model_id == "astronomer/Llama-3-8B-Instruct-GPTQ-8-Bit"
    assert (cfg.quantize, cfg.hostname, cfg.port, cfg.usage_stats) == ("gptq", "0.0.0.0", 1337, "on")
    assert cfg.cors_allow_origin == [] and cfg.sharded is None and cfg.waiting_served_ratio == 0.3
    assert cfg.problems() == []
    assert LauncherConfig.from_cli(cfg.to_cli()) == cfg
    assert LauncherConfig.from_args_log(cfg.to_args_log()) == cfg
    assert LauncherConfig.from_env(cfg.to_env()) == cfg


def test_the_launch_command_of_seed_004_matches_its_args_line():
    text = seed("004")
    start = text.index("text-generation-launcher \\\n--model-id")
    command = text[start: text.index("```", start)].replace("\\\n", " ")
    assert LauncherConfig.from_cli(shlex.split(command)) == LauncherConfig.from_args_log(args_line())


def test_args_line_enums_options_and_pretty_printing():
    line = ('2024-01-01T00:00:00Z INFO text_generation_launcher: Args { model_id: "m \\"q\\"", sharded: Some(\n'
            '    true,\n), num_shard: Some( 2, ), quantize: Some(BitsandbytesNf4), dtype: Some(BFloat16), '
            'kv_cache_dtype: Some(Fp8e4m3fn), rope_scaling: Some(Dynamic), cuda_graphs: Some([1, 2]), '
            'cors_allow_origin: ["a", "b"], usage_stats: NoStack, cuda_memory_fraction: 0.5, '
            'some_future_option: Some(Thing), }, more log')
    cfg = LauncherConfig.from_args_log(line)
    assert (cfg.model_id, cfg.sharded, cfg.num_shard) == ('m "q"', True, 2)
    assert (cfg.quantize, cfg.dtype, cfg.kv_cache_dtype) == ("bitsandbytes-nf4", "bfloat16", "fp8_e4m3fn")
    assert (cfg.rope_scaling, cfg.cuda_graphs, cfg.cors_allow_origin) == ("dynamic", [1, 2], ["a", "b"])
    assert (cfg.usage_stats, cfg.cuda_memory_fraction) == ("no-stack", 0.5)
    with pytest.raises(ConfigError, match="unknown launcher option 'some_future_option'"):
        LauncherConfig.from_args_log(line, strict=True)
    assert LauncherConfig.from_args_log(cfg.to_args_log()) == cfg
    with pytest.raises(ConfigError, match="Args"):
        LauncherConfig.from_args_log("no such line")


def test_args_line_redaction():
    line = LauncherConfig(api_key="k3y").to_args_log(redact=True)
    assert "k3y" not in line and 'api_key: Some("***")' in line
    assert LauncherConfig(api_key="k3y").to_dict()["api_key"] == "***"
    assert LauncherConfig(api_key="k3y").to_dict(redact=False)["api_key"] == "k3y"


def test_deployment_arguments_of_seed_000():
    cfg = LauncherConfig.from_deployment_arguments(seed("000"))
    assert cfg.model_id == "bigscience/bloomz-7b1-mt"
    assert (cfg.max_input_length, cfg.max_total_tokens, cfg.max_batch_total_tokens) == (1000, 1512, 32000)
    assert (cfg.waiting_served_ratio, cfg.port, cfg.quantize) == (1.2, 5555, None)
    assert cfg.problems() == []
    assert LauncherConfig.from_deployment_arguments(cfg.to_deployment_arguments()) == cfg
    assert LauncherConfig.from_cli(cfg.to_cli()) == cfg
    resolved = cfg.resolved(2048, env={})
    # TGI 3: the launcher's prefill default for an unknown card, min(4096, 2048 positions) (L1).
    assert (resolved.max_input_tokens, resolved.max_batch_prefill_tokens) == (1000, 2048)


def test_deployment_arguments_refuse_unknown_options():
    with pytest.raises(ConfigError, match="did you mean max_total_tokens"):
        LauncherConfig.from_deployment_arguments("# Deployment Arguments\n- max_totl_tokens: 5\n")


def test_to_dict_non_default_only():
    cfg = LauncherConfig(max_total_tokens=512, port=3000)
    assert cfg.to_dict(non_default_only=True) == {"max_total_tokens": 512}
    assert len(cfg.to_dict()) == len(OPTIONS)
