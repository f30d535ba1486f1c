"""Every `tgi-toolkit` command answers bad input as a user would want: one line naming the field or
file, exit code 2, no traceback. Each case runs the real command line in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

LLAMA = ('{"model_type": "llama", "hidden_size": 576, "num_attention_heads": %s, "num_hidden_layers": 30, '
         '"num_key_value_heads": 3, "intermediate_size": 1536, "vocab_size": 49152, '
         '"max_position_embeddings": 8192}')


def _files(tmp: Path) -> dict[str, Path]:
    files = {
        "list/config.json": "[1, 2]",
        "zero-heads/config.json": LLAMA % 0,
        "text-heads/config.json": LLAMA % '"nine"',
        "broken/config.json": "{",
        "list.yaml": "[1]\n",
        "broken.yaml": "name: [unclosed\n",
        "unknown-key.yaml": "colour: blue\n",
    }
    for name, text in files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp / "empty").mkdir()
    return {name: tmp / name for name in [*files, "empty"]}


CASES = [
    # (argv with <name> placeholders for the files above, text the one error line must contain)
    (["plan", "--model", "<list/config.json>", "--gpu", "A100-80GB"], "config.json"),
    (["plan", "--model", "<zero-heads/config.json>", "--gpu", "A100-80GB"], "num_attention_heads"),
    (["plan", "--model", "<text-heads/config.json>", "--gpu", "A100-80GB"], "num_attention_heads"),
    (["plan", "--model", "<broken/config.json>", "--gpu", "A100-80GB"], "config.json"),
    (["plan", "--model", "<empty>/nothing-here", "--gpu", "A100-80GB"], "--model"),
    (["plan", "--model", "HuggingFaceTB/SmolLM2-135M-Instruct", "--gpu", "A100-80GB", "--overhead", "lots"],
     "--overhead"),
    (["sweep", "<empty>/missing.yaml"], "missing.yaml"),
    (["sweep", "<list.yaml>"], "list"),
    (["sweep", "<broken.yaml>"], "broken.yaml"),
    (["sweep", "<unknown-key.yaml>"], "colour"),
    (["report", "<empty>"], "empty"),
    (["report", "<empty>/missing"], "missing"),
    (["serve", "--max-total-tokens", "many"], "--max-total-tokens"),
    (["launch", "--max-concurrent-requests", "-1"], "--max-concurrent-requests"),
    (["bench", "concurrency", "--url", "http://127.0.0.1:9", "--users", "1"], "url"),
]


@pytest.mark.parametrize("argv,names", CASES, ids=[" ".join(c[0][:2]) + f"-{i}" for i, c in enumerate(CASES)])
def test_bad_input_is_one_line_naming_it_with_exit_code_2(tmp_path, argv, names):
    files = _files(tmp_path)
    args = []
    for arg in argv:
        for name, path in files.items():
            arg = arg.replace(f"<{name}>", str(path))
        args.append(arg)
    done = subprocess.run([sys.executable, "-m", "tgi_toolkit.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output[-3000:]
    assert done.returncode == 2, output[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error:"), done.stderr
    assert names in errors[0], errors[0]
