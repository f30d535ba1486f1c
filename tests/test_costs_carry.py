"""Kernel times carried from one card to another by the datasheets (tgi_toolkit.costs.kernel_carry).

The expected ratios are worked by hand from each row's shape and the two cards' achievable figures in
costs/hardware.py: H200 794.5 TFLOP/s and 4,180 GB/s, H100-80GB 794.5 TFLOP/s and 2,970 GB/s (Bekman's matmul
table and Azure's BabelStream triad), A100-80GB 271.2 TFLOP/s and 1,700 GB/s, with no FP8 tensor cores."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tgi_toolkit.costs.kernel_carry import carried_to, carry, table_card
from tgi_toolkit.costs.kernel_tables import KernelTables
from tgi_toolkit.costs.measured import gpu_cost_model

H200_PROBE = Path(__file__).resolve().parents[1] / "data" / "measured" / "gpu" / "h200-2026-11-28"
BANDWIDTH_RATIO = 4180 / 2970  # a memory-bound kernel's H100 time over its H200 time


def gemm_rows(device: str = "NVIDIA H200") -> pd.DataFrame:
    return pd.DataFrame([{"device": device, "gemm_dtype": dtype, "m": m, "n": 4096, "k": 4096, "latency": 0.020}
                         for m, dtype in ((1, "bfloat16"), (256, "bfloat16"), (8192, "bfloat16"), (1, "fp8"))])


def attention_rows(op: str, **shape: int) -> pd.DataFrame:
    return pd.DataFrame([{"device": "NVIDIA H200", "batch_size": 1, "num_heads": 32, "num_key_value_heads": 8,
                          "head_dim": 128, "attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "latency": 0.5,
                          "op_name": op, **shape}])


def tables(**ops: pd.DataFrame) -> KernelTables:
    return KernelTables(ops, {op: f"{op} on the H200" for op in ops})


def test_each_gemm_moves_with_whatever_bounds_it_on_each_card() -> None:
    carried = carry(tables(gemm=gemm_rows()), "H200", "H100-80GB").tables["gemm"]
    by_m = {(r.m, r.gemm_dtype): r.latency for r in carried.itertuples()}
    # m = 1: 33,554,432 FLOPs, 33,570,816 bytes (the 4096 x 4096 weight and the row in, the row out, 2 bytes each):
    # 8.03 us of reading on the H200 against 0.04 us of math; 11.30 us on the H100; the bandwidths' ratio
    assert by_m[1, "bfloat16"] == pytest.approx(0.020 * BANDWIDTH_RATIO, rel=1e-9)
    # m = 256: 8,589,934,592 FLOPs = 10.81 us on either card; 37,748,736 bytes = 9.03 us on the H200 (the math
    # bounds it) but 12.71 us on the H100 (the reading does): 12.710 / 10.812 = 1.1756
    assert by_m[256, "bfloat16"] == pytest.approx(0.020 * 1.17557, rel=1e-4)
    # m = 8192: 274,877,906,944 FLOPs = 346 us on either card, far above 167,772,160 bytes' 56 us: unchanged
    assert by_m[8192, "bfloat16"] == pytest.approx(0.020, rel=1e-9)
    # FP8 at one row reads half the weight bytes, still memory-bound on both
    assert by_m[1, "fp8"] == pytest.approx(0.020 * BANDWIDTH_RATIO, rel=1e-9)


def test_attention_moves_with_the_kv_read_in_decode_and_the_math_in_a_long_prompt() -> None:
    carried = carry(tables(generation_attention=attention_rows("generation_attention", isl=1, step=4096),
                           context_attention=attention_rows("context_attention", isl=4096, step=0)),
                    "H200", "H100-80GB")
    # one query against 4,096 cached tokens: 67,108,864 FLOPs against 16,793,600 bytes of keys and values: read-bound
    assert carried.tables["generation_attention"].latency.iloc[0] == pytest.approx(0.5 * BANDWIDTH_RATIO, rel=1e-9)
    # a 4,096-token causal prompt: 137,472,507,904 FLOPs (173 us) against 83,886,080 bytes (28 us on the H100)
    assert carried.tables["context_attention"].latency.iloc[0] == pytest.approx(0.5, rel=1e-9)


def test_a_card_without_fp8_loses_the_fp8_rows_and_the_host_table_is_kept() -> None:
    host = pd.DataFrame([{"device": "NVIDIA H200", "op_name": "torch_call", "latency": 0.004}])
    carried = carry(tables(gemm=gemm_rows(), host=host), "H200", "A100-80GB")
    gemm = carried.tables["gemm"]
    assert set(gemm.gemm_dtype) == {"bfloat16"} and len(gemm) == 3
    # m = 8192 is math-bound on both: 346 us on the H200, 1,013.6 us at the A100's 271.2 TFLOP/s
    assert gemm[gemm.m == 8192].latency.iloc[0] == pytest.approx(0.020 * 794.5 / 271.2, rel=1e-9)
    assert carried.tables["host"] is host
    assert carried.sources["gemm"] == "gemm on the H200, carried from H200 to A100-80GB by the datasheets"
    assert carried.sources["host"] == "host on the H200"


def test_only_another_gpus_tables_are_carried() -> None:
    same = tables(gemm=gemm_rows())
    assert table_card(same) == "H200" and carried_to(same, "H200") is same
    cpu = tables(gemm=gemm_rows(device="cpu"))
    assert table_card(cpu) is None and carried_to(cpu, "H100-80GB") is cpu
    assert table_card(tables(gemm=gemm_rows(device="NVIDIA H100 80GB HBM3"))) == "H100-80GB"


def test_a_cost_model_for_another_card_reads_the_carried_times_and_says_so() -> None:
    config = str(H200_PROBE / "model" / "config.json")
    kernels = str(H200_PROBE / "kernels")
    here = gpu_cost_model("H200", config, cost_model="measured", kernel_times=kernels, engine=True)
    there = gpu_cost_model("H100-80GB", config, cost_model="measured", kernel_times=kernels, engine=True)
    # the LM head at one row (128,256 x 4,096) is 0.268064 ms in the H200's table, a 1.05 GB weight read
    assert here.lm_head(1) == pytest.approx(0.268064e-3, rel=1e-6)
    assert there.lm_head(1) == pytest.approx(0.268064e-3 * BANDWIDTH_RATIO, rel=1e-6)
    assert "carried from H200 to H100-80GB by the datasheets" in there.provenance()
    assert "carried" not in here.provenance()
