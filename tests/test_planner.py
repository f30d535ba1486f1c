"""Capacity planner: the memory arithmetic on several architectures, log parsing, CLI."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import shutil
from pathlib import Path

import pytest

from tgi_toolkit.planner import (
    KNOWN_GPUS,
    ModelShape,
    compare,
    kv_bytes_per_token,
    kv_capacity_tokens,
    parse_reported_capacity,
    parse_size,
    plan,
    plan_embedded,
    resolve_gpu,
)

CONFIGS = Path(__file__).parent / "data" / "configs"
LLAMA2 = CONFIGS / "llama-2-7b.json"
LLAMA3 = CONFIGS / "llama-3-8b.json"
FALCON = CONFIGS / "falcon-7b.json"
MISTRAL = CONFIGS / "mistral-7b.json"
MIXTRAL = CONFIGS / "mixtral-8x7b.json"
SMOLLM2 = CONFIGS / "smollm2-135m.json"
GiB = 2**30


def config(path: Path, **changes) -> dict:
    return {**json.loads(path.read_text()), **changes}


# -- parameters and KV bytes ------------------------------------------------------------------

# Parameter counts published with the checkpoints (safetensors metadata on the model pages).
@pytest.mark.parametrize("path, published", [
    (LLAMA2, 6_738_415_616),       # "7B", multi-head attention
    (LLAMA3, 8_030_261_248),       # "8B", grouped-query attention
    (FALCON, 6_921_720_704),       # "7B", multi-query attention, parallel attention/MLP, plain MLP
    (MISTRAL, 7_241_732_096),      # "7.2B", sliding window
    (MIXTRAL, 46_702_792_704),     # "46.7B", 8 experts
    (SMOLLM2, 134_515_008),        # "135M", tied embeddings
])
def test_parameter_count_matches_published_size(path, published):
    assert ModelShape.from_config(path).parameters() == pytest.approx(published, rel=1e-3)


def test_mixture_of_experts_active_parameters():
    shape = ModelShape.from_config(MIXTRAL)
    # Mixtral's model card: 12.9B parameters used per token (2 of 8 experts).
    assert shape.active_parameters() == pytest.approx(12.9e9, rel=0.01)
    assert shape.parameter_breakdown()["router"] == 32 * 4096 * 8


@pytest.mark.parametrize("path, dtype, kv_dtype, expected", [
    (LLAMA2, "float16", None, 2 * 32 * 32 * 128 * 2),  # 524,288: every head cached
    (LLAMA3, "bfloat16", None, 131_072),                # 8 KV heads for 32 query heads
    (FALCON, "bfloat16", None, 2 * 32 * 1 * 64 * 2),   # one KV head
    (MISTRAL, "bfloat16", None, 131_072),
    (MIXTRAL, "bfloat16", None, 131_072),               # experts do not touch the cache
    (SMOLLM2, "bfloat16", None, 23_040),                # CPU-PERF.md: 2 x 30 x 3 x 64 x 2
    (SMOLLM2, "float32", None, 46_080),
    (LLAMA3, "bfloat16", "fp8_e4m3fn", 65_536),          # fp8 cache: 1 byte per element
])
def test_kv_bytes_per_token(path, dtype, kv_dtype, expected):
    shape = ModelShape.from_config(path)
    assert kv_bytes_per_token(shape, dtype, kv_dtype) == expected
    assert plan(path, "H100-80GB", dtype=dtype, kv_cache_dtype=kv_dtype).model.kv_bytes_per_token == expected


def test_attention_kinds_are_read_from_each_configs_own_fields():
    assert ModelShape.from_config(LLAMA2).num_kv_heads == 32
    assert ModelShape.from_config(LLAMA3).num_kv_heads == 8
    assert ModelShape.from_config(FALCON).num_kv_heads == 1  # multi_query: true
    assert ModelShape.from_config(config(FALCON, new_decoder_architecture=True, num_kv_heads=8)).num_kv_heads == 8
    assert ModelShape.from_config({"n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257,
                                   "model_type": "gpt2", "n_positions": 1024}).parameters() == \
        pytest.approx(124.4e6, rel=0.005)  # GPT-2 small, learned positions and biases


def test_model_config_as_dict_directory_and_transformers_config(tmp_path):
    expected = ModelShape.from_config(SMOLLM2).parameters()
    shutil.copy(SMOLLM2, tmp_path / "config.json")
    assert ModelShape.from_config(tmp_path).parameters() == expected
    assert ModelShape.from_config(str(tmp_path / "config.json")).parameters() == expected
    assert ModelShape.from_config(json.loads(SMOLLM2.read_text())).parameters() == expected
    from transformers import LlamaConfig

    assert ModelShape.from_config(LlamaConfig(**json.loads(SMOLLM2.read_text()))).parameters() == expected
    with pytest.raises(ValueError, match="model_config"):
        ModelShape.from_config(tmp_path / "missing")


# -- weights and quantization --------------------------------------------------------------------

def test_quantized_weight_memory():
    bf16 = plan(LLAMA2, "A100-80GB").model.weight_bytes
    assert bf16 == 6_738_415_616 * 2
    ratios = {q: plan(LLAMA2, "A100-80GB", quantize=q).model.weight_bytes / bf16
              for q in ("eetq", "bitsandbytes", "fp8", "gptq", "awq", "bitsandbytes-nf4")}
    # 8-bit methods halve the linear weights; embeddings and lm_head (3.9% of Llama-2-7B) stay 2 B.
    for q in ("eetq", "bitsandbytes", "fp8"):
        assert 0.51 < ratios[q] < 0.53, (q, ratios[q])
    # 4-bit: 0.25 of the linear weights plus group scales, zeros or absmax.
    for q in ("gptq", "awq", "bitsandbytes-nf4"):
        assert 0.28 < ratios[q] < 0.30, (q, ratios[q])
    # TheBloke/Llama-2-7B-GPTQ (4 bits, group 128): a 3.90 GB model.safetensors.
    assert plan(LLAMA2, "A100-80GB", quantize="gptq").model.weight_bytes == pytest.approx(3.90e9, rel=0.01)
    assert ratios["gptq"] > plan(LLAMA2, "A100-80GB", quantize="marlin").model.weight_bytes / bf16  # no zero points
    assert plan(LLAMA2, "A100-80GB", dtype="float32").model.weight_bytes == 2 * bf16


def test_checkpoint_quantization_config_is_honoured_like_tgi_does():
    gptq4 = config(LLAMA2, quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 128})
    gptq8 = config(LLAMA2, quantization_config={"quant_method": "gptq", "bits": 8, "group_size": 128})
    # TGI's launcher takes the method from config.json when --quantize is not given.
    auto = plan(gptq4, "A10G")
    assert auto.model.quantize == "gptq"
    assert auto.model.weight_bytes == plan(LLAMA2, "A10G", quantize="gptq").model.weight_bytes
    assert plan(gptq8, "A10G").model.weight_bytes > 1.7 * auto.model.weight_bytes
    assert not any("already quantized" in w for w in auto.warnings)
    assert any("already quantized" in w for w in plan(LLAMA2, "A10G", quantize="awq").warnings)
    assert auto.limits.cuda_graphs  # GPTQ kernels run in CUDA graphs
    assert plan(LLAMA2, "A100-80GB", quantize="bitsandbytes").limits.cuda_graphs == ()  # the launcher turns them off


# -- budget, sharding, sliding window, fitting ----------------------------------------------------

def test_budget_arithmetic_is_tgis_warmup_formula():
    p = plan(LLAMA3, "A100-80GB", memory_fraction=0.8, overhead_bytes=GiB)
    usable = int(81_920 * 2**20 * 0.8 * 0.90)
    assert p.hardware.usable_bytes == usable
    assert p.hardware.kv_budget_bytes == usable - p.model.weight_bytes - GiB - p.hardware.activation_bytes
    assert p.capacity.kv_capacity_tokens == p.hardware.kv_budget_bytes // 131_072
    assert p.hardware.activation_bytes == \
        p.limits.max_batch_prefill_tokens * 2 * (4 * 4096 + 4096 + 2 * 1024 + 3 * 14336)
    # Paged attention allocates 16-token blocks.
    paged = plan(LLAMA3, "A100-80GB", memory_fraction=0.8, overhead_bytes=GiB, block_size=16)
    assert paged.capacity.kv_capacity_tokens == p.capacity.kv_capacity_tokens // 16 * 16


def test_kv_budget_is_tgis_warmup_formula_on_round_numbers():
    # docs/tgi-rules.md L2 on an 80e9 B card, Llama-3-8B bf16, no fixed reserve, max_batch_prefill_tokens 4096:
    # weights 8,030,261,248 x 2 B = 16,060,522,496; prefill activations 4096 x 2 B x (4 x 4096 + 4096 + 2 x 1024
    # + 3 x 14336 = 65,536) = 536,870,912; the warm-up batch (one 4096-token prompt, 1 new token) holds
    # 4096 blocks x 131,072 B = 536,870,912. Free after warm-up = 80e9 - those three = 62,865,735,680.
    # Minus (1 - 1.0 x 0.90) x 80e9 = 8e9 -> 54,865,735,680 B; / 131,072 = 418,592 blocks (x 131,072 =
    # 54,865,690,624, 45,056 B left over), + 4096 warm-up blocks = 422,688 tokens.
    card = resolve_gpu(80_000_000_000)
    p = plan(LLAMA3, card, overhead_bytes=0, max_batch_prefill_tokens=4096)
    assert p.capacity.kv_capacity_tokens == 422_688
    # Paged (16-token blocks): 2,097,152 B each, warm-up ceil(4096 / 16) = 256 blocks, the same bytes;
    # 54,865,735,680 / 2,097,152 = 26,162 blocks (x 2,097,152 = 54,865,690,624) + 256 = 26,418 x 16 = 422,688.
    assert plan(LLAMA3, card, overhead_bytes=0, max_batch_prefill_tokens=4096, block_size=16,
                chunking=False).capacity.kv_capacity_tokens == 422_688
    # --cuda-memory-fraction 0.5: 62,865,735,680 - (1 - 0.45) x 80e9 = 18,865,735,680 B; / 131,072 = 143,934
    # blocks (x 131,072 = 18,865,717,248) + 4096 = 148,030 tokens.
    half = plan(LLAMA3, card, overhead_bytes=0, max_batch_prefill_tokens=4096, memory_fraction=0.5)
    assert half.capacity.kv_capacity_tokens == 148_030
    assert "4,096 warm-up blocks" in half.explain()


def test_default_prefill_budget_is_the_launchers_flops_formula():
    llama31 = config(LLAMA3, max_position_embeddings=131_072)  # Llama-3.1-8B: Llama-3-8B's shape, 128k context
    # docs/tgi-rules.md L1: 32 x (2 x 4096 x 128 x (3 x 32 + 2 x 8) + 6 x 4096 x 14336) = 15,032,385,536 FLOPs
    # per token; 1 x H100: floor(900e12 / 15,032,385,536) = 59,870 (x 15,032,385,536 = 899,988,922,040,320).
    assert plan(llama31, "H100-80GB").limits.max_batch_prefill_tokens == 59_870
    # 2 shards: floor(1,800e12 / 15,032,385,536) = 119,741.
    assert plan(llama31, "H100-80GB", num_shard=2).limits.max_batch_prefill_tokens == 119_741
    # H200 989e12: floor(989e12 / 15,032,385,536) = 65,791 (x 65,791 = 988,995,676,798,976 <= 989e12;
    # x 65,792 = 989,010,709,184,512 > 989e12).
    assert plan(llama31, "H200").limits.max_batch_prefill_tokens == 65_791
    # L4 121e12: floor(121e12 / 15,032,385,536) = 8049 (x = 120,995,671,179,264).
    assert plan(llama31, "L4").limits.max_batch_prefill_tokens == 8049
    # T4, float16: compute_optimal floor(65e12 / 15,032,385,536) = 4323, but the launcher's VRAM estimate
    # (15,360 MiB x 0.95 - 14,449,770,496 B of weights) / 260,096 B per token = 3,272 caps it.
    assert plan(llama31, "T4", dtype="float16").limits.max_batch_prefill_tokens == 3272
    # A card outside the table: 4096; Llama-3-8B's 8192 positions cap the H100 figure.
    assert plan(llama31, "A10").limits.max_batch_prefill_tokens == 4096
    assert plan(LLAMA3, "H100-80GB").limits.max_batch_prefill_tokens == 8192
    assert plan(llama31, "H100-80GB", max_batch_prefill_tokens=2048).limits.max_batch_prefill_tokens == 2048  # as given


def test_sharding_splits_weights_and_kv_heads():
    one = plan(LLAMA3, "A100-80GB")
    two = plan(LLAMA3, "A100-80GB", num_shard=2)
    eight = plan(LLAMA3, "A100-80GB", num_shard=8)
    assert two.model.kv_bytes_per_token == 65_536 and eight.model.kv_bytes_per_token == 16_384
    assert two.model.weight_bytes_per_shard == one.model.weight_bytes // 2
    assert two.capacity.kv_capacity_tokens > 2 * one.capacity.kv_capacity_tokens  # half the KV per token, more room
    # Multi-query: the single KV head is copied on every shard, so KV per token does not shrink.
    assert plan(FALCON, "A100-80GB", num_shard=2).model.kv_bytes_per_token == 8_192
    assert "--num-shard 2" in two.command_line()
    with pytest.raises(ValueError, match="exl2"):
        plan(LLAMA3, "A100-80GB", quantize="exl2", num_shard=2)


def test_sliding_window_caps_the_tokens_a_request_reserves():
    long_requests = dict(prompt_tokens=8000, output_tokens=1000)
    windowed = plan(MISTRAL, "A100-80GB", **long_requests)
    full = plan(config(MISTRAL, sliding_window=None), "A100-80GB", **long_requests)
    assert windowed.model.sliding_window == 4096 and full.model.sliding_window is None
    assert windowed.capacity.kv_capacity_tokens == full.capacity.kv_capacity_tokens
    assert windowed.capacity.tokens_per_request == 4096 and full.capacity.tokens_per_request == 9000
    assert windowed.capacity.concurrent_users == windowed.capacity.kv_capacity_tokens // 4096
    assert windowed.capacity.concurrent_users > 2 * full.capacity.concurrent_users
    short = plan(MISTRAL, "A100-80GB", prompt_tokens=1000, output_tokens=500)
    assert short.capacity.tokens_per_request == 1500  # below the window: no cap
    # Qwen2-style configs carry a window they do not use.
    assert ModelShape.from_config(config(MISTRAL, use_sliding_window=False)).sliding_window is None


def test_workload_sets_users_and_recommendations():
    p = plan(LLAMA3, "A100-80GB", prompt_tokens=1000, output_tokens=500)
    assert (p.limits.max_input_tokens, p.limits.max_total_tokens) == (1000, 1500)
    assert p.capacity.concurrent_users == p.capacity.kv_capacity_tokens // 1500 == p.limits.max_batch_size
    # The launcher's default (docs/tgi-rules.md L1): floor(312e12 A100 FLOPS / 15,032,385,536 FLOPs per token)
    # = 20,755, capped at Llama-3-8B's 8192 positions (it was TGI 2's 4096 before TGI 3).
    assert p.limits.max_batch_prefill_tokens == 8192
    assert p.limits.cuda_graphs == (1, 2, 4, 8, 16, 32)
    assert p.fits and not p.suggestions
    # Without a workload: TGI 3's warm-up defaults (L3), min(KV capacity, max_position_embeddings) = 4096
    # for Llama-2 (25,090 KV tokens here), max_input_tokens = 4096 - 1.
    d = plan(LLAMA2, "L4", quantize="eetq")
    assert (d.limits.max_input_tokens, d.limits.max_total_tokens) == (4095, 4096)
    assert d.capacity.concurrent_users == d.capacity.kv_capacity_tokens // 4096
    assert d.limits.cuda_graphs == tuple(g for g in (1, 2, 4, 8, 16, 32) if g <= d.capacity.concurrent_users)
    assert plan(FALCON, "A100-80GB").limits.max_total_tokens == 2048  # Falcon's context
    with pytest.raises(ValueError, match="prompt_tokens and output_tokens"):
        plan(LLAMA3, "A100-80GB", prompt_tokens=100)
    with pytest.raises(ValueError, match="max_input_tokens"):
        plan(LLAMA3, "A100-80GB", max_input_tokens=2000, max_total_tokens=2000)


def test_weights_that_do_not_fit_are_flagged_with_alternatives():
    p = plan(MIXTRAL, "A100-80GB")  # 87 GiB of bf16 weights on one 80 GB card
    assert not p.fits and p.capacity.kv_capacity_tokens == 0 and p.limits.max_batch_size is None
    assert any("do not fit" in w for w in p.warnings)
    assert any(s.startswith("--quantize") for s in p.suggestions)
    assert any(s.startswith("--num-shard 2") for s in p.suggestions)
    assert plan(MIXTRAL, "A100-80GB", num_shard=2).fits
    # Llama-2-7B in fp16 on a 16 GB T4: 12.6 GiB of weights leave too little for one 4096-token request.
    t4 = plan(LLAMA2, "T4", dtype="float16")
    assert not t4.fits and t4.suggestions
    assert any("lower max_total_tokens" in w or "do not fit" in w for w in t4.warnings)
    assert "### What would fit" in t4.explain()
    assert any("bfloat16" in w for w in plan(SMOLLM2, "T4").warnings)  # T4 has no native bf16


def test_plan_is_complete_when_built_and_its_record_stays_flat():
    p = plan(MIXTRAL, "A100-80GB")  # does not fit: its suggestions are in the plan returned, not added after
    assert p.suggestions and isinstance(p.suggestions, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.capacity = None  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.limits.max_batch_size = 4  # type: ignore[misc]
    # Four groups: the model and its memory, the hardware, the recommended limits, the capacity.
    assert (p.model.name, p.model.architecture, p.hardware.gpu, p.hardware.server) == (
        "mistralai/Mixtral-8x7B-v0.1", "mixtral", "A100-80GB", "tgi")
    record = p.to_dict()  # `plan --json`: one flat record, the grouped fields under their own names
    assert list(record)[:4] == ["model", "architecture", "gpu", "gpu_memory_bytes"]
    assert len(record) == 38 and "max_batch_total_tokens" not in record
    assert (record["model"], record["kv_capacity_tokens"], record["cuda_graphs"], record["suggestions"]) == (
        p.model.name, p.capacity.kv_capacity_tokens, list(p.limits.cuda_graphs), list(p.suggestions))
    json.dumps(record)  # plain JSON types only


def test_explain_shows_the_arithmetic():
    text = plan(LLAMA2, "A100-80GB", dtype="float16", prompt_tokens=1000, output_tokens=500).explain()
    for fragment in ("6,738,415,616", "2 (K, V) x 32 layers x 32 KV heads x 128 head dim x 2 B", "524,288 B",
                     "x 0.9 wiggle room", "warm-up blocks; max_batch_total_tokens = blocks x", "floor(",
                     "compute_optimal = floor(312 TFLOPS", "--max-batch-total-tokens",
                     "text-generation-launcher"):
        assert fragment in text, fragment


# -- GPUs and sizes ---------------------------------------------------------------------------

def test_gpu_names_and_sizes():
    assert resolve_gpu("a100 80gb") is KNOWN_GPUS["A100-80GB"]
    assert resolve_gpu("NVIDIA H100 80GB HBM3") is KNOWN_GPUS["H100-80GB"]
    assert resolve_gpu("nvidia-l4") is KNOWN_GPUS["L4"]
    assert resolve_gpu("rtx_4090") is KNOWN_GPUS["RTX-4090"]
    assert resolve_gpu("24GiB").memory_bytes == 24 * GiB
    assert resolve_gpu("80GB").memory_bytes == 80 * 10**9
    assert resolve_gpu(16 * GiB).memory_bytes == 16 * GiB
    assert parse_size("512 MiB") == 512 * 2**20
    with pytest.raises(ValueError, match="gpu .*A100-80GB.*H100-80GB"):
        resolve_gpu("A6000-ultra")
    with pytest.raises(ValueError, match="--overhead"):
        parse_size("lots", field="--overhead")


# -- what servers report --------------------------------------------------------------------

def test_vllm_cpu_figure_from_cpu_perf_is_reproduced():
    # CPU-PERF.md: vLLM's CPU backend reported 93,184 tokens for VLLM_CPU_KVCACHE_SPACE=2 GiB, bf16.
    # 2 GiB / 23,040 B = 93,206.8 tokens; vLLM's CPU backend allocates 128-token blocks: 728 x 128.
    assert kv_capacity_tokens(SMOLLM2, 2 * GiB, dtype="bfloat16", block_size=128) == 93_184
    assert kv_capacity_tokens(SMOLLM2, 2 * GiB, dtype="bfloat16", block_size=16) == 93_200  # 16 would not match
    assert compare(93_184, parse_reported_capacity(
        "INFO 11-22 10:12:01 [kv_cache_utils.py:1087] GPU KV cache size: 93,184 tokens")) == 0.0


def test_embedded_engine_prediction_mirrors_its_code():
    torch = pytest.importorskip("torch")
    from tgi_toolkit.config.embedded import DEFAULT_KV_CACHE_BYTES
    from tgi_toolkit.engine.kv_cache import SlotCache

    shape = ModelShape.from_config(SMOLLM2)
    for dtype in ("float32", "bfloat16"):
        cache = SlotCache(shape.num_layers, shape.num_kv_heads, shape.head_dim, getattr(torch, dtype), 1, 1)
        assert cache.bytes_per_token() == kv_bytes_per_token(shape, dtype)
    assert DEFAULT_KV_CACHE_BYTES == 2 * GiB
    p = plan_embedded(SMOLLM2, dtype="float32")
    # 2 GiB = 2,147,483,648 B / 46,080 B = 46,603.4 -> 46,603 one-token blocks (flashinfer's block size 1).
    assert p.model.kv_bytes_per_token == 46_080 and p.capacity.kv_capacity_tokens == 46_603
    # TGI 3's warm-up defaults (docs/tgi-rules.md L3): min(46,603 KV, 8192 positions) = 8192, input 8191.
    assert (p.limits.max_total_tokens, p.limits.max_input_tokens) == (8192, 8191)
    # 1 GiB / 46,080 = 23,301.7 -> 23,301; TGI_TOOLKIT_KV_CACHE_GIB=4 x 0.5 = 2 GiB -> 46,603 again.
    assert plan_embedded(SMOLLM2, dtype="float32", memory_fraction=0.5, env={}).capacity.kv_capacity_tokens == 23_301
    assert plan_embedded(SMOLLM2, dtype="float32", memory_fraction=0.5,
                         env={"TGI_TOOLKIT_KV_CACHE_GIB": "4"}).capacity.kv_capacity_tokens == 46_603
    # flashdecoding's 256-token blocks: 46,080 x 256 = 11,796,480 B each; floor(2 GiB / that) = 182 blocks
    # (182 x 11,796,480 = 2,146,959,360) = 46,592 tokens.
    assert plan_embedded(SMOLLM2, dtype="float32", env={"ATTENTION": "flashdecoding"}).capacity.kv_capacity_tokens == \
        46_592
    # Less KV than one request: the engine refuses to start as TGI's router does (NotEnoughMemory):
    # 2 GiB x 0.01 = 21,474,836 B / 46,080 = 466 tokens < max_total_tokens 2048.
    with pytest.raises(ValueError, match="not enough KV memory"):
        plan_embedded(SMOLLM2, dtype="float32", memory_fraction=0.01, max_total_tokens=2048, max_input_tokens=2000,
                      env={})
    assert p.limits.cuda_graphs == () and p.command_line().startswith("tgi-toolkit serve")
    # float32 is the engine's default on CPUs without bf16, not a --dtype value.
    assert "--dtype" not in p.command_line() and any("float32" in w for w in p.warnings)
    assert "--dtype bfloat16" in plan_embedded(SMOLLM2, dtype="bfloat16").command_line()
    # The launcher's default without a known GPU (L1): 4096 (it was max_input_tokens + 50 before TGI 3).
    assert p.limits.max_batch_prefill_tokens == 4096
    # Without chunking the prompt limit must fit one prefill: the default budget is raised to it.
    off = {"PREFILL_CHUNKING": "0"}
    unchunked = plan_embedded(SMOLLM2, dtype="float32", max_input_tokens=6000, max_total_tokens=7000, env=off)
    assert unchunked.limits.max_batch_prefill_tokens == 6000
    # Unchunked, max_total_tokens defaults to the warm-up prompt (one 6000-token request: 6000), which
    # is not above max_input_tokens 6000: TGI's router refuses that start-up too (L3, L4).
    with pytest.raises(ValueError, match=r"max-input-tokens \(6000\) must be < --max-total-tokens \(6000\)"):
        plan_embedded(SMOLLM2, dtype="float32", max_input_tokens=6000, env=off)
    prefill = plan_embedded(SMOLLM2, dtype="float32", max_input_tokens=6000, env={}).limits.max_batch_prefill_tokens
    assert prefill == 4096
    assert plan(SMOLLM2, "embedded", dtype="float32").to_dict() == p.to_dict()
    with pytest.raises(ValueError, match="num_shard"):
        plan(SMOLLM2, "cpu", num_shard=2)


@pytest.mark.slow
def test_embedded_engine_reports_what_was_planned(engine):
    log = engine.log()
    reported = parse_reported_capacity(log)
    dtype = "bfloat16" if "torch.bfloat16" in log else "float16" if "torch.float16" in log else "float32"
    # The session engine runs with --max-input-tokens 1000 --max-total-tokens 1200 (tests/conftest.py).
    predicted = plan_embedded(SMOLLM2, dtype=dtype, max_input_tokens=1000, max_total_tokens=1200)
    assert reported.max_batch_total_tokens == reported.kv_capacity_tokens == predicted.capacity.kv_capacity_tokens
    assert compare(predicted, reported) == 0.0
    # The engine logs its weights in MiB with one decimal.
    assert reported.weight_bytes == pytest.approx(predicted.model.weight_bytes, abs=0.05 * 2**20)


def test_parse_tgi_log_lines():
    compact = (
        "\x1b[2m2024-08-16T12:08:30.101Z\x1b[0m \x1b[32m INFO\x1b[0m \x1b[2mtext_generation_launcher\x1b[0m: "
        "Default `max_batch_prefill_tokens` to 4096\n"
        "2024-08-16T12:08:41.202Z  INFO text_generation_launcher: KV-cache blocks: 455003, size: 1\n"
        "2024-08-16T12:08:41.889Z  INFO text_generation_router_v3: backends/v3/src/lib.rs:137: "
        "Setting max batch total tokens to 455003\n"
        "2024-08-16T12:08:42.001Z  INFO text_generation_router::server: router/src/server.rs:2404: Connected\n"
    )
    found = parse_reported_capacity(compact)
    assert found.to_dict() == {"max_batch_prefill_tokens": 4096, "num_blocks": 455003, "block_size": 1,
                               "max_batch_total_tokens": 455003, "server": "tgi", "kv_capacity_tokens": 455003}
    as_json = json.dumps({"timestamp": "2024-08-16T12:08:41.889Z", "level": "INFO",
                          "fields": {"message": "Setting max batch total tokens to 1048576"},
                          "target": "text_generation_router_v3"})
    assert parse_reported_capacity(as_json).kv_capacity_tokens == 1_048_576
    # A restart logs it again: the last one counts.
    assert parse_reported_capacity(compact + as_json).max_batch_total_tokens == 1_048_576
    assert parse_reported_capacity("nothing here").to_dict() == {}
    with pytest.raises(ValueError, match="states no KV capacity"):
        compare(1000, parse_reported_capacity("nothing here"))


def test_parse_vllm_log_lines():
    v1 = (
        "(EngineCore_DP0 pid=4242) INFO 11-22 10:11:58 [gpu_model_runner.py:2653] Model loading took 14.9889 GiB "
        "memory and 4.21 seconds\n"
        "(EngineCore_DP0 pid=4242) INFO 11-22 10:12:01 [gpu_worker.py:298] Available KV cache memory: 53.62 GiB\n"
        "(EngineCore_DP0 pid=4242) INFO 11-22 10:12:01 [kv_cache_utils.py:1087] GPU KV cache size: 439,232 tokens\n"
        "(EngineCore_DP0 pid=4242) INFO 11-22 10:12:01 [kv_cache_utils.py:1091] Maximum concurrency for 8,192 "
        "tokens per request: 53.62x\n"
    )
    found = parse_reported_capacity(v1)
    assert found.kv_capacity_tokens == 439_232 and found.server == "vllm"
    assert found.max_concurrency == 53.62 and found.max_concurrency_tokens == 8192
    assert found.kv_cache_bytes == int(53.62 * GiB)
    assert found.weight_bytes == int(14.9889 * GiB)
    v0 = "INFO 07-05 15:07:40 gpu_executor.py:83] # GPU blocks: 7281, # CPU blocks: 512\n"
    assert parse_reported_capacity(v0).kv_capacity_tokens == 7281 * 16
    cpu = "INFO 07-05 15:07:40 cpu_executor.py:72] # CPU blocks: 728\n"
    assert parse_reported_capacity(cpu, block_size=128).kv_capacity_tokens == 93_184


def test_a_starting_server_reads_its_capacity_lines_as_the_planner_reads_them():
    from tgi_toolkit.server.tgi import TgiBackend
    from tgi_toolkit.server.vllm import VllmBackend

    vllm_lines = ["\x1b[1;36m(EngineCore_DP0 pid=4242)\x1b[0;0m INFO 11-22 10:12:01 [kv_cache_utils.py:1087] GPU KV "
                  "cache size: 439,232 tokens",
                  "INFO 11-22 10:12:01 [kv_cache_utils.py:1091] Maximum concurrency for 8,192 tokens per request: "
                  "53.62x"]
    facts: dict = {}
    for line in vllm_lines:
        VllmBackend().parse_line(line, facts)
    assert facts == {"kv_capacity_tokens": 439_232, "max_concurrency": 53.62}
    found = parse_reported_capacity("\n".join(vllm_lines))
    assert (found.kv_capacity_tokens, found.max_concurrency) == (439_232, 53.62)
    tgi_line = "\x1b[2m2024-08-16T12:08:41.889Z\x1b[0m INFO router: Setting max batch total tokens to 455_003"
    facts = {}
    TgiBackend().parse_line(tgi_line, facts)
    assert facts == {"max_batch_total_tokens": 455_003} == {"max_batch_total_tokens":
                                                            parse_reported_capacity(tgi_line).max_batch_total_tokens}


def test_compare_is_the_relative_error():
    p = plan(LLAMA3, "A100-80GB")
    assert compare(p, p.capacity.kv_capacity_tokens) == 0.0
    assert compare(110, 100) == pytest.approx(0.10)
    assert compare(p, {"max_batch_total_tokens": p.capacity.kv_capacity_tokens * 2}) == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="reported"):
        compare(p, {"num_blocks": 3})


def test_vllm_prediction_against_a_published_estimate():
    # Seed 001: happy_vllm estimated ~100k KV tokens for CodeLlama-7b-Instruct (Llama-2-7B's shape,
    # 16k context) under vLLM 0.4.3 on an A100-80GB: gpu_memory_utilization 0.9, block 16, a profiling
    # prefill of max_model_len tokens. An estimate read off a benchmark, so only the ballpark is checked.
    codellama = config(LLAMA2, vocab_size=32016, max_position_embeddings=16384, rope_theta=1e6)
    p = plan(codellama, "A100-80GB", memory_fraction=0.9, wiggle_room=1.0, block_size=16,
             max_total_tokens=16384, max_input_tokens=16383, max_batch_prefill_tokens=16384)
    assert compare(p, 100_000) == pytest.approx(0.0, abs=0.20)


# -- CLI ------------------------------------------------------------------------------------

def run_cli(*argv: str) -> tuple[int, str, str]:
    from tgi_toolkit.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["plan", *argv])
    return rc, out.getvalue(), err.getvalue()


def test_cli_prints_the_plan_and_the_launcher_command():
    rc, out, _ = run_cli("--model", str(LLAMA3), "--gpu", "A100-80GB", "--prompt-tokens", "1000",
                         "--output-tokens", "500")
    expected = plan(LLAMA3, "A100-80GB", prompt_tokens=1000, output_tokens=500)
    assert rc == 0
    # TGI 3 ignores --max-batch-total-tokens (docs/tgi-rules.md L2 step 5): the plan shows the figure, not the flag.
    assert f"max_batch_total_tokens {expected.capacity.kv_capacity_tokens:,}: what the server will infer" in out
    assert "--max-batch-total-tokens" not in expected.command_line()
    assert "text-generation-launcher --model-id meta-llama/Meta-Llama-3-8B" in out
    assert "131,072 B" in out


def test_cli_json_and_options(tmp_path):
    shutil.copy(SMOLLM2, tmp_path / "config.json")
    rc, out, _ = run_cli("--model", str(tmp_path), "--gpu", "24GiB", "--num-shard", "1", "--kv-cache-dtype",
                         "fp8_e5m2", "--memory-fraction", "0.5", "--quantize", "eetq", "--json")
    data = json.loads(out)
    assert rc == 0 and data["kv_bytes_per_token"] == 11_520 and data["quantize"] == "eetq"
    assert data["memory_fraction"] == 0.5 and data["gpu_memory_bytes"] == 24 * GiB
    rc, out, _ = run_cli("--model", str(SMOLLM2), "--gpu", "embedded", "--dtype", "float32", "--json")
    assert rc == 0 and json.loads(out)["kv_capacity_tokens"] == 46_603


def test_cli_errors_name_the_field():
    rc, _, err = run_cli("--model", str(LLAMA3), "--gpu", "TPU-v5")
    assert rc == 2 and "gpu 'TPU-v5' is not known" in err and "A100-80GB" in err
    rc, _, err = run_cli("--model", "/nonexistent/dir", "--gpu", "L4")
    assert rc == 2 and "--model (/nonexistent/dir)" in err and "no config.json" in err
    rc, out, _ = run_cli("--model", str(MIXTRAL), "--gpu", "L4")
    assert rc == 1 and "do not fit" in out  # exit status 1: the plan does not fit


# -- LauncherConfig ------------------------------------------------------------------------------

def test_plan_to_launcher_config():
    from tgi_toolkit.config import LauncherConfig

    p = plan(LLAMA3, "A100-80GB", prompt_tokens=1000, output_tokens=500, memory_fraction=0.9)
    cfg = p.to_launcher_config()
    assert isinstance(cfg, LauncherConfig)
    assert (cfg.model_id, cfg.max_input_tokens, cfg.max_total_tokens, cfg.max_batch_prefill_tokens,
            cfg.max_batch_total_tokens, cfg.max_batch_size, cfg.cuda_graphs, cfg.dtype, cfg.cuda_memory_fraction) == (
        "meta-llama/Meta-Llama-3-8B", 1000, 1500, 8192, None, p.capacity.concurrent_users,  # TGI 3 infers the total
        [1, 2, 4, 8, 16, 32], "bfloat16", 0.9)
    assert cfg.max_concurrent_requests == p.capacity.concurrent_users > 128
    cfg.check()
    assert "--max-batch-total-tokens" not in cfg.to_cli()
    # The launcher refuses --dtype with GPTQ; the plan leaves it out.
    gptq = plan(LLAMA2, "L4", quantize="gptq", num_shard=1).to_launcher_config(model_id="TheBloke/Llama-2-7B-GPTQ")
    assert gptq.dtype is None and gptq.quantize == "gptq" and gptq.model_id == "TheBloke/Llama-2-7B-GPTQ"
    gptq.check()
    assert plan(LLAMA2, "A100-80GB", quantize="bitsandbytes").to_launcher_config().cuda_graphs == [0]
    with pytest.raises(ValueError, match="does not fit"):
        plan(MIXTRAL, "A100-80GB").to_launcher_config()


@pytest.mark.parametrize("path", [LLAMA2, LLAMA3, FALCON, MISTRAL, SMOLLM2])
@pytest.mark.parametrize("given", [{}, {"max_input_tokens": 1000}, {"max_total_tokens": 3000},
                                   {"max_input_tokens": 5000}])
def test_default_lengths_agree_with_launcher_config_resolved(path, given):
    from tgi_toolkit.config import ConfigError, LauncherConfig

    # Both follow TGI 3's warm-up defaults (docs/tgi-rules.md L3) given the same KV capacity.
    mpe = ModelShape.from_config(path).max_position_embeddings
    kv = plan(path, "H200").capacity.kv_capacity_tokens
    try:
        resolved = LauncherConfig(**given).resolved(mpe, kv_capacity_tokens=kv, env={})
    except ConfigError:
        with pytest.raises(ValueError):
            plan(path, "H200", **given)
        return
    p = plan(path, "H200", **given)
    assert p.capacity.kv_capacity_tokens == kv
    limits = (p.limits.max_input_tokens, p.limits.max_total_tokens)
    assert limits == (resolved.max_input_tokens, resolved.max_total_tokens)
