"""The model card (tgi_toolkit.report) from the committed example result set: main metrics and how each
was obtained, parameters, figures, the Markdown + HTML files and the CLI."""

from __future__ import annotations

import copy
import math
import re

import numpy as np
import pandas as pd
import pytest

from tgi_toolkit import report, report_figures, report_sections
from tgi_toolkit import schema as S
from tgi_toolkit.bench import load_results
from tgi_toolkit.bench.results import Results
from tgi_toolkit.cli import main as cli_main
from tgi_toolkit.cookbook import example_results_dir


@pytest.fixture(scope="module")
def example() -> Results:
    return load_results(example_results_dir())


def _copy(results: Results) -> Results:
    return Results(results.requests.copy(), results.points.copy(), results.batch.copy(), results.server.copy(),
                   copy.deepcopy(results.runs), results.path)


def _only(results: Results, scenario: str) -> Results:
    out = _copy(results)
    for name in ("requests", "points", "batch"):
        df = getattr(out, name)
        setattr(out, name, df[df[S.SCENARIO] == scenario].reset_index(drop=True))
    out.runs = [r for r in out.runs if r["scenario"] == scenario]
    return out


def test_main_metrics_of_the_example(example: Results) -> None:
    metrics = report.main_metrics(example).set_index("metric")
    assert list(metrics.index) == [report.INGESTION, report.GENERATION, report.KV_CAPACITY]
    assert (metrics["value"] > 0).all()
    # the example holds happy_vllm's exact point: 10 users, 1024-token prompts, 128 generated
    gen = metrics.loc[report.GENERATION]
    assert gen["label"] == ("Mean generation speed for 10 parallel requests with a prompt of 1024 tokens and "
                            "128 tokens generated")
    assert gen["basis"].startswith("measured at that point")
    point = example.points[(example.points[S.USERS] == 10) & (example.points[S.PROMPT_TOKENS] == 1024)]
    assert gen["value"] == pytest.approx(float(point[S.stat_column("speed", "mean")].iloc[0]))
    assert gen["text"].endswith("t/s for each request")
    fit = example.ingestion()
    assert metrics.loc[report.INGESTION, "value"] == pytest.approx(fit["speed_tok_s"])
    # kept: the ingestion requests the line was fitted to, as a mask over the requests table
    assert fit["kept"].index.equals(example.requests.index) and fit["kept"].sum() == fit["n"]
    assert (example.requests.loc[fit["kept"], S.SCENARIO] == "ingestion").all()
    kv = metrics.loc[report.KV_CAPACITY]
    assert kv["value"] == example.runs[0]["info"]["max_batch_total_tokens"]
    assert kv["text"] == f"~{round(kv['value'] / 1000)}k tokens" and "stated by the server" in kv["basis"]
    # one implementation: Results.main_metrics() and a folder path give the card's very table
    assert example.main_metrics().equals(report.main_metrics(example))
    assert report.main_metrics(example_results_dir()).drop(columns="config_label").equals(
        report.main_metrics(example).drop(columns="config_label"))


def test_generation_speed_nearest_point_is_named(example: Results) -> None:
    # 3 users: 4 is nearer than 2 on a log scale (4/3 < 3/2)
    metric = report.generation_speed(example, users=3, prompt_tokens=128, max_new_tokens=32)
    assert metric.label.startswith("Mean generation speed for 4 parallel requests with a prompt of 128 tokens and 32")
    assert "nearest point" in metric.basis and "3 parallel requests" in metric.basis
    exact = report.generation_speed(example, users=2, prompt_tokens=128, max_new_tokens=32)
    assert exact.basis.startswith("measured at that point")


def test_generation_speed_point_cut_to_what_the_server_takes(example: Results) -> None:
    small = _copy(example)
    for run in small.runs:
        run["info"] = {**run["info"], "max_input_tokens": 100, "max_total_tokens": 132}
    (users, prompt, output), why = report.card_point(small)
    assert (users, prompt, output) == (10, 100, 32)
    assert "max_input_tokens is 100" in why and "max_total_tokens is 132" in why
    metric = report.generation_speed(small)
    assert "the server takes at most 100/32" in metric.basis


def test_metrics_missing_from_the_results_say_why(example: Results) -> None:
    batch_only = _only(example, "batch")
    metrics = report.main_metrics(batch_only).set_index("metric")
    assert math.isnan(metrics.loc[report.INGESTION, "value"])
    assert "no ingestion run" in metrics.loc[report.INGESTION, "basis"]
    assert "no concurrency point" in metrics.loc[report.GENERATION, "basis"]
    assert metrics.loc[report.GENERATION, "text"] == "-"


