"""The cookbook's notebooks are written as jupytext percent scripts, `notebooks_py/NAME.py`, each paired with
`notebooks/NAME.ipynb` (pyproject.toml's [tool.jupytext]), which is committed with the outputs of a run of its
defaults (`make notebooks`, tools/run_notebooks.py). The script is what a person edits and reviews; the
notebook is what a reader opens, nbval compares and papermill runs.

    python tools/sync_notebooks.py            # write each .ipynb's cells from its .py, keeping outputs and ids
    python tools/sync_notebooks.py --check    # exit 1 naming each pair that differs (tests/test_notebooks.py)

A pair is in sync when the script read by jupytext gives the notebook's cells: each cell's type, source and
tags, in order (outputs and cell ids are the notebook's alone: the script holds neither). `jupytext --sync
notebooks/NAME.ipynb` does the same from whichever file is newer, e.g. after an edit in JupyterLab.

Each notebook has exactly one cell tagged `parameters` (papermill's): its defaults run on a 2-core CPU in a
minute or two; tests and CI pass smaller or redirected values. Code cells whose output holds timings are
tagged `nbval-ignore-output`, and so are timing claims checked with `busy=` (on a busy machine they print
"not checked" instead of failing); nbval compares every other cell's output as committed
(tools/nbval_sanitize.cfg masks paths and dates). A tag is written in the cell's marker line:
`# %% tags=["nbval-ignore-output"]`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import jupytext
import nbformat
from jupytext.combine import combine_inputs_with_outputs

from tgi_toolkit.cookbook import NOTEBOOKS

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
PY_DIR = ROOT / "notebooks_py"
FORMAT = "py:percent"
# The kernel `make setup` installs (ipykernel install --name python3) as JupyterLab describes it: a notebook
# saved with another display name ("Python 3") is rewritten by JupyterLab when its kernel starts, so that it
# shows as modified as soon as it is opened. Every synced notebook carries this one.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
# the metadata of a notebook new to notebooks/ (its script written first); a run fills language_info in
METADATA = {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}}


def cells_of(nb: nbformat.NotebookNode) -> list[tuple[str, str, list[str]]]:
    """What the script decides of a notebook: each cell's type, source and tags (not its outputs or id)."""
    return [(c.cell_type, c.source, list(c.metadata.get("tags", []))) for c in nb.cells]


def read_script(path: Path) -> nbformat.NotebookNode:
    return jupytext.read(path, fmt=FORMAT)


def out_of_sync(nb_dir: Path = NB_DIR, py_dir: Path = PY_DIR, names: Sequence[str] = NOTEBOOKS) -> list[str]:
    """One line per notebook whose pair differs or is incomplete, or which `names` (the cookbook's list,
    tgi_toolkit.cookbook.NOTEBOOKS) does not hold; empty when every pair is in sync."""
    found = {p.stem for p in nb_dir.glob("*.ipynb")} | {p.stem for p in py_dir.glob("*.py")}
    problems = [f"{name}: not in tgi_toolkit.cookbook.NOTEBOOKS" for name in sorted(found - set(names))]
    for name in names:
        notebook, script = nb_dir / f"{name}.ipynb", py_dir / f"{name}.py"
        missing = [p for p in (notebook, script) if not p.is_file()]
        if missing:
            problems.append(f"{name}: {' and '.join(_shown(p) for p in missing)} missing")
            continue
        ours, theirs = cells_of(read_script(script)), cells_of(nbformat.read(notebook, as_version=4))
        if ours != theirs:
            problems.append(f"{name}: {_first_difference(ours, theirs)}")
    return problems


def _first_difference(script: list[tuple[str, str, list[str]]], notebook: list[tuple[str, str, list[str]]]) -> str:
    for i, (a, b) in enumerate(zip(script, notebook, strict=False)):
        if a != b:
            what = "type" if a[0] != b[0] else "source" if a[1] != b[1] else "tags"
            return f"cell {i} differs ({what})"
    return f"the script has {len(script)} cells, the notebook {len(notebook)}"


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def synced(name: str, nb_dir: Path = NB_DIR, py_dir: Path = PY_DIR) -> nbformat.NotebookNode:
    """notebooks/NAME.ipynb with its cells from notebooks_py/NAME.py: the committed outputs, ids and notebook
    metadata kept for every cell jupytext matches (an edited code cell keeps its outputs until it runs), the
    kernelspec set to KERNELSPEC."""
    notebook, script = nb_dir / f"{name}.ipynb", py_dir / f"{name}.py"
    text = read_script(script)
    if not notebook.is_file():
        text.metadata = nbformat.from_dict(METADATA)
        return text
    committed = nbformat.read(notebook, as_version=4)
    if cells_of(text) != cells_of(committed) and notebook.stat().st_mtime > script.stat().st_mtime:
        raise RuntimeError(f"{_shown(notebook)} was changed after {_shown(script)}: bring the change into the "
                           f"script (jupytext --sync {_shown(notebook)}) or drop it (git checkout {_shown(notebook)})")
    nb = combine_inputs_with_outputs(text, committed, fmt=FORMAT)
    nb.metadata["kernelspec"] = nbformat.from_dict(KERNELSPEC)
    return nb


def sync(names: Sequence[str] = NOTEBOOKS, nb_dir: Path = NB_DIR, py_dir: Path = PY_DIR) -> list[str]:
    """Write each notebook whose cells differ from its script's; returns the names written."""
    written = []
    for name in names:
        notebook = nb_dir / f"{name}.ipynb"
        text = nbformat.writes(synced(name, nb_dir, py_dir)) + "\n"  # as run_notebooks writes it
        if notebook.is_file() and notebook.read_text() == text:
            continue
        notebook.write_text(text)
        written.append(name)
    return written


def main(argv: list[str]) -> int:
    if "--check" in argv:
        problems = out_of_sync()
        if problems:
            print("notebooks out of sync with their scripts (python tools/sync_notebooks.py writes the notebooks "
                  "from the scripts):\n" + "\n".join(problems))
            return 1
        return 0
    try:
        written = sync()
    except (RuntimeError, FileNotFoundError) as exc:
        print(exc, file=sys.stderr)
        return 1
    for name in written:
        print(f"{name}.ipynb: cells written from notebooks_py/{name}.py (make notebooks NOTEBOOKS={name} runs it)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
