"""What a reader finds in the committed notebooks and in `make lab` (issue 43 item 8): no temporary or
machine paths in the outputs, a kernelspec JupyterLab does not rewrite on opening (which showed notebook 01
as modified), nbval comparing relative and absolute paths alike, and `make lab` printing notebook 01's URL."""

from __future__ import annotations

import configparser
import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from tgi_toolkit.cookbook import NOTEBOOKS

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools"


def _tool(name: str):
    sys.path.insert(0, str(TOOLS))  # run_notebooks imports sync_notebooks as a sibling
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run_tool = _tool("run_notebooks")
sync_tool = _tool("sync_notebooks")


def test_written_back_outputs_show_a_readers_paths() -> None:
    tmp_out, root = "/tmp/tmpabc123/out", str(run_tool.ROOT)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {"m": {"state": {
        "value": f"starting embedded server (bundled: {root}/.venv/lib/model.gguf)"}}}}}
    nb.cells.append(nbformat.v4.new_code_cell("print(card)", outputs=[
        nbformat.v4.new_output("stream", text=f"HTML report: {tmp_out}/03_sweep/report/model_card.html\n"),
        nbformat.v4.new_output("execute_result", data={"text/plain": f"Results(at {root}/data/examples/x)",
                                                       "image/png": "iVBORw0KGgo="}, execution_count=1)]))
    paths = {tmp_out: "out", f"{root}/": "", root: "."}
    text = nbformat.writes(run_tool.tidy(nb, paths))
    assert tmp_out not in text and root not in text
    outputs = nb.cells[0].outputs
    assert outputs[0].text == "HTML report: out/03_sweep/report/model_card.html\n"
    assert outputs[1].data["text/plain"] == "Results(at data/examples/x)"
    assert outputs[1].data["image/png"] == "iVBORw0KGgo="  # pictures are not text: left alone
    assert "(bundled: .venv/lib/model.gguf)" in text
    assert nb.metadata["kernelspec"] == sync_tool.KERNELSPEC


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebooks_carry_no_machine_paths_and_the_installed_kernels_name(name: str) -> None:
    text = (ROOT / "notebooks" / f"{name}.ipynb").read_text()
    assert not re.search(r"/tmp/tmp\w+", text), "a run's temporary folder in the outputs"
    assert str(ROOT) not in text, "this checkout's absolute path in the outputs"
    assert json.loads(text)["metadata"]["kernelspec"] == sync_tool.KERNELSPEC


def test_the_kernelspec_is_the_one_make_setup_installs() -> None:
    """JupyterLab writes the running kernel's spec into the notebook: any other display name marks it modified."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(sync_tool.KERNELSPEC["name"])
    except NoSuchKernel:
        pytest.skip("no python3 kernel installed (make setup installs it)")
    assert {"display_name": spec.display_name, "language": spec.language, "name": "python3"} == sync_tool.KERNELSPEC


def test_nbval_compares_relative_and_absolute_checkout_paths_alike() -> None:
    config = configparser.ConfigParser()
    config.read(TOOLS / "nbval_sanitize.cfg")
    rule = config["checkout paths"]

    def sanitized(text: str) -> str:
        return re.sub(rule["regex"], rule["replace"], text)

    assert sanitized("report: /tmp/tmpx/out/03_sweep/card.html") == sanitized("report: out/03_sweep/card.html")
    assert sanitized("at /home/me/tgi/data/examples/a:") == sanitized("at data/examples/a:") == \
        "at <checkout>/data/examples/a:"
    assert sanitized("layout/x and checkout/y") == "layout/x and checkout/y"


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_make_lab_prints_notebook_01s_url(tmp_path) -> None:
    """`make lab LAB_ARGS=--no-browser`: the URL printed (and opened) is notebook 01's, not the launcher's."""
    from tgi_toolkit.server.ports import free_port

    port = free_port()
    dry = subprocess.run(["make", "-n", "-s", "lab", "LAB_ARGS=--no-browser", f"LAB_PORT={port}"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    command = next(line for line in dry.replace("\\\n", " ").splitlines() if "jupyter lab" in line)
    log, printed = tmp_path / "lab.log", re.compile(rf"http://127\.0\.0\.1:{port}/\S*\?token=")
    with log.open("w") as out:
        # the recipe's own command line (its `VAR=value` prefix included), without `make setup` before it; a
        # session of its own, so that the shell and JupyterLab under it stop together
        lab = subprocess.Popen(["bash", "-c", command], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and not printed.search(log.read_text()):
            assert lab.poll() is None, log.read_text()
            time.sleep(0.5)
        url = printed.search(log.read_text())
        assert url, log.read_text()
        assert url.group().startswith(f"http://127.0.0.1:{port}/lab/tree/01_configure_and_launch.ipynb?"), \
            shlex.quote(url.group())
    finally:
        os.killpg(lab.pid, signal.SIGTERM)
        lab.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_notebook_01_opens_unmodified_in_jupyterlab(tmp_path) -> None:
    """Opened in a real JupyterLab (Debian's chromium), notebook 01 is not marked modified once its kernel has
    started: JupyterLab rewrites the kernelspec it names when the kernel's differs (issue 43)."""
    import shutil

    from tests.test_app_browser import BROWSER_ARGS, NO_BROWSER, find_browser
    from tgi_toolkit.server.ports import free_port

    playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra)")
    if find_browser() is None:
        pytest.skip(NO_BROWSER)
    root = tmp_path / "notebooks"
    root.mkdir()
    shutil.copy2(ROOT / "notebooks" / "01_configure_and_launch.ipynb", root)
    port = free_port()
    with (tmp_path / "lab.log").open("w") as log:
        lab = subprocess.Popen(
            [str(Path(sys.executable).parent / "jupyter"), "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={port}", "--ServerApp.token=t", f"--ServerApp.root_dir={root}",
             f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}", "--allow-root"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "JUPYTER_CONFIG_PATH": str(TOOLS / "jupyter")})
    try:
        with playwright_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=find_browser(), args=BROWSER_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            deadline = time.monotonic() + 120
            while True:  # JupyterLab takes a few seconds to listen
                try:
                    page.goto(f"http://127.0.0.1:{port}/lab/tree/01_configure_and_launch.ipynb?token=t")
                    break
                except playwright_api.Error:
                    assert time.monotonic() < deadline and lab.poll() is None, (tmp_path / "lab.log").read_text()
                    time.sleep(1)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=150_000)
            page.wait_for_timeout(3000)  # the kernel's spec and language_info reach the model after it is idle
            dirty = page.evaluate("() => [...document.querySelectorAll('.lm-TabBar-tab.jp-mod-dirty')]"
                                  ".map(t => t.textContent)")
            page.screenshot(path=str(tmp_path / "lab.png"))
            browser.close()
        assert dirty == [], f"marked modified on opening: {dirty}"
    finally:
        os.killpg(lab.pid, signal.SIGTERM)
        lab.wait(timeout=30)
