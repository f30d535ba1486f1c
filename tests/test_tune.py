"""Auto-tuning: the selection (objectives, goodput ranking, Pareto set, none met), the planner-bounded
search space and its rounds, and one small real tuning run against the embedded engine."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from tests.standins.fixtures import no_leftover_processes, standins  # noqa: F401
from tgi_toolkit import schema as S
from tgi_toolkit.bench.results import frame, load_results
from tgi_toolkit.cli import build_parser
from tgi_toolkit.config import LauncherConfig
from tgi_toolkit.sweep import Workload, load_manifest
from tgi_toolkit.tune import (
    Objectives,
    Round,
    Searched,
    TuneResult,
    build_space,
    choose,
    load_tune,
    pareto_points,
    plan_for,
    tune,
    workload_demand,
)
from tgi_toolkit.tune.cli import _values
from tgi_toolkit.tune.search import coarse, refine
from tgi_toolkit.tune.sizing import kv_sizing, tuned_base
from tgi_toolkit.tune.space import Knob, repair

SMOLLM2 = Path(__file__).parent / "data" / "configs" / "smollm2-135m.json"
TTFT, TPOT = S.stat_column("ttft", "p90"), S.stat_column("tpot", "p90")
TGI_MODE = ("ATTENTION", "PREFIX_CACHING", "PREFILL_CHUNKING", "TGI_TOOLKIT_KV_CACHE_GIB")


@pytest.fixture
def tgi3_defaults(monkeypatch):
    """TGI 3's default mode (flashinfer: 1-token blocks, chunking on) and the engine's default 2 GiB KV space."""
    for name in TGI_MODE:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def point(config: str, users: int, ttft: float, tpot: float, goodput: float, throughput: float, *,
          errors: int = 0, requests: int = 8) -> dict:
    return {S.RUN_ID: f"run-{config}", S.CONFIG_ID: config, S.CONFIG_LABEL: f"label-{config}",
            S.SCENARIO: "concurrency", S.POINT_ID: f"users={users}", S.USERS: users, S.REQUESTS: requests,
            S.ERRORS: errors, S.SHORT_OUTPUTS: 0, S.TOTAL_INPUT_TOKENS: 0, S.TOTAL_OUTPUT_TOKENS: 0,
            TTFT: ttft, TPOT: tpot, S.stat_column("ttft", "p50"): ttft / 2, S.GOODPUT_RPS: goodput,
            S.OUTPUT_THROUGHPUT: throughput, S.REQUEST_THROUGHPUT: goodput}


def entry(config: str, status: str = "complete", **overrides) -> dict:
    return {"config_id": config, "label": ",".join(f"{k}={v}" for k, v in overrides.items()),
            "config_label": f"label-{config}", "overrides": overrides, "launcher_config": dict(overrides),
            "status": status, "error": None, "problems": []}


LIMITS = Objectives(ttft_s=1.0, tpot_s=0.1)


# -- selection ------------------------------------------------------------------------------------------
def test_goodput_ranks_the_configurations_that_meet_the_objectives_at_their_best_load():
    points = frame([
        point("a", 1, 0.2, 0.05, 1.0, 40), point("a", 4, 0.5, 0.08, 3.5, 90),
        point("a", 8, 2.0, 0.09, 5.0, 150),  # more goodput, but TTFT over the limit: not a's operating point
        point("b", 4, 0.4, 0.07, 3.0, 100),
        point("c", 4, 0.3, 0.12, 6.0, 200),  # the fastest, but TPOT over the limit at every load
    ], "points")
    configs = [entry("a", max_batch_size=4), entry("b", max_batch_size=8), entry("c", max_batch_size=16)]
    result = choose(points, LIMITS, configs=configs, knobs=["max_batch_size"])
    table = result.table
    assert list(table[S.CONFIG_ID]) == ["a", "b", "c"] and list(table["rank"]) == [1, 2, 3]
    assert list(table["meets"]) == [True, True, False]
    assert list(table["max_batch_size"]) == [4, 8, 16]
    assert table.loc[0, S.POINT_ID] == "users=4" and table.loc[0, S.GOODPUT_RPS] == 3.5
    assert table.loc[0, "points_meeting"] == 2
    assert table.loc[2, "violation"] == pytest.approx(1.2)  # TPOT 0.12 against 0.1
    assert result.met and result.best[S.CONFIG_ID] == "a" and result.closest is None
    assert result.best["overrides"] == {"max_batch_size": 4}
    assert TuneResult(result).to_launcher_config().max_batch_size == 4
    assert result.message.startswith("best: max_batch_size=4 — goodput 3.5 req/s")
    assert "TTFT p90 0.5 s, TPOT p90 0.08 s" in result.message


def test_equal_goodput_goes_to_more_throughput_then_lower_ttft():
    points = frame([point("a", 4, 0.5, 0.05, 2.0, 80), point("b", 4, 0.4, 0.05, 2.0, 90),
                    point("c", 4, 0.3, 0.05, 2.0, 90)], "points")
    assert list(choose(points, LIMITS).table[S.CONFIG_ID]) == ["c", "b", "a"]


def test_missing_tpot_and_errors_do_not_meet_the_objectives():
    points = frame([point("one-token", 4, 0.2, math.nan, 4.0, 40), point("errors", 4, 0.2, 0.05, 3.0, 40, errors=1),
                    point("ok", 4, 0.9, 0.09, 1.0, 20)], "points")
    table = choose(points, LIMITS).table
    assert list(table[S.CONFIG_ID]) == ["ok", "errors", "one-token"]
    assert list(table["meets"]) == [True, False, False]
    assert math.isinf(table.loc[2, "violation"])
    lenient = choose(points, Objectives(ttft_s=1.0, tpot_s=0.1, max_error_rate=0.2)).table
    assert list(lenient[S.CONFIG_ID][:2]) == ["errors", "ok"]  # 1 error in 8 requests is allowed now
    assert choose(points, Objectives(ttft_s=1.0)).table.loc[0, S.CONFIG_ID] == "one-token"  # no TPOT limit


def test_objectives_nobody_meets_give_no_best_and_name_the_closest():
    points = frame([point("a", 1, 0.3, 0.05, 1.0, 40), point("a", 4, 0.6, 0.08, 3.0, 90),
                    point("b", 4, 0.9, 0.2, 3.0, 100)], "points")
    configs = [entry("a", max_batch_size=4), entry("b", max_batch_size=8), entry("x", status="failed")]
    impossible = Objectives(ttft_s=0.1, tpot_s=0.1)
    result = choose(points, impossible, configs=configs)
    assert not result.met and result.best is None
    closest = result.closest
    assert closest[S.CONFIG_ID] == "a" and closest[S.POINT_ID] == "users=1"  # its least-violating load
    assert closest["violation"] == pytest.approx(3.0)
    assert result.message == ("no configuration met the objectives (TTFT p90 <= 0.1 s, TPOT p90 <= 0.1 s, no errors);"
                              " closest: max_batch_size=4 at users=1: TTFT p90 0.3 s, TPOT p90 0.05 s "
                              "(3x the tightest limit)")
    with pytest.raises(ValueError, match=r"no configuration met.*to_launcher_config\(closest=True\)"):
        TuneResult(result).to_launcher_config()
    assert TuneResult(result).to_launcher_config(closest=True).max_batch_size == 4
    assert list(result.table[S.CONFIG_ID]) == ["a", "b", "x"]  # measured nothing: last, with its status
    assert result.table.loc[2, "status"] == "failed"


def test_configurations_that_all_measured_nothing_are_ranked_not_a_crash():
    result = choose(frame([], "points"), LIMITS, configs=[entry("a", "failed", max_batch_size=1),
                                                          entry("b", "invalid", max_batch_size=0)],
                    knobs=["max_batch_size"])
    assert list(result.table["config_id"]) == ["a", "b"] and list(result.table["max_batch_size"]) == [1, 0]
    assert result.table[TTFT].isna().all() and not result.table["meets"].any()
    assert result.best is None and result.closest is None


def test_pareto_set_keeps_the_points_nothing_beats_on_throughput_and_latency():
    points = frame([point("a", 1, 0.1, 0.05, 1, 10), point("a", 4, 0.2, 0.05, 2, 20),
                    point("b", 4, 0.3, 0.05, 2, 15),  # slower and less throughput than a at 4 users
                    point("b", 8, 0.5, 0.05, 3, 30)], "points")
    front = pareto_points(points, LIMITS)
    assert list(zip(front[S.CONFIG_ID], front[S.USERS], strict=True)) == [("a", 1), ("a", 4), ("b", 8)]
    assert list(front["meets"]) == [True, True, True]
    by_tpot = pareto_points(points, LIMITS, latency=TPOT)  # equal TPOT everywhere: the most throughput wins
    assert list(by_tpot[S.USERS]) == [8]


def test_objectives_are_checked():
    with pytest.raises(ValueError, match="percentile 'p42'.*allowed: p25, p50, p75, p90, p99"):
        Objectives(ttft_s=1, percentile="p42")
    for not_a_percentile in ("mean", "ci95", "max"):
        with pytest.raises(ValueError, match=f"percentile '{not_a_percentile}'"):
            Objectives(ttft_s=1, percentile=not_a_percentile)
    with pytest.raises(ValueError, match="ttft_s must be a number of seconds > 0"):
        Objectives(ttft_s=-1)
    with pytest.raises(ValueError, match="give ttft_s and/or tpot_s"):
        tune(None, Workload("concurrency", users=[4]), Objectives(), output="unused")
    assert Objectives(ttft_s=2, percentile="p99").limits() == {"ttft_p99_s": 2.0}


def test_result_saves_as_tune_json_and_reads_back(tmp_path):
    points = frame([point("a", 4, 0.5, 0.08, 3.5, 90), point("b", 4, 0.4, 0.2, 3.0, 100)], "points")
    choice = choose(points, LIMITS, configs=[entry("a", max_batch_size=4), entry("b", max_batch_size=8)])
    rounds = (Round(1, "coarse grid", ("max_batch_size=4", "max_batch_size=8"), "max_batch_size=4"),)
    result = TuneResult(choice, Searched(base={"max_input_tokens": 16, "max_total_tokens": 20, "api_key": "***"}),
                        rounds)
    path = result.save(tmp_path)
    saved = json.loads(path.read_text())  # tune.json stays one flat record
    assert path == tmp_path / "tune.json" and saved["met"] is True and saved["backend"] == "embedded"
    assert saved["rounds"] == [{"round": 1, "kind": "coarse grid", "configs": ["max_batch_size=4", "max_batch_size=8"],
                                "center": "max_batch_size=4"}]
    again = load_tune(tmp_path)
    assert again.choice.best["label"] == "max_batch_size=4" and again.choice.objectives == LIMITS
    assert again.rounds == rounds and again.searched.base == result.searched.base and again.path == path
    assert list(again.choice.table[S.CONFIG_ID]) == ["a", "b"]
    assert math.isinf(result.choice.table.loc[1, "violation"]) is False
    config = again.to_launcher_config()  # the redacted secret is dropped, not used
    assert (config.max_batch_size, config.max_total_tokens, config.api_key) == (4, 20, None)
    assert again.command() == ("tgi-toolkit serve --model-id HuggingFaceTB/SmolLM2-135M-Instruct "
                               "--max-input-tokens 16 --max-total-tokens 20 --max-batch-size 4 --hostname 127.0.0.1")


# -- the search space -----------------------------------------------------------------------------------
def test_workload_demand_uses_the_bench_defaults_and_refuses_ingestion():
    assert workload_demand(Workload("concurrency", users=[1, 8], prompt_tokens=[32, 64])) == \
        workload_demand(Workload("concurrency", users=[8], prompt_tokens=64, max_new_tokens=128))
    assert workload_demand(Workload("rate", rates=[2.0], requests=10)).concurrency == 10
    assert workload_demand(Workload("rate", rates=[2.0], max_concurrency=3)).concurrency == 3
    batch = workload_demand(Workload("batch"))
    assert (batch.prompt_tokens, batch.output_tokens, batch.concurrency) == (10, 8, 32)
    with pytest.raises(ValueError, match="one request at a time"):
        workload_demand(Workload("ingestion"))


def test_the_planner_bounds_each_ladder_by_capacity_and_by_the_workload(tgi3_defaults):
    demand = workload_demand(Workload("concurrency", users=[4], prompt_tokens=16, max_new_tokens=4))
    base = LauncherConfig(dtype="float32")
    plan = plan_for(base, "embedded", demand, model_config=SMOLLM2)
    assert (plan.limits.max_input_tokens, plan.limits.max_total_tokens) == (16, 20)
    assert plan.capacity.tokens_per_request == 20
    kv = kv_sizing(base, "embedded", demand, plan, model_config=SMOLLM2)
    space = build_space(base, demand, plan, kv=kv)
    assert list(space) == ["max_batch_size", "cuda_memory_fraction", "max_batch_prefill_tokens"]
    # plenty of KV cache: the workload's 4 requests of 20 tokens are the bound
    assert space["max_batch_size"].values == [1, 2, 4]
    assert space["max_batch_prefill_tokens"].values == [16, 32, 64]
    # TGI 3 infers the KV capacity from the KV memory (L2), so the KV ladder is one of fractions of that
    # memory: on the engine 2 GiB x fraction, in 1-token blocks of 2 x 30 layers x 3 KV heads x 64 x 4 B
    # = 46,080 B (float32). 20 tokens = 921,600 B = 0.00042915 of 2^31 B, shown rounded up: 0.0004292;
    # 40 tokens 0.00085831 -> 0.0008584; 80 tokens 3,686,400 B = 0.00171661 -> 0.001717.
    assert space["cuda_memory_fraction"].values == [0.0004292, 0.0008584, 0.001717]
    assert [kv.tokens(f) for f in space["cuda_memory_fraction"].values] == [20, 40, 80]
    assert "min(KV capacity 46603, 4 x 20 tokens per request)" in space["cuda_memory_fraction"].source
    assert "0.0004292 -> 20, 0.0008584 -> 40, 0.001717 -> 80 tokens" in space["cuda_memory_fraction"].source
    # TGI_TOOLKIT_KV_CACHE_GIB sizes the memory the fraction scales: 0.5 GiB needs 4x the fraction
    tgi3_defaults.setenv("TGI_TOOLKIT_KV_CACHE_GIB", "0.5")
    quarter = kv_sizing(base, "embedded", demand, plan, model_config=SMOLLM2)
    assert quarter.fraction_for(80) == 0.006867  # 3,686,400 / 2^29 = 0.00686646

    # a KV cache of 60 tokens (2^31 x 0.00129 = 2,770,278 B / 46,080) holds 3 of those requests: capacity
    # binds, and the top rung is the shared settings' own fraction (the tuner never takes more memory)
    tgi3_defaults.delenv("TGI_TOOLKIT_KV_CACHE_GIB")
    small = LauncherConfig(dtype="float32", cuda_memory_fraction=0.00129)
    plan = plan_for(small, "embedded", demand, model_config=SMOLLM2)
    assert (plan.capacity.kv_capacity_tokens, plan.capacity.concurrent_users) == (60, 3)
    kv = kv_sizing(small, "embedded", demand, plan, model_config=SMOLLM2)
    space = build_space(small, demand, plan, knobs=["max_batch_size", "cuda_memory_fraction"],
                        given={"max_batch_prefill_tokens": [64, 16]}, kv=kv)
    assert space["max_batch_size"].values == [1, 2, 3]
    assert space["cuda_memory_fraction"].values == [0.0004292, 0.0008584, 0.00129]
    assert space["max_batch_prefill_tokens"] == Knob("max_batch_prefill_tokens", [16, 64], "given")
    assert "capped at the 3 that fit" in space["max_batch_size"].source
    with pytest.raises(ValueError, match="no ladder is known for 'dtype'"):
        build_space(small, demand, plan, knobs=["dtype"], kv=kv)
    assert tuned_base(base, plan).to_dict(non_default_only=True) == {
        "dtype": "float32", "max_input_tokens": 16, "max_total_tokens": 20}
    with pytest.raises(ValueError, match="needs the GPU"):
        plan_for(base, "tgi", demand, model_config=SMOLLM2)
    on_l4 = plan_for(LauncherConfig(), "tgi", demand, model_config=SMOLLM2, gpu="L4")
    assert on_l4.capacity.kv_capacity_tokens > 10**5


def test_knobs_the_server_ignores_are_refused_in_one_line_naming_the_allowed_ones(tgi3_defaults):
    demand = workload_demand(Workload("concurrency", users=[4], prompt_tokens=16, max_new_tokens=4))
    base = LauncherConfig(dtype="float32")
    plan = plan_for(base, "embedded", demand, model_config=SMOLLM2)
    kv = kv_sizing(base, "embedded", demand, plan, model_config=SMOLLM2)
    allowed = ("knobs with a ladder: max_batch_size, cuda_memory_fraction, max_batch_prefill_tokens, "
               "waiting_served_ratio, max_waiting_tokens")
    # TGI 3 ignores --max-batch-total-tokens on flash models with a "deprecated" warning (L2 step 5)
    for knobs, given in ((["max_batch_total_tokens"], None), ([], {"max_batch_total_tokens": [20, 40]})):
        with pytest.raises(ValueError, match=r"knob 'max_batch_total_tokens': TGI 3 ignores") as err:
            build_space(base, demand, plan, knobs=knobs, given=given, kv=kv)
        assert allowed in str(err.value) and "cuda_memory_fraction" in str(err.value)
    # with chunking (TGI 3's default) the router ignores waiting_served_ratio and max_waiting_tokens (B1)
    with pytest.raises(ValueError, match=r"knob 'waiting_served_ratio': ignored with prefill chunking.*"
                                         r"PREFILL_CHUNKING=0"):
        build_space(base, demand, plan, knobs=["waiting_served_ratio"], kv=kv)
    tgi3_defaults.setenv("PREFILL_CHUNKING", "0")  # the older path uses them: their default ladders
    unchunked = kv_sizing(base, "embedded", demand, plan, model_config=SMOLLM2)
    space = build_space(base, demand, plan, knobs=["waiting_served_ratio", "max_waiting_tokens"], kv=unchunked)
    assert space["waiting_served_ratio"].values == [0.0, 0.3, 1.2, 3.0]
    # vLLM has no counterpart of TGI's waiting rules; its KV knob is the same fraction (gpu_memory_utilization)
    gpu_plan = plan_for(LauncherConfig(), "vllm", demand, model_config=SMOLLM2, gpu="L4")
    vllm = kv_sizing(LauncherConfig(), "vllm", demand, gpu_plan, model_config=SMOLLM2, gpu="L4")
    with pytest.raises(ValueError, match=r"knob 'max_waiting_tokens': no vLLM counterpart"):
        build_space(LauncherConfig(), demand, gpu_plan, knobs=["max_waiting_tokens"], kv=vllm)
    assert vllm.top == 0.9  # vLLM's own --gpu-memory-utilization default: TGI's 1.0 is not passed on


def test_cli_refuses_max_batch_total_tokens_as_a_knob(tmp_path, capsys, tgi3_defaults):
    from tgi_toolkit.cli import main

    code = main(["tune", "--ttft", "1", "--knob", "max_batch_total_tokens", "--model-config", str(SMOLLM2),
                 "--output", str(tmp_path), "--", "--dtype", "float32"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: knob 'max_batch_total_tokens': TGI 3 ignores")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_coarse_round_spreads_from_the_planner_point_and_refinement_bisects_around_the_best():
    space = {"a": Knob("a", [1, 2, 4, 8, 16], ""), "b": Knob("b", [10, 20, 40], "")}
    full = coarse(space, levels=3, budget=9, seed={"a": 16, "b": 40})
    assert {(c["a"], c["b"]) for c in full} == {(a, b) for a in (1, 4, 16) for b in (10, 20, 40)}
    few = coarse(space, levels=3, budget=3, seed={"a": 16, "b": 40})
    # the seed, then the farthest point, then one as far from both (a tie, broken the same way each time)
    assert [(c["a"], c["b"]) for c in few] == [(16, 40), (1, 10), (16, 10)]
    tried = few
    assert refine(space, {"a": 16, "b": 40}, tried) == [{"a": 4, "b": 40}, {"a": 16, "b": 20}]
    assert refine(space, {"a": 4, "b": 20}, [*tried, {"a": 4, "b": 20}]) == [
        {"a": 2, "b": 20}, {"a": 8, "b": 20}]  # b: 10 and 40 are next to 20, nothing between


def test_repair_follows_tgi3_router_rules_against_the_inferred_capacity(tgi3_defaults):
    base = LauncherConfig(dtype="float32", max_input_tokens=16, max_total_tokens=20)
    demand = workload_demand(Workload("concurrency", users=[4], prompt_tokens=16, max_new_tokens=4))
    kv = kv_sizing(base, "embedded", demand, plan_for(base, "embedded", demand, model_config=SMOLLM2),
                   model_config=SMOLLM2)
    forty, eighty = 0.0008584, 0.001717  # 40 and 80 KV tokens of SmolLM2 in float32 (46,080 B a token)
    # L4: max_batch_prefill_tokens <= max_batch_total_tokens, the capacity inferred from the KV memory
    assert repair({"cuda_memory_fraction": forty, "max_batch_prefill_tokens": 64}, base, kv) == {
        "cuda_memory_fraction": forty, "max_batch_prefill_tokens": 40}
    # the launcher's default prefill without a known card is 4096 (L1, under the 8,192-token context):
    # it would not fit 40 either, so the candidate carries the capacity
    assert repair({"cuda_memory_fraction": forty}, base, kv) == {"cuda_memory_fraction": forty,
                                                                 "max_batch_prefill_tokens": 40}
    assert repair({"cuda_memory_fraction": 1.0}, base, kv) == {"cuda_memory_fraction": 1.0}  # 46,603 >= 4096
    # with chunking a prompt (16) longer than the prefill budget is cut in chunks: nothing to repair
    assert repair({"cuda_memory_fraction": eighty, "max_batch_prefill_tokens": 8}, base, kv) == {
        "cuda_memory_fraction": eighty, "max_batch_prefill_tokens": 8}
    # without chunking the router wants max_input_tokens <= max_batch_prefill_tokens (L4)
    tgi3_defaults.setenv("PREFILL_CHUNKING", "0")
    unchunked = kv_sizing(base, "embedded", demand, plan_for(base, "embedded", demand, model_config=SMOLLM2),
                          model_config=SMOLLM2)
    assert repair({"cuda_memory_fraction": eighty, "max_batch_prefill_tokens": 8}, base, unchunked) == {
        "cuda_memory_fraction": eighty, "max_batch_prefill_tokens": 16}
    assert repair({"max_batch_size": 2}, base) == {"max_batch_size": 2}  # no KV model: nothing to check against


def test_cli_is_registered_and_reads_values():
    args = build_parser("tune").parse_args(["tune", "--ttft", "1", "--output", "x", "--values",
                                            "waiting-served-ratio=0.3,1.2", "--", "--max-batch-size", "4"])
    assert args.func.__module__ == "tgi_toolkit.tune.cli" and args.ttft == 1.0
    assert _values(args.values) == {"waiting_served_ratio": [0.3, 1.2]}
    with pytest.raises(ValueError, match="expected FIELD=V1,V2"):
        _values(["max_batch_size"])


@pytest.mark.usefixtures("standins")
def test_tuning_launches_exactly_the_configurations_its_table_lists(tmp_path, monkeypatch, launches):
    # Stand-in TGI servers that crash at start-up: each configuration costs one launch, and fails.
    monkeypatch.setenv("TGI_TOOLKIT_STANDIN", "crash")
    workload = Workload("concurrency", users=[4], prompt_tokens=16, max_new_tokens=4, requests=8)
    result = tune({"model_id": "org/standin-model"}, workload, Objectives(ttft_s=5.0), output=tmp_path,
                  backend="tgi", model_config=SMOLLM2, gpu="L4", knobs=["max_batch_size"], max_configs=2, levels=2,
                  rounds=1, confirm=0, server={"health_timeout": 20}, progress=False)
    manifest = load_manifest(tmp_path)["configs"]
    assert len(result.choice.table) == 2 and set(result.choice.table["status"]) == {"failed"}
    # every configuration measured is ranked in the table; the shared base was not measured on the side
    assert [e["config_id"] for e in manifest] == list(result.choice.table[S.CONFIG_ID])
    assert sorted(c.max_batch_size for c in launches) == sorted(result.choice.table["max_batch_size"]) == [1, 4]
    assert "base" not in [e["label"] for e in manifest]


# -- a real tuning run --------------------------------------------------------------------------------------
@pytest.mark.slow
def test_tuning_the_embedded_engine_chooses_a_configuration_that_meets_its_objectives(tmp_path):
    # Generous: the 2-core CPU is shared with other work (measured under load: TTFT p90 0.3-4.6 s,
    # TPOT p90 0.13-0.62 s; a 20-token KV cache serves the 4 users one at a time); two candidates may be
    # measured again before one holds.
    objectives = Objectives(ttft_s=5.0, tpot_s=1.0)
    # ramp_up 0: the 4 users start together and every request sent is one of the 8 measured (the default "auto"
    # first sends a request a user and ramps over their mean duration: some 8 unmeasured requests more a
    # configuration, one at a time on the smallest KV cache); a closed loop of 4 users queues as deep either way
    workload = Workload("concurrency", users=[4], prompt_tokens=16, max_new_tokens=4, requests=8, ramp_up=0)
    result = tune(None, workload, objectives, output=tmp_path, knobs=["max_batch_size", "cuda_memory_fraction"],
                  max_configs=3, levels=2, rounds=2, confirm=2, progress=False,
                  # one thread a server: torch's default threads on this loaded 2-core machine made a decode
                  # step ~3 s and erratic (TPOT p90 3.3 s under a load average of 13), one thread ~0.2 s
                  server={"health_timeout": 180, "env": {"OMP_NUM_THREADS": "1"}})
    assert result.met and result.choice.confirmed, result.message
    best = result.choice.best
    # the chosen configuration's own measurement, read back from the folder, meets the objectives
    points = load_results(tmp_path).points
    (measured,) = points[(points[S.RUN_ID] == best[S.RUN_ID]) & (points[S.POINT_ID] == best[S.POINT_ID])
                         ].to_dict("records")
    assert measured[S.CONFIG_ID] == best[S.CONFIG_ID] and measured[S.ERRORS] == 0
    assert measured[TTFT] <= 5.0 and measured[TPOT] <= 1.0
    confirmation = best["confirmation"]  # measured again with other prompts: still within them
    assert confirmation["run_id"] != best[S.RUN_ID] and confirmation[TTFT] <= 5.0 and confirmation[TPOT] <= 1.0
    records = {e["config_id"]: e for e in load_manifest(tmp_path)["configs"]}[best[S.CONFIG_ID]]["workloads"]
    assert [r["run_id"] for r in records.values()] == [best[S.RUN_ID], confirmation["run_id"]]
    # and it has the most goodput of those that met them
    meeting = result.choice.table[result.choice.table["meets"]]
    assert best[S.GOODPUT_RPS] == meeting[S.GOODPUT_RPS].max()

    # the planner bounded the space to what the workload can use: 4 requests of 16 + 4 tokens, so KV
    # memory for 20 (one request, max_total_tokens) to 80 tokens (all four) in steps of doubling
    assert result.searched.space["max_batch_size"]["values"] == [1, 2, 4]
    fractions = result.searched.space["cuda_memory_fraction"]["values"]
    assert len(fractions) == 3 and "-> 20, " in result.searched.space["cuda_memory_fraction"]["source"]
    assert [r.kind for r in result.rounds][0] == "coarse grid" and len(result.choice.table) == 3
    # the knob changes what the server does: the engine infers its KV capacity (TGI 3 L2, the
    # tgi_batch_max_total_tokens gauge) from each configuration's fraction, 20, 40 or 80 tokens, and a
    # 20-token cache admits one request (16 + 4 - 1 = 19 reserved tokens) at a time
    by_config = points[points[S.CONFIG_ID].isin(result.choice.table[S.CONFIG_ID])].groupby(S.CONFIG_ID)
    chosen = dict(zip(result.choice.table[S.CONFIG_ID], result.choice.table["cuda_memory_fraction"], strict=True))
    capacity = {chosen[c]: set(g[S.KV_CAPACITY_TOKENS]) for c, g in by_config}
    assert capacity == {f: {dict(zip(fractions, (20.0, 40.0, 80.0), strict=True))[f]} for f in capacity}
    assert len(capacity) >= 2  # the coarse round spans the ladder's ends
    smallest = points[points[S.CONFIG_ID].isin([c for c, f in chosen.items() if f == fractions[0]])]
    assert (smallest[S.SERVER_BATCH_SIZE_MAX].dropna() <= 1).all()
    assert result.rounds[-1].kind == "confirmation (seed + 1)"
    config = result.to_launcher_config()
    assert (config.max_input_tokens, config.max_total_tokens) == (16, 20)
    assert config.max_batch_size == best["max_batch_size"]
    saved = load_tune(tmp_path)
    assert saved.choice.best["label"] == best["label"] and saved.to_launcher_config() == config
    pareto = result.choice.pareto
    assert not pareto.empty and set(pareto[S.CONFIG_ID]) <= set(result.choice.table[S.CONFIG_ID])

    # the same measurements against objectives this CPU cannot meet: none met, the closest named
    impossible = choose(points, Objectives(ttft_s=1e-4, tpot_s=1e-4))
    assert not impossible.met and impossible.closest is not None
    assert impossible.message.startswith("no configuration met the objectives")


@pytest.mark.slow
def test_tuning_in_simulation_measures_the_simulations_best_and_saves_a_whole_result(tmp_path):
    from tgi_toolkit.simulate import LinearCostModel
    from tgi_toolkit.tune.simulated import tune_simulated

    # max_batch_size 1 and 2 are simulated; measure=1, spread=0: only the simulation's first is measured
    cost = LinearCostModel(forward_s=0.05, source={"server": {"max_batch_total_tokens": 46603, "chunking": True}})
    result = tune_simulated(None, Workload("concurrency", users=[2], prompt_tokens=16, max_new_tokens=4, requests=4),
                            Objectives(ttft_s=20.0, tpot_s=5.0), output=tmp_path, cost_model=cost,
                            knobs=["max_batch_size"], levels=2, measure=1, spread=0, progress=False,
                            server={"health_timeout": 180, "env": {"OMP_NUM_THREADS": "1"}})
    simulation = result.simulation
    assert (simulation["simulated_configs"], simulation["measured_configs"]) == (2, 1)
    (ranked,) = simulation["ranks"]
    assert ranked["simulated_rank"] == 1 and list(result.choice.table[S.CONFIG_ID]) == [ranked["config_id"]]
    searched = result.searched
    assert searched.space["max_batch_size"]["values"] == [1, 2] and searched.workload["slo_ttft_s"] == 20.0
    assert searched.plan["max_total_tokens"] == 20 and searched.config is not None  # the plan that bounded it
    assert [r.kind for r in result.rounds] == ["simulation of 2 configurations",
                                                  "measured: the simulation's best and a spread"]
    # built whole, then saved where it says: tune.json reads back the same, simulation.json beside it
    assert result.path == tmp_path / "tune.json" and (tmp_path / "simulation.json").exists()
    again = load_tune(tmp_path)
    assert again.rounds == result.rounds and again.searched.space == searched.space
    assert again.choice.best["label"] == ranked["label"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.choice = None  # type: ignore[misc]
