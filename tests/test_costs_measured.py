"""The measured-kernel cost model (tgi_toolkit.costs.measured): a forward is the sum of its operations read from
kernel tables. Small tables with latencies chosen so every sum can be worked out by hand, then the real
operator database (aiconfigurator-core) read in place, and the CLI as a user runs it."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tgi_toolkit.costs.features import Shape
from tgi_toolkit.costs.hardware import achievable
from tgi_toolkit.costs.kernel_tables import Curve, KernelTables, database_root, nearest_version
from tgi_toolkit.costs.measured import MeasuredCostModel, gpu_cost_model

# hidden 128, 4 heads of 32 (2 KV heads), MLP 256 gated, vocab 512, 2 layers:
# QKV n = (4 + 2 x 2) x 32 = 256, k = 128; O n = 128, k = 128; gate/up n = 512, k = 128; down n = 128, k = 256;
# LM head n = 512, k = 128.
TINY = {"model_type": "llama", "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 512, "max_position_embeddings": 4096,
        "tie_word_embeddings": False, "hidden_act": "silu", "rms_norm_eps": 1e-5, "_name_or_path": "tiny"}
NO_HOST = {"forward_overhead_s": 0.0, "row_overhead_s": 0.0, "host_token_s": 0.0, "bandwidth_efficiency": 1.0}


def gemm_ms(n: int, k: int, m: int) -> float:
    """The tiny tables' GEMM: 1 us per 16,384 weights up to 16 tokens, then in proportion to the tokens."""
    return 0.001 * n * k / 16384 * max(1, m / 16)


def write_tables(folder: Path) -> Path:
    common = {"framework": "tgi_toolkit", "version": "test", "device": "test card"}
    gemm = [{**common, "op_name": "gemm", "kernel_source": "torch", "gemm_dtype": "bfloat16", "m": m, "n": n, "k": k,
             "latency": gemm_ms(n, k, m)} for n in (128, 256, 512) for k in (128, 256) for m in (1, 16, 256)]
    attn = {**common, "beam_width": 1, "attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "num_heads": 4,
            "num_key_value_heads": 2, "head_dim": 32, "window_size": 0}
    # generation: 1 us per row per 16 KV tokens; context: 2 us for a 16-token prompt, quadratic in its length
    generation = [{**attn, "op_name": "generation_attention", "kernel_source": "fa", "batch_size": b, "isl": 1,
                   "step": s, "latency": 0.001 * b * s / 16} for b in (1, 4) for s in (16, 256)]
    context = [{**attn, "op_name": "context_attention", "kernel_source": "fa", "batch_size": b, "isl": n,
                "step": 0, "latency": 0.002 * b * (n / 16) ** 2} for b in (1, 4) for n in (16, 256)]
    pd.DataFrame(gemm).to_parquet(folder / "gemm_perf.parquet")
    pd.DataFrame(generation).to_parquet(folder / "generation_attention_perf.parquet")
    pd.DataFrame(context).to_parquet(folder / "context_attention_perf.parquet")
    return folder


@pytest.fixture
def tiny(tmp_path: Path) -> MeasuredCostModel:
    return MeasuredCostModel("H100", TINY, server="vllm-v1", kernel_times=str(write_tables(tmp_path)), **NO_HOST)


def elementwise_s(tokens: int) -> float:
    # 10 hidden-sized passes of 2 bytes per token and layer, at the card's copy bandwidth (efficiency 1 here)
    return 10 * tokens * 128 * 2 / (achievable("H100-80GB").bandwidth_gbs * 1e9)


def test_one_decode_row_is_the_sum_of_its_kernels(tiny: MeasuredCostModel) -> None:
    # per layer at m = 1: QKV 2 us + O 1 us + gate/up 4 us + down 2 us = 9 us; generation attention of one row
    # at KV 64, between 16 (1 us) and 256 (16 us) in log-log: 4 us. Two layers, then the LM head: 4 us.
    decode = Shape(rows=1, tokens=1, context=64, pairs=64, prefilling=False)
    expected = 2 * (9e-6 + 4e-6 + elementwise_s(1)) + 4e-6
    assert tiny.seconds(decode) == pytest.approx(expected, rel=1e-9)


