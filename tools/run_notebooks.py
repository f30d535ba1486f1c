"""Execute the cookbook's notebooks with their defaults and write them back with their outputs: `make notebooks`
(`python tools/run_notebooks.py [NAME ...]`, all of them by default).

Each notebook takes its cells from its script, notebooks_py/NAME.py (tools/sync_notebooks.py), is executed
by papermill in notebooks/ (as a reader runs it, HF_HUB_OFFLINE=1) and written back, so that GitHub, the
Space and JupyterLab show its results before anything is run. Figures are saved as plotly's JSON
(interactive in JupyterLab) with a PNG beside it (what GitHub shows): PLOTLY_RENDERER=plotly_mimetype+png,
the PNG drawn by kaleido with the installed Chromium. A figure whose JSON is over FIGURE_JSON_CAP keeps its
PNG alone, so that a notebook stays small; without a Chromium the JSON is kept whatever its size.
papermill's timing metadata is dropped. Each notebook writes into an out/ of its own (TGI_TOOLKIT_OUT),
removed afterwards: the run starts as on a fresh clone, whatever earlier runs left in the checkout's out/.
The paths its outputs print are written back as a reader's checkout would show them: that temporary out/
as `out`, the checkout's own folder as a relative path (`sanitize`), never this machine's /tmp or home.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from tgi_toolkit.cookbook import NOTEBOOKS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sync_notebooks import KERNELSPEC, NB_DIR, synced  # noqa: E402

PLOTLY = "application/vnd.plotly.v1+json"
FIGURE_JSON_CAP = 150_000  # characters of one figure's JSON kept beside its PNG


def _png_available() -> bool:
    from tgi_toolkit.report_figures import png_renderer_available

    return png_renderer_available()


ROOT = NB_DIR.parent


def sanitize(value: object, paths: dict[str, str]) -> object:
    """Text (and the strings inside JSON outputs) with each path of `paths` replaced by what a reader sees."""
    if isinstance(value, str):
        for path, shown in paths.items():
            value = value.replace(path, shown)
        return value
    if isinstance(value, list):
        return [sanitize(v, paths) for v in value]
    if isinstance(value, dict):
        return {k: v if k.startswith("image/") else sanitize(v, paths) for k, v in value.items()}
    return value


def tidy(nb: nbformat.NotebookNode, paths: dict[str, str] | None = None) -> nbformat.NotebookNode:
    """papermill's metadata dropped; oversized figure JSON dropped where a PNG stands in for it; the
    outputs' `paths` (the run's temporary out/, the checkout) replaced by what a reader's checkout shows."""
    nb.metadata.pop("papermill", None)
    nb.metadata["kernelspec"] = nbformat.from_dict(KERNELSPEC)  # as JupyterLab names the kernel: not "modified"
    if paths and "widgets" in nb.metadata:  # progress bars' saved state holds the text they showed
        nb.metadata["widgets"] = nbformat.from_dict(sanitize(dict(nb.metadata["widgets"]), paths))
    for cell in nb.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if cell.metadata.get("tags") == []:
            del cell.metadata["tags"]
        if paths and cell.get("outputs"):
            cell.outputs = [nbformat.from_dict(sanitize(dict(o), paths)) for o in cell.outputs]
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if PLOTLY in data and "image/png" in data and len(json.dumps(data[PLOTLY])) > FIGURE_JSON_CAP:
                del data[PLOTLY]
    return nb


def run(name: str) -> float:
    """Execute one notebook with its defaults and write it back; returns the seconds it took."""
    import papermill

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        # an out/ of its own, as on a fresh clone: results left by earlier runs with other parameters would
        # be resumed or drawn beside this run's (the kernel inherits the variable; tgi_toolkit.cookbook.out_dir)
        os.environ["TGI_TOOLKIT_OUT"] = str(Path(tmp) / "out")
        source, target = Path(tmp) / f"{name}.ipynb", Path(tmp) / f"{name}.out.ipynb"
        nb = synced(name)  # papermill clears the outputs; a widget state of an earlier run goes too
        nb.metadata.pop("widgets", None)
        nbformat.write(nb, source)
        papermill.execute_notebook(str(source), str(target), kernel_name="python3", cwd=str(NB_DIR),
                                   progress_bar=False)
        # the longest first: the temporary out/ may lie inside the checkout's folder or beside it
        paths = {str(Path(tmp).resolve() / "out"): "out", str(Path(tmp) / "out"): "out", f"{ROOT}/": "",
                 str(ROOT): "."}
        nb = tidy(nbformat.read(target, as_version=4), paths)
    (NB_DIR / f"{name}.ipynb").write_text(nbformat.writes(nb) + "\n")
    return time.perf_counter() - started


def main(argv: list[str]) -> int:
    names = argv or list(NOTEBOOKS)
    unknown = [n for n in names if n not in NOTEBOOKS]
    if unknown:
        print(f"unknown notebook(s): {', '.join(unknown)} (allowed: {', '.join(NOTEBOOKS)})", file=sys.stderr)
        return 2
    os.environ["HF_HUB_OFFLINE"] = "1"  # the kernel inherits it: no model hub, as on a GPU host without internet
    os.environ.setdefault("PLOTLY_RENDERER", "plotly_mimetype+png" if _png_available() else "plotly_mimetype")
    print(f"figures: {os.environ['PLOTLY_RENDERER']}", flush=True)
    failed = []
    for name in names:
        print(f"{name}: running", flush=True)
        try:
            seconds = run(name)
        except Exception as exc:  # papermill's error names the cell; the committed notebook is left as it was
            failed.append(name)
            print(f"{name}: FAILED, left unchanged: {str(exc).strip().splitlines()[-1] if str(exc).strip() else exc!r}",
                  flush=True)
            continue
        size = (NB_DIR / f"{name}.ipynb").stat().st_size
        print(f"{name}: done in {seconds:.0f} s, {size / 1000:.0f} kB", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
