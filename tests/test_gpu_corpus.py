"""The published GPU figures (data/reference/gpu_figures.csv), the fit written from them (gpu_fit.json), and
the uncertainty every GPU prediction reads from it."""

from __future__ import annotations

import csv
from collections import Counter

import pytest

from tgi_toolkit.costs.roofline import KERNEL_BOUNDS, roofline
from tgi_toolkit.costs.server_profiles import HOST_BOUNDS
from tgi_toolkit.costs.uncertainty import REGIMES, Uncertainty, load_fit, regime_of, uncertainty
from tgi_toolkit.simulate.corpus import (
    FIGURES_FILE,
    corpus_dir,
    corpus_sha256,
    figure_from_row,
    load_figures,
    load_models,
)

LLAMA3_8B = "tests/data/configs/llama-3-8b.json"


@pytest.fixture(scope="module")
def figures():
    return load_figures()


def test_the_corpus_covers_what_the_issue_asks(figures):
    assert len(figures) >= 40
    assert len({f.source_id for f in figures}) >= 8
    assert len({f.gpu for f in figures}) >= 4
    servers = {f.server.split("-")[0] for f in figures}
    assert {"tgi", "vllm"} <= servers
    regimes = Counter(f.regime for f in figures)
    assert all(regimes[r] >= 2 for r in REGIMES), regimes
    assert any(f.num_gpus >= 8 for f in figures)
    assert any(f.quantize for f in figures)
    assert any(f.input_tokens >= 2048 and f.metric in ("ttft_ms", "prefill_ms") for f in figures)