def test_gemms_interpolate_in_log_log_and_scale_with_tokens_past_the_grid(tiny: MeasuredCostModel) -> None:
    # 64 tokens lie between 16 (x1) and 256 (x16): 4 times the 16-token time; 1,024 tokens lie past 256: 4 times
    # the 256-token time. The four projections at 16 tokens are 9 us.
    assert tiny._layer_gemms(64) == pytest.approx(4 * 9e-6, rel=1e-9)
    assert tiny._layer_gemms(1024) == pytest.approx(4 * 16 * 9e-6, rel=1e-9)


def test_a_prefill_prices_context_attention_and_a_mixed_forward_both_kernels(tiny: MeasuredCostModel) -> None:
    # one 64-token prompt: GEMMs at 64 tokens 36 us a layer; context attention at 64 tokens, between 16 (2 us) and
    # 256 (512 us), quadratic: 2 x 4^2 = 32 us; the LM head for the one emitting row 4 us
    prefill = Shape(rows=1, tokens=64, context=64, pairs=64 * 65 / 2, prefilling=True)
    assert tiny.seconds(prefill) == pytest.approx(2 * (36e-6 + 32e-6 + elementwise_s(64)) + 4e-6, rel=1e-6)
    # the same prompt chunked into a forward beside 4 rows decoding at KV 64: 68 tokens of GEMMs (16 -> 256 in
    # log-log, 68/16 = 4.25 times 9 us), the prompt's context attention as above, the 4 decode rows' generation
    # attention (4 rows at KV 64: 4 us x 4 = 16 us, the b = 4 table), and the LM head for 5 rows (5 tokens: 4 us)
    mixed = Shape(rows=5, tokens=68, context=64 + 4 * 64, pairs=64 * 65 / 2 + 4 * 64, prefilling=True,
                  decode_rows=4, decode_context=4 * 64)
    per_layer = 4.25 * 9e-6 + 32e-6 + 16e-6 + elementwise_s(68)
    assert tiny.seconds(mixed) == pytest.approx(2 * per_layer + 4e-6, rel=1e-6)


def test_a_chunk_after_a_cached_prefix_is_priced_by_its_query_key_pairs(tiny: MeasuredCostModel) -> None:
    # 16 tokens after 56 cached: 16 x 56 + 16 x 17 / 2 = 1,032 pairs, the causal pairs n (n + 1) / 2 of a
    # 44.93-token prompt (n = (sqrt(1 + 8 x 1032) - 1) / 2): 2 us x (44.93 / 16)^2 = 15.8 us a layer
    chunk = Shape(rows=1, tokens=16, context=72, pairs=16 * 56 + 16 * 17 / 2, prefilling=True)
    isl = (math.sqrt(1 + 8 * 1032) - 1) / 2
    assert isl == pytest.approx(44.934, abs=1e-3)
    attention = 2e-6 * (isl / 16) ** 2
    assert tiny.seconds(chunk) == pytest.approx(2 * (9e-6 + attention + elementwise_s(16)) + 4e-6, rel=1e-6)


