"""The model card where people read it: its HTML report opened in a real browser (Debian's chromium driven
by Playwright, as the app's browser tests do) in a 1,280-pixel-wide window, which it must fit without
scrolling sideways for up to 4 configurations, each plot keeping at least half of its figure's width (issue
43: legends of ~90-character configuration labels squeezed plots to 70-130 px), no title cut, no word of a
table broken. Screenshots go to out/report/."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pytest

from tests.test_app_browser import BROWSER_ARGS, NO_BROWSER, find_browser
from tgi_toolkit import report
from tgi_toolkit import schema as S
from tgi_toolkit.bench import load_results
from tgi_toolkit.bench.results import Results
from tgi_toolkit.cookbook import example_results_dir, out_dir

pytestmark = pytest.mark.slow
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra)")

WIDTH = 1280
# Sweep labels as long as real ones: two knobs each, a fraction with 4 significant digits.
LABELS = ["cuda_memory_fraction=0.006867, max_batch_prefill_tokens=512",
          "cuda_memory_fraction=0.006867, max_batch_prefill_tokens=2048",
          "cuda_memory_fraction=1.0, max_batch_prefill_tokens=512",
          "cuda_memory_fraction=1.0, max_batch_prefill_tokens=2048"]


def four_configurations(labels: Sequence[str] = LABELS) -> Results:
    """The example result set (a real run of the embedded engine) as if a sweep had measured it under 4
    configurations: the card's layout is what is tested here, not the numbers."""
    example = load_results(example_results_dir())
    parts = []
    for i, label in enumerate(labels):
        part = Results(*(df.copy() for df in (example.requests, example.points, example.batch, example.server)),
                       copy.deepcopy(example.runs), example.path)
        for df in (part.requests, part.points, part.batch, part.server):
            if S.CONFIG_ID in df:
                df[S.CONFIG_ID] = f"config-{i}"
            if S.CONFIG_LABEL in df:
                df[S.CONFIG_LABEL] = label
        for run in part.runs:
            run.update(config_id=f"config-{i}", config_label=label, run_id=f"{run['run_id']}-{i}")
        for df in (part.requests, part.points, part.batch, part.server):
            if S.RUN_ID in df:
                df[S.RUN_ID] = df[S.RUN_ID] + f"-{i}"
        parts.append(part)
    return Results(*(pd.concat([getattr(p, name) for p in parts], ignore_index=True)
                     for name in ("requests", "points", "batch", "server")),
                   [run for p in parts for run in p.runs], None)


def test_the_card_of_four_configurations_fits_a_1280_pixel_window(tmp_path) -> None:
    if find_browser() is None:
        pytest.skip(NO_BROWSER)
    md = report.write_report(four_configurations(), tmp_path / "card", figure_format="html").read_text()
    # configurations as rows under short headers, the full metric names in the legend above
    assert "|Configuration|Prompt ingestion|Generation speed|KV-cache capacity|" in md
    assert all(f"|{label}|~" in md for label in LABELS)
    assert "Generation speed: Mean generation speed for 10 parallel requests" in md
    html = tmp_path / "card" / "model_card.html"
    shot = out_dir("report") / "card_1280.png"
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=find_browser(), args=BROWSER_ARGS)
        page = browser.new_page(viewport={"width": WIDTH, "height": 900})
        try:
            page.goto(html.as_uri())
            page.wait_for_selector(".plotly-graph-div", timeout=60_000)
            page.screenshot(path=str(shot), full_page=True)
            overflow = page.evaluate("""() => {
                const width = document.documentElement.clientWidth;
                return {width, scroll: document.documentElement.scrollWidth,
                        wide: [...document.querySelectorAll('table, h1, h2, p, .plotly-graph-div')]
                              .filter(e => e.getBoundingClientRect().right > width + 1)
                              .map(e => e.tagName + ': ' + e.textContent.slice(0, 60))};
            }""")
        finally:
            browser.close()
    assert overflow["scroll"] <= overflow["width"] and not overflow["wide"], (overflow, shot)


# What a sweep's configurations are labelled (bench.provenance.config_label): every setting made, ~90 characters.
SWEEP_BASE = {"max_input_tokens": 384, "max_total_tokens": 512, "max_batch_prefill_tokens": 512}


def sweep_labels() -> list[str]:
    from tgi_toolkit.bench.provenance import config_label
    from tgi_toolkit.config import LauncherConfig

    return [config_label(LauncherConfig(**SWEEP_BASE, cuda_memory_fraction=f, max_batch_size=n))
            for f in (0.006867, 1.0) for n in (1, 4)]