def test_every_figure_says_where_it_came_from_and_every_model_has_its_shape(figures):
    with open(corpus_dir() / FIGURES_FILE, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        assert r["source_url"].startswith("http") and r["quote"] and r["source_date"][:2] == "20", r["id"]
    models = load_models()
    for f in figures:
        assert f.model_id in models, f.id
        roofline(f.gpu, models[f.model_id], num_shard=f.num_gpus, quantize=f.quantize, server=f.server)


def test_a_row_with_a_bad_field_is_refused_naming_the_row_and_the_allowed_values():
    with open(corpus_dir() / FIGURES_FILE, newline="", encoding="utf-8") as fh:
        row = next(csv.DictReader(fh))
    with pytest.raises(ValueError, match=rf"{row['id']}: metric 'tokens_per_watt' is not one of .*tpot_ms"):
        figure_from_row({**row, "metric": "tokens_per_watt"})
    with pytest.raises(ValueError, match=rf"{row['id']}: request_rate inf .* needs batch_size"):
        figure_from_row({**row, "batch_size": "", "users": "", "request_rate": "inf"})
    with pytest.raises(ValueError, match="value must be a positive number"):
        figure_from_row({**row, "value": "-3"})
    with pytest.raises(ValueError, match="server 'llama.cpp' has no profile"):
        figure_from_row({**row, "server": "llama.cpp"})


def test_the_fit_file_is_the_fit_of_this_corpus_and_stays_inside_the_physical_bounds():
    fit = load_fit()
    assert fit["corpus_sha256"] == corpus_sha256(), "re-run benchmarks/gpu_accuracy.py: the corpus changed"
    for name, (low, high) in KERNEL_BOUNDS.items():
        assert low * 0.999 <= fit["factors"][name] <= high * 1.001, name
    for server, terms in fit["servers"].items():
        for name, (low, high) in HOST_BOUNDS.items():
            assert low * 0.999 <= terms[name] <= high * 1.001, (server, name)
    by_regime = fit["cross_validated"]["by_regime"]
    assert set(REGIMES) <= set(by_regime)
    assert fit["cross_validated"]["method"].startswith("leave one source out")


def test_a_prediction_carries_its_regimes_held_out_error():
    fit = load_fit()
    h100 = roofline("H100-80GB", LLAMA3_8B, server="vllm-v1")
    tpot = uncertainty(h100, "tpot", rows=16)
    stats = fit["cross_validated"]["by_regime"]["batched_decode"]
    assert "batched_decode" not in fit["test_set"]["by_regime"]  # the test set has no batched-decode figure
    assert tpot.regime == "batched_decode" and tpot.covered
    assert tpot.error == stats["p80_error"] and tpot.figures == stats["figures"]
    assert tpot.label().startswith(f"±{100 * stats['p80_error']:.0f} % (at least 80 % of {stats['figures']} held-out")
    # where the test set has figures of the regime, the worse of the two checks is the one stated
    loso, test = fit["cross_validated"]["by_regime"]["prefill"], fit["test_set"]["by_regime"]["prefill"]
    ttft = uncertainty(h100, "ttft")
    assert ttft.error == max(loso["p80_error"], test["p80_error"])
    assert ttft.figures == loso["figures"] + test["figures"]
    assert uncertainty(roofline("H100-80GB", LLAMA3_8B, num_shard=2), "ttft").regime == "tensor_parallel"
    low, high = tpot.band(10.0)
    assert low == pytest.approx(10 * (1 - tpot.error)) and high == pytest.approx(10 * (1 + tpot.error))


def test_a_prediction_outside_the_corpus_says_so():
    # the default server: without a published TGI 3 figure its host terms are the prior's, and it says so
    tgi3 = uncertainty(roofline("H100-80GB", LLAMA3_8B), "tpot")
    measured = "tgi-3" in load_fit()["coverage"]["servers"]
    assert tgi3.covered == measured and ("no published figure of tgi-3" in tgi3.note) != measured
    t4 = uncertainty(roofline("T4", LLAMA3_8B, dtype="float16"), "tpot")
    assert not t4.covered and "no published figure on T4 nor a measured matmul or copy speed" in t4.note
    assert "outside the published corpus" in t4.label()
    tiny = uncertainty(roofline("H100-80GB", "tests/data/configs/smollm2-135m.json"), "ttft")
    assert not tiny.covered and "0.1B-parameter model" in tiny.note


def test_a_calibrated_profile_is_not_given_the_gpu_corpus_error():
    from tgi_toolkit.simulate import LinearCostModel

    u = uncertainty(LinearCostModel(forward_s=0.02), "tpot", rows=4)
    assert u.error is None and not u.covered and "calibrated profile" in u.label()


def test_without_a_fit_file_the_error_is_unknown_and_says_how_to_get_one():
    u = uncertainty(roofline("H100-80GB", LLAMA3_8B), "tpot", fit={})
    assert u == Uncertainty("batch1_decode", None, None, 0, False, u.note)
    assert "benchmarks/gpu_accuracy.py" in u.label()


@pytest.mark.parametrize(("metric", "rows", "shards", "regime"), [
    ("ttft", 8, 1, "prefill"), ("tpot", 1, 1, "batch1_decode"), ("tpot", 2, 1, "batched_decode"),
    ("throughput", 32, 1, "batched_decode"), ("tpot", 1, 4, "tensor_parallel")])
def test_the_regime_of_a_prediction(metric, rows, shards, regime):
    assert regime_of(metric, rows=rows, num_shard=shards) == regime


def test_the_cli_prints_each_metrics_held_out_error_and_refuses_an_unknown_server(capsys):
    from tgi_toolkit.cli import main
    from tgi_toolkit.costs.measured import gpu_cost_model

    args = ["simulate", "concurrency", "--gpu", "H100", "--model", LLAMA3_8B, "-u", "8", "--prompt-tokens", "256",
            "--max-new-tokens", "16", "--requests", "8"]
    assert main([*args, "--server", "vllm-v1", "--cost-model", "roofline"]) == 0
    out = capsys.readouterr().out
    decode = uncertainty(roofline("H100", LLAMA3_8B, server="vllm-v1"), "tpot", rows=8)
    prefill = uncertainty(roofline("H100", LLAMA3_8B, server="vllm-v1"), "ttft")
    assert f"TPOT: ±{100 * decode.error:.0f} % (at least 80 % of {decode.figures} held-out" in out
    assert f"TTFT: ±{100 * prefill.error:.0f} % (at least 80 % of {prefill.figures} held-out" in out
    assert "vLLM V1" in out
    # the default on an H100 sums measured kernel times, and carries that model's own held-out record
    assert main([*args, "--server", "vllm-v1"]) == 0
    out = capsys.readouterr().out
    measured = uncertainty(gpu_cost_model("H100", LLAMA3_8B, server="vllm-v1"), "tpot", rows=8)
    assert measured.figures != decode.figures or measured.error != decode.error
    assert f"TPOT: ±{100 * measured.error:.0f} % (at least 80 % of {measured.figures} held-out" in out
    assert "priced by: measured: h100_sxm" in out
    assert main([*args, "--server", "tgi-9"]) == 2
    assert "--server: 'tgi-9' is not a server profile (allowed: tgi-3" in capsys.readouterr().err


def test_a_measured_profile_carried_to_another_card_through_the_cli(tmp_path, capsys):
    from tgi_toolkit.cli import main
    from tgi_toolkit.costs.linear import LinearCostModel

    profile = LinearCostModel(forward_s=0.012, token_s=2e-5, context_token_s=1e-8, request_overhead_s=0.01,
                              name="measured on an A10G").save(tmp_path / "cost.json")
    args = ["simulate", "concurrency", "--cost-model", str(profile), "-u", "4", "--prompt-tokens", "128",
            "--max-new-tokens", "16", "--requests", "8"]
    assert main([*args, "--gpu", "H100"]) == 2  # which card was it measured on?
    assert "--measured-on GPU" in capsys.readouterr().err
    assert main([*args, "--measured-on", "A10G", "--gpu", "H100", "--model", LLAMA3_8B]) == 0
    assert "measured on an A10G on A10G, carried to H100-80GB" in capsys.readouterr().out


def test_a_simulated_gpu_run_carries_its_error_into_the_points_and_the_model_card():
    from tgi_toolkit.bench.card_metrics import generation_speed
    from tgi_toolkit.simulate import LinearCostModel, run_concurrency

    gpu = run_concurrency(roofline("H100", LLAMA3_8B, server="vllm-v1"), users=[10], prompt_tokens=1024,
                          max_new_tokens=128, requests=20)
    decode = uncertainty(roofline("H100", LLAMA3_8B, server="vllm-v1"), "tpot", rows=10).error
    assert gpu.points["tpot_prediction_error"].iloc[0] == pytest.approx(decode)
    assert f"±{100 * decode:.0f} % (cross-validated on published GPU figures" in generation_speed(gpu).basis
    # a calibrated profile of this machine is judged on this machine, not against published GPU figures
    cpu = run_concurrency(LinearCostModel(forward_s=0.02, token_s=1e-4, source={"server": {
        "max_batch_total_tokens": 50_000}}), users=[10], prompt_tokens=1024, max_new_tokens=128, requests=20)
    assert cpu.points["tpot_prediction_error"].isna().all()
    assert "cross-validated" not in generation_speed(cpu).basis