def test_the_engine_attends_its_prompt_chunks_in_one_call_and_runs_its_elementwise_ops_unfused(tmp_path: Path) -> None:
    # A context table where one call over 4 prompts costs less than 4 calls (3 us against 2 us each at 16 tokens):
    # TGI's varlen kernel takes the 4 prompts in one call; the engine one call too: causal where they are new and of
    # one length (attention.plan groups them), else padded and masked (attention.pad).
    tables = write_tables(tmp_path)
    context = pd.read_parquet(tables / "context_attention_perf.parquet")
    context["latency"] = [{(1, 16): 0.002, (4, 16): 0.003, (1, 256): 0.512, (4, 256): 1.024}[(b, n)]
                          for b, n in zip(context.batch_size, context.isl, strict=True)]
    context.to_parquet(tables / "context_attention_perf.parquet")
    fused = MeasuredCostModel("H100", TINY, server="vllm-v1", kernel_times=str(tables), **NO_HOST)
    engine = gpu_cost_model("H100", TINY, cost_model="measured", kernel_times=tables, server="vllm-v1", engine=True,
                            **NO_HOST)
    assert engine.engine and "embedded engine" in engine.name and "embedded engine" not in fused.name
    assert MeasuredCostModel.from_dict(engine.to_dict()).engine
    bandwidth = achievable("H100-80GB").bandwidth_gbs * 1e9
    # the engine's elementwise bytes a token and layer, from its code (engine_elementwise_bytes' list): H = Q = 128,
    # K = 2 x 32 = 64, I = 256, d = 32: 30 x 128 + 14 x 128 + 22 x 64 + 5 x 256 + 2 x 32 = 8,384 bf16 elements,
    # 16,768 bytes
    engine_elementwise = 16768 / bandwidth
    # 4 prompts of 16 tokens: 544 pairs, 136 a prompt, isl 16; GEMMs at 64 tokens 36 us a layer, the LM head at
    # 4 rows 4 us
    prefill = Shape(rows=4, tokens=64, context=64, pairs=4 * 136, prefilling=True)
    assert fused.seconds(prefill) == pytest.approx(2 * (36e-6 + 3e-6 + elementwise_s(64)) + 4e-6, rel=1e-6)
    assert engine.seconds(prefill) == pytest.approx(2 * (36e-6 + 3e-6 + 64 * engine_elementwise) + 4e-6, rel=1e-6)
    # 4 new prompts of 15, 15, 17 and 17 tokens: 120 + 120 + 153 + 153 = 546 pairs, more than the 544 of four
    # 16-token prompts, so not one length: one padded call of 4 rows at the length n whose n (n + 1) / 2 is
    # 546 / 4 = 136.5, n = (sqrt(1093) - 1) / 2 = 16.030. The table's batch-4 curve, read in log-log between 3 us at
    # 16 and 1,024 us at 256, grows as the length to the power ln(1024 / 3) / ln(16) = 5.8329 / 2.7726 = 2.1038
    uneven = Shape(rows=4, tokens=64, context=64, pairs=546, prefilling=True)
    n = (math.sqrt(1093) - 1) / 2
    assert n == pytest.approx(16.030, abs=1e-3)
    assert engine.seconds(uneven) == pytest.approx(2 * (36e-6 + 3e-6 * (n / 16) ** 2.1038 + 64 * engine_elementwise)
                                                   + 4e-6, rel=1e-4)
    # 4 chunks of 16 after 8 cached positions each (context 96): one padded call, at 16 x 8 + 136 = 264 pairs a
    # chunk, n = 22.49
    cached = Shape(rows=4, tokens=64, context=96, pairs=4 * 264, prefilling=True)
    n = (math.sqrt(1 + 8 * 264) - 1) / 2
    assert engine.seconds(cached) == pytest.approx(2 * (36e-6 + 3e-6 * (n / 16) ** 2.1038 + 64 * engine_elementwise)
                                                   + 4e-6, rel=1e-4)
    # a decode step has no prompt chunk: only its elementwise bytes differ (one row: 9 us of GEMMs, 4 us of
    # generation attention at KV 64, the LM head 4 us)
    decode = Shape(rows=1, tokens=1, context=64, pairs=64, prefilling=False)
    assert engine.seconds(decode) == pytest.approx(2 * (9e-6 + 4e-6 + engine_elementwise) + 4e-6, rel=1e-9)


