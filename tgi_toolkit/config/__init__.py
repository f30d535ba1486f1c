"""Launcher configuration: `LauncherConfig`, its problems, and its vLLM counterpart.

`to_vllm_args`, `VllmArgs` and `from_vllm_table` live in `tgi_toolkit.config.vllm_args` and are
re-exported here lazily (that module imports this package's launcher module).
"""

from __future__ import annotations

from typing import Any

from tgi_toolkit.config.errors import ConfigError, Problem
from tgi_toolkit.config.launcher import DOCKER_IMAGE, OPTIONS, LauncherConfig
from tgi_toolkit.config.launcher_fields import (
    DEFAULT_HOSTNAME,
    DTYPE_VALUES,
    GROUPS,
    KV_CACHE_DTYPE_VALUES,
    QUANTIZE_VALUES,
)
from tgi_toolkit.config.launcher_rules import BITSANDBYTES
from tgi_toolkit.config.options import OptionSpec, env_for, flag_for
from tgi_toolkit.models.files import DEFAULT_MODEL_ID

_VLLM = ("VllmArgs", "to_vllm_args", "from_vllm_table")


def __getattr__(name: str) -> Any:
    if name in _VLLM:
        from tgi_toolkit.config import vllm_args

        return getattr(vllm_args, name)
    raise AttributeError(f"module 'tgi_toolkit.config' has no attribute {name!r}")


__all__ = [
    "BITSANDBYTES", "DEFAULT_HOSTNAME", "DEFAULT_MODEL_ID", "DOCKER_IMAGE", "DTYPE_VALUES", "GROUPS",
    "KV_CACHE_DTYPE_VALUES", "OPTIONS", "QUANTIZE_VALUES", "ConfigError", "LauncherConfig", "OptionSpec",
    "Problem", "VllmArgs", "env_for", "flag_for", "from_vllm_table", "to_vllm_args",
]