def test_several_configurations_get_one_column_each(example: Results) -> None:
    two = _copy(example)
    other = _only(example, "concurrency")
    for df in (other.points, other.requests):
        df[S.CONFIG_ID] = "other"
        df[S.CONFIG_LABEL] = "max_batch_size=4"
    for run in other.runs:
        run.update(config_id="other", config_label="max_batch_size=4",
                   launcher_config={**run["launcher_config"], "max_batch_size": 4})
    two.points = pd.concat([two.points, other.points], ignore_index=True)
    two.requests = pd.concat([two.requests, other.requests], ignore_index=True)
    two.runs = two.runs + other.runs
    assert list(report.split_by_config(two)) == [example.runs[0]["config_label"], "max_batch_size=4"]
    params = report_sections.parameters(two)
    assert list(params.columns) == [example.runs[0]["config_label"], "max_batch_size=4"]
    assert params.loc["max_batch_size"].tolist() == ["16", "4"]
    assert [f.name for f in report_figures.card_figures(two)][-1] == "pareto"
    table = report.main_metrics_table(report.main_metrics(two))
    assert table.columns.tolist() == params.columns.tolist()
    assert table.index[1].startswith("Mean generation speed for 10 parallel requests with a prompt of 1024")

    # measured at different points: the row says what was asked, each cell where it was measured
    two.points = two.points[~((two.points[S.CONFIG_ID] == "other") & (two.points[S.PROMPT_TOKENS] == 1024))]
    table = report.main_metrics_table(report.main_metrics(two))
    assert table.index[1] == "Mean generation speed (see each cell for the point)"
    assert table.iloc[1, 0].endswith("(10 users, 1024/128 tokens)")
    assert table.iloc[1, 1].endswith("(10 users, 128/32 tokens)")


