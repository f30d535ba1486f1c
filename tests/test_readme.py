"""README.md and docs/: every `tgi-toolkit` command they show is one the command line accepts (parsed), and every
command of the README that needs no GPU and no server runs as written on a fresh clone (the others say why not)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tgi_toolkit.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def readme_commands(*pages: Path) -> list[str]:
    """`tgi-toolkit ...` lines of the bash blocks of the README (or of `pages`), continuations joined,
    comments dropped; usage synopses (`[--output FILE]`) left out."""
    text = "\n".join(page.read_text() for page in pages or (ROOT / "README.md",))
    blocks = re.findall(r"^```bash\n(.*?)^```", text, flags=re.M | re.S)
    lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    commands = [shlex.split(line, comments=True) for line in lines if line.startswith("tgi-toolkit ")]
    return [shlex.join(c[1:]) for c in commands if not any(a.startswith("[") for a in c)]


def test_the_readme_shows_each_command_line_tool() -> None:
    shown = {shlex.split(c)[0] for c in readme_commands()}
    assert {"serve", "bench", "sweep", "tune", "plan", "app"} <= shown


# The README's depth moved to docs/ (issue 28): the commands shown there are held to the same check.
@pytest.mark.parametrize("command", readme_commands(ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))))
def test_readme_command_parses(command: str) -> None:
    argv = shlex.split(command)
    try:
        args = build_parser(argv[0]).parse_args(argv)
    except SystemExit as exc:  # argparse's way of refusing
        pytest.fail(f"`tgi-toolkit {command}` is refused by the parser (exit {exc.code})")
    assert callable(args.func)


# -- the README's commands, run as written (issue 43: a fresh clone runs every one that needs no GPU) ------------
def readme_lines() -> list[str]:
    """Every command line of the README's bash blocks, continuations joined and comments dropped."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```bash\n(.*?)^```", text, flags=re.M | re.S)
    lines = [shlex.split(line, comments=True) for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    return [shlex.join(argv) for argv in lines if argv]


# What a test does not run, and why: each is long-running or serves until stopped, and is tested where named.
NOT_RUN = {
    ("make", "quickstart"): "sets up and runs a server, a sweep and a report for minutes (tests/test_quickstart.py)",
    ("make", "lab"): "serves JupyterLab until stopped",
    ("make", "test"): "the whole test suite itself",
    ("tgi-toolkit", "serve"): "serves until stopped (the engine's tests start it)",
    ("tgi-toolkit", "bench"): "starts the embedded engine and measures it for minutes (tests/test_bench_*.py)",
    ("tgi-toolkit", "tune"): "launches a server per configuration it tries, for minutes (tests/test_tune.py)",
    ("tgi-toolkit", "app"): "serves the web app until stopped (tests/test_app.py)",
    (".venv/bin/papermill",): "executes a notebook for minutes (`make notebooks`; notebooks/ under nbval)",
}
# Run, and slow (more than a few seconds on 2 busy cores): a GGUF header parsed, 8 candidates tuned, figures drawn,
# 128 requests simulated.
SLOW = {("tgi-toolkit", "plan"), ("tgi-toolkit", "advise"), ("tgi-toolkit", "report"), ("tgi-toolkit", "simulate")}
RUN = {("tgi-toolkit", "simulate"), ("tgi-toolkit", "sweep")} | SLOW


def _kind(argv: list[str]) -> tuple[str, ...]:
    if argv[0] == "tgi-toolkit" and argv[1] == "sweep" and "--dry-run" not in argv:
        return ("tgi-toolkit", "serve")  # a real sweep launches servers
    return tuple(argv[:2]) if tuple(argv[:2]) in NOT_RUN or tuple(argv[:2]) in RUN else tuple(argv[:1])


def _param(line: str) -> object:
    slow = _kind(shlex.split(line)) in SLOW
    return pytest.param(line, marks=[pytest.mark.slow] if slow else [], id=line[:60])


@pytest.mark.parametrize("line", [_param(line) for line in readme_lines()])
def test_readme_command_runs_as_written(line: str, tmp_path: Path) -> None:
    argv = shlex.split(line)
    kind = _kind(argv)
    if kind in NOT_RUN and "--help" not in argv:
        pytest.skip(NOT_RUN[kind])
    assert kind in RUN or "--help" in argv, f"`{line}`: a README command this test neither runs nor says why not"
    # A scratch folder holding the repository files the command names, so what it writes stays out of the clone.
    for arg in argv[1:]:
        source = ROOT / arg
        if not arg.startswith("-") and source.exists():
            (tmp_path / arg).parent.mkdir(parents=True, exist_ok=True)
            copy = shutil.copytree if source.is_dir() else shutil.copy2
            copy(source, tmp_path / arg)
    env = {k: v for k, v in os.environ.items() if k != "TGI_TOOLKIT_DATA"}
    env.update(TGI_TOOLKIT_CACHE=str(tmp_path / "cache"), HF_HUB_OFFLINE="1")  # a fresh machine, offline
    script = Path(sys.executable).with_name("tgi-toolkit")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "tgi_toolkit.cli"]
    done = subprocess.run([*command, *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=580)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in output, f"`{line}` failed:\n{output[-3000:]}"
    assert not (tmp_path / "cache" / "gguf").exists(), "no command here converts a model"
