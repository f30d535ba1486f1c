"""The published model shapes shipped with the toolkit, read by model id without a download.

`data/models/` (in an installed wheel `tgi_toolkit/data/models/`) holds JSON files that map a Hugging Face
model id to its config.json fields, each entry's `_source` saying where the fields were read.
`gpu_models.json` and `gpu_models_heldout.json` are the GPU corpus's models (tgi_toolkit.simulate.corpus
reads the same files); `models.json` holds the other shapes. `tgi-toolkit plan`, `simulate` and `advise`
take any of these ids as `--model` (tgi_toolkit.models.files.model_config). To add a model, add an
entry to `models.json`: its config.json fields and a `_source` (docs/planning.md, "Model shapes").
"""

from __future__ import annotations

import difflib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from tgi_toolkit.data_folder import data_dirs

MODELS_SUBDIR = "models"


def shipped_models_dir() -> Path:
    """The folder of the shipped shapes: data/models/ of the data folder (tgi_toolkit.data_folder.data_dirs)."""
    places = data_dirs()
    for place in places:
        if (place / MODELS_SUBDIR).is_dir():
            return place / MODELS_SUBDIR
    return places[0] / MODELS_SUBDIR


def read_shapes(path: str | Path) -> dict[str, dict[str, Any]]:
    """{model id: config.json fields, `_source` included} of one shapes file."""
    path = Path(path)
    try:
        shapes = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable JSON file of model shapes ({exc})") from None
    if not isinstance(shapes, dict) or not all(isinstance(v, dict) for v in shapes.values()):
        raise ValueError(f"{path}: must map model ids to objects of config.json fields")
    return shapes


@lru_cache(maxsize=4)
def _all_shapes(folder: Path) -> dict[str, tuple[dict[str, Any], Path]]:
    found: dict[str, tuple[dict[str, Any], Path]] = {}
    for path in sorted(folder.glob("*.json")):
        for model_id, fields in read_shapes(path).items():
            if model_id.lower() in found:
                raise ValueError(f"model shape {model_id!r} is in both {found[model_id.lower()][1]} and {path}; "
                                 "keep one")
            found[model_id.lower()] = ({**fields, "_name_or_path": model_id}, path)
    return found


def shipped_models() -> dict[str, dict[str, Any]]:
    """{model id: config.json fields with `_source` and `_name_or_path`} of every shipped shape."""
    return {fields["_name_or_path"]: dict(fields) for fields, _ in _all_shapes(shipped_models_dir()).values()}


def shipped_ids() -> list[str]:
    return sorted(shipped_models(), key=str.lower)


def shipped_config(model_id: str) -> dict[str, Any] | None:
    """config.json fields of a shipped model (ids compare case-insensitively, as the Hub's do), else None."""
    entry = _all_shapes(shipped_models_dir()).get(str(model_id).strip().lower())
    return dict(entry[0]) if entry else None


def closest_ids(model_id: str, n: int = 3) -> list[str]:
    """The shipped ids nearest `model_id` by spelling, for a "did you mean" hint."""
    by_lower = {m.lower(): m for m in shipped_models()}
    return [by_lower[m] for m in difflib.get_close_matches(str(model_id).lower(), list(by_lower), n=n, cutoff=0.6)]
