"""The cookbook where people use it: JupyterLab in a real browser (Debian's chromium driven by Playwright,
as the app's browser tests do), on a copy of notebooks/ with the repository's Jupyter configuration (as
`make lab` starts it). Its first screen lists the notebooks alone, with no news pop-up; notebook 01 runs
to the end with small parameters, its launcher form rendered as ipywidgets and its command line
following an edited field. JupyterLab runs on loopback with a token and HF_HUB_OFFLINE=1, as on a GPU
host without internet. Screenshots go to out/lab/."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.test_app_browser import BROWSER_ARGS, NO_BROWSER, find_browser
from tgi_toolkit.cookbook import out_dir

pytestmark = pytest.mark.slow
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra)")
pytest.importorskip("jupyterlab", reason="JupyterLab is not installed (the dev extra)")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "01_configure_and_launch.ipynb"
# test_notebooks' small run: a short context, 8 new tokens
PARAMETERS = {"max_input_tokens": 256, "max_total_tokens": 512, "max_batch_size": 4, "max_new_tokens": 8}
# Every cell kept in the page (JupyterLab's windowing detaches cells scrolled away). The news pop-up is
# the repository's to turn off (tools/jupyter, which `make lab` puts on JUPYTER_CONFIG_PATH), not the test's.
LAB_SETTINGS = {"@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"}}
LAB_CONFIG = ROOT / "tools" / "jupyter"
NEWS_PLUGIN = "@jupyterlab/apputils-extension:announcements"
RUN_TIMEOUT_MS = 300_000  # kernel start, engine start (5-20 s), one question, on a busy 2-core machine


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """JupyterLab in its own process on a free loopback port, serving a copy of notebooks/ whose notebook 01
    has small parameters (injected as papermill does); its own runtime, settings and workspace folders, the
    repository's Jupyter configuration."""
    import nbformat
    import psutil
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    if find_browser() is None:
        pytest.skip(NO_BROWSER)
    work = tmp_path_factory.mktemp("lab")
    notebooks = work / "notebooks"
    shutil.copytree(ROOT / "notebooks", notebooks, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    nb = parameterize_notebook(load_notebook_node(str(ROOT / "notebooks" / NOTEBOOK)), PARAMETERS)
    nbformat.write(nb, notebooks / NOTEBOOK)
    for name, settings in LAB_SETTINGS.items():
        path = work / "settings" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))
    port, token = free_port(), secrets.token_hex(16)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "JUPYTER_RUNTIME_DIR": str(work / "runtime"),
           "JUPYTER_CONFIG_PATH": str(LAB_CONFIG)}
    argv = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={notebooks}",
            f"--LabApp.user_settings_dir={work / 'settings'}", f"--LabApp.workspaces_dir={work / 'workspaces'}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if os.geteuid() == 0:
        argv.append("--allow-root")
    log_path = work / "lab.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=work, env=env,
                                start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{base}/api/status", headers={"Authorization": f"token {token}"},
                             timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not answer within 120 s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield {"base": base, "token": token, "log": log_path}
    finally:
        children = []
        if proc.poll() is None:
            children = psutil.Process(proc.pid).children(recursive=True)
            # Jupyter's own shutdown: kernels stopped, and their servers. SIGTERM, not ^C^C: without a terminal
            # on stdin (make test in CI or a background job) SIGINT ends Jupyter at once, its kernels left to
            # notice and the wait below to run out (32 s of teardown)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        _, alive = psutil.wait_procs(children, timeout=30)
        for child in alive:  # a kernel or engine that outlived Jupyter's shutdown
            child.kill()


@contextlib.contextmanager
def notebook_page(lab: dict[str, object]) -> Iterator[object]:
    """A browser page on JupyterLab with notebook 01 open, as `make lab` opens it; closed afterwards."""
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=find_browser(), args=BROWSER_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(f"{lab['base']}/lab/tree/{NOTEBOOK}?token={lab['token']}")
            page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=120_000)
            yield page
        finally:
            browser.close()


def test_the_lab_opens_on_the_notebooks_alone_without_news(lab) -> None:
    shots = out_dir("lab")
    expected = sorted(p.name for p in (ROOT / "notebooks").iterdir() if not p.name.startswith("."))
    assert expected and all(name.endswith(".ipynb") for name in expected), expected  # helpers live elsewhere
    with notebook_page(lab) as page:
        page.wait_for_selector(".jp-DirListing-item", timeout=60_000)
        listed = sorted(page.locator(".jp-DirListing-item .jp-DirListing-itemText").all_inner_texts())
        disabled = page.evaluate("() => JSON.parse(document.getElementById('jupyter-config-data').textContent)"
                                 ".disabledExtensions")
        # JupyterLab asks about news a moment after start-up when its announcements plugin runs
        page.wait_for_timeout(5_000)
        page.screenshot(path=str(shots / "first_screen.png"), full_page=False)
        news = page.get_by_text("official Jupyter news", exact=False).count()
        toasts = page.locator(".Toastify__toast").count()
    assert listed == expected
    assert NEWS_PLUGIN in disabled and news == 0 and toasts == 0, (disabled, news, toasts)


def test_notebook_01_runs_in_jupyterlab_and_its_form_follows_the_fields(lab) -> None:
    shots = out_dir("lab")
    with notebook_page(lab) as page:
        try:
            # the kernel is up before anything runs: the status bar names it, idle (cells run before it
            # connects can be lost)
            page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=120_000)
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

            # The launcher form, rendered by JupyterLab's ipywidgets manager, with the command it runs.
            command = page.locator(".jupyter-widgets pre", has_text="tgi-toolkit serve")
            command.wait_for(timeout=RUN_TIMEOUT_MS)
            before = command.inner_text()
            assert "--max-input-tokens 256" in before and "--revision" not in before

            # The rest of the notebook: the server answers the question, and nothing failed.
            page.get_by_text("TTFT ", exact=False).first.wait_for(timeout=RUN_TIMEOUT_MS)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=RUN_TIMEOUT_MS)
            page.screenshot(path=str(shots / "01_done.png"), full_page=True)
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
                                  has_text="Traceback")
            assert errors.count() == 0, errors.first.inner_text()
            assert page.get_by_text("A: ", exact=False).count() >= 1

            # A field edited in the browser reaches the kernel (once it is idle: a running cell holds the
            # widget messages back) and the command line follows, as the user types.
            revision = page.locator(".widget-text", has=page.locator("label", has_text="--revision")).locator(
                "input")
            revision.scroll_into_view_if_needed()
            revision.fill("v1.0")
            page.wait_for_function(
                "() => [...document.querySelectorAll('.jupyter-widgets pre')]"
                ".some(p => p.textContent.includes('--revision v1.0'))", timeout=60_000)
            page.screenshot(path=str(shots / "01_form.png"), full_page=False)
            assert command.inner_text() == before.replace(" --max-input-tokens", " --revision v1.0 --max-input-tokens")
        except Exception:
            page.screenshot(path=str(shots / "01_failed.png"), full_page=True)
            raise
