"""The app in a real browser: Debian's chromium driven by Playwright, the app on loopback in its own
process (tests/app_server.py), nothing downloaded at run time.

One app process for the module, used in order: a bad launcher setting shows TGI's message naming
the field (never a traceback); a bad benchmark setting is marked on its field; a small benchmark
runs against the embedded engine with figures and tables appearing; the results download as a zip;
the zip loads in the explorer next to a published reference. Screenshots are kept in out/app/ (CI
uploads out/). Closing the app stops its engine.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tgi_toolkit.cookbook import out_dir

pytestmark = pytest.mark.slow
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the app extra)")

ROOT = Path(__file__).resolve().parents[1]
# Debian's chromium first (what `make browser` installs); other Chromium builds work the same.
BROWSERS = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome",
            "/usr/bin/google-chrome-stable")
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
                "--disable-extensions"]
NO_BROWSER = ("no Chromium-based browser installed: `make browser` installs Debian's chromium (needs root or "
              "sudo), or set TGI_TOOLKIT_CHROMIUM")
RUN_TIMEOUT_MS = 240_000  # engine start (5-20 s) plus a few tiny points, on a busy 2-core machine


def find_browser() -> str | None:
    """TGI_TOOLKIT_CHROMIUM, else the first Chromium-based browser installed in the usual places."""
    chosen = os.environ.get("TGI_TOOLKIT_CHROMIUM")
    if chosen:  # an explicit choice: that browser or none
        return chosen if os.access(chosen, os.X_OK) else None
    return next((path for path in BROWSERS if os.access(path, os.X_OK)), None) or shutil.which("chromium")


@pytest.fixture(scope="module")
def app_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """The app running in its own process; on teardown it gets SIGTERM and must stop its engine too."""
    import psutil

    if find_browser() is None:
        pytest.skip(NO_BROWSER)
    work = tmp_path_factory.mktemp("app")
    net_log = work / "network.log"
    port = free_port()
    log_path = work / "app.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "app_server.py"), str(port), str(work / "work"),
                                 str(net_log)], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}/"
    info: dict[str, object] = {"url": url, "work": work, "proc": proc, "log": log_path, "net_log": net_log}
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the app exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the app did not answer within 120 s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield info
    finally:
        children = psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        info["exit_code"] = proc.returncode
        # Whatever the app started (the engine runs in a process group of its own) is gone with it.
        gone, alive = psutil.wait_procs(children, timeout=30)
        for child in alive:
            child.kill()
        assert not alive, f"left running after the app closed: {[c.pid for c in alive]}"


@pytest.fixture(scope="module")
def page(app_url: dict[str, object]) -> Iterator[object]:
    executable = find_browser()
    if executable is None:
        pytest.skip(NO_BROWSER)
    outside: list[str] = []
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, headless=True, args=BROWSER_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
        tab = context.new_page()
        tab.set_default_timeout(30_000)
        tab.on("request", lambda r: outside.append(r.url)
               if not r.url.startswith(("http://127.0.0.1", "data:", "blob:")) else None)
        tab.goto(str(app_url["url"]))
        tab.get_by_role("tab", name="1. Launcher settings").wait_for()
        yield tab
        context.close()
        browser.close()
    assert not outside, f"the page asked for something beyond loopback: {outside}"


def box(page: object, elem_id: str) -> object:
    """The text input inside a Gradio component."""
    return page.locator(f"#{elem_id} textarea, #{elem_id} input").first  # type: ignore[attr-defined]


def shot(page: object, name: str) -> Path:
    path = out_dir("app") / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    return path


def no_traceback(page: object) -> None:
    text = page.locator("body").inner_text()  # type: ignore[attr-defined]
    assert "Traceback" not in text, text[-2000:]


def test_bad_launcher_setting_shows_the_message_naming_the_field(page) -> None:
    box(page, "field-max_input_tokens").fill("abc")
    check = page.locator("#settings-check")
    check.get_by_text("expects an integer, got 'abc'").wait_for()
    assert "--max-input-tokens" in check.inner_text() and "max_input_tokens" in check.inner_text()
    assert box(page, "settings-command").count() == 0 or "tgi-toolkit serve" not in page.locator(
        "#settings-command").inner_text()
    # "Check settings" marks the field itself with the message. Let the as-you-type check settle first:
    # any event that takes the field as input clears its mark when it is sent.
    page.wait_for_timeout(1500)
    page.locator("#settings-check-button").click()
    page.locator("#field-max_input_tokens").get_by_text("expects an integer").wait_for()
    shot(page, "settings-problem")
    no_traceback(page)
    # a rule between two fields names both
    box(page, "field-max_input_tokens").fill("600")
    box(page, "field-max_total_tokens").fill("512")
    check.get_by_text("must be < --max-total-tokens").wait_for()
    # the benchmark refuses to start, and says why, on its own tab
    page.get_by_role("tab", name="2. Run a benchmark").click()
    page.locator("#bench-run").click()
    page.locator("#bench-status").get_by_text("fix the launcher settings first").wait_for()
    no_traceback(page)


def test_valid_settings_show_the_command(page) -> None:
    page.get_by_role("tab", name="1. Launcher settings").click()
    # small budgets: the engine's warm-up is quick on a busy CPU
    for name, value in (("max_input_tokens", "256"), ("max_total_tokens", "512"),
                        ("max_batch_prefill_tokens", "512")):
        box(page, f"field-{name}").fill(value)
    page.locator("#settings-check").get_by_text("Valid launcher configuration").wait_for()
    page.locator("#settings-command").get_by_text("--max-total-tokens 512").wait_for()


def test_bad_benchmark_setting_is_marked_on_its_field(page) -> None:
    page.get_by_role("tab", name="2. Run a benchmark").click()
    box(page, "bench-users").fill("1, x")
    page.locator("#bench-run").click()
    page.locator("#bench-users").get_by_text("'x' is not a whole number").wait_for()
    no_traceback(page)


def test_run_a_small_benchmark_and_download_it(page, app_url, tmp_path_factory) -> None:
    page.get_by_role("tab", name="2. Run a benchmark").click()
    for name, value in (("users", "1, 2"), ("prompt_tokens", "16"), ("max_new_tokens", "4"), ("requests", "2")):
        box(page, f"bench-{name}").fill(value)
    page.locator("#bench-run").click()
    status = page.locator("#bench-status")
    status.get_by_text("Finished 2 points", exact=False).wait_for(timeout=RUN_TIMEOUT_MS)
    page.locator("#bench-plot .js-plotly-plot").wait_for()
    assert "concurrency" in page.locator("#bench-points").inner_text()
    assert "KV cache" in page.locator("#bench-metrics").inner_text()
    no_traceback(page)
    shot(page, "benchmark")

    with page.expect_download() as download:
        page.locator("#bench-download").click()
    archive = tmp_path_factory.mktemp("download") / "results.zip"
    download.value.save_as(archive)
    names = zipfile.ZipFile(archive).namelist()
    assert any(n.endswith("/points.parquet") for n in names) and any("/runs/" in n for n in names), names
    app_url["zip"] = archive


def test_load_the_download_in_the_explorer_next_to_a_reference(page, app_url) -> None:
    archive = app_url.get("zip")
    if archive is None:
        pytest.skip("needs the download of the benchmark test")
    page.get_by_role("tab", name="3. Explore and compare results").click()
    page.locator("#explore-upload input[type=file]").set_input_files(str(archive))
    page.locator("#explore-upload-status").get_by_text("Loaded").wait_for(timeout=60_000)
    page.locator("#explore-sets").get_by_text("reference: CodeLlama", exact=False).click()
    page.locator("#explore-metrics").get_by_text("~13500 t/s").wait_for(timeout=60_000)
    assert "upload: results" in page.locator("#explore-metrics").inner_text()
    page.locator("#explore-plot .js-plotly-plot").wait_for()
    no_traceback(page)
    shot(page, "explorer")


def test_the_app_made_no_connection_beyond_loopback(app_url) -> None:
    log = Path(str(app_url["net_log"]))
    attempts = log.read_text() if log.exists() else ""
    assert attempts == "", attempts
