"""advise: the arithmetic worked by hand (replicas, cost per hour and per million tokens, ties, refusals), the
capacity search on a load whose answer is known, and the whole search on the simulator through the CLI."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tgi_toolkit.advise.candidates import Candidate, enumerate_candidates, refusal
from tgi_toolkit.advise.capacity import Probes, band, sustained
from tgi_toolkit.advise.evaluate import per_replica_load, replicas
from tgi_toolkit.advise.prices import load_prices
from tgi_toolkit.advise.ranking import COST, cost_per_hour, cost_per_million, tie_with_first
from tgi_toolkit.advise.traffic import Traffic, load_lengths, objectives
from tgi_toolkit.planner.shape import load_config

CONFIGS = Path(__file__).parent / "data" / "configs"
LLAMA3 = CONFIGS / "llama-3-8b.json"
ROOT = Path(__file__).resolve().parents[1]


# -- the arithmetic, by hand ------------------------------------------------------------------------
def test_the_package_and_its_function_are_two_names():
    # `tgi_toolkit.advise` is the package, `tgi_toolkit.advise.advise` the function (as tune.tune): the package
    # is not callable, and the top-level package does not re-export the function under the package's name.
    import types

    import tgi_toolkit
    import tgi_toolkit.advise
    from tgi_toolkit.advise.api import advise

    assert isinstance(tgi_toolkit.advise, types.ModuleType) and not callable(tgi_toolkit.advise)
    assert tgi_toolkit.advise.advise is advise and "advise" not in tgi_toolkit.__all__


def test_replicas_round_up_and_ignore_float_noise():
    assert replicas(20, 3.2) == 7  # 20 / 3.2 = 6.25 -> 7 replicas
    assert replicas(20, 4.0) == 5  # exactly 5: no sixth replica
    assert replicas(0.1 * 3, 0.1) == 3  # 0.30000000000000004 / 0.1 = 3.0000000000000004: still 3
    assert replicas(0.5, 3.0) == 1  # less than one replica's load still needs one
    with pytest.raises(ValueError, match="sustained load must be > 0"):
        replicas(1, 0)


def test_users_per_replica_is_the_busiest_replicas_share():
    traffic = Traffic(users=64)
    assert replicas(64, 12) == 6  # 64 / 12 = 5.33 -> 6
    assert per_replica_load(traffic, 6) == 11  # ceil(64 / 6) = ceil(10.67)
    assert per_replica_load(Traffic(rate_rps=20), 7) == pytest.approx(20 / 7)


def test_cost_per_hour_and_per_million_tokens():
    # 7 replicas of 2 A100-80GB at $3.4309 per GPU-hour (p4de.24xlarge $27.44705 / 8)
    hourly = cost_per_hour(7, 2, 3.4309)
    assert hourly == pytest.approx(48.0326)
    # 20 requests/s x 128 output tokens = 2,560 tokens/s = 9,216,000 tokens/h; 48.0326 / 9.216 = 5.21187
    assert cost_per_million(hourly, 20 * 128) == pytest.approx(5.21187, rel=1e-5)
    assert cost_per_million(1.0, 0.0) == math.inf


def test_ties_are_overlapping_cost_bands_with_the_first():
    table = pd.DataFrame({COST: [1.0, 1.2, 2.0, 1.0], "cost_low": [0.8, 1.1, 1.8, 1.0],
                          "cost_high": [1.3, 1.5, 2.2, 1.0]})
    # 1.2's band starts at 1.1 <= 1.3 (the first's top): tied; 2.0's starts at 1.8 > 1.3: not; an equal cost ties
    assert tie_with_first(table).tolist() == [False, True, False, True]


# -- prices -------------------------------------------------------------------------------------------
def test_shipped_prices_are_dated_and_sourced():
    prices = load_prices()
    assert prices.date and "http" in prices.source
    assert prices.gpu_hour("H100-80GB") == pytest.approx(55.04 / 8)  # p5.48xlarge over its 8 GPUs
    assert prices.gpu_hour("A100-80GB", 8) == pytest.approx(27.44705 / 8, rel=1e-4)
    assert "dated" in prices.describe() and "gpu_prices.yaml" in prices.describe()


def test_prices_file_overrides_and_names_bad_fields(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("date: '2026-01-01'\nsource: mine\ngpus:\n  h100: 2.5\n  A10G: {usd_per_gpu_hour: 1.0, "
                    "by_shards: {4: 1.418}}\n")
    prices = load_prices(path)
    assert prices.gpu_hour("H100-80GB") == 2.5  # "h100" resolved as the planner resolves cards
    assert prices.gpu_hour("A10G", 1) == 1.0 and prices.gpu_hour("A10G", 4) == 1.418
    with pytest.raises(KeyError, match="no price for 'L4'"):
        prices.gpu_hour("L4")
    path.write_text("gpus:\n  L4: cheap\n")
    with pytest.raises(ValueError, match="gpus.L4 must be a number"):
        load_prices(path)
    with pytest.raises(ValueError, match="is not a file"):
        load_prices(tmp_path / "missing.yaml")


# -- refusals -----------------------------------------------------------------------------------------
def test_refusal_reasons():
    model = load_config(LLAMA3)
    assert "no FP8 tensor cores" in refusal(model, Candidate("A10G", 1, "fp8"), 512, 128)
    assert refusal(model, Candidate("L4", 1, "fp8"), 512, 128) is None
    # 32 attention heads over 3 GPUs: TGI refuses the sharding
    assert "32 attention heads do not split over 3 shards" in refusal(model, Candidate("A100-80GB", 3), 512, 128)
    # 8.03e9 parameters x 2 bytes = 15.0 GiB of weights on a 15 GiB T4, before the CUDA context's reserve
    assert "weights do not fit" in refusal(model, Candidate("T4"), 512, 128)
    kept, refused = enumerate_candidates(model, ["A10G", "L4"], [1, 2], ["none", "fp8"], 512, 128)
    assert [c.name for c in kept] == ["A10G", "A10G x2", "L4", "L4 fp8", "L4 x2", "L4 x2 fp8"]
    assert [r.candidate.name for r in refused] == ["A10G fp8", "A10G x2 fp8"]
    with pytest.raises(ValueError, match="no datasheet figures"):
        enumerate_candidates(model, ["B300"], [1], ["none"], 512, 128)
    with pytest.raises(ValueError, match="quantize 'int3' is not known"):
        enumerate_candidates(model, ["L4"], [1], ["int3"], 512, 128)


# -- the capacity search on a load whose answer is known ---------------------------------------------
def _row(load: float) -> dict:
    """A point whose TTFT p90 is 0.1 s per request/s of load (1 s at 10 requests/s), TPOT flat, e2e 2 s."""
    return {"requests": 100, "errors": 0, "ttft_p90_s": 0.1 * load, "tpot_p90_s": 0.01, "goodput_rps": load,
            "request_throughput_rps": load, "e2e_p50_s": 2.0}


def test_sustained_load_is_found_within_ten_percent():
    goals = objectives(1.0, 0.05)
    probes = Probes(_row)
    found = sustained(probes, goals, start=1.0)
    assert 10 / 1.1 <= found <= 10  # meets up to 10 requests/s exactly
    assert len(probes.rows) <= 10
    # the band with ±20 % errors: limits 1 / 1.2 -> 8.33 requests/s, 1 / 0.8 -> 12.5 requests/s
    low, high = band(probes, goals, (0.2, 0.2), found)
    assert 8.33 / 1.1 <= low <= 8.34 and 12.5 / 1.1 <= high <= 12.5
    assert band(probes, goals, (None, None), found) is None


def test_no_load_meets_when_a_lone_request_misses():
    goals = objectives(1.0, 0.005)  # TPOT 0.01 s at any load: never meets
    probes = Probes(_row)
    assert sustained(probes, goals, start=1.0) is None
    assert min(probes.rows) >= 0.01  # stopped once requests ran alone (load x e2e 2 s < 0.05), not at 0.001


def test_users_search_is_integer():
    goals = objectives(1.0, None)
    probes = Probes(lambda users: _row(users), integer=True)
    assert sustained(probes, goals, start=4) == 10


# -- lengths from a dataset ---------------------------------------------------------------------------
def test_lengths_from_a_dataset(tmp_path):
    path = tmp_path / "lengths.jsonl"
    path.write_text('{"prompt_tokens": 100, "output_tokens": 20}\n{"input_tokens": 300, "max_new_tokens": 60}\n')
    lengths = load_lengths(path)
    assert lengths == ((100, 20), (300, 60))
    traffic = Traffic(rate_rps=1, lengths=lengths)
    assert traffic.mean_output_tokens == 40 and traffic.longest == (300, 60)
    (tmp_path / "bad.jsonl").write_text('{"prompt": "text"}\n')
    with pytest.raises(ValueError, match="has none of prompt_tokens"):
        load_lengths(tmp_path / "bad.jsonl")


# -- the whole search ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_advise_ranks_writes_results_and_draws(tmp_path):
    from tgi_toolkit.advise import advise, load_advice
    from tgi_toolkit.bench import load_results

    advice = advise(LLAMA3, rate=4, prompt_tokens=256, max_new_tokens=64, ttft=1.0, tpot=0.1,
                    gpus=["A10G", "L4"], shards=[1], quantize=["none", "fp8"], output=tmp_path, progress=False)
    table = advice.table
    assert list(table["candidate"]) and set(table["candidate"]) <= {"A10G", "L4", "L4 fp8"}
    assert [r.candidate.name for r in advice.refused] == ["A10G fp8"]
    first = table.iloc[0]
    # the table's cost is its own replicas x GPUs x price over the traffic's tokens (4 x 64 tokens/s)
    expected = first["replicas"] * load_prices().gpu_hour(first["gpu"]) / (4 * 64 * 3600) * 1e6
    assert first[COST] == pytest.approx(expected)
    assert (table[COST].diff().dropna() >= 0).all()
    assert first["replicas"] == replicas(4, first["sustained_per_replica"])
    assert "error unknown" in first["ttft_error"] or "%" in first["ttft_error"]
    assert advice.command.startswith("text-generation-launcher --model-id")
    # one simulated configuration per ranked candidate, read as any results folder
    results = load_results(tmp_path)
    assert results.points["config_id"].nunique() == len(table)
    assert results.points["backend"].eq("simulated").all()
    assert sorted(advice.run_ids) == sorted(results.run_ids)  # what a reused folder is filtered by (notebook 09)
    saved = load_advice(tmp_path)
    assert list(saved["table"]["candidate"]) == list(table["candidate"])
    fig = advice.figure()
    names = [t.name for t in fig.data]
    assert any(n.startswith("Pareto set: ") and first["candidate"] in n for n in names)


@pytest.mark.slow
def test_cli_bad_input_names_the_field(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tgi_toolkit.cli", "advise", "--model", str(LLAMA3), *args],
                              capture_output=True, text=True, cwd=ROOT, timeout=120)

    bad_gpu = run("--rate", "1", "--ttft", "1", "--gpus", "Z80")
    assert bad_gpu.returncode == 2 and "gpus: 'Z80'" in bad_gpu.stderr and "Traceback" not in bad_gpu.stderr
    no_goal = run("--rate", "1")
    assert no_goal.returncode == 2 and "objectives" in no_goal.stderr
    both = run("--rate", "1", "--users", "4", "--ttft", "1")
    assert both.returncode == 2 and "exactly one of rate" in both.stderr
    shards = run("--rate", "1", "--ttft", "1", "--shards", "1,two")
    assert shards.returncode == 2 and "--shards" in shards.stderr


@pytest.mark.slow
def test_app_advise_tab_logic():
    pytest.importorskip("gradio")
    from tgi_toolkit.app.advise_tab import run_advice

    text, table, figure, refused = run_advice("codellama/CodeLlama-7b-Instruct-hf", "x", "512", "128", "1", "0.05",
                                              "90", ["L4"], ["1"], ["none"])
    assert text == "**Not run:** request rate: 'x' is not a number" and figure is None
    text, table, figure, refused = run_advice("codellama/CodeLlama-7b-Instruct-hf", "2", "512", "128", "1", "0.05",
                                              "90", ["L4", "A10G"], ["1", "3"], ["none"])
    assert "Cheapest:" in text and "gpu_prices.yaml" in text
    assert list(table["rank"]) == list(range(1, len(table) + 1))
    assert "32 attention heads do not split over 3 shards" in refused
    assert figure is not None


@pytest.mark.slow
def test_advise_with_users_and_a_dataset_of_lengths(tmp_path):
    from tgi_toolkit.advise import advise
    from tgi_toolkit.bench import load_results

    lengths = tmp_path / "lengths.csv"
    lengths.write_text("prompt_tokens,output_tokens\n200,40\n400,80\n300,60\n")
    advice = advise(LLAMA3, users=24, dataset=lengths, ttft=1.0, tpot=0.05, gpus=["A100-80GB"], shards=[1],
                    output=tmp_path / "out", progress=False)
    row = advice.table.iloc[0]
    assert row["replicas"] == math.ceil(24 / row["sustained_per_replica"])  # integer users per replica
    assert row["load_per_replica"] == math.ceil(24 / row["replicas"])
    assert "lengths.csv" in advice.traffic.describe()
    requests = load_results(tmp_path / "out").requests
    # each request's lengths were drawn from the dataset
    drawn = set(zip(requests["input_tokens"], requests["output_tokens"], strict=True))
    assert drawn <= {(200, 40), (400, 80), (300, 60)} and len(drawn) > 1


def test_each_candidate_says_what_priced_it():
    from tgi_toolkit.advise import advise

    # the operator database measured the H100 (inside vLLM, which stands in for TGI 3's kernels) but not the L4
    advice = advise(LLAMA3, rate=2, prompt_tokens=256, max_new_tokens=64, ttft=1.0, tpot=0.1,
                    gpus=["H100", "L4"], shards=[1], tune=False, requests=40, progress=False)
    priced = dict(zip(advice.table["gpu"], advice.table["priced_by"], strict=True))
    assert priced["H100-80GB"].startswith("measured: h100_sxm, vllm")
    assert priced["L4"].startswith("roofline")
    forced = advise(LLAMA3, rate=2, prompt_tokens=256, max_new_tokens=64, ttft=1.0, tpot=0.1, gpus=["H100"],
                    shards=[1], tune=False, requests=40, progress=False, cost_model="roofline")
    assert forced.table["priced_by"].iloc[0].startswith("roofline")
    with pytest.raises(ValueError, match="cost_model: 'kernels' is not one of auto, measured, roofline"):
        advise(LLAMA3, rate=2, ttft=1.0, gpus=["H100"], shards=[1], cost_model="kernels")