def test_parameters_come_from_the_provenance(example: Results) -> None:
    params = report_sections.parameters(example).iloc[:, 0]
    assert params["model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert params["backend"] == "embedded"
    assert params["max_total_tokens"] == "2048" and params["max_batch_size"] == "16"
    assert params["max_batch_prefill_tokens"] == "None"  # as recorded: left to the server
    assert params["max_batch_prefill_tokens (resolved by the server)"] == "1586"
    assert params["api_key"] == "None"


def test_write_report_with_html_figures(example: Results, tmp_path) -> None:
    path = report.write_report(example, tmp_path / "card", figure_format="html")
    assert path == tmp_path / "card" / "model_card.md"
    md = path.read_text()
    html = (tmp_path / "card" / "model_card.html").read_text()
    figures = tmp_path / "card" / "figures"
    assert md.startswith("Model card for SmolLM2-135M-Instruct on 2-core CPU\n====")
    # the seeds' section order, and their centred two-column table
    assert [line for line in md.splitlines() if line.startswith("# ")][:3] == [
        "# Main metrics", "# Total generation speed", "# Generation speed and latency"]
    assert md.splitlines()[-1].startswith("|")  # the parameters table closes the card
    assert "|Metric|Value|\n| :---: | :---: |\n|Prompt ingestion speed|~" in md
    links = re.findall(r"\]\((\./figures/[^)]+)\)", md)
    assert "./figures/total_speed_generation_graph.html" in links
    assert "./figures/speed_generation/speed_generation_graph_input_1024_output_128.html" in links
    for link in links:
        assert (tmp_path / "card" / link).is_file()
    assert (figures / "plotly.min.js").stat().st_size > 1_000_000
    nested = (figures / "speed_generation" / "speed_generation_graph_input_128_output_32.html").read_text()
    assert 'src="../plotly.min.js"' in nested
    # the HTML report: one file, plotly.js inline once, every figure and table
    assert html.count("<table>") == md.count("| :---: |")
    assert html.count('class="plotly-graph-div"') == len(links)
    assert html.count("Plotly.newPlot") == len(links)
    assert not re.search(r'<script[^>]*src="https?:', html)  # opens offline
    assert "<pre>" in html  # text-generation-benchmark's tables of the batch run


def test_write_report_to_an_html_file_writes_the_markdown_beside_it(example: Results, tmp_path) -> None:
    out = tmp_path / "report.html"
    assert report.write_report(example, out, figure_format="html") == out
    assert out.is_file() and (tmp_path / "report.md").is_file() and (tmp_path / "figures").is_dir()
    # any other ending is a folder
    assert report.write_report(example, tmp_path / "card.v2", figure_format="html") == \
        tmp_path / "card.v2" / "model_card.md"


def test_png_asked_for_without_a_renderer_is_refused(example: Results, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(report, "png_renderer_available", lambda: False)
    with pytest.raises(ValueError, match="kaleido"):
        report.write_report(example, tmp_path, figure_format="png")
    # auto falls back to HTML figures
    md = report.write_report(example, tmp_path, figure_format="auto").read_text()
    assert "(interactive figure)](./figures/" in md and "<img" not in md
    with pytest.raises(ValueError, match="figure_format"):
        report.write_report(example, tmp_path, figure_format="svg")


@pytest.mark.slow
@pytest.mark.skipif(not report_figures.png_renderer_available(), reason="needs kaleido and an installed Chromium")
def test_write_report_with_png_figures(example: Results, tmp_path) -> None:
    md = report.write_report(example, tmp_path, figure_format="png").read_text()
    images = re.findall(r'<img src="(\./figures/[^"]+\.png)" width="800"/>', md)
    assert "./figures/total_speed_generation_graph.png" in images
    for image in images:
        assert (tmp_path / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_empty_results_are_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="nothing to report"):
        report.write_report(Results(), tmp_path)


def test_cli(tmp_path, capsys) -> None:
    out = tmp_path / "card.md"
    assert cli_main(["report", str(example_results_dir()), "--output", str(out), "--figures", "html"]) == 0
    printed = capsys.readouterr().out
    assert f"model card: {out}" in printed and f"HTML report: {tmp_path / 'card.html'}" in printed
    assert out.is_file() and (tmp_path / "card.html").is_file()
    assert cli_main(["report", str(tmp_path / "missing")]) == 2
    assert "is not a results folder" in capsys.readouterr().err


def test_the_card_of_the_shipped_example_goes_to_out_never_into_the_source_tree(tmp_path, monkeypatch,
                                                                                capsys) -> None:
    # issue 43: `tgi-toolkit report data/examples/...` wrote an untracked report/ folder into data/
    example = example_results_dir()
    monkeypatch.setenv("TGI_TOOLKIT_OUT", str(tmp_path / "out"))
    before = sorted(p.name for p in example.iterdir())
    assert cli_main(["report", str(example), "--figures", "html"]) == 0
    assert sorted(p.name for p in example.iterdir()) == before
    card = tmp_path / "out" / "report" / example.name / "model_card.md"
    assert card.is_file() and f"model card: {card}" in capsys.readouterr().out
    # a results folder of the user's own keeps its card beside the results
    assert report.default_output(tmp_path / "results") == tmp_path / "results" / "report"


# -- issue 15 item 6: results that never overstate ------------------------------------------------------------
def _scattered(results: Results, seed: int = 1) -> Results:
    """The example's ingestion TTFTs with 150 ms of seeded noise each: what a busy machine does to them."""
    out = _copy(results)
    rows = out.requests[S.SCENARIO] == "ingestion"
    noise = np.random.default_rng(seed).normal(0, 0.15, int(rows.sum()))
    out.requests.loc[rows, S.TTFT_S] = (out.requests.loc[rows, S.TTFT_S] + noise).abs()
    return out


def test_a_poor_ingestion_fit_is_never_a_number_alone(example: Results) -> None:
    good = report.main_metrics(example).set_index("metric").loc[report.INGESTION]
    assert "not to be quoted" not in good["text"]  # r² 0.99 over 15 requests and 5 lengths
    fit = example.ingestion()
    assert f"15 requests one at a time, prompts of 32 to 1024 tokens, r\u00b2 = {fit['r2_all']:.2f} over all" \
        in good["basis"]
    poor = _scattered(example)
    fit = poor.ingestion()
    assert fit["r2"] < 0.9
    row = report.main_metrics(poor).set_index("metric").loc[report.INGESTION]
    reason = (f"not to be quoted: TTFT scatters around the line (r\u00b2 {fit['r2']:.2f} over the {fit['n']:.0f} "
              f"requests fitted, 0.9 needed)")
    assert row["text"].endswith(f" t/s, {reason}")
    assert reason in row["basis"]
    (figure,) = [f for f in report_figures.card_figures(poor) if f.name.startswith("prompt_ingestion")]
    assert reason in figure.figure.layout.title.subtitle.text  # the title keeps its number, the subtitle why
    # too few requests: 4 of two lengths fit a line perfectly, and mean nothing
    few = _copy(example)
    ingestion = few.requests[few.requests[S.SCENARIO] == "ingestion"]
    keep = ingestion[ingestion[S.PROMPT_TOKENS].isin([32, 1024])].index[:4]
    few.requests = few.requests.drop(ingestion.index.difference(keep)).reset_index(drop=True)
    unreliable = few.ingestion()["unreliable"]
    assert unreliable == "not to be quoted: 4 of the 5 requests needed; 2 of the 3 prompt lengths needed"


def test_a_perfect_fit_of_too_few_requests_says_how_many_were_trimmed() -> None:
    # issue 26: 6 ingestion requests, 2 trimmed, read "~4030 t/s, unreliable (r² = 1.00)". By hand: TTFT =
    # 10 ms + length / 4000 t/s for 100, 200, 300 tokens twice, two of them 0.5 s late: the 4 others lie on
    # the line (4000 t/s, r² 1 over them); over all 6 the late two leave r² = 1 - 0.5 / 0.3108 = -0.61.
    from tgi_toolkit.bench.stats import ingestion_fit

    lengths = [100, 100, 200, 200, 300, 300]
    ttft = [0.01 + n / 4000 + (0.5 if i in (1, 3) else 0) for i, n in enumerate(lengths)]
    fit = ingestion_fit(lengths, ttft)
    assert fit["speed_tok_s"] == pytest.approx(4000) and fit["r2"] == pytest.approx(1)
    assert (fit["n"], fit["measured"]) == (4, 6) and fit["r2_all"] == pytest.approx(-0.6086, abs=1e-4)
    assert fit["unreliable"] == "not to be quoted: 4 of the 5 requests needed (2 of 6 trimmed as outliers)"
    # enough requests, but 3 of 10 trimmed: more than a quarter, so the line fits a chosen few
    lengths = [100, 100, 200, 200, 300, 300, 400, 400, 500, 500]
    ttft = [0.01 + n / 4000 + (0.5 if i in (1, 3, 5) else 0) for i, n in enumerate(lengths)]
    fit = ingestion_fit(lengths, ttft)
    assert (fit["n"], fit["measured"]) == (7, 10) and fit["speed_tok_s"] == pytest.approx(4000)
    assert fit["unreliable"] == "not to be quoted: 3 of 10 requests trimmed as outliers (a quarter at most)"


def test_each_configurations_ingestion_figure_agrees_with_its_table_cell(example: Results) -> None:
    # The quickstart's card: the table said ~1560 t/s (one configuration's fit) and the figure
    # 5,512 tokens/s (a fit over every configuration's requests at once).
    two = _copy(example)
    other = _only(_scattered(example, seed=2), "ingestion")
    other.requests[S.CONFIG_ID] = "other"
    other.requests[S.CONFIG_LABEL] = "max_batch_size=4"
    other.requests[S.TTFT_S] *= 3
    for run in other.runs:
        run.update(config_id="other", config_label="max_batch_size=4")
    two.requests = pd.concat([two.requests, other.requests], ignore_index=True)
    two.runs = two.runs + other.runs
    metrics = report.main_metrics(two)
    speeds = metrics[metrics["metric"] == report.INGESTION].set_index("config_label")["value"]
    titles = [f.figure.layout.title.text for f in report_figures.card_figures(two)
              if f.name.startswith("prompt_ingestion")]
    assert len(titles) == 2 == len(speeds)
    for (config, speed), title in zip(speeds.items(), titles, strict=True):
        # the number first, then the setting that tells the configurations apart (all of them: the parameters)
        batch = config.split("max_batch_size=")[1].split(",")[0]  # 16 (the example's), 4 (the other's)
        assert title.startswith(f"Prompt ingestion: {speed:,.0f} tokens/s, max_batch_size={batch}, ")


def test_points_measured_on_a_busy_machine_are_flagged_on_the_card(example: Results, tmp_path) -> None:
    busy = _copy(example)
    busy.points[S.MACHINE_BUSY] = False
    busy.points[S.CLIENT_BOUND] = False
    busy.points[S.OTHER_CPU_CORES] = 0.1
    card_point = (busy.points[S.SCENARIO] == "concurrency") & (busy.points[S.USERS] == 10) & (
        busy.points[S.PROMPT_TOKENS] == 1024)
    busy.points.loc[card_point, S.MACHINE_BUSY] = True
    busy.points.loc[card_point, S.OTHER_CPU_CORES] = 1.4
    md = report.write_report(busy, tmp_path / "card", figure_format="html").read_text()
    assert "# Measurement conditions" in md
    flagged = [line for line in md.splitlines() if "machine busy (other processes took CPU)" in line]
    assert len(flagged) == int(card_point.sum()) and all("|1.4|" in line for line in flagged)
    speed = report.main_metrics(busy).set_index("metric").loc[report.GENERATION]
    assert "measured while the machine was busy" in speed["basis"]
    quiet = report.write_report(example, tmp_path / "quiet", figure_format="html").read_text()
    assert "Measurement conditions" not in quiet