def test_the_engines_compiled_decode_sizes_take_the_compiled_gemms_and_nothing_else(tmp_path: Path) -> None:
    # profile-gpu's compiled table: at one row QKV 1 us, O 0.5 us, gate/up 2 us, down 1 us (4.5 us a layer, where
    # the tiny gemm table's F.linear gives 2 + 1 + 4 + 2 = 9 us); at two rows every projection but the down one;
    # and an fp8 row the bf16 model does not read
    tables = write_tables(tmp_path)
    common = {"framework": "tgi_toolkit", "version": "test", "device": "test card", "op_name": "gemm",
              "kernel_source": "torch.compile (inductor)"}
    rows = [(1, 256, 128, 0.001), (1, 128, 128, 0.0005), (1, 512, 128, 0.002), (1, 128, 256, 0.001),
            (2, 256, 128, 0.001), (2, 128, 128, 0.0005), (2, 512, 128, 0.002)]
    compiled = [{**common, "gemm_dtype": "bfloat16", "m": m, "n": n, "k": k, "latency": ms} for m, n, k, ms in rows]
    compiled.append({**common, "gemm_dtype": "fp8", "m": 4, "n": 256, "k": 128, "latency": 1e-6})
    pd.DataFrame(compiled).to_parquet(tables / "compiled_gemm_perf.parquet")
    eager = gpu_cost_model("H100", TINY, cost_model="measured", kernel_times=tables, server="vllm-v1", engine=True,
                           **NO_HOST)
    sized = gpu_cost_model("H100", TINY, cost_model="measured", kernel_times=tables, server="vllm-v1", engine=True,
                           compile_sizes=(1, 2, 4), **NO_HOST)
    framework = gpu_cost_model("H100", TINY, cost_model="measured", kernel_times=tables, server="vllm-v1",
                               compile_sizes=(1,), **NO_HOST)
    one = Shape(rows=1, tokens=1, context=64, pairs=64, prefilling=False)
    # one row: 2 layers x (9 - 4.5) us less
    assert eager.seconds(one) - sized.seconds(one) == pytest.approx(9e-6, rel=1e-9)
    # two rows lack the down projection's compiled time, four rows any bf16 one: priced as the eager step
    for rows_ in (2, 4):
        step = Shape(rows=rows_, tokens=rows_, context=64 * rows_, pairs=64 * rows_, prefilling=False,
                     decode_rows=rows_, decode_context=64 * rows_)
        assert sized.seconds(step) == eager.seconds(step)
    # a one-token prompt is a prefill (the graphs replay decode steps only), and a framework has no compiled layers
    prompt = Shape(rows=1, tokens=1, context=1, pairs=1, prefilling=True)
    assert sized.seconds(prompt) == eager.seconds(prompt)
    assert framework.seconds(one) == MeasuredCostModel("H100", TINY, server="vllm-v1", kernel_times=str(tables),
                                                       **NO_HOST).seconds(one)
    assert sized.priced_by()["measured"]["compiled_gemm"].endswith("(decode rows 1)")
    assert "compiled_gemm" not in eager.priced_by()["measured"] and "compiled" not in eager.priced_by()
    assert MeasuredCostModel.from_dict(sized.to_dict()).seconds(one) == sized.seconds(one)
    # compile sizes with no compiled table: priced by F.linear's times, and said so
    (tables / "compiled_gemm_perf.parquet").unlink()
    bare = gpu_cost_model("H100", TINY, cost_model="measured", kernel_times=tables, server="vllm-v1", engine=True,
                          compile_sizes=(1,), **NO_HOST)
    assert bare.seconds(one) == eager.seconds(one)
    assert "no compiled_gemm_perf table" in bare.priced_by()["compiled"]


