"""The prefix-cache and chunked-prefill workloads (scenarios.plans, bench.play): planned lengths and
cache hits worked out by hand, token-exact texts checked with the model's own tokenizer, the stall
window and the hit rate from counters, the figures from small hand-made tables, and (slow) a tiny
shared-prefix and multi-turn run against the real engine with its prefix-cache counters."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tgi_toolkit import schema as S
from tgi_toolkit.bench import BenchError, DecodeStallScenario, MultiTurn, SharedPrefix
from tgi_toolkit.bench.client import StreamRecord
from tgi_toolkit.bench.play import hit_rate_columns, shared_prefix_texts, stall_gaps, turn_text
from tgi_toolkit.bench.prompts import LocalTokenizer, PromptFactory
from tgi_toolkit.scenarios.plans import cached_tokens, expected_hit_rate, synthetic_ids

MS = 1_000_000  # ns


# -- plans ----------------------------------------------------------------------------------------------
def test_shared_prefix_plan() -> None:
    workload = SharedPrefix(groups=3, requests_per_group=4, prefix_tokens=100, suffix_tokens=20, max_new_tokens=8)
    plan = workload.requests()
    assert [r.prompt_tokens for r in plan] == [120] * 12
    assert [(r.group, r.turn) for r in plan[:5]] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]
    # a group's later requests wait for its first one (TGI caches a prompt only once its request is freed)
    assert [r.after for r in plan[:8]] == [None, 0, 0, 0, None, 4, 4, 4]
    assert [cached_tokens(plan, i) for i in range(4)] == [0, 100, 100, 100]
    # by hand: 3 groups x 3 later requests x 100 cached tokens, over 12 prompts of 120 tokens
    assert expected_hit_rate(plan) == pytest.approx(900 / 1440)
    ids = [synthetic_ids(r) for r in plan]
    assert ids[0][:100] == ids[1][:100] and ids[0][100:] != ids[1][100:] and ids[0][:100] != ids[4][:100]


def test_multi_turn_plan() -> None:
    plan = MultiTurn(conversations=2, turns=4, user_tokens=30, max_new_tokens=10, system_tokens=50).requests()
    # by hand: 50 + 30 = 80, then each turn adds the 10-token answer and a 30-token message
    assert [r.prompt_tokens for r in plan] == [80, 120, 160, 200] * 2
    assert [r.after for r in plan] == [None, 0, 1, 2, None, 4, 5, 6]
    # turn t finds turn t-1's prompt in the cache (its answer is never cached): 0, 80, 120, 160
    assert [cached_tokens(plan, i) for i in range(4)] == [0, 80, 120, 160]
    assert expected_hit_rate(plan) == pytest.approx(360 / 560)
    assert MultiTurn(turns=3, user_tokens=64, max_new_tokens=32).prompt_tokens(2) == 64 + 2 * 96


def test_decode_stall_plan() -> None:
    plan = DecodeStallScenario(streams=8, long_prompt=2000, lead_tokens=4).requests()
    assert len(plan) == 9 and [r.group for r in plan] == [0] * 8 + [1]
    assert plan[-1].prompt_tokens == 2000 and plan[-1].wait_tokens == 4 and plan[0].wait_tokens == 0
    assert plan[0].segments != DecodeStallScenario().requests(1)[0].segments  # each round its own prompts


@pytest.mark.parametrize(("make", "field"), [
    (lambda: SharedPrefix(groups=0), "groups"),
    (lambda: SharedPrefix(prefix_tokens=-1), "prefix_tokens"),
    (lambda: MultiTurn(turns=0), "turns"),
    (lambda: MultiTurn(system_tokens=-3), "system_tokens"),
    (lambda: DecodeStallScenario(lead_tokens=200, stream_tokens=100), "lead_tokens"),
    (lambda: DecodeStallScenario(long_prompt=0), "long_prompt"),  # the scenario's own name for it
])
def test_bad_workload_names_its_field(make, field) -> None:
    with pytest.raises(BenchError) as info:
        make()
    assert str(info.value).startswith(f"{field}: ") and "allowed" in str(info.value)


# -- token-exact texts, with the served model's tokenizer ------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer():
    from tgi_toolkit.models.files import conversion_cache_dir

    root = conversion_cache_dir()
    folders = sorted(p for p in root.iterdir() if (p / "tokenizer.json").exists()) if root.is_dir() else []
    if not folders:
        pytest.skip("no converted tokenizer in the cache")
    return LocalTokenizer(str(folders[0]))


def _ids(tokenizer: LocalTokenizer, text: str) -> list[int]:
    return tokenizer._tok(text, add_special_tokens=True)["input_ids"]


def test_shared_prefix_texts_share_the_prefix_tokens(tokenizer) -> None:
    workload = SharedPrefix(groups=2, requests_per_group=3, prefix_tokens=37, suffix_tokens=13)
    texts = shared_prefix_texts(PromptFactory(tokenizer, seed=1), workload, "salt")
    ids = [_ids(tokenizer, t) for t in texts]
    assert [len(i) for i in ids] == [50] * 6
    assert ids[0][:37] == ids[1][:37] == ids[2][:37] and ids[3][:37] == ids[4][:37] == ids[5][:37]
    assert ids[0][:37] != ids[3][:37] and len({tuple(i) for i in ids}) == 6
    again = shared_prefix_texts(PromptFactory(tokenizer, seed=1), workload, "salt")
    assert again == texts and shared_prefix_texts(PromptFactory(tokenizer, seed=1), workload, "other") != texts


def test_turns_resend_the_history_token_exact(tokenizer) -> None:
    workload = MultiTurn(conversations=1, turns=3, user_tokens=20, max_new_tokens=6, system_tokens=15)
    prompts = PromptFactory(tokenizer, seed=2)
    plan = workload.requests()
    system = prompts.extend("", 15, "salt:system")
    # answers of the asked length, shorter and longer: the new message absorbs the difference
    answers = [" The river was quiet that night.", " Yes.", ""]
    history, texts = system, []
    for request, answer in zip(plan, answers, strict=True):
        text = turn_text(prompts, history, request, "salt")
        texts.append(text)
        history = text + answer
    ids = [_ids(tokenizer, t) for t in texts]
    assert [len(i) for i in ids] == [35, 61, 87]  # 15 + 20, then + 6 + 20 each turn
    assert ids[0][:15] == _ids(tokenizer, system)
    for before, after in zip(ids, ids[1:], strict=False):
        assert after[:len(before)] == before  # the last prompt is a token prefix of the next: a cache hit


# -- the stall window and the hit rate --------------------------------------------------------------------
def test_stall_gaps_by_hand() -> None:
    long = StreamRecord(sent_ns=100 * MS, token_ns=[400 * MS, 420 * MS])
    a = StreamRecord(sent_ns=0, token_ns=[0, 60 * MS, 120 * MS, 480 * MS, 540 * MS])
    b = StreamRecord(sent_ns=0, token_ns=[10 * MS, 90 * MS])  # ended before the long prompt was sent
    inside, before, spanning = stall_gaps([a, b], long)
    # a: 60->120 and 120->480 overlap (100, 400); 480->540 starts after it; 0->60 is before it
    assert inside == pytest.approx([0.06, 0.36]) and before == pytest.approx([0.06, 0.08]) and spanning == 1
    assert stall_gaps([a], StreamRecord(sent_ns=100 * MS)) == ([], [], 0)  # no first token: no window


def test_hit_rate_from_counter_deltas() -> None:
    cols = hit_rate_columns((100.0, 400.0), (356.0, 880.0))
    assert cols[S.PREFIX_HIT_RATE] == pytest.approx(256 / 480)
    assert (cols[S.PREFIX_HIT_TOKENS], cols[S.PREFIX_LOOKUP_TOKENS]) == (256.0, 480.0)
    assert math.isnan(hit_rate_columns(None, None)[S.PREFIX_HIT_RATE])
    assert math.isnan(hit_rate_columns((5.0, 9.0), (5.0, 9.0))[S.PREFIX_HIT_RATE])  # nothing looked up


# -- figures from small tables ------------------------------------------------------------------------------
def _requests(rows: list[dict]) -> pd.DataFrame:
    from tgi_toolkit.bench.results import frame

    base = {S.RUN_ID: "r1", S.CONFIG_LABEL: "", S.WARMUP: False, S.REPEAT: 0, S.ERROR: None, S.ITL_S: []}
    return frame([{**base, **row} for row in rows], "requests")


def test_ttft_figures() -> None:
    from tgi_toolkit import plots

    turns = _requests([{S.SCENARIO: "multi_turn", S.GROUP: c, S.TURN: t, S.TTFT_S: ttft}
                       for c, row in enumerate([[0.9, 0.2, 0.3], [1.1, 0.4, 0.5]]) for t, ttft in enumerate(row)])
    fig = plots.ttft_by_turn(turns)
    (trace,) = fig.data
    assert list(trace.x) == [1, 2, 3] and list(trace.y) == pytest.approx([1000.0, 300.0, 400.0])  # ms medians
    assert "ms" in fig.layout.yaxis.title.text
    shared = _requests([{S.SCENARIO: "shared_prefix", S.GROUP: g, S.TURN: t, S.TTFT_S: ttft}
                        for g in range(2) for t, ttft in enumerate([2.0 + g, 0.5, 0.7, 0.6])]
                       + [{S.SCENARIO: "shared_prefix", S.RUN_ID: "r2", S.CONFIG_LABEL: "no cache", S.GROUP: 0,
                           S.TURN: t, S.TTFT_S: 2.0} for t in range(4)])
    fig = plots.shared_prefix_ttft(shared)
    assert len(fig.data) == 2
    cached = next(t for t in fig.data if t.name != "no cache")
    assert list(cached.x) == [plots.prefix.FIRST, plots.prefix.LATER]
    assert list(cached.y) == pytest.approx([2.5, 0.6])  # medians of (2.0, 3.0) and of the six later ones
    empty = plots.ttft_by_turn(shared)
    assert not empty.data and empty.layout.annotations


def test_decode_stall_figures() -> None:
    from tgi_toolkit import plots

    rows = []
    for label, gap, long_ttft in (("chunked", 0.08, 0.5), ("not chunked", 0.6, 0.7)):
        rows += [{S.SCENARIO: "decode_stall", S.RUN_ID: label, S.CONFIG_LABEL: label, S.GROUP: 0, S.TURN: i,
                  S.SENT_S: 10.0, S.TTFT_S: 0.05, S.ITL_S: [0.05, gap, 0.05]} for i in range(2)]
        rows.append({S.SCENARIO: "decode_stall", S.RUN_ID: label, S.CONFIG_LABEL: label, S.GROUP: 1, S.TURN: 0,
                     S.SENT_S: 10.12, S.TTFT_S: long_ttft, S.ITL_S: []})
    requests = _requests(rows)
    table = plots.stall_gaps_table(requests)
    chunked = table[table["series"] == "chunked"]
    # tokens at 10.05, 10.10, 10.18, 10.23 s; on the long prompt's clock (sent at 10.12): -0.02, 0.06, 0.11
    assert sorted(chunked["t_s"].round(6).unique()) == pytest.approx([-0.02, 0.06, 0.11])
    assert table.groupby("series")["gap_s"].max().to_dict() == pytest.approx({"chunked": 0.08, "not chunked": 0.6})
    fig = plots.decode_stall(requests)
    assert [t.name for t in fig.data] == ["chunked", "not chunked"]
    assert sorted(s.x0 for s in fig.layout.shapes) == pytest.approx([0.0, 0.5, 0.7])
    assert list(fig.layout.xaxis.range) == pytest.approx([-0.105, 0.91])  # the longest wait (0.7 s) in view
    points = pd.DataFrame({S.SCENARIO: ["decode_stall"] * 2, S.CONFIG_LABEL: ["chunked", "not chunked"],
                           S.RUN_ID: ["a", "b"], S.STALL_MAX_GAP_S: [0.08, 0.6], S.STALL_P99_GAP_S: [0.07, 0.5],
                           S.STALL_BASELINE_GAP_S: [0.05, 0.05], S.LONG_PROMPT_TTFT_S: [0.5, 0.7]})
    summary = plots.decode_stall_summary(points)
    assert len(summary.data) == 4 and list(summary.data[0].y) == pytest.approx([80.0, 600.0])


def test_cli_flags_reach_the_workloads() -> None:
    import argparse

    from tgi_toolkit.bench.cli import add_parser, scenario_params

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["bench", "shared-prefix", "--url", "http://x", "--groups", "2", "--prefix-tokens", "100"])
    assert scenario_params(args) == {"groups": 2, "requests_per_group": 4, "prefix_tokens": 100,
                                      "suffix_tokens": 32, "max_new_tokens": 16, "users": 4}
    args = parser.parse_args(["bench", "shared-prefix", "--url", "http://x"])
    assert scenario_params(args)["prefix_tokens"] == 512
    args = parser.parse_args(["bench", "multi-turn", "--url", "http://x", "--turns", "6", "--system-tokens", "200"])
    assert scenario_params(args)["turns"] == 6 and scenario_params(args)["system_tokens"] == 200
    args = parser.parse_args(["bench", "decode-stall", "--url", "http://x", "--long-prompt", "900"])
    assert scenario_params(args)["long_prompt"] == 900 and scenario_params(args)["streams"] == 8


# -- the real engine ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_shared_prefix_and_multi_turn_against_the_engine(engine_url) -> None:
    from tgi_toolkit.bench import run_multi_turn, run_shared_prefix

    quick = {"progress": False, "scrape_interval": 0.2}
    shared = SharedPrefix(groups=2, requests_per_group=3, prefix_tokens=96, suffix_tokens=16, max_new_tokens=4,
                          users=2)
    results = run_shared_prefix(engine_url, groups=2, requests_per_group=3, prefix_tokens=96, suffix_tokens=16,
                                max_new_tokens=4, users=2, **quick)
    requests, (point,) = results.requests, results.points.to_dict("records")
    assert tuple(results.points.columns) == S.POINT_COLUMNS and tuple(requests.columns) == S.REQUEST_COLUMNS
    assert requests[S.ERROR].isna().all() and (requests[S.INPUT_TOKENS] == 112).all()
    assert requests[[S.GROUP, S.TURN]].values.tolist() == [[g, t] for g in range(2) for t in range(3)]
    # the later requests of a group were sent after its first one ended
    first_end = (requests[S.SENT_S] + requests[S.E2E_S])[requests[S.TURN] == 0].to_numpy()
    later_sent = requests[S.SENT_S][requests[S.TURN] > 0].to_numpy().reshape(2, 2)
    assert (later_sent >= first_end[:, None]).all()
    # by hand: 4 later requests x 96 cached tokens over 6 x 112 looked up; two prefixes may share a
    # first word's tokens, so a few more hits are possible, never fewer
    assert point[S.PREFIX_LOOKUP_TOKENS] == 6 * 112
    assert 4 * 96 <= point[S.PREFIX_HIT_TOKENS] <= 4 * 96 + 2 * 4
    assert point[S.PREFIX_HIT_RATE] == pytest.approx(point[S.PREFIX_HIT_TOKENS] / (6 * 112))
    assert point[S.PREFIX_HIT_RATE] >= expected_hit_rate(shared.requests()) > 0

    results = run_multi_turn(engine_url, conversations=2, turns=3, user_tokens=24, max_new_tokens=6,
                             system_tokens=32, **quick)
    requests, (point,) = results.requests, results.points.to_dict("records")
    assert requests[S.ERROR].isna().all()
    assert requests[S.INPUT_TOKENS].tolist() == [56, 86, 116] * 2 == requests[S.PROMPT_TOKENS].tolist()
    # turn t finds turn t-1's prompt cached: (56 + 86) per conversation at least, over 2 x (56 + 86 + 116)
    assert point[S.PREFIX_LOOKUP_TOKENS] == 2 * (56 + 86 + 116)
    assert point[S.PREFIX_HIT_TOKENS] >= 2 * (56 + 86)
    assert point[S.PREFIX_HIT_RATE] >= 284 / 516
    assert not np.isnan(requests[S.TTFT_S]).any()


def test_a_server_without_prefix_counters_gives_nan_and_says_so() -> None:
    # a mock OpenAI server process (no /metrics at all), as vLLM or TGI would be for these counters
    from tgi_toolkit.bench import run_multi_turn

    from .test_bench_harness import mock_server

    with mock_server() as url:
        results = run_multi_turn(url, conversations=1, turns=2, user_tokens=6, max_new_tokens=3, progress=False,
                                 api="completions", scrape_interval=0.2)
    assert results.requests[S.ERROR].isna().all() and results.requests[S.TURN].tolist() == [0, 1]
    assert results.requests[S.INPUT_TOKENS].tolist() == [6, 15]  # the server's own count of each turn
    point = results.points.iloc[0]
    assert math.isnan(point[S.PREFIX_HIT_RATE]) and math.isnan(point[S.PREFIX_LOOKUP_TOKENS])
    assert any("no tgi_toolkit_prefix_cache" in n for n in results.runs[0]["notes"])