# Per figure: its width, its plot area (from the leftmost to the rightmost of its panels' drag rectangles:
# plotly's .nsewdrag, one per panel), its title's right edge and text.
MEASURE = """() => [...document.querySelectorAll('.plotly-graph-div')].map(div => {
    const box = div.getBoundingClientRect();
    const panels = [...div.querySelectorAll('.nsewdrag')].map(d => d.getBoundingClientRect());
    const title = div.querySelector('.gtitle');
    return {width: box.width, right: box.right,
            plot: panels.length ? Math.max(...panels.map(r => r.right)) - Math.min(...panels.map(r => r.left)) : 0,
            title: title ? title.textContent : '', titleRight: title ? title.getBoundingClientRect().right : 0};
})"""


def _open(html: Path, shots: str) -> tuple[list[dict], dict]:
    """Open `html` at 1,280 pixels: each figure's measures (MEASURE), the tables' styles; a screenshot of
    each figure to out/report/<shots>_<i>.png."""
    folder = out_dir("report")
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=find_browser(), args=BROWSER_ARGS)
        page = browser.new_page(viewport={"width": WIDTH, "height": 900})
        try:
            page.goto(html.as_uri())
            page.wait_for_selector(".plotly-graph-div .nsewdrag", timeout=60_000)
            page.wait_for_timeout(500)  # plotly lays legends out after the first draw
            figures = page.evaluate(MEASURE)
            for i, element in enumerate(page.query_selector_all(".plotly-graph-div")):
                element.screenshot(path=str(folder / f"{shots}_{i}.png"))
            tables = page.evaluate("""() => [...document.querySelectorAll('td, th')].map(c => {
                const style = getComputedStyle(c); return style.wordBreak + ' ' + style.overflowWrap; })""")
        finally:
            browser.close()
    return figures, {"styles": set(tables)}


def _assert_readable(figures: list[dict], shots: str) -> None:
    assert figures
    for i, fig in enumerate(figures):
        where = f"{fig['title']!r} (out/report/{shots}_{i}.png)"
        assert fig["plot"] >= fig["width"] / 2, f"plot area {fig['plot']:.0f} of {fig['width']:.0f} px: {where}"
        assert fig["titleRight"] <= fig["right"], f"title cut: {where}"


def test_every_plot_of_a_sweeps_card_keeps_half_its_figure_width(tmp_path) -> None:
    if find_browser() is None:
        pytest.skip(NO_BROWSER)
    labels = sweep_labels()
    assert min(map(len, labels)) > 80 and labels[2].startswith("cuda_memory_fraction=1.0,")
    report.write_report(four_configurations(labels), tmp_path / "card", figure_format="html")
    figures, tables = _open(tmp_path / "card" / "model_card.html", "sweep_card")
    _assert_readable(figures, "sweep_card")
    assert tables["styles"] == {"normal normal"}  # no word of a table broken ("ingest ion")
    titles = [f["title"] for f in figures]
    # the ingestion figures: the number first, then what tells the configuration apart
    assert "Prompt ingestion: 3,396 tokens/s, cuda_memory_fraction=1.0, max_batch_size=4" in titles
    md = (tmp_path / "card" / "model_card.md").read_text()
    assert "|cuda_memory_fraction=0.006867, max_batch_size=1|~" in md  # configurations named by what differs


def test_the_notebooks_comparison_figures_keep_half_their_width(tmp_path) -> None:
    """Notebook 03's and 09's figures, drawn from a sweep's labels and an advice's table, on one page."""
    if find_browser() is None:
        pytest.skip(NO_BROWSER)
    from tgi_toolkit import plots

    results = four_configurations(sweep_labels())
    points = results.points[results.points[S.SCENARIO] == "concurrency"]
    advice = pd.DataFrame({
        "candidate": ["H100-80GB x2", "H100-80GB", "A100-80GB x2", "A100-80GB", "L4", "A10G"],
        "gpu": ["H100-80GB", "H100-80GB", "A100-80GB", "A100-80GB", "L4", "A10G"],
        "cost_per_million_tokens": [0.9, 0.8, 0.7, 0.6, 2.0, 2.5], "cost_low": [0.8, 0.7, 0.6, 0.5, 1.8, 2.2],
        "cost_high": [1.0, 0.9, 0.8, 0.7, 2.2, 2.8], "ttft_p90_s": [0.03, 0.05, 0.07, 0.2, 0.34, 0.39]})
    figures = [plots.throughput_vs_users(points), plots.speed_and_ttft_vs_users(points), plots.pareto_plot(points),
               plots.batch_latency_throughput(results.batch), plots.cost_latency(advice, objectives={"ttft_s": 0.5})]
    body = "".join(f.to_html(full_html=False, include_plotlyjs=i == 0, default_width="100%", default_height="550px")
                   for i, f in enumerate(figures))
    page = tmp_path / "figures.html"
    page.write_text(f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>{body}</body></html>")
    measured, _ = _open(page, "notebook_figures")
    assert len(measured) == len(figures)
    _assert_readable(measured, "notebook_figures")
