"""The app's Advise tab in a real browser (the pattern and fixtures of tests/test_app_browser.py): a bad rate is
named in one sentence, and a small search draws the ranked table, the cost-latency figure and the launch command."""

from __future__ import annotations

import pytest

from tests.test_app_browser import app_url, box, no_traceback, page, shot  # noqa: F401  (module fixtures)

pytestmark = pytest.mark.slow


def test_bad_rate_is_named(page) -> None:  # noqa: F811
    page.get_by_role("tab", name="4. Advise: which GPUs").click()
    box(page, "advise-rate").fill("fast")
    page.locator("#advise-run").click()
    page.locator("#advise-summary").get_by_text("request rate: 'fast' is not a number").wait_for(timeout=60_000)
    no_traceback(page)


def test_advise_draws_the_table_and_the_figure(page) -> None:  # noqa: F811
    page.get_by_role("tab", name="4. Advise: which GPUs").click()
    box(page, "advise-rate").fill("2")
    page.locator("#advise-run").click()
    page.locator("#advise-summary").get_by_text("Cheapest:").wait_for(timeout=240_000)
    assert "text-generation-launcher --model-id" in page.locator("#advise-summary").inner_text()
    page.locator("#advise-plot .js-plotly-plot").wait_for()
    assert "Pareto set" in page.locator("#advise-plot").inner_text()
    table = page.locator("#advise-table").inner_text()
    assert "A100-80GB" in table and "L4" in table
    no_traceback(page)
    shot(page, "advise")
