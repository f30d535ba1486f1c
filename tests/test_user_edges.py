"""What a person meets around the edges: the converted model shared between virtual environments,
`tgi-toolkit plan` taking the default model by name, and `serve --help` naming the command typed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tgi_toolkit.cli import main
from tgi_toolkit.models.files import DEFAULT_MODEL_ID, _converted_path, gguf_digest


def test_the_conversion_cache_is_keyed_by_content_not_path_or_mtime(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TGI_TOOLKIT_CACHE", str(tmp_path / "cache"))
    # The same file in two virtual environments: another path, another modification time.
    first, second = tmp_path / "venv1" / "m.gguf", tmp_path / "venv2" / "m.gguf"
    for path in (first, second):
        path.parent.mkdir()
        path.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    os.utime(second, (1_000_000, 1_000_000))
    assert _converted_path(first) == _converted_path(second)
    assert gguf_digest(first) == "b6a7abb60985011ea433cdecba7ef96b79ce50c04929de3958d883b6642f5d64"  # by sha256sum
    assert _converted_path(first).name == f"m-{first.stat().st_size}-b6a7abb60985011e"
    # Other content (same size) is another copy once the file's modification time moves, as a rewrite moves it.
    first.write_bytes(b"GGUX" + bytes(range(256)) * 64)
    os.utime(first, (2_000_000, 2_000_000))
    assert _converted_path(first) != _converted_path(second)


def test_serve_help_names_the_command_typed(capsys) -> None:
    assert main(["serve", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: tgi-toolkit serve ")


@pytest.mark.slow  # reads the bundled GGUF file's header (seconds on 2 busy cores)
def test_plan_takes_the_default_model_by_name_as_serve_does(capsys) -> None:
    assert main(["plan", "--model", DEFAULT_MODEL_ID, "--gpu", "embedded"]) == 0
    out = capsys.readouterr().out
    assert f"Capacity plan: {DEFAULT_MODEL_ID} on embedded CPU engine" in out
    assert "30 layers, hidden 576" in out  # SmolLM2-135M's config.json
    assert main(["plan", "--model", "nobody/no-such-model", "--gpu", "embedded"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --model (nobody/no-such-model): 'nobody/no-such-model' is neither a shipped "
                          "model shape nor a model found here.") and "\n" == err[-1]
    assert err.count("\n") == 1


def test_a_config_file_or_model_directory_still_plans(tmp_path, capsys) -> None:
    shutil.copy(Path(__file__).parent / "data" / "configs" / "smollm2-135m.json", tmp_path / "config.json")
    assert main(["plan", "--model", str(tmp_path), "--gpu", "embedded", "--model-id", "mine"]) == 0
    assert main(["plan", "--model", str(tmp_path / "config.json"), "--gpu", "embedded"]) == 0
    assert "30 layers, hidden 576" in capsys.readouterr().out
