"""README.md and docs/: every `tgi-toolkit` command they show is one the command line accepts (parsed, not run)."""

from __future__ import annotations

import re
import shlex
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
