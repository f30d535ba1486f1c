"""The model card where people read it: its HTML report opened in a real browser (Debian's chromium driven
by Playwright, as the app's browser tests do) in a 1,280-pixel-wide window, which it must fit without
scrolling sideways for up to 4 configurations. Screenshots go to out/report/."""

from __future__ import annotations

import copy

import pandas as pd
import pytest

from tests.test_app_browser import BROWSER_ARGS, NO_BROWSER, find_browser
from tgi_toolkit import report
from tgi_toolkit.bench import load_results
from tgi_toolkit.bench import schema as S
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


def four_configurations() -> Results:
    """The example result set (a real run of the embedded engine) as if a sweep had measured it under 4
    configurations: the card's layout is what is tested here, not the numbers."""
    example = load_results(example_results_dir())
    parts = []
    for i, label in enumerate(LABELS):
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
