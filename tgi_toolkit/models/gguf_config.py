"""A GGUF file's model settings as config.json fields, read from its header alone.

`gguf.GGUFReader` maps the file and parses its metadata and tensor index without reading a tensor, so a
plan of the bundled model answers in about a second where converting it (files.converted_model_dir)
de-quantizes 272 tensors. The keys are renamed with transformers' own table (GGUF_CONFIG_MAPPING, the one
its GGUF loader uses); the few rules that loader writes as code instead (architecture renames, tied
embeddings read from the tensor index) are followed here, as of transformers 5.x's
modeling_gguf_pytorch_utils.load_gguf_checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# llama.cpp's architecture names that transformers renames (its loader does this in code, not in the table).
_RENAMED = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2"}
_TEXT_ONLY = {"gemma3": "gemma3_text", "gemma4": "gemma4_text"}  # their GGUF files hold the text backbone only
_ALWAYS_TIED = ("falcon", "bloom")  # transformers ties these whatever the tensor index says


def _value(field: Any) -> Any:
    """A metadata field's value: a number, a string, or a list of them."""
    from gguf import GGUFValueType

    def one(part: Any, kind: Any) -> Any:
        return bytes(part).decode("utf-8") if kind == GGUFValueType.STRING else part.tolist()[0]

    if field.types[0] == GGUFValueType.ARRAY:
        return [one(field.parts[i], field.types[-1]) for i in field.data]
    return one(field.parts[field.data[0]], field.types[0])


def gguf_config(path: str | Path) -> dict[str, Any]:
    """config.json fields of the GGUF file at `path`, from its header (no tensor is read).

    ValueError when the file is not GGUF or holds an architecture transformers cannot load.
    """
    from gguf import GGUFReader
    from transformers.integrations.ggml import GGUF_CONFIG_DEFAULTS_MAPPING, GGUF_CONFIG_MAPPING

    path = Path(path)
    try:
        reader = GGUFReader(path)
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"{path}: not a readable GGUF file ({exc})") from None
    fields = reader.fields
    if "general.architecture" not in fields:
        raise ValueError(f"{path}: its GGUF header has no general.architecture")
    architecture = str(_value(fields["general.architecture"]))
    model_type = _RENAMED.get(architecture, architecture)
    table = GGUF_CONFIG_MAPPING.get(model_type)
    if table is None:
        known = sorted(k for k in GGUF_CONFIG_MAPPING if k != "general")
        raise ValueError(f"{path}: GGUF architecture {architecture!r} is not one transformers loads "
                         f"({', '.join(known)})")
    config: dict[str, Any] = {"model_type": _TEXT_ONLY.get(model_type, model_type)}
    if "general.name" in fields:
        config["_name_or_path"] = str(_value(fields["general.name"]))
    for key, field in fields.items():
        if not key.startswith(architecture + "."):
            continue
        target = table.get(key[len(architecture) + 1:])
        if target is not None and target != -1:  # None / -1: a key transformers reads but does not keep
            config[target] = _value(field)
    config["tie_word_embeddings"] = architecture in _ALWAYS_TIED or all(
        tensor.name != "output.weight" for tensor in reader.tensors)
    if "vocab_size" not in config and "tokenizer.ggml.tokens" in fields:
        config["vocab_size"] = len(fields["tokenizer.ggml.tokens"].data)
    for key, value in GGUF_CONFIG_DEFAULTS_MAPPING.get(model_type, {}).items():
        config.setdefault(key, value)
    return config