def test_the_engines_host_issues_its_calls_beside_its_kernels_or_before_its_graph(tmp_path: Path) -> None:
    """A host that takes 1 us a torch call and 10 us to launch a graph, and an engine whose rule (EngineCalls) says a
    one-row prompt forward makes 20 + 70 calls a layer, each further row 1, prompts padded into one call 5 + 10 a
    layer, decode rows beside prompts 3 + 10 a layer, and a decode step 15. Two layers, no other host time."""
    from tgi_toolkit.costs.engine_forward import EngineCalls

    tables = write_tables(tmp_path)
    common = {"framework": "tgi_toolkit", "version": "test", "device": "test card"}
    pd.DataFrame([{**common, "op_name": "torch_call", "calls": 400, "latency": 0.001},
                  {**common, "op_name": "graph_replay", "calls": 400, "latency": 0.010}]).to_parquet(
        tables / "host_perf.parquet")
    rule = EngineCalls(base=20, per_layer=70, per_row=1, padded=5, padded_layer=10, beside_decode=3,
                       beside_decode_layer=10, decode_step=15)
    host = gpu_cost_model("H100", TINY, cost_model="measured", kernel_times=tables, server="vllm-v1", engine=True,
                          host_calls=rule, **NO_HOST)
    plain = gpu_cost_model("H100", TINY, cost_model="measured", kernel_times=tables, server="vllm-v1", engine=True,
                           **NO_HOST)
    # one 16-token prompt: 20 + 2 x 70 = 160 calls, 160 us, past its kernels (2 x (9 + 2 us + elementwise) + 4 us)
    prompt = Shape(rows=1, tokens=16, context=16, pairs=136, prefilling=True)
    assert plain.seconds(prompt) < 160e-6
    assert host.seconds(prompt) == pytest.approx(160e-6, rel=1e-9)
    # four new 16-token prompts beside a decode row at KV 64: one attention call; 160 + 4 rows + 3 + 2 x 10 = 187
    mixed = Shape(rows=5, tokens=65, context=128, pairs=4 * 136 + 64, prefilling=True, decode_rows=1,
                  decode_context=64)
    assert host.seconds(mixed) == pytest.approx(max(187e-6, plain.seconds(mixed)), rel=1e-9)
    assert host.seconds(mixed) == pytest.approx(187e-6, rel=1e-9)
    # four prompts of 15, 15, 17 and 17 tokens: padded into one call, 160 + 3 rows + 5 + 2 x 10 = 188 calls
    uneven = Shape(rows=4, tokens=64, context=64, pairs=546, prefilling=True)
    assert host.seconds(uneven) == pytest.approx(188e-6, rel=1e-9)
    # 4 prompts of 256 tokens: 1,024 tokens, GEMMs of 64 x 9 = 576 us a layer: the kernels outlast the 163 calls
    long = Shape(rows=4, tokens=1024, context=1024, pairs=4 * 256 * 257 / 2, prefilling=True)
    assert plain.seconds(long) > 163e-6 and host.seconds(long) == plain.seconds(long)
    # a decode step: its kernels, then its 15 calls and the graph's launch, the card idle meanwhile
    one = Shape(rows=1, tokens=1, context=64, pairs=64, prefilling=False)
    assert host.seconds(one) == pytest.approx(plain.seconds(one) + 15e-6 + 10e-6, rel=1e-9)
    assert host.priced_by()["measured"]["host"].endswith("1.00 us a torch call x the engine's calls")
    assert "host" not in plain.priced_by()["measured"]
    assert MeasuredCostModel.from_dict(host.to_dict()).seconds(uneven) == host.seconds(uneven)
    # the engine's front end, in its process, holds up the forwards it falls in: kept through the model's file
    front = gpu_cost_model("H100", TINY, cost_model="measured", kernel_times=tables, server="vllm-v1", engine=True,
                           host_calls=rule, frontend_s=7e-4, frontend_stalls_forwards=True, **NO_HOST)
    again = MeasuredCostModel.from_dict(front.to_dict())
    assert (again.frontend_s, again.frontend_stalls_forwards) == (7e-4, True) and not host.frontend_stalls_forwards


def test_provenance_names_the_tables_and_what_the_roofline_priced(tiny: MeasuredCostModel) -> None:
    p = tiny.priced_by()
    assert set(p["measured"]) == {"gemm", "lm_head", "context_attention", "generation_attention"}
    assert p["roofline"] == ["elementwise"]
    assert "measured by profile-gpu" in tiny.provenance() and "roofline: elementwise" in tiny.provenance()
    assert tiny.describe()["kind"] == "measured"


