"""Loading the model the engine serves, in the dtype it computes in, on its device; or a model of a published
shape with random weights (`load_random`, `--random-weights`), for timing where no weights can be fetched.

Finding it (local directory, GGUF file, offline hub cache, or the bundled default), reading its files and the GGUF
conversion cache are tgi_toolkit.models', which the planner and the tuner use without importing the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tgi_toolkit.models.files import (
    DEFAULT_MODEL_ID,
    ModelNotFoundError,
    ModelSource,
    converted_model_dir,
    load_gguf,
    load_pretrained,
    resolve_model,
)

__all__ = ["DTYPES", "LoadedModel", "default_dtype", "load_model", "load_random", "random_config", "torch_dtype"]

DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class LoadedModel:
    source: ModelSource
    model: Any  # transformers PreTrainedModel
    tokenizer: Any  # transformers tokenizer
    config: Any  # transformers PretrainedConfig
    dtype: Any  # torch.dtype
    random_weights: bool = False  # built by load_random: its text is noise, served for timing only

    @property
    def max_position_embeddings(self) -> int:
        return int(getattr(self.config, "max_position_embeddings", 0) or 2048)

    @property
    def eos_token_ids(self) -> set[int]:
        ids: set[int] = set()
        for candidate in (self.config.eos_token_id, self.tokenizer.eos_token_id):
            if isinstance(candidate, int):
                ids.add(candidate)
            elif isinstance(candidate, (list, tuple)):
                ids.update(int(c) for c in candidate)
        gen = getattr(self.model, "generation_config", None)
        if gen is not None and gen.eos_token_id is not None:
            eos = gen.eos_token_id
            ids.update([eos] if isinstance(eos, int) else eos)
        return ids


def default_dtype(device: str | None = None) -> str:
    """bfloat16 where the hardware computes in it (a CUDA card, or a CPU with AVX512-BF16/AMX), else float32
    (`device.default_dtype_name`); `device` None: the one `--device` would default to."""
    from tgi_toolkit.engine.device import default_dtype_name, resolve_device

    return default_dtype_name(device or resolve_device(None))


def torch_dtype(name: str | None, device: str | None = None):
    import torch

    if name is None:
        name = default_dtype(device)
    if name not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}; got {name!r}")
    return getattr(torch, name)


def load_model(source: ModelSource, dtype: str | None = None,
               tokenizer_config_path: str | None = None, device: str = "cpu") -> LoadedModel:
    """Load tokenizer and weights from a resolved source onto `device`; errors name the files involved."""
    target = torch_dtype(dtype, device)
    try:
        if source.gguf_file:
            tokenizer, model = load_gguf(source, target)
        else:
            tokenizer, model = load_pretrained(source.path, target)
    except Exception as exc:  # transformers raises many kinds; all mean "cannot read this model"
        raise ModelNotFoundError(f"cannot read model {source.describe()}: {exc}") from exc
    model.eval()
    if device != "cpu":
        model.to(device)
    return _finish(LoadedModel(source=source, model=model, tokenizer=tokenizer, config=model.config, dtype=target),
                   tokenizer_config_path)


def _finish(loaded: LoadedModel, tokenizer_config_path: str | None) -> LoadedModel:
    import torch

    if tokenizer_config_path:
        _apply_tokenizer_config(loaded.tokenizer, Path(tokenizer_config_path))
    if loaded.tokenizer.pad_token_id is None:
        loaded.tokenizer.pad_token = loaded.tokenizer.eos_token
    torch.set_grad_enabled(False)
    return loaded


def random_config(model: str) -> tuple[dict[str, Any], Path | None]:
    """The config.json fields `--random-weights` builds, and the file they came from: a config.json, a directory
    holding one, or a published shape shipped with the toolkit by id (data/models/, no file: None)."""
    import json

    from tgi_toolkit.models.shipped import shipped_config

    path = Path(model).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        try:
            return json.loads(path.read_text()), path
        except (OSError, ValueError) as exc:
            raise ModelNotFoundError(f"--random-weights: cannot read {path} as JSON ({exc})") from exc
    shipped = shipped_config(model)
    if shipped is None:
        raise ModelNotFoundError(
            f"--random-weights builds a model from a config.json: --model-id {model!r} is neither a config.json "
            "file, a directory holding one, nor a shipped model shape (tgi-toolkit plan lists them)")
    return {k: v for k, v in shipped.items() if not k.startswith("_")}, None


def random_model(fields: Mapping[str, Any], dtype: Any, device: str, source: str = "the config") -> Any:
    """The transformers model of config.json `fields` with random weights, in torch `dtype` on `device`, in eval
    mode; a config transformers cannot read is refused naming `source`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        fields = dict(fields)
        config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    except (ValueError, KeyError) as exc:
        raise ModelNotFoundError(f"--random-weights: cannot read {source} as a model's config.json "
                                 f"({type(exc).__name__}: {exc})") from exc
    with torch.device(device):
        built = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return built.eval()


def load_random(model: str, dtype: str | None = None, tokenizer_config_path: str | None = None,
                device: str = "cpu") -> LoadedModel:
    """A model of `model`'s shape (`random_config`) with random weights, built on `device` in `dtype`.

    For timing only: its tokens are noise. Built under `torch.device(device)`, so an 8B model's weights are
    allocated once, on the card, never first in host memory. The tokenizer is the one beside config.json where
    there is one, else the bundled default model's (ids beyond its vocabulary decode to nothing)."""
    from transformers import AutoTokenizer

    fields, path = random_config(model)
    target = torch_dtype(dtype, device)
    built = random_model(fields, target, device, str(path or model))
    tokenizer_dir = path.parent if path is not None and (path.parent / "tokenizer.json").is_file() else \
        converted_model_dir(resolve_model(DEFAULT_MODEL_ID))
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    source = ModelSource(str(path or model), "random-weights", path.parent if path else Path("."))
    loaded = LoadedModel(source=source, model=built, tokenizer=tokenizer, config=built.config, dtype=target,
                         random_weights=True)
    return _finish(loaded, tokenizer_config_path)


def _apply_tokenizer_config(tokenizer: Any, path: Path) -> None:
    import json

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelNotFoundError(f"--tokenizer-config-path {path}: cannot read it as JSON ({exc})") from exc
    if "chat_template" in data:
        tokenizer.chat_template = data["chat_template"]
    for key in ("bos_token", "eos_token"):
        if isinstance(data.get(key), str):
            setattr(tokenizer, key, data[key])
