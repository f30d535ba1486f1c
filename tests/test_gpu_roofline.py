"""The GPU roofline's arithmetic, server profiles, closed-form figures and transfer, against numbers worked by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from tgi_toolkit.costs.features import Shape
from tgi_toolkit.costs.roofline import roofline
from tgi_toolkit.costs.server_profiles import server_of
from tgi_toolkit.simulate.corpus import Figure
from tgi_toolkit.simulate.figures import simulated, steady

# A tiny Llama: per layer 4 x 1024^2 attention weights + 3 x 1024 x 4096 MLP weights + 2 x 1024 norm weights
# = 16,779,264; two layers and the final norm 33,559,552; embeddings and an untied lm_head 1,024,000 each.
# 35,607,552 parameters, 71,215,104 bytes in bf16. KV per token: 2 x 2 layers x 8 heads x 128 x 2 B = 8,192 B.
TINY = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 8,
        "num_key_value_heads": 8, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 4096,
        "tie_word_embeddings": False, "_name_or_path": "tiny"}
FACTORS = {"matmul_efficiency": 0.5, "attention_efficiency": 0.5, "bandwidth_efficiency": 0.5,
           "quantized_bandwidth_efficiency": 1.0, "link_efficiency": 0.5, "forward_overhead_s": 1e-3,
           "row_overhead_s": 10e-6, "host_token_s": 1e-6, "request_overhead_s": 0.0, "allreduce_latency_s": 20e-6}


def test_one_row_decode_on_an_a100_is_its_weight_read_plus_the_servers_host_time():
    cost = roofline("A100-80GB", TINY, **FACTORS)
    decode = Shape(rows=1, tokens=1, context=100, pairs=100, prefilling=False)
    # memory: (71,215,104 + 100 x 8,192) B / (1,700 GB/s x 0.5) = 84.7462 us, 1,700 GB/s being what Azure's
    # BabelStream triad measured on an A100 80GB (not the datasheet's 2,039); compute is far below it
    assert cost.kernel_seconds(decode) == pytest.approx(72_034_304 / (1700e9 * 0.5), rel=1e-6)
    # host: 1 ms a forward + 10 us a row + 1 us a token
    assert cost.host_seconds(decode) == pytest.approx(1e-3 + 10e-6 + 1e-6)
    assert cost.seconds(decode) == pytest.approx(84.7462e-6 + 1.011e-3, rel=1e-5)


def test_two_shards_halve_the_reads_and_add_two_all_reduces_a_layer():
    one = roofline("A100-80GB", TINY, **FACTORS)
    two = roofline("A100-80GB", TINY, num_shard=2, **FACTORS)
    decode = Shape(rows=1, tokens=1, context=100, pairs=100, prefilling=False)
    # all-reduces: 2 a layer x 2 layers x (20 us + 2 x (2-1)/2 x 2,048 B / (600 GB/s x 0.5)) = 80.0273 us
    allreduce = 4 * (20e-6 + 2048 / 300e9)
    assert two.kernel_seconds(decode) == pytest.approx(one.kernel_seconds(decode) / 2 + allreduce, rel=1e-9)
    assert two.host_seconds(decode) == one.host_seconds(decode)  # one CPU loop however many shards


def test_a_pcie_a100_is_its_own_card_and_its_shards_all_reduce_over_pcie():
    from tgi_toolkit.planner.gpus import resolve_gpu

    assert resolve_gpu("A100 80GB PCIe").name == "A100-80GB-PCIe" and resolve_gpu("A100").name == "A100-80GB"
    two = roofline("A100 80GB PCIe", TINY, num_shard=2, **FACTORS)
    decode = Shape(rows=1, tokens=1, context=100, pairs=100, prefilling=False)
    # nobody measured its copy speed: its datasheet's 1,935 GB/s x the measured NVIDIA cards' median fraction,
    # 4,180 / 4,800 = 0.87083 (H200; the others 1,700 / 2,039 = 0.83374 and 2,970 / 3,350 = 0.88657)
    read = 72_034_304 / (2 * 1935e9 * 4180 / 4800 * 0.5)
    # all-reduces over PCIe 4.0 x16, 64 GB/s, where the SXM board's NVLink gives 600:
    # 2 a layer x 2 layers x (20 us + 2 x (2-1)/2 x 2,048 B / (64 GB/s x 0.5))
    allreduce = 4 * (20e-6 + 2048 / 32e9)
    assert two.kernel_seconds(decode) == pytest.approx(read + allreduce, rel=1e-6)


def test_a_long_prefill_is_compute_bound_and_counts_attention_pairs():
    cost = roofline("A100-80GB", TINY, **FACTORS)
    n = 4096
    prefill = Shape(rows=1, tokens=n, context=n, pairs=n * (n + 1) / 2, prefilling=True)
    # weights: 2 x (33,559,552 x 4,096 + 1,024,000 x 1 emitting row) FLOP at 271.2 TFLOP/s (the BF16 matmul
    # measured on an A100 SXM in Bekman's table; the datasheet says 312) x 0.5
    # attention: 4 x 2 layers x 8 heads x 128 x 8,390,656 pairs at the same rate
    matmul = 2 * (33_559_552 * n + 1_024_000) / (271.2e12 * 0.5)
    attention = 4 * 2 * 8 * 128 * (n * (n + 1) / 2) / (271.2e12 * 0.5)
    assert cost.kernel_seconds(prefill) == pytest.approx(matmul + attention, rel=1e-6)


def test_an_mi300x_prefills_slower_than_an_h100_as_measured_though_its_datasheet_says_faster():
    n = 4096
    prefill = Shape(rows=1, tokens=n, context=n, pairs=n * (n + 1) / 2, prefilling=True)
    mi300x, h100 = roofline("MI300X", TINY, **FACTORS), roofline("H100-80GB", TINY, **FACTORS)
    # datasheets: 1,307 against 989 TFLOP/s (0.757x the time); measured BF16 matmuls (Bekman's table): 668.4
    # against 794.5 TFLOP/s, so 794.5 / 668.4 = 1.1887x the time
    assert mi300x.kernel_seconds(prefill) / h100.kernel_seconds(prefill) == pytest.approx(1.1887, rel=1e-4)


def test_a_card_no_microbenchmark_measured_gets_the_typical_fraction_of_its_datasheet():
    from tgi_toolkit.costs.hardware import achievable

    l4 = achievable("L4")
    # GEMM: the median of H100 794.5/989 = 0.80334 (twice: H200 is H100's) and A100 271.2/312 = 0.86923 (twice:
    # both A100s) is 0.83629, x 121 TFLOP/s = 101.19; copy: the median of 2,970/3,350 = 0.88657,
    # 4,180/4,800 = 0.87083 and 1,700/2,039 = 0.83374 is 0.87083, x 300 GB/s = 261.25
    assert l4.tflops == pytest.approx(101.19, rel=1e-4) and l4.bandwidth_gbs == pytest.approx(261.25, rel=1e-6)
    assert l4.measured == () and achievable("MI300X").measured == ("tflops", "bandwidth")


@pytest.mark.parametrize(("server", "version", "date", "profile"), [
    ("tgi", "1.0.3", "2023-09-26", "tgi-1"),
    ("tgi", "2.4.0", "", "tgi-2"),
    ("tgi", "3.0.1", "", "tgi-3"),
    ("tgi", "sha-11d7af7-rocm", "2024-10-08", "tgi-2"),  # a main-branch build before 3.0 (2024-12-10)
    ("tgi", "unknown", "2025-01-15", "tgi-3"),
    ("vllm", "0.6.3.post1", "", "vllm-v0.6"),
    ("vllm", "0.5.3", "", "vllm-v0"),
    ("vllm", "0.8.0", "", "vllm-v1"),  # V1 became the default in 0.8.0
    ("vllm", "nightly 2025-08-19", "2025-08-19", "vllm-v1"),
    ("vllm", "unknown", "2024-03-01", "vllm-v0"),
    ("vllm", "0.2.0", "", "vllm-eager"),  # every forward eager until CUDA graphs came in 0.2.7
    ("vllm", "0.2.7", "", "vllm-v0"),
    ("vllm", "unknown", "2023-09-01", "vllm-eager"),  # before PR #1926 was merged (2023-12-17)
    ("tensorrt-llm", "0.5.0", "", "tensorrt-llm"),
    ("other:sglang", "0.3.0", "", "sglang"),
])
def test_a_published_servers_version_or_date_picks_its_profile(server, version, date, profile):
    assert server_of(server, version, date) == profile


def test_an_unknown_server_or_profile_is_refused_with_the_allowed_values():
    with pytest.raises(ValueError, match="tgi, vllm, tensorrt-llm"):
        server_of("llama.cpp", "b1234")
    with pytest.raises(ValueError, match="tgi-3"):
        roofline("A100-80GB", TINY, server="tgi-9")


class Linear:
    """A stand-in forward price: 10 ms plus 1 ms a computed token."""

    request_overhead_s = frontend_s = jitter_cv = 0.0
    frontend_stalls_forwards = False
    name = "10 ms + 1 ms a token"

    def __init__(self, chunking: bool = False) -> None:
        self.profile = SimpleNamespace(chunking=chunking, waiting_served_ratio=None)

    def seconds(self, s: Shape) -> float:
        return 0.010 + 0.001 * s.tokens

    def server_defaults(self) -> dict:
        return {"max_batch_total_tokens": 100_000, "chunking": self.profile.chunking}

    def describe(self) -> dict:
        return {"kind": "stand-in"}


def fig(metric: str, prompt: int = 100, **workload) -> Figure:
    return Figure(id="x", source_id="s", source_url="", model_id="m", gpu="A100-80GB", num_gpus=1, server="tgi-3",
                  dtype="float16", quantize=None, batch_size=workload.get("batch_size"), users=workload.get("users"),
                  request_rate=workload.get("request_rate"), input_tokens=prompt, output_tokens=11, metric=metric,
                  value=1.0, regime="batched_decode")


def test_a_static_batch_prefills_together_then_decodes_side_by_side():
    cost = Linear()
    # prefill: 10 ms + 4 x 100 tokens = 410 ms; a decode step 10 + 4 = 14 ms; e2e 410 + 10 x 14 = 550 ms
    assert steady(fig("ttft_ms", batch_size=4), cost) == pytest.approx(410)
    assert steady(fig("tpot_ms", batch_size=4), cost) == pytest.approx(14)
    assert steady(fig("output_tok_s", batch_size=4), cost) == pytest.approx(4 * 11 / 0.55)


def test_a_served_burst_goes_through_the_router_where_a_static_batch_prefills_whole():
    cost = Linear()  # no chunking: a prompt is prefilled in a forward of its own
    burst, static = {"batch_size": 2, "request_rate": math.inf}, {"batch_size": 2}
    # static: one 6,000-token prefill, 10 + 6,000 = 6,010 ms, for both prompts
    assert simulated(fig("ttft_ms", 3000, **static), cost) == pytest.approx(6010)
    # burst: the router takes the first prompt alone (3,010 ms); the second waits for it, then its own
    # 3,010 ms forward (TTFT 6,020 ms), which stalls the first one's decode; median TTFT (3,010 + 6,020) / 2
    assert simulated(fig("ttft_ms", 3000, **burst), cost) == pytest.approx(4515)
    # then 10 steps of 12 ms each: both end at 6,020 + 120 = 6,140 ms; TPOTs (6,140 - 3,010) / 10 = 313 and 12 ms
    assert simulated(fig("e2e_s", 3000, **burst), cost) == pytest.approx(6.140)
    assert simulated(fig("tpot_ms", 3000, **burst), cost) == pytest.approx((313 + 12) / 2)


def test_one_user_is_never_stalled_by_its_own_prompt():
    cost = Linear()
    # prefill 10 + 100 = 110 ms, then 10 steps of 11 ms: e2e 220 ms
    assert steady(fig("ttft_ms", users=1), cost) == pytest.approx(110)
    assert steady(fig("e2e_s", users=1), cost) == pytest.approx(0.220)


def test_two_users_out_of_phase_stall_each_other_once_a_request():
    cost = Linear()
    # step 12 ms; the other user's prompt (110 ms alone) arrives once per latency E:
    # TTFT = 12/2 x 1/2 + 110 = 113 ms; E = 0.113 + 10 x 0.012 / (1 - 0.110 / E)
    # => E^2 - 0.343 E + 0.01243 = 0 => E = (0.343 + sqrt(0.067929)) / 2 = 0.3018160 s
    e2e = (0.343 + math.sqrt(0.343 ** 2 - 4 * 0.01243)) / 2
    assert steady(fig("ttft_ms", users=2), cost) == pytest.approx(113)
    assert steady(fig("e2e_s", users=2), cost) == pytest.approx(e2e, rel=1e-6)
    assert steady(fig("tpot_ms", users=2), cost) == pytest.approx(12 / (1 - 0.110 / e2e), rel=1e-6)


def test_an_open_loop_rate_beyond_the_prefill_capacity_is_nan():
    cost = Linear()
    # each prompt holds the server 110 ms alone: 10 requests a second would need 110 % of its time
    assert math.isnan(steady(fig("tpot_ms", request_rate=10.0), cost))
    assert steady(fig("output_tok_s", request_rate=2.0), cost) == pytest.approx(22)  # all served: 2 x 11


def test_a_chunking_server_pays_only_the_prompts_own_tokens_in_a_mixed_forward():
    cost = Linear(chunking=True)
    # two users: a decode step 12 ms; a prompt joining it makes a 10 + 2 + 100 = 112 ms forward, 100 ms extra;
    # TTFT = 12/2 x 1/2 + 112 = 115 ms
    assert steady(fig("ttft_ms", users=2), cost) == pytest.approx(115)


def test_a_profile_carried_to_another_card_keeps_its_host_time_and_scales_its_kernels():
    from tgi_toolkit.costs.linear import LinearCostModel
    from tgi_toolkit.costs.transfer import transfer

    measured = LinearCostModel(forward_s=0.004, context_token_s=1e-8, request_overhead_s=0.02)
    moved = transfer(measured, measured_on="A100-80GB", gpu="H100-80GB", model=TINY)
    a100 = roofline("A100-80GB", TINY)
    h100 = roofline("H100-80GB", TINY)
    decode = Shape(rows=1, tokens=1, context=100, pairs=100, prefilling=False)
    t_a = 0.004 + 100 * 1e-8
    host = min(t_a, a100.host_seconds(decode))
    expected = host + (t_a - host) * h100.kernel_seconds(decode) / a100.kernel_seconds(decode)
    assert moved.seconds(decode) == pytest.approx(expected)
    # decode reads weights: at the H100's 2,970 GB/s against the A100's 1,700 (both measured by BabelStream)
    assert h100.kernel_seconds(decode) / a100.kernel_seconds(decode) == pytest.approx(1700 / 2970, rel=1e-6)
    assert moved.request_overhead_s == 0.02  # the front end is the server's, whatever the card
    assert moved.server_defaults()["max_batch_total_tokens"] == h100.server_defaults()["max_batch_total_tokens"]
