"""Loading the model the engine serves, in the dtype it computes in.

Finding it (local directory, GGUF file, offline hub cache, or the bundled default) and the GGUF
conversion cache are in tgi_toolkit.config.model_files, which the planner and the tuner use
without importing the engine; the names are re-exported here for the engine and its callers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tgi_toolkit.config.embedded import cpu_has_bf16
from tgi_toolkit.config.model_files import (
    BUNDLED_GGUF,
    BUNDLED_PACKAGE,
    DEFAULT_MODEL_ID,
    ModelNotFoundError,
    ModelSource,
    _load_gguf,
    _load_pretrained,
    bundled_gguf_path,
    conversion_cache_dir,
    converted_model_dir,
    gguf_digest,
    resolve_model,
)

__all__ = [
    "BUNDLED_GGUF", "BUNDLED_PACKAGE", "DEFAULT_MODEL_ID", "DTYPES", "LoadedModel", "ModelNotFoundError",
    "ModelSource", "bundled_gguf_path", "conversion_cache_dir", "converted_model_dir", "cpu_has_bf16",
    "default_dtype", "gguf_digest", "load_model", "resolve_model", "torch_dtype",
]

DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class LoadedModel:
    source: ModelSource
    model: Any  # transformers PreTrainedModel
    tokenizer: Any  # transformers tokenizer
    config: Any  # transformers PretrainedConfig
    dtype: Any  # torch.dtype

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


def default_dtype() -> str:
    """bfloat16 where the hardware computes in it (a GPU, or a CPU with AVX512-BF16/AMX), else float32.

    Without native bf16 matmuls, bf16 weights are converted on every product: prefill ran 5x
    slower than float32 on an AVX2-only CPU.
    """
    import torch

    if torch.cuda.is_available() or cpu_has_bf16():
        return "bfloat16"
    return "float32"


def torch_dtype(name: str | None):
    import torch

    if name is None:
        name = default_dtype()
    if name not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}; got {name!r}")
    return getattr(torch, name)


def load_model(source: ModelSource, dtype: str | None = None,
               tokenizer_config_path: str | None = None) -> LoadedModel:
    """Load tokenizer and weights from a resolved source; errors name the files involved."""
    import torch

    target = torch_dtype(dtype)
    try:
        if source.gguf_file:
            tokenizer, model = _load_gguf(source, target)
        else:
            tokenizer, model = _load_pretrained(source.path, target)
    except Exception as exc:  # transformers raises many kinds; all mean "cannot read this model"
        raise ModelNotFoundError(f"cannot read model {source.describe()}: {exc}") from exc
    model.eval()
    if tokenizer_config_path:
        _apply_tokenizer_config(tokenizer, Path(tokenizer_config_path))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    torch.set_grad_enabled(False)
    return LoadedModel(source=source, model=model, tokenizer=tokenizer, config=model.config, dtype=target)


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
