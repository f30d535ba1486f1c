"""TGI 3's scheduling mode (section 1) and limits (section 6) of docs/tgi-rules.md.

Every expected number is worked by hand from the document's rules in the comment beside it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tgi_toolkit.config import ConfigError
from tgi_toolkit.config.prefill_default import (
    GPU_FP16_FLOPS,
    launcher_max_batch_prefill_tokens,
    launcher_vram_tokens,
    model_flops_per_token,
)
from tgi_toolkit.config.scheduling import (
    default_max_input_tokens,
    default_max_total_tokens,
    derive_limits,
    embedded_kv_bytes,
    kv_bytes_per_block,
    kv_capacity_tokens,
    kv_num_blocks,
    max_batch_total_tokens,
    router_problems,
    warmup_blocks,
    warmup_kv_bytes,
    warmup_requests,
)
from tgi_toolkit.config.scheduling_mode import (
    CHUNKING_IGNORES_WARNING,
    DEPRECATED_BATCH_TOTAL_WARNING,
    SPECULATION_WARNING,
    resolve_mode,
)

CONFIGS = Path(__file__).parent / "data" / "configs"


def load(name: str, **changes) -> dict:
    return {**json.loads((CONFIGS / f"{name}.json").read_text()), **changes}


LLAMA3 = load("llama-3-8b")  # hidden 4096 / 32 heads = head dim 128
LLAMA31 = load("llama-3-8b", max_position_embeddings=131_072)  # Llama-3.1-8B: same shape, 128k context
MiB = 2**20


def mode_tuple(mode) -> tuple:
    return mode.attention, mode.block_size, mode.prefix_caching, mode.chunking


# -- F1-F3: the mode ----------------------------------------------------------------------------------
@pytest.mark.parametrize("env, expected", [
    # F1 step 5 / F2 / F3: nothing set -> flashinfer (block 1), prefix caching, chunking (PREFILL_CHUNKING "1").
    ({}, ("flashinfer", 1, True, True)),
    # F2 block sizes: flashdecoding 256, ipex 64; both are flash kernels, so prefix caching and chunking stay on.
    ({"ATTENTION": "flashdecoding"}, ("flashdecoding", 256, True, True)),
    ({"ATTENTION": "flashdecoding-ipex"}, ("flashdecoding-ipex", 64, True, True)),
    # F1 step 4: paged with PREFIX_CACHING unset -> PREFIX_CACHING=0; F3: paged is not a chunking kernel.
    ({"ATTENTION": "paged"}, ("paged", 16, False, False)),
    ({"ATTENTION": "paged", "PREFIX_CACHING": "0"}, ("paged", 16, False, False)),
    # F3: PREFILL_CHUNKING=0 turns chunking off and nothing else.
    ({"PREFILL_CHUNKING": "0"}, ("flashinfer", 1, True, False)),
    ({"PREFIX_CACHING": "0"}, ("flashinfer", 1, False, True)),
    ({"PREFIX_CACHING": "TRUE", "PREFILL_CHUNKING": "true"}, ("flashinfer", 1, True, True)),  # F2 lower-cases
    # F5: the AMD image's settings.
    ({"ATTENTION": "paged", "PREFIX_CACHING": "0", "PREFILL_CHUNKING": "0"}, ("paged", 16, False, False)),
])
def test_mode_from_environment_variables(env, expected):
    for model_config in (None, LLAMA3):  # a head dim of 128 changes nothing (F1 step 3)
        assert mode_tuple(resolve_mode(env, model_config=model_config)) == expected


def test_typical_cuda_default_and_its_start_up_warning():
    # Section 1's closing line: sm >= 8, Llama-like, head dim 128 -> flashinfer, block 1, both features on.
    mode = resolve_mode({}, model_config=LLAMA3, cuda_capability=(8, 0))
    assert mode_tuple(mode) == ("flashinfer", 1, True, True)
    # B1: with chunking TGI warns that waiting_served_ratio and max_waiting_tokens are ignored.
    assert mode.warnings == ("Model supports prefill chunking. `waiting_served_ratio` and `max_waiting_tokens` "
                             "will be ignored.",)
    assert CHUNKING_IGNORES_WARNING not in resolve_mode({"PREFILL_CHUNKING": "0"}).warnings


def test_speculation_and_model_class_turn_chunking_off():
    # F3: any speculation turns chunking off, with a warning; prefix caching is unaffected.
    spec = resolve_mode({}, speculate=2)
    assert mode_tuple(spec) == ("flashinfer", 1, True, False) and spec.warnings == (SPECULATION_WARNING,)
    assert not resolve_mode({}, support_chunking=False).chunking
    # F3: models/__init__.py passes support_chunking=False for Gemma3, Qwen2-VL, Qwen2.5-VL, Mllama.
    for model_type in ("gemma3", "qwen2_vl", "qwen2_5_vl", "mllama"):
        assert not resolve_mode({}, model_config={"model_type": model_type, "head_dim": 128}).chunking


def test_launcher_rules_read_from_config_json():
    # F1 step 1: a VLM (vision_config) or an encoder-decoder model -> PREFIX_CACHING=0.
    vlm = {**LLAMA3, "vision_config": {}}
    assert mode_tuple(resolve_mode({}, model_config=vlm)) == ("flashinfer", 1, False, True)
    assert not resolve_mode({}, model_config={**LLAMA3, "is_encoder_decoder": True}).prefix_caching
    assert resolve_mode({"PREFIX_CACHING": "1"}, model_config=vlm).prefix_caching  # a user value is respected
    # F1 step 3, head dim 128 with LoRA adapters -> PREFIX_CACHING=0; attention stays flashinfer.
    assert mode_tuple(resolve_mode({}, model_config=LLAMA3, lora=True)) == ("flashinfer", 1, False, True)
    # Head dim 2560 / 32 = 80, not in {64, 128, 256}: the fallback kernel, no prefix caching.
    phi = {"model_type": "phi", "hidden_size": 2560, "num_attention_heads": 32}
    assert mode_tuple(resolve_mode({}, model_config=phi)) == ("flashdecoding", 256, False, True)  # sm 9.0
    assert mode_tuple(resolve_mode({}, model_config=phi, cuda_capability=(7, 5))) == ("paged", 16, False, False)
    assert mode_tuple(resolve_mode({}, model_config=phi, cuda_capability=None)) == ("paged", 16, False, False)
    # A user's ATTENTION is kept; PREFIX_CACHING (unset) still goes to 0 for that head dim.
    assert mode_tuple(resolve_mode({"ATTENTION": "flashinfer"}, model_config=phi)) == ("flashinfer", 1, False, True)
    # Falcon-7B: 4544 / 71 = head dim 64; falcon is forced to the fallback (flashdecoding on sm >= 8) and
    # keeps prefix caching there; on sm 7.5 the fallback is paged, so prefix caching goes too.
    falcon = load("falcon-7b")
    assert mode_tuple(resolve_mode({}, model_config=falcon)) == ("flashdecoding", 256, True, True)
    assert mode_tuple(resolve_mode({}, model_config=falcon, cuda_capability=(7, 5))) == ("paged", 16, False, False)
    # Gemma3 without a head dim anywhere: 256 (text_config first, then the gemma3 rule).
    assert resolve_mode({}, model_config={"model_type": "gemma3", "text_config": {"head_dim": 100}}).attention == \
        "flashdecoding"
    assert resolve_mode({}, model_config={"model_type": "gemma3", "text_config": {}}).attention == "flashinfer"
    # F1 step 5: with no config.json the config-based steps (the fallback kernel included) are skipped.
    assert mode_tuple(resolve_mode({}, cuda_capability=None)) == ("flashinfer", 1, True, True)


@pytest.mark.parametrize("env, variable, allowed", [
    ({"ATTENTION": "flash"}, "ATTENTION", "paged, flashdecoding, flashdecoding-ipex, flashinfer"),
    ({"ATTENTION": "FlashInfer"}, "ATTENTION", "paged, flashdecoding"),  # F2 compares case-sensitively
    ({"PREFIX_CACHING": "yes"}, "PREFIX_CACHING", "1, true, 0, false"),
    ({"PREFILL_CHUNKING": "maybe"}, "PREFILL_CHUNKING", "1, true, 0, false"),
])
def test_bad_values_name_the_variable_and_the_allowed_values(env, variable, allowed):
    with pytest.raises(ConfigError) as info:
        resolve_mode(env)
    assert info.value.fields == {variable} and allowed in str(info.value) and "\n" not in str(info.value)


def test_prefix_caching_with_paged_attention_is_a_start_up_error():
    # F2: prefix caching combined with paged is a start-up error (a user-set PREFIX_CACHING=1 is kept by F1).
    with pytest.raises(ConfigError) as info:
        resolve_mode({"ATTENTION": "paged", "PREFIX_CACHING": "1"})
    assert info.value.fields == {"PREFIX_CACHING", "ATTENTION"} and "PREFIX_CACHING=0" in str(info.value)


# -- L2: KV capacity after warm-up ------------------------------------------------------------------------
def test_bytes_per_block():
    # Llama-3-8B bf16: BLOCK_SIZE x 8 KV heads x 128 head size x 32 layers x 2 (K, V) x 2 B.
    assert kv_bytes_per_block(1, num_layers=32, kv_heads=8, head_dim=128, dtype_bytes=2) == 131_072
    assert kv_bytes_per_block(256, num_layers=32, kv_heads=8, head_dim=128, dtype_bytes=2) == 33_554_432
    assert kv_bytes_per_block(16, num_layers=32, kv_heads=4, head_dim=128, dtype_bytes=2) == 1_048_576  # 2 shards


def test_warmup_kv_formula_on_round_numbers():
    # An 80e9 B card, 50e9 B free after weights and warm-up, --cuda-memory-fraction 1.0:
    # free - (1 - 1.0 x 0.90) x 80e9 = 50e9 - 8e9 = 42e9 B for the cache.
    kv = warmup_kv_bytes(50e9, 80e9, 1.0)
    assert kv == 42_000_000_000
    # The warm-up batch: one 4096-token prompt (max_batch_prefill_tokens 4096, no max_input_tokens),
    # max_new_tokens 1 -> ceil((4096 + 1 - 1) / 1) = 4096 blocks at block size 1.
    requests = warmup_requests(4096)
    assert requests == [(4096, 1)] and warmup_blocks(requests, 1) == 4096
    # flashinfer: floor(42e9 / 131,072) = 320,434 (131,072 x 320,434 = 41,999,925,248; one more block is
    # 42,000,056,320 > 42e9), + 4096 warm-up blocks = 324,530 blocks = 324,530 tokens.
    assert kv_num_blocks(kv, 131_072, 4096) == 324_530
    assert kv_capacity_tokens(kv, 131_072, 1, 4096) == 324_530
    # flashdecoding: floor(42e9 / 33,554,432) = 1251 (x 1251 = 41,976,594,432; x 1252 = 42,010,148,864),
    # warm-up blocks ceil(4096 / 256) = 16 -> 1267 blocks x 256 = 324,352 tokens (block-size rounding).
    assert warmup_blocks(requests, 256) == 16
    assert kv_capacity_tokens(kv, 33_554_432, 256, 16) == 324_352
    # --cuda-memory-fraction 0.5: 50e9 - (1 - 0.45) x 80e9 = 6e9; floor(6e9 / 131,072) = 45,776
    # (131,072 x 45,776 = 5,999,951,872) + 4096 = 49,872.
    assert kv_capacity_tokens(warmup_kv_bytes(50e9, 80e9, 0.5), 131_072, 1, 4096) == 49_872
    # Less free memory than the reserve: no block beyond the warm-up's own.
    assert warmup_kv_bytes(5e9, 80e9, 1.0) == 0 and kv_capacity_tokens(0, 131_072, 1, 4096) == 4096


def test_warmup_requests_follow_the_router():
    # max_batch_prefill_tokens 4096 in prompts of at most 1000: 1000, 1000, 1000, 1000, 96; each asks
    # max_total_tokens (1500) - prompt new tokens.
    requests = warmup_requests(4096, max_input_tokens=1000, max_total_tokens=1500)
    assert requests == [(1000, 500)] * 4 + [(96, 1404)]
    # Each reserves prompt + new - 1 = 1499 tokens: ceil(1499 / 16) = 94 blocks (93 x 16 = 1488 < 1499), x 5.
    assert warmup_blocks(requests, 16) == 470
    assert warmup_blocks(requests, 16, speculate=2) == 5 * 94  # 1501 tokens: still 94 blocks (94 x 16 = 1504)
    assert warmup_requests(4096, max_input_tokens=1000, max_batch_size=2) == [(1000, 1), (1000, 1)]


def test_a_user_max_batch_total_tokens_is_ignored_with_the_deprecated_warning():
    # L2 step 5: flash models use the inferred value and warn.
    assert max_batch_total_tokens(324_530) == (324_530, ())
    value, warnings = max_batch_total_tokens(324_530, 100_000)
    assert value == 324_530
    assert warnings == (DEPRECATED_BATCH_TOTAL_WARNING, "Inferred max batch total tokens: 324530")
    assert DEPRECATED_BATCH_TOTAL_WARNING == "`--max-batch-total-tokens` is deprecated for Flash Attention models."


# -- L3: length defaults -----------------------------------------------------------------------------------
def test_default_max_total_and_input_tokens():
    # With chunking: min(KV capacity 324,530, tokenizer model_max_length 131,072, max_position_embeddings
    # 131,072) = 131,072; a small cache wins: min(49,872, 131,072, 131,072) = 49,872.
    assert default_max_total_tokens(chunking=True, kv_capacity_tokens=324_530, model_max_length=131_072,
                                    max_position_embeddings=131_072) == 131_072
    assert default_max_total_tokens(chunking=True, kv_capacity_tokens=49_872, model_max_length=131_072,
                                    max_position_embeddings=131_072) == 49_872
    # transformers' "no limit" model_max_length (int(1e30)) does not bind.
    assert default_max_total_tokens(chunking=True, kv_capacity_tokens=324_530, model_max_length=int(1e30),
                                    max_position_embeddings=8192) == 8192
    # Without chunking: the warm-up batch's prompt tokens, about max_batch_prefill_tokens (4096).
    assert default_max_total_tokens(chunking=False, kv_capacity_tokens=324_530, warmup_prompt_tokens=4096) == 4096
    assert default_max_input_tokens(131_072) == 131_071 and default_max_input_tokens(4096) == 4095


# -- L4: the router's checks --------------------------------------------------------------------------------
def test_router_checks_depend_on_chunking():
    limits = dict(max_input_tokens=8000, max_total_tokens=8192, max_batch_prefill_tokens=4096,
                  max_batch_total_tokens=324_530)
    # A prompt limit above the prefill budget is what chunking allows.
    assert router_problems(**limits, chunking=True) == []
    (problem,) = router_problems(**limits, chunking=False)
    assert problem.fields == ("max_batch_prefill_tokens", "max_input_tokens") and "4096" in str(problem)
    fields = [p.fields for p in router_problems(max_input_tokens=9000, max_total_tokens=9000,
                                                max_batch_prefill_tokens=8192, max_batch_total_tokens=4096,
                                                chunking=True)]
    assert fields == [("max_input_tokens", "max_total_tokens"), ("max_batch_prefill_tokens", "max_batch_total_tokens"),
                      ("max_total_tokens", "max_batch_total_tokens")]


def test_derive_limits_for_the_embedded_engine():
    # SmolLM2-135M in float32: 2 x 30 layers x 3 KV heads x 64 x 4 B = 46,080 B per token (block size 1).
    # 2 GiB = 2,147,483,648 B / 46,080 = 46,603.4 -> 46,603 blocks = tokens.
    kv = embedded_kv_bytes({}, 1.0)
    limits = derive_limits(kv_bytes=kv, bytes_per_block=46_080, block_size=1, chunking=True,
                           max_batch_prefill_tokens=4096, max_position_embeddings=8192, model_max_length=8192)
    # Chunking: max_total = min(46,603, 8192, 8192) = 8192, max_input = 8191 (> the 4096 prefill budget: allowed).
    assert (limits.max_batch_total_tokens, limits.max_total_tokens, limits.max_input_tokens) == (46_603, 8192, 8191)
    assert limits.num_blocks == 46_603 and limits.warnings == ()
    # Without chunking: max_total = the warm-up prompt, 4096 tokens; max_input 4095.
    old = derive_limits(kv_bytes=kv, bytes_per_block=46_080, block_size=1, chunking=False,
                        max_batch_prefill_tokens=4096, max_position_embeddings=8192)
    assert (old.max_total_tokens, old.max_input_tokens) == (4096, 4095)
    # block size 16: 737,280 B per block; floor(2,147,483,648 / 737,280) = 2912 (x 737,280 = 2,146,959,360)
    # -> 2912 x 16 = 46,592 tokens; a user value is ignored with TGI's warning.
    paged = derive_limits(kv_bytes=kv, bytes_per_block=46_080 * 16, block_size=16, chunking=True,
                          max_batch_prefill_tokens=4096, max_input_tokens=1000, max_total_tokens=1200,
                          user_max_batch_total_tokens=5000)
    assert paged.max_batch_total_tokens == 46_592 and paged.warnings[0] == DEPRECATED_BATCH_TOTAL_WARNING
    with pytest.raises(ConfigError) as info:  # the launcher's check of the given value (L4), before it is ignored
        derive_limits(kv_bytes=kv, bytes_per_block=46_080, block_size=1, chunking=True, max_batch_prefill_tokens=4096,
                      max_total_tokens=4096, user_max_batch_total_tokens=2048)
    assert info.value.fields == {"max_total_tokens", "max_batch_total_tokens"}
    with pytest.raises(ConfigError) as info:  # the prompt limit needs chunking with this prefill budget
        derive_limits(kv_bytes=kv, bytes_per_block=46_080, block_size=1, chunking=False,
                      max_batch_prefill_tokens=4096, max_input_tokens=8000, max_total_tokens=8192)
    assert info.value.fields == {"max_batch_prefill_tokens", "max_input_tokens"}
    with pytest.raises(ConfigError, match="not enough KV memory"):  # lib.rs NotEnoughMemory
        derive_limits(kv_bytes=46_080 * 1000, bytes_per_block=46_080, block_size=1, chunking=True,
                      max_batch_prefill_tokens=512, max_input_tokens=1000, max_total_tokens=2000)


def test_embedded_kv_bytes_knob():
    assert embedded_kv_bytes({}) == 2 * 2**30  # default 2 GiB = 2,147,483,648 B
    assert embedded_kv_bytes({}, 0.5) == 2**30
    # 0.5 GiB x fraction 0.5 = 0.25 GiB = 268,435,456 B.
    assert embedded_kv_bytes({"TGI_TOOLKIT_KV_CACHE_GIB": "0.5"}, 0.5) == 268_435_456
    assert embedded_kv_bytes({"TGI_TOOLKIT_KV_CACHE_GIB": "8"}) == 8 * 2**30
    for bad in ("lots", "0", "-1", "inf", "nan"):
        with pytest.raises(ConfigError) as info:
            embedded_kv_bytes({"TGI_TOOLKIT_KV_CACHE_GIB": bad})
        assert info.value.fields == {"TGI_TOOLKIT_KV_CACHE_GIB"} and "GiB > 0" in str(info.value)


# -- L1: the launcher's default max_batch_prefill_tokens ----------------------------------------------------
def test_model_flops_per_token():
    # Llama-3-8B: 32 x (2 x 4096 x 128 x (3 x 32 + 2 x 8) + 6 x 4096 x 14336 x 1)
    # = 32 x (117,440,512 + 352,321,536) = 32 x 469,762,048 = 15,032,385,536.
    assert model_flops_per_token(LLAMA3) == 15_032_385_536
    # Mixtral-8x7B, 2 experts per token: 32 x (117,440,512 + 6 x 4096 x 14336 x 2 = 704,643,072) = 26,306,674,688.
    assert model_flops_per_token(load("mixtral-8x7b")) == 26_306_674_688
    assert model_flops_per_token(load("falcon-7b")) is None  # no intermediate_size in its config.json
    assert model_flops_per_token({**LLAMA3, "vision_config": {}}) is None  # VLMs are not estimated


def test_launcher_default_prefill_budget():
    h100 = GPU_FP16_FLOPS["H100-80GB"]
    # Llama-3.1-8B on 1 x H100: floor(900e12 / 15,032,385,536) = 59,870 (15,032,385,536 x 59,870 =
    # 899,988,922,040,320; the remainder 11,077,959,680 is less than one more token's FLOPs). Below its
    # 131,072 positions and the VRAM estimate (~256k), so 59,870: the document's L1 figure.
    value, steps = launcher_max_batch_prefill_tokens(LLAMA31, gpu_fp16_flops=h100, gpu_memory_bytes=81_559 * MiB)
    assert value == 59_870 and "59,870" in steps[0]
    # 2 shards: floor(1,800e12 / 15,032,385,536) = 119,741 (2 x 59,870.74).
    assert launcher_max_batch_prefill_tokens(LLAMA31, gpu_fp16_flops=h100, num_shard=2)[0] == 119_741
    # Llama-3-8B's 8192 positions cap it.
    assert launcher_max_batch_prefill_tokens(LLAMA3, gpu_fp16_flops=h100)[0] == 8192
    # Mixtral on an A100: floor(312e12 / 26,306,674,688) = 11,860 (x 11,860 = 311,997,161,799,680), under
    # its 32,768 positions; its ~90 GB of weights exceed the card, so the VRAM estimate is unavailable.
    mixtral = load("mixtral-8x7b")
    assert launcher_max_batch_prefill_tokens(mixtral, gpu_fp16_flops=312 * 10**12,
                                             gpu_memory_bytes=81_920 * MiB)[0] == 11_860
    # Unknown card (not in the table): 4096; gemma3 8000 and qwen2_vl 10000, capped by their positions.
    assert launcher_max_batch_prefill_tokens(LLAMA31, gpu_fp16_flops=None)[0] == 4096
    assert launcher_max_batch_prefill_tokens({"model_type": "gemma3"}, gpu_fp16_flops=h100)[0] == 8000
    qwen = {"model_type": "qwen2_vl", "vision_config": {}, "max_position_embeddings": 32_768}
    assert launcher_max_batch_prefill_tokens(qwen, gpu_fp16_flops=h100)[0] == 10_000
    assert launcher_max_batch_prefill_tokens(None, gpu_fp16_flops=h100)[0] == 4096  # no config.json


def test_launcher_vram_estimate_caps_the_prefill_budget():
    # Llama-3-8B, the launcher's rough size: per layer 3 x 14336 x 1 x 4096 (MLP) + (32 + 16) x 128 (its
    # attention term) + 32 x 128 x 4096 (o) = 176,160,768 + 6,144 + 16,777,216 = 192,944,128; x 32 layers
    # = 6,174,212,096, + 2 x 4096 x 128,256 = 1,050,673,152 -> 7,224,885,248 x 2 B = 14,449,770,496 B.
    # Per token: KV 8 x 2 x 128 x 2 x 32 = 131,072 + MLP (14336 + 7168) x 1 x 2 x 3 = 129,024 -> 260,096 B.
    # T4: 15,360 MiB = 16,106,127,360 B x 0.95 = 15,300,820,992 B; minus the model = 851,050,496 B
    # / 260,096 = 3,272.1 -> 3,272 tokens, below compute_optimal floor(65e12 / 15,032,385,536) = 4,323.
    assert launcher_vram_tokens(LLAMA3, 15_360 * MiB) == 3272
    value, steps = launcher_max_batch_prefill_tokens(LLAMA31, gpu_fp16_flops=GPU_FP16_FLOPS["T4"],
                                                     gpu_memory_bytes=15_360 * MiB)
    assert value == 3272 and "4,323" in steps[0] and "3,272" in steps[-1]
    # H100: 81,559 MiB x 0.95 = 81,245,298,688 B - 14,449,770,496 = 66,795,528,192 / 260,096 = 256,811.6;
    # the launcher multiplies in f32 (0.95 is 0.94999999 there), which lands 2 tokens lower.
    assert launcher_vram_tokens(LLAMA3, 81_559 * MiB) == pytest.approx(256_811, abs=3)
    assert launcher_vram_tokens({**LLAMA3, "quantization_config": {"quant_method": "gptq"}}, 81_559 * MiB) is None
