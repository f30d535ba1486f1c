"""tgi_toolkit.plots: each figure's traces, colours, axes and hover text, on small hand-made tables in
the schema's columns and dtypes, on partial data, and on the published reference sets."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from tgi_toolkit import plots as P
from tgi_toolkit import schema as S
from tgi_toolkit.pareto import pareto_front
from tgi_toolkit.reference import load_reference

SIZES, SEQS, REPEATS = (1, 2, 4, 8), (128, 256), 3
TTFT = {stat: S.stat_column("ttft", stat) for stat in S.STATS}
SPEED = {stat: S.stat_column(S.SPEED_METRIC, stat) for stat in S.STATS}


def typed(rows: list[dict], columns: tuple[str, ...]) -> pd.DataFrame:
    """Rows as the harness writes them: every schema column, knobs as nullable Int64."""
    df = pd.DataFrame(rows).reindex(columns=list(columns))
    for c in (S.USERS, S.BATCH_SIZE, S.PROMPT_TOKENS, S.MAX_NEW_TOKENS, S.INPUT_TOKENS):
        if c in df:
            df[c] = df[c].astype("Int64")
    return df


def batch_table(label: str = "default") -> pd.DataFrame:
    """B requests of S tokens, 64 decoded; prefill grows with B*S, decode step with B; one warm-up each."""
    rows = []
    for seq, size, repeat in itertools.product(SEQS, SIZES, range(-1, REPEATS)):
        prefill = 0.02 + 4e-5 * size * seq + 0.001 * repeat
        token = 0.03 + 0.002 * size + 0.0002 * repeat
        rows.append({S.RUN_ID: "run-b", S.CONFIG_LABEL: label, S.SCENARIO: "batch", S.BATCH_SIZE: size,
                     S.POINT_ID: f"batch={size},sequence={seq}", S.SEQUENCE_LENGTH: seq, S.DECODE_LENGTH: 64,
                     S.REPEAT: max(repeat, 0), S.WARMUP: repeat < 0, S.PREFILL_LATENCY_S: prefill,
                     S.PREFILL_THROUGHPUT: size * seq / prefill, S.DECODE_TOKEN_LATENCY_S: token,
                     S.DECODE_TOTAL_LATENCY_S: 63 * token, S.DECODE_THROUGHPUT: size / token})
    return typed(rows, S.BATCH_COLUMNS)


def points_table(label: str = "default", users=(1, 2, 4, 8, 16), prompts=(128, 512)) -> pd.DataFrame:
    rows = []
    for prompt, u in itertools.product(prompts, users):
        ttft, speed = 0.05 * prompt / 128 * (1 + 0.2 * u), 30 / (1 + 0.1 * u)
        row = {S.RUN_ID: "run-c", S.CONFIG_LABEL: label, S.SCENARIO: "concurrency", S.USERS: u,
               S.POINT_ID: f"users={u},prompt={prompt},output=64", S.PROMPT_TOKENS: prompt, S.MAX_NEW_TOKENS: 64,
               S.OUTPUT_THROUGHPUT: 0.9 * speed * u}
        for stat, factor in (("p25", 0.8), ("p50", 1.0), ("p75", 1.3), ("mean", 1.05)):
            row[TTFT[stat]], row[SPEED[stat]] = ttft * factor, speed * factor
        rows.append(row)
    return typed(rows, S.POINT_COLUMNS)


def requests_table() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    rows = []
    for point, users in (("users=1", 1), ("users=4", 4)):
        for i in range(-1, 8):  # -1: the warm-up
            prompt = (32, 64, 128, 256, 512)[i % 5]
            itl = list(0.03 * users ** 0.5 + rng.exponential(0.004, size=10))
            rows.append({S.RUN_ID: "run-r", S.POINT_ID: point, S.USERS: users, S.REQUEST_INDEX: i + 1,
                         S.WARMUP: i < 0, S.SENT_S: 0.25 * len(rows), S.PROMPT_TOKENS: prompt, S.INPUT_TOKENS: prompt,
                         S.OUTPUT_TOKENS: 11, S.TTFT_S: 0.01 + 2e-4 * prompt, S.ITL_S: itl, S.ERROR: None})
    rows[3].update({S.ERROR: "overloaded", S.TTFT_S: np.nan, S.ITL_S: [9.0], S.OUTPUT_TOKENS: 0})
    return typed(rows, S.REQUEST_COLUMNS)


def server_table(run: str = "run-r", queue=(0, 2, 5, 3, 0), batch=(1, 4, 4, 4, 2)) -> pd.DataFrame:
    rows = []
    for k, (q, b) in enumerate(zip(queue, batch, strict=True)):
        for metric, value in (("tgi_queue_size", q), ("tgi_batch_current_size", b),
                              ("tgi_batch_current_max_tokens", 256 * b), ("tgi_batch_max_total_tokens", 2048),
                              ("process_cpu_percent", 150.0)):
            rows.append({S.RUN_ID: run, S.CONFIG_ID: "c", S.T_S: 0.5 * k, S.METRIC: metric, S.LABELS: "",
                         S.VALUE: float(value)})
    return pd.DataFrame(rows, columns=list(S.SERVER_COLUMNS))


def traces(fig: go.Figure, kind: type = go.Scatter) -> list:
    return [t for t in fig.data if isinstance(t, kind)]


def notes(fig: go.Figure) -> list[str]:
    return [a.text for a in fig.layout.annotations]


def assert_readable(fig: go.Figure) -> None:
    """A title, every axis in use titled, and hover text on every trace that is not a filled band."""
    assert fig.data or fig.layout.annotations
    assert fig.layout.title.text
    for t in fig.data:
        assert t.hovertemplate or t.hoverinfo == "skip", t.name
    used = {getattr(t, "xaxis", None) or "x" for t in fig.data} | {getattr(t, "yaxis", None) or "y" for t in fig.data}
    for ref in used:
        axis = fig.layout[f"{ref[0]}axis{ref[1:]}"]
        shared = axis.matches is not None and axis.showticklabels is False  # titled on the panel below
        assert axis.title.text or shared, f"{ref} has no title"


# -- 1. latency against throughput per batch size -------------------------------------------------------
def test_batch_scatter_one_colour_per_batch_size_per_step():
    fig = P.batch_latency_throughput(batch_table())
    assert_readable(fig)
    assert [t.name for t in fig.data] == [f"batch {b}" for b in SIZES] * 2
    colours = {t.name: t.marker.color for t in fig.data[:4]}
    assert len(set(colours.values())) == 4
    assert all(t.marker.color == colours[t.name] for t in fig.data[4:])  # same colour in both panels
    assert [t.showlegend for t in fig.data] == [True] * 4 + [False] * 4
    assert fig.layout.legend.title.text == "Batch size"
    assert all(len(t.x) == len(SEQS) * REPEATS for t in fig.data)  # the warm-ups are left out
    assert fig.layout.xaxis.title.text == "Prefill throughput (tokens/s)"
    assert fig.layout.yaxis.title.text == "Prefill latency (ms)"
    assert fig.layout.xaxis2.title.text == "Decode throughput (tokens/s)"
    assert fig.layout.yaxis2.title.text == "Decode latency per token (ms)"
    assert "Throughput" in fig.data[0].hovertemplate and "Latency" in fig.data[0].hovertemplate
    batch8 = fig.data[3]
    first = batch_table().query("batch_size == 8 and not warmup").iloc[0]
    assert batch8.y[0] == pytest.approx(first[S.PREFILL_LATENCY_S] * 1000)
    assert batch8.x[0] == pytest.approx(first[S.PREFILL_THROUGHPUT])


def test_batch_scatter_overlays_seed_000():
    ref = load_reference("tgi-benchmark-mt0-xxl")
    fig = P.batch_latency_throughput(P.label_sets({"ours": batch_table(), "seed 000": ref.batch}))
    seed = [t for t in fig.data if t.name == "batch 16 · seed 000"]
    assert len(seed) == 2
    assert seed[0].x[0] == pytest.approx(8345.0) and seed[0].y[0] == pytest.approx(958.8)
    assert seed[1].x[0] == pytest.approx(131.28) and seed[1].y[0] == pytest.approx(121.88)
    ours = next(t for t in fig.data if t.name == "batch 1 · ours")
    assert seed[0].marker.symbol != ours.marker.symbol
    assert seed[0].marker.color not in {t.marker.color for t in fig.data if t.name.endswith("ours")}


def test_batch_scatter_one_step_and_its_columns_only():
    table = batch_table().drop(columns=[S.PREFILL_LATENCY_S, S.PREFILL_THROUGHPUT])
    fig = P.batch_latency_throughput(table, steps=("decode",))
    assert len(fig.data) == 4 and fig.layout.xaxis.title.text == "Decode throughput (tokens/s)"
    with pytest.raises(ValueError, match=r"missing column\(s\) prefill_throughput_tok_s, prefill_latency_s"):
        P.batch_latency_throughput(table)
    with pytest.raises(ValueError, match="steps"):
        P.batch_latency_throughput(table, steps=("both",))


def test_batch_scatter_partial_data():
    table = batch_table()
    one = table[~table[S.WARMUP]].head(1)
    fig = P.batch_latency_throughput(one)
    assert [len(t.x) for t in fig.data] == [1, 1]
    empty = table.assign(**{S.PREFILL_LATENCY_S: np.nan, S.DECODE_TOKEN_LATENCY_S: np.nan})
    fig = P.batch_latency_throughput(empty)
    assert fig.data == () and any("no measured batch rows" in n for n in notes(fig))
    assert P.batch_latency_throughput(table.head(0)).data == ()


# -- 2. throughput, speed and TTFT against parallel users ---------------------------------------------
def test_throughput_and_ttft_against_users_with_bands():
    points = points_table()
    fig = P.metrics_vs_users(points)
    assert_readable(fig)
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    bands = [t for t in fig.data if t.fill == "toself"]
    assert [t.name for t in lines] == ["prompt 128 / output 64", "prompt 512 / output 64"] * 2
    assert len(bands) == 2 and all(t.hoverinfo == "skip" for t in bands)
    assert lines[0].marker.color == lines[2].marker.color == bands[0].fillcolor
    throughput = points[points[S.PROMPT_TOKENS] == 128].sort_values(S.USERS)
    assert list(lines[0].x) == [1, 2, 4, 8, 16]
    assert np.allclose(lines[0].y, throughput[S.OUTPUT_THROUGHPUT])
    assert np.allclose(lines[2].y, throughput[TTFT["p50"]] * 1000)  # TTFT in ms: its values are under 1 s
    n = len(throughput)
    assert np.allclose(bands[0].y[:n], throughput[TTFT["p75"]] * 1000)
    assert np.allclose(bands[0].y[n:], throughput[TTFT["p25"]][::-1] * 1000)
    assert fig.layout.yaxis.title.text == "Output throughput (tokens/s)"
    assert fig.layout.yaxis2.title.text == "TTFT p50 (ms)"
    assert fig.layout.xaxis2.title.text == "Parallel users"
    assert list(fig.layout.xaxis2.tickvals) == [1, 2, 4, 8, 16]  # whole users only
    assert "p25–p75" in lines[2].hovertemplate


def test_speed_and_ttft_bars_like_happy_vllm():
    fig = P.speed_and_ttft_vs_users(points_table())
    assert_readable(fig)
    assert len(fig.data) == 4 and all(t.fill is None for t in fig.data)
    speed = fig.data[0]
    expected = points_table().query("prompt_tokens == 128").sort_values(S.USERS)
    assert np.allclose(speed.y, expected[SPEED["p50"]])
    assert np.allclose(speed.error_y.array, expected[SPEED["p75"]] - expected[SPEED["p50"]])
    assert np.allclose(speed.error_y.arrayminus, expected[SPEED["p50"]] - expected[SPEED["p25"]])
    assert fig.layout.yaxis.title.text == "Per-request speed p50 (tokens/s)"


def test_users_partial_data():
    points = points_table(prompts=(128,))
    points.loc[points[S.USERS] == 4, TTFT["p25"]] = np.nan  # no band at 4 users
    points.loc[points[S.USERS] == 8, TTFT["p50"]] = np.nan  # no point at 8 users
    fig = P.metrics_vs_users(points, ("ttft",))
    line, band = fig.data
    assert list(line.x) == [1, 2, 4, 16]
    assert list(band.x) == [1, 2, 16, 16, 2, 1]
    single = P.metrics_vs_users(points.head(1))
    assert [len(t.x) for t in single.data] == [1, 1, 2]
    no_bands = P.metrics_vs_users(points.drop(columns=[TTFT["p25"], TTFT["p75"]]), ("ttft",))
    assert len(no_bands.data) == 1
    with pytest.raises(ValueError, match="ttft_p50_s"):
        P.metrics_vs_users(points.drop(columns=[TTFT["p50"]]))
    with pytest.raises(ValueError, match="spread"):
        P.metrics_vs_users(points, spread="shade")


def test_users_repeats_reduced_to_their_median():
    points = points_table(users=(4,), prompts=(128,))
    again = points.assign(**{S.OUTPUT_THROUGHPUT: points[S.OUTPUT_THROUGHPUT] * 3, S.RUN_ID: "run-d"})
    third = points.assign(**{S.OUTPUT_THROUGHPUT: points[S.OUTPUT_THROUGHPUT] * 2, S.RUN_ID: "run-e"})
    fig = P.throughput_vs_users(pd.concat([points, again, third]))
    assert fig.data[0].y[0] == pytest.approx(points[S.OUTPUT_THROUGHPUT].iloc[0] * 2)
    assert "rows: %{customdata[0]}" in fig.data[0].hovertemplate and fig.data[0].customdata[0][0] == 3


# -- 3. ITL distributions -------------------------------------------------------------------------------
@pytest.mark.parametrize(("kind", "trace_type"), [("violin", go.Violin), ("box", go.Box),
                                                  ("histogram", go.Histogram), ("ecdf", go.Scatter)])
def test_itl_distribution_per_point(kind, trace_type):
    requests = requests_table()
    fig = P.itl_distribution(requests, kind=kind)
    assert_readable(fig)
    assert [t.name for t in fig.data] == ["users=1", "users=4"]
    assert all(isinstance(t, trace_type) for t in fig.data)
    measured = requests[~requests[S.WARMUP] & requests[S.ERROR].isna()]
    for t, point in zip(fig.data, ("users=1", "users=4"), strict=True):
        gaps = np.concatenate(measured[measured[S.POINT_ID] == point][S.ITL_S].tolist()) * 1000
        values = t.x if kind in ("histogram", "ecdf") else t.y
        if kind == "ecdf":
            assert values[-1] == pytest.approx(gaps.max()) and t.y[-1] == pytest.approx(1.0)
        else:
            assert sorted(values) == pytest.approx(sorted(gaps))  # warm-up and the failed request left out
    title = fig.layout.yaxis.title.text if kind in ("violin", "box") else fig.layout.xaxis.title.text
    assert title == "Inter-token latency (ms)"


def test_distribution_of_scalar_column_and_arrays_from_parquet():
    requests = requests_table()
    requests[S.ITL_S] = [np.asarray(v) for v in requests[S.ITL_S]]  # what read_parquet gives back
    assert len(P.itl_distribution(requests, by=[S.USERS]).data) == 2
    fig = P.distribution(requests, S.TTFT_S, by=S.USERS, kind="box")
    assert [t.name for t in fig.data] == ["users 1", "users 4"]
    assert fig.layout.yaxis.title.text == "TTFT (ms)"


def test_distribution_partial_data():
    requests = requests_table()
    empty = requests.assign(**{S.ITL_S: [[] for _ in range(len(requests))]})
    fig = P.itl_distribution(empty)
    assert fig.data == () and any("no measured values" in n for n in notes(fig))
    ecdf = P.itl_distribution(requests.iloc[[1]], kind="ecdf")
    assert len(ecdf.data[0].x) == 10
    with pytest.raises(ValueError, match="itl_s"):
        P.itl_distribution(requests.drop(columns=[S.ITL_S]))
    with pytest.raises(ValueError, match="kind"):
        P.itl_distribution(requests, kind="pie")


def test_ecdf_is_thinned_for_large_pools():
    many = pd.DataFrame({S.POINT_ID: ["p"], S.ITL_S: [list(np.linspace(0.01, 0.05, 50_000))]})
    line = P.itl_distribution(many, kind="ecdf").data[0]
    assert len(line.x) == P.distributions.ECDF_POINTS and line.y[-1] == 1.0 and line.x[-1] == pytest.approx(50.0)


# -- 4. heatmap -------------------------------------------------------------------------------------------
def test_heatmap_batch_size_by_sequence_length():
    table = batch_table()
    fig = P.batch_heatmap(table, S.PREFILL_LATENCY_S)
    assert_readable(fig)
    (heat,) = fig.data
    assert list(heat.x) == ["128", "256"] and list(heat.y) == ["1", "2", "4", "8"]
    measured = table[~table[S.WARMUP]]
    expected = measured.groupby([S.BATCH_SIZE, S.SEQUENCE_LENGTH])[S.PREFILL_LATENCY_S].median().unstack()
    assert np.allclose(heat.z, expected.to_numpy() * 1000)
    assert (heat.customdata == REPEATS).all()
    assert fig.layout.xaxis.type == "category" and fig.layout.xaxis.title.text == "Sequence length (tokens)"
    assert fig.layout.yaxis.title.text == "Batch size"
    assert fig.layout.coloraxis.colorbar.title.text == "Prefill latency (ms)"


def test_heatmap_facets_per_configuration_and_points():
    table = pd.concat([batch_table("a"), batch_table("b")])
    fig = P.batch_heatmap(table)
    assert [t.name for t in fig.data] == ["a", "b"] and {t.coloraxis for t in fig.data} == {"coloraxis"}
    points = P.batch_heatmap(points_table(), TTFT["p50"], x=S.PROMPT_TOKENS, y=S.USERS, agg="max")
    assert points.data[0].z.shape == (5, 2)
    holes = P.batch_heatmap(batch_table().query("batch_size != 2 or sequence_length != 256"))
    assert np.isnan(holes.data[0].z[1][1])
    with pytest.raises(ValueError, match="sequence_length"):
        P.batch_heatmap(points_table())


# -- 5. Pareto frontier -------------------------------------------------------------------------------
def brute_force_front(x, y):
    return [not any(xj >= xi and yj <= yi and (xj > xi or yj < yi) for xj, yj in zip(x, y, strict=True))
            and not (np.isnan(xi) or np.isnan(yi)) for xi, yi in zip(x, y, strict=True)]


def test_pareto_front_small_cases():
    df = pd.DataFrame({"x": [10, 20, 30, 20, 5, 30, np.nan], "y": [1.0, 2.0, 3.0, 5.0, 1.0, 3.0, 0.1]})
    # (10,1) and (20,2) and both (30,3) survive; (20,5) is beaten by (20,2); (5,1) by (10,1); NaN never
    assert pareto_front(df, "x", "y").tolist() == [True, True, True, False, False, True, False]
    assert pareto_front(df, "x", "y", maximize_x=False, minimize_y=False).tolist() == \
        [False, False, False, True, True, False, False]
    assert pareto_front(df.head(0), "x", "y").tolist() == []
    assert pareto_front(df.head(1), "x", "y").tolist() == [True]
    with pytest.raises(ValueError, match="z"):
        pareto_front(df, "x", "z")


@pytest.mark.parametrize("seed", range(20))
def test_pareto_front_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 12, 60).astype(float)  # few distinct values: ties on x and on y
    y = rng.integers(0, 12, 60).astype(float)
    x[rng.random(60) < 0.05] = np.nan
    df = pd.DataFrame({"x": x, "y": y}, index=rng.permutation(60) + 100)
    front = pareto_front(df, "x", "y")
    assert front.index.equals(df.index)
    assert front.tolist() == brute_force_front(x, y)


def test_pareto_plot_highlights_the_frontier_with_config_hover():
    fast = points_table("max_batch_size=4").assign(**{TTFT["p50"]: lambda d: d[TTFT["p50"]] * 0.5})
    big = points_table("max_batch_size=32").assign(**{S.OUTPUT_THROUGHPUT: lambda d: d[S.OUTPUT_THROUGHPUT] * 1.5})
    table = P.label_sets({"max_batch_size=4": fast, "max_batch_size=32": big})
    fig = P.pareto_plot(table)
    assert_readable(fig)
    assert [t.name for t in fig.data] == ["max_batch_size=4", "max_batch_size=32", "Pareto frontier"]
    front = pareto_front(table, S.OUTPUT_THROUGHPUT, TTFT["p50"])
    frontier = fig.data[-1]
    assert list(frontier.x) == sorted(table.loc[front, S.OUTPUT_THROUGHPUT])
    assert set(frontier.customdata[:, 0]) == set(table.loc[front, S.CONFIG_LABEL])
    for t in fig.data[:2]:
        on = np.asarray(t.marker.size) == 13
        rows = table[table[S.CONFIG_LABEL] == t.name]
        assert on.sum() == front[rows.index].sum()
        assert "on the Pareto frontier" in set(t.customdata[on, 0])
        assert t.name in t.hovertemplate and "Point" in t.hovertemplate
    assert fig.layout.yaxis.title.text == "TTFT p50 (ms)"


def test_axis_scale_is_the_unit_each_axis_is_drawn_in():
    table = points_table(prompts=(128,))
    fast, slow = table.assign(**{TTFT["p90"]: 0.25}), table.assign(**{TTFT["p90"]: 4.0})
    assert P.axis_scale(fast, TTFT["p90"]) == P.AxisScale(1000.0, "ms") and P.axis_scale(fast, TTFT["p90"])(5.0) == 5000
    assert P.axis_scale(slow, TTFT["p90"]) == P.AxisScale(1.0, "s")
    assert P.axis_scale(fast, TTFT["p90"], "s") == P.AxisScale(1.0, "s")
    assert P.axis_scale(fast, S.OUTPUT_THROUGHPUT) == P.AxisScale(1.0, "tokens/s")
    for df in (fast, slow):  # what the figure's axis says
        unit = P.axis_scale(df, TTFT["p90"]).unit
        assert P.pareto_plot(df, y=TTFT["p90"]).layout.yaxis.title.text == f"TTFT p90 ({unit})"
    with pytest.raises(ValueError, match="not a time unit"):
        P.axis_scale(fast, TTFT["p90"], "min")


@pytest.mark.parametrize(("ttft", "at", "text"), [(0.25, 5000.0, "≤ 5,000 ms"), (4.0, 5.0, "≤ 5 s")])
def test_pareto_plot_draws_objectives_in_the_axis_unit(ttft, at, text):
    table = points_table(prompts=(128,)).assign(**{TTFT["p90"]: ttft})
    fig = P.pareto_plot(table, y=TTFT["p90"], objectives={TTFT["p90"]: 5.0, S.OUTPUT_THROUGHPUT: 100.0})
    horizontal, vertical = fig.layout.shapes
    assert (horizontal.yref, horizontal.y0, horizontal.y1) == ("y", at, at)
    assert (vertical.xref, vertical.x0) == ("x", 100.0)  # throughput is drawn as it is, tokens/s
    texts = [a.text for a in fig.layout.annotations]
    assert texts == [f"objective: TTFT p90 {text}", "objective: Output throughput ≥ 100 tokens/s"]
    assert [t.name for t in fig.data] == [t.name for t in P.pareto_plot(table, y=TTFT["p90"]).data]  # no new trace
    with pytest.raises(ValueError, match="on neither axis"):
        P.pareto_plot(table, y=TTFT["p90"], objectives={TTFT["p50"]: 1.0})
    with pytest.raises(ValueError, match="finite number"):
        P.pareto_plot(table, objectives={TTFT["p50"]: float("nan")})


def test_pareto_plot_partial_data():
    table = points_table(prompts=(128,))
    table.loc[table.index[:3], TTFT["p50"]] = np.nan
    table[S.USERS] = table[S.USERS].astype("Int64").mask(table[S.USERS] == 16)  # <NA>: shown as a dash
    fig = P.pareto_plot(table)
    assert len(fig.data[0].x) == 2
    assert fig.data[0].customdata[-1, 1 + list(P.pareto.HOVER_COLUMNS).index(S.USERS)] == "–"
    assert P.pareto_plot(table.assign(**{S.CONFIG_LABEL: ""})).data[0].name == "(no configuration label)"
    none = P.pareto_plot(table.assign(**{TTFT["p50"]: np.nan}))
    assert any("no point" in n for n in notes(none))
    with pytest.raises(ValueError, match="config_label"):
        P.pareto_plot(table.drop(columns=[S.CONFIG_LABEL]))


# -- 6. queue and batch over time -----------------------------------------------------------------------
def test_server_timeline_steps_and_requests():
    fig = P.server_timeline(server_table(), requests=requests_table())
    assert_readable(fig)
    queue, batch = fig.data[:2]
    assert (queue.name, batch.name) == ("queue size", "batch size")
    assert queue.line.shape == batch.line.shape == "hv"
    assert list(queue.y) == [0, 2, 5, 3, 0] and list(batch.y) == [1, 4, 4, 4, 2]
    assert list(queue.x) == [0.0, 0.5, 1.0, 1.5, 2.0]
    clients = fig.data[2:]
    assert [t.name for t in clients] == ["users=1", "users=1 (failed)", "users=4"]
    assert all(t.xaxis == "x2" for t in clients)
    assert len(clients[0].x) + len(clients[2].x) == 15  # 16 measured, one failed drawn apart
    assert fig.layout.xaxis2.title.text == "Time since run start (s)"
    assert fig.layout.yaxis2.title.text == "TTFT (ms)"


def test_server_timeline_without_samples():
    for server in (None, server_table().head(0), server_table().query("metric == 'process_cpu_percent'")):
        fig = P.server_timeline(server)
        assert fig.data == () and any("no server samples" in n for n in notes(fig))
    fig = P.server_timeline(None, requests=requests_table())
    assert len(fig.data) == 3
    with pytest.raises(ValueError, match="value"):
        P.server_timeline(server_table().drop(columns=[S.VALUE]))
    with pytest.raises(ValueError, match="sent_s"):
        P.server_timeline(server_table(), requests=requests_table().drop(columns=[S.SENT_S]))


def test_server_timeline_runs_and_vllm_names():
    two = pd.concat([server_table("a"), server_table("b", queue=(1, 1, 1, 1, 1))])
    fig = P.server_timeline(two)
    assert [t.name for t in fig.data] == ["queue size (a)", "queue size (b)", "batch size (a)", "batch size (b)"]
    only_b = P.server_timeline(two, run_id="b")
    assert list(only_b.data[0].y) == [1] * 5
    vllm = server_table().replace({"tgi_queue_size": "vllm:num_requests_waiting",
                                   "tgi_batch_current_size": "vllm:num_requests_running"})
    assert [list(t.y) for t in P.server_timeline(vllm).data] == [[0, 2, 5, 3, 0], [1, 4, 4, 4, 2]]


def test_kv_usage_from_tgi_gauges_and_vllm_fraction():
    fig = P.kv_usage_timeline(server_table())
    assert_readable(fig)
    assert np.allclose(fig.data[0].y, [256 * b / 2048 for b in (1, 4, 4, 4, 2)])
    vllm = pd.DataFrame({S.RUN_ID: "r", S.T_S: [0.0, 1.0], S.METRIC: "vllm:kv_cache_usage_perc", S.LABELS: "",
                         S.VALUE: [0.25, 0.5]})
    assert list(P.kv_usage_timeline(vllm).data[0].y) == [0.25, 0.5]
    assert any("no KV samples" in n for n in notes(P.kv_usage_timeline(None)))


# -- 7. side by side ------------------------------------------------------------------------------------
def test_compare_batch_against_seed_000_table():
    ref = load_reference("tgi-benchmark-mt0-xxl")
    fig = P.compare_batch({"ours": batch_table(), "seed 000": ref.batch_stats})
    assert_readable(fig)
    assert [t.name for t in fig.data] == ["ours", "seed 000"] * 4
    assert fig.data[0].marker.color != fig.data[1].marker.color
    assert list(fig.data[0].x) == ["1", "2", "4", "8", "16"]
    seed_prefill = fig.data[1]
    assert seed_prefill.y[-1] == pytest.approx(958.8)
    assert seed_prefill.error_y.array[-1] == pytest.approx(970.9 - 958.8)
    assert seed_prefill.error_y.arrayminus[-1] == pytest.approx(958.8 - 946.7)
    measured = batch_table().query("not warmup and batch_size == 1")[S.PREFILL_LATENCY_S] * 1000
    ours = fig.data[0]
    assert ours.y[0] == pytest.approx(measured.mean())
    assert ours.error_y.array[0] == pytest.approx(measured.max() - measured.mean())
    assert np.isnan(ours.y[-1])  # no batch 16 of ours: a gap, not a zero
    assert fig.layout.yaxis.title.text == "Prefill latency (ms)"
    assert fig.layout.yaxis2.title.text == "Prefill throughput (tokens/s)"
    with pytest.raises(ValueError, match=r"compare_batch\['x'\].*decode_throughput_tok_s"):
        P.compare_batch({"x": batch_table().drop(columns=[S.DECODE_THROUGHPUT])})


def test_compare_points_with_a_happy_vllm_card():
    card = load_reference("happy-vllm-codellama-7b-a100")
    fig = P.compare_points({"ours": points_table(prompts=(1024,)), "seed 001": card.points}, ("speed",),
                           center="mean")
    assert_readable(fig)
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    assert [t.name for t in lines] == ["ours / prompt 1024 / output 64", "seed 001 / prompt 1024 / output 128"]
    assert list(lines[1].x) == [10] and list(lines[1].y) == [41.0]
    assert lines[0].line.color != lines[1].line.color


# -- prompt ingestion ---------------------------------------------------------------------------------
def ingestion_requests(outlier: bool = True) -> pd.DataFrame:
    lengths = np.repeat([64, 128, 256, 512, 1024], 4)
    ttft = 0.02 + lengths / 8000.0  # 8000 tokens/s
    rows = [{S.PROMPT_TOKENS: int(n), S.INPUT_TOKENS: int(n), S.TTFT_S: t, S.WARMUP: False} for n, t in
            zip(lengths, ttft, strict=True)]
    if outlier:
        rows[5][S.TTFT_S] += 1.0  # met a busy server
    return typed(rows, S.REQUEST_COLUMNS)


def test_ingestion_fit_drops_the_outlier():
    fit = P.fit_ingestion(ingestion_requests())
    assert fit["speed_tok_s"] == pytest.approx(8000.0)
    assert fit["intercept_s"] == pytest.approx(0.02)
    assert fit["n"] == 19  # the request that met a busy server is not fitted
    # which one: a mask over the requests table's index
    assert fit["kept"].index.equals(ingestion_requests().index) and list(fit["kept"][~fit["kept"]].index) == [5]
    fig = P.ingestion_plot(ingestion_requests())
    assert_readable(fig)
    points, outliers, line = fig.data
    assert len(points.x) == 19 and line.name == "fit (19 of 20 requests,<br>outliers left out)"  # legend: wrapped
    # the outlier drawn apart, in grey, where it was measured
    assert outliers.name == "outliers (left out of the fit)" and outliers.marker.color == "#b0b0b0"
    assert list(outliers.x) == [128] and list(outliers.y) == pytest.approx([(1.02 + 128 / 8000) * 1000])
    assert points.marker.color != outliers.marker.color
    together = P.ingestion_plot(ingestion_requests(), grey_outliers=False)
    assert len(together.data) == 2 and len(together.data[0].x) == 20 and together.data[1].name == line.name
    assert list(line.y) == pytest.approx([(0.02 + 64 / 8000) * 1000, (0.02 + 1024 / 8000) * 1000])
    assert "8,000 tokens/s" in fig.layout.title.text
    assert fig.layout.xaxis.title.text == "Prompt length (tokens)" and fig.layout.yaxis.title.text == "TTFT (ms)"


def test_ingestion_uses_the_ingestion_scenario_and_measured_requests():
    requests = ingestion_requests(outlier=False).assign(**{S.SCENARIO: "ingestion"})
    noise = requests.assign(**{S.SCENARIO: "concurrency", S.TTFT_S: 5.0})
    warm = requests.head(3).assign(**{S.WARMUP: True, S.TTFT_S: 9.0})
    table = pd.concat([requests, noise, warm], ignore_index=True)
    fit = P.fit_ingestion(table)
    assert fit["speed_tok_s"] == pytest.approx(8000.0) and fit["n"] == 20
    assert fit["kept"].tolist() == [True] * 20 + [False] * 23  # other scenarios and warm-ups are not fitted
    no_outlier = P.ingestion_plot(requests)
    assert [t.name for t in no_outlier.data] == ["requests", "fit (20 of 20 requests)"]  # no empty grey trace


def test_ingestion_partial_data():
    requests = ingestion_requests(outlier=False)
    requests[S.INPUT_TOKENS] = pd.array([pd.NA] * len(requests), dtype="Int64")  # falls back to prompt_tokens
    assert P.fit_ingestion(requests)["speed_tok_s"] == pytest.approx(8000.0)
    one_length = requests[requests[S.PROMPT_TOKENS] == 64]
    assert np.isnan(P.fit_ingestion(one_length)["speed_tok_s"])
    assert any("too few" in n for n in notes(P.ingestion_plot(one_length)))
    assert any("no measured" in n for n in notes(P.ingestion_plot(requests.head(0))))
    with pytest.raises(ValueError, match="input_tokens or prompt_tokens"):
        P.fit_ingestion(requests.drop(columns=[S.INPUT_TOKENS, S.PROMPT_TOKENS]))


def test_figures_are_returned_not_shown(monkeypatch):
    monkeypatch.setattr(go.Figure, "show", lambda *a, **k: pytest.fail("a plot function called show()"))
    for fig in (P.batch_latency_throughput(batch_table()), P.metrics_vs_users(points_table()),
                P.itl_distribution(requests_table()), P.batch_heatmap(batch_table()),
                P.pareto_plot(points_table()), P.server_timeline(server_table()),
                P.compare_batch({"a": batch_table()})):
        assert isinstance(fig, go.Figure)


# -- real runs -----------------------------------------------------------------------------------------
def test_figures_of_the_committed_example_set():
    from tgi_toolkit.bench import load_results
    from tgi_toolkit.cookbook import example_results_dir

    results = load_results(example_results_dir())
    conc = results.points[results.points[S.SCENARIO] == "concurrency"]
    conc_requests = results.requests[results.requests[S.SCENARIO] == "concurrency"]
    users = P.metrics_vs_users(conc)
    # natural order: 128 before 1024, users=2 before users=10, whatever the text sorts to
    assert [t.name for t in users.data[:2]] == ["prompt 128 / output 32", "prompt 1024 / output 128"]
    itl = P.itl_distribution(conc_requests[conc_requests[S.PROMPT_TOKENS] == 128])
    assert [t.name.split(",")[0] for t in itl.data] == ["users=1", "users=2", "users=4", "users=10"]
    run_id = conc[S.RUN_ID].iloc[0]
    server = P.server_timeline(results.server, requests=results.requests, run_id=run_id)
    assert max(server.data[1].y) >= 2  # the running batch did grow under parallel users
    ingestion = P.ingestion_plot(results.requests)
    assert ingestion.data[1].name.startswith("fit (") and "tokens/s" in ingestion.layout.title.text
    for fig in (users, itl, server, ingestion, P.batch_latency_throughput(results.batch), P.pareto_plot(conc),
                P.kv_usage_timeline(results.server, run_id=run_id), P.batch_heatmap(results.batch),
                P.compare_points({"ours": conc, "seed 001": load_reference("happy-vllm-codellama-7b-a100").points},
                                 ("speed",), center="mean")):
        assert_readable(fig)
        assert fig.data and not [n for n in notes(fig) if n.startswith(("no ", "too few"))]


# -- a real run -----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_figures_of_a_tiny_run_against_the_embedded_engine(engine_url, tmp_path):
    from tgi_toolkit.bench import load_results, run_batch, run_concurrency

    common = {"output": tmp_path, "progress": False, "scrape_interval": 0.1}
    run_batch(engine_url, batch_sizes=[1, 2], sequence_length=16, decode_length=8, runs=2, warmups=1, **common)
    run_concurrency(engine_url, users=[1, 4], prompt_tokens=16, max_new_tokens=8, requests=8, **common)
    results = load_results(tmp_path)  # what a notebook reads back: the parquet files' dtypes
    conc = results.points[results.points[S.SCENARIO] == "concurrency"]
    figures = {
        "batch": P.batch_latency_throughput(results.batch),
        "users": P.metrics_vs_users(conc),
        "itl": P.itl_distribution(results.requests[results.requests[S.SCENARIO] == "concurrency"], kind="ecdf"),
        "heatmap": P.batch_heatmap(results.batch),
        "pareto": P.pareto_plot(conc),
        "server": P.server_timeline(results.server, requests=results.requests,
                                    run_id=conc[S.RUN_ID].iloc[0]),
        "kv": P.kv_usage_timeline(results.server, run_id=conc[S.RUN_ID].iloc[0]),
        "compare": P.compare_batch({"ours": results.batch,
                                    "seed 000": load_reference("tgi-benchmark-mt0-xxl").batch_stats}),
    }
    for name, fig in figures.items():
        assert_readable(fig)
        assert fig.data, name
        (tmp_path / f"{name}.html").write_text(fig.to_html(include_plotlyjs=False))
    batch = figures["batch"]
    assert [t.name for t in batch.data] == ["batch 1", "batch 2"] * 2
    assert all(len(t.x) == 2 for t in batch.data)  # two runs each, the warm-up left out
    users = [t for t in figures["users"].data if t.mode == "lines+markers"]
    assert [list(t.x) for t in users] == [[1, 4], [1, 4]]
    assert len(figures["itl"].data) == 2
    queue, running = figures["server"].data[:2]
    assert (queue.name, running.name) == ("queue size", "batch size") and len(running.x) >= 2
    assert max(running.y) >= 1  # the server did run the requests
    assert 0 < max(figures["kv"].data[0].y) < 1