def test_curves_past_the_grid_scale_in_proportion_and_below_it_keep_the_floor() -> None:
    c = Curve.of([1, 16, 256], [1e-6, 1e-6, 16e-6])
    assert c(512) == pytest.approx(32e-6) and c(0.5) == pytest.approx(1e-6) and c.beyond(512)


def test_kernel_times_that_are_not_a_folder_are_refused_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kernel_times"):
        KernelTables.from_dir(tmp_path / "missing")
    with pytest.raises(ValueError, match="kernel_times: .* holds none of"):
        KernelTables.from_dir(tmp_path)


def test_nearest_version_reads_the_release_closest_to_the_server() -> None:
    assert nearest_version(["0.14.0", "0.24.0"], "0.15.1") == "0.14.0"
    assert nearest_version(["0.14.0", "0.24.0"], "0.22.0") == "0.24.0"
    assert nearest_version(["0.14.0", "0.24.0"], None) == "0.24.0"
    assert nearest_version(["0.14.0", "0.24.0"], "nightly 2025-06-26") == "0.24.0"


# -- the real operator database --------------------------------------------------------------------------------

LLAMA_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
            "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 128256,
            "max_position_embeddings": 131072, "tie_word_embeddings": False, "hidden_act": "silu",
            "rms_norm_eps": 1e-5, "_name_or_path": "meta-llama/Llama-3.1-8B"}


def test_the_database_is_read_in_place_in_its_own_units() -> None:
    # Llama-3.1-8B's O projection (4,096 x 4,096) is a measured shape on the H100: one token's GEMM is the
    # table's row for m = 1, in milliseconds, as seconds
    table = pd.read_parquet(database_root() / "h100_sxm" / "gemm" / "vllm" / "0.24.0" / "gemm_perf.parquet")
    row = table[(table.gemm_dtype == "bfloat16") & (table.m == 1) & (table.n == 4096) & (table.k == 4096)]
    cost = MeasuredCostModel("H100", LLAMA_8B, server="vllm-v1")
    assert cost.gemms[1](1) == pytest.approx(row.latency.min() / 1e3, rel=1e-12)
    assert cost.provenance().startswith("measured: h100_sxm, vllm 0.24.0: gemm, lm_head, context_attention, "
                                        "generation_attention")


def test_cards_and_servers_the_database_lacks_fall_back_to_the_roofline_and_say_why() -> None:
    assert type(gpu_cost_model("A10G", LLAMA_8B, server="vllm-v1")).__name__ == "RooflineCostModel"
    with pytest.raises(ValueError, match="cost_model: the operator database has no kernel times for A10G"):
        gpu_cost_model("A10G", LLAMA_8B, server="vllm-v1", cost_model="measured")
    eager = MeasuredCostModel("H100", LLAMA_8B, server="tgi-1")
    assert not eager.priced and "tgi-1" in eager.priced_by()["why"]
    decode = Shape(rows=1, tokens=1, context=100, pairs=100, prefilling=False)
    assert eager.kernel_seconds(decode) == gpu_cost_model("H100", LLAMA_8B, server="tgi-1",
                                                          cost_model="roofline").kernel_seconds(decode)
    awq = MeasuredCostModel("H100", LLAMA_8B, server="vllm-v1", quantize="awq")
    assert "gemm" in awq.priced_by()["roofline"] and "awq" in awq.priced_by()["why"]


def test_mixtral_is_priced_from_the_moe_table() -> None:
    mixtral = {**LLAMA_8B, "num_local_experts": 8, "num_experts_per_tok": 2, "model_type": "mixtral",
               "_name_or_path": "mistralai/Mixtral-8x7B-v0.1"}
    cost = MeasuredCostModel("H100", mixtral, server="vllm-v1", num_shard=2)
    assert "moe" in cost.priced_by()["measured"] and "allreduce" in cost.priced_by()["measured"]
    one, many = (cost.kernel_seconds(Shape(r, r, 100 * r, 100 * r, False)) for r in (1, 64))
    assert 0 < one < many


@pytest.mark.slow
def test_simulate_prices_a_gpu_from_measured_kernels_and_says_so(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    import json

    config.write_text(json.dumps(LLAMA_8B))
    cmd = [sys.executable, "-m", "tgi_toolkit.cli", "simulate", "concurrency", "--gpu", "H100", "--model",
           str(config), "--server", "vllm-v1", "-u", "4", "--prompt-tokens", "256", "--max-new-tokens", "32",
           "--requests", "8"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "priced by: measured: h100_sxm, vllm 0.24.0" in out.stdout
    refused = subprocess.run([*cmd[:6], "A10G", *cmd[7:], "--cost-model", "measured"], capture_output=True,
                             text=True, timeout=300)
    assert refused.returncode == 2 and refused.stderr.startswith("error: --cost-model: the operator database")
    tables = write_tables(tmp_path)
    tiny = tmp_path / "tiny.json"
    tiny.write_text(json.dumps(TINY))
    own = subprocess.run([*cmd[:8], str(tiny), *cmd[9:], "--kernel-times", str(tables)], capture_output=True,
                         text=True, timeout=300)
    assert own.returncode == 0, own.stderr
    assert "measured by profile-gpu" in own.stdout


def test_the_engines_elementwise_bytes_are_what_its_own_forward_moves() -> None:
    """engine_elementwise_bytes against the engine's prompt forward itself (engine/runner.py, on a CPU in bf16): the
    bytes every non-matmul op reads and writes, per token and layer (the difference between 96 and 32 tokens, and
    between 4 and 2 layers, leaves out what a forward does once: the embedding, the final norm, the LM head). A
    view moves nothing; a copy into a tensor reads its source and writes as much."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    from transformers import LlamaConfig, LlamaForCausalLM

    from tgi_toolkit.costs.engine_forward import engine_elementwise_bytes
    from tgi_toolkit.engine.runner import LlamaRunner
    from tgi_toolkit.planner.shape import ModelShape

    priced_apart = {"mm", "addmm", "linear", "_linear_pointwise", "scaled_dot_product_attention",
                    "_scaled_dot_product_flash_attention_for_cpu", "new_empty", "empty"}

    class Moved(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.bytes = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            out = func(*args, **(kwargs or {}))
            ins = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and t.is_floating_point()]
            outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
            name = func.overloadpacket.__name__
            if name in priced_apart or not ins:
                return out
            if name in ("copy_", "index_put_"):
                self.bytes += 2 * sum(t.numel() * t.element_size() for t in ins[1:])
            elif not any(o.untyped_storage().data_ptr() == t.untyped_storage().data_ptr() for o in outs for t in ins):
                self.bytes += sum(t.numel() * t.element_size() for t in ins + outs)
            return out

    shape = {"hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
             "vocab_size": 512, "max_position_embeddings": 512}

    def moved(layers: int, tokens: int) -> int:
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=layers, **shape)).to(torch.bfloat16).eval()
        runner = LlamaRunner(model, max_rows=1, max_positions=128)
        runner.enable_pool(128)  # the server's prompts store their keys and values in the prefix pool
        seq = runner.new_seq()
        with torch.inference_mode(), Moved() as counted:
            runner.forward([(seq, list(range(1, tokens + 1)))], None, [list(range(tokens))], [True])
        return counted.bytes

    per_token_layer = (moved(4, 96) - moved(4, 32) - moved(2, 96) + moved(2, 32)) / 64 / 2
    rule = engine_elementwise_bytes(ModelShape.from_config({"model_type": "llama", "num_hidden_layers": 2, **shape}))
    assert rule == 16768  # worked by hand in the test above
    assert per_token_layer == rule
