"""The server under test: a URL or a started `Server`, and what the benchmark needs to know of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from tgi_toolkit.bench.checks import length_rule
from tgi_toolkit.bench.client import API_KINDS
from tgi_toolkit.bench.errors import BenchError

if TYPE_CHECKING:  # pragma: no cover
    from typing import TypeAlias

    from tgi_toolkit.server.base import ServerHandle

    # What the benchmark's entry points take as the server under test: its base URL, a started Server, or a Target.
    ServerRef: TypeAlias = "str | ServerHandle | Target"


@dataclass
class Target:
    url: str
    backend: str  # embedded | tgi | tgi-docker | vllm | url
    api: str  # tgi | completions | chat
    info: dict[str, Any]
    config: Any = None  # LauncherConfig when the toolkit launched it
    server: ServerHandle | None = None  # the Server, when given one
    pid: int | None = None
    api_key: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # what the server's log said (KV capacity)

    @property
    def model_id(self) -> str:
        return str(self.info.get("model_id") or "")

    @property
    def model_name(self) -> str:
        """The `model` field OpenAI routes expect (vLLM checks it; TGI takes anything)."""
        return str(self.info.get("served_model_name") or self.info.get("model_id") or "tgi")

    @property
    def takes_ignore_eos(self) -> bool:
        """The server honours `ignore_eos`: vLLM (OpenAI routes) and the embedded engine; TGI does not."""
        if str(self.info.get("engine", "")).startswith("tgi_toolkit"):
            return True
        return self.info.get("router") == "vllm" and self.api != "tgi"

    @property
    def max_input_tokens(self) -> int | None:
        value = self.info.get("max_input_tokens")
        if value is None and self.info.get("max_total_tokens") is not None:
            value = int(self.info["max_total_tokens"]) - 1
        return value

    @property
    def max_total_tokens(self) -> int | None:
        return self.info.get("max_total_tokens")

    @property
    def max_concurrent_requests(self) -> int | None:
        """Requests in flight past which the server answers 429 (TGI's /info; None where it does not say)."""
        return self.info.get("max_concurrent_requests")

    def alive(self) -> bool:
        """The server process lives (when we know it) and `/health` answers."""
        if self.server is not None and self.server.backend != "url" and not self.server.running:
            return False
        try:
            return httpx.get(self.url + "/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def check_lengths(self, prompt_tokens: int, max_new_tokens: int, field_name: str = "prompt_tokens") -> None:
        """Refuse lengths the server would refuse, naming the field and the allowed range."""
        length_rule(self.max_input_tokens, self.max_total_tokens, prompt_tokens, max_new_tokens, field_name)


def _read_info(url: str, api_key: str | None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(base_url=url, timeout=10.0, headers=headers) as client:
            response = client.get("/info")
            if response.status_code == 200 and isinstance(response.json(), dict) and "model_id" in response.json():
                return response.json()
            from tgi_toolkit.server.vllm import VllmBackend

            return VllmBackend().info(client)  # no /info: vLLM's /v1/models and /version
    except (httpx.HTTPError, ValueError) as exc:
        raise BenchError("url", f"cannot reach a text-generation server at {url}: {exc}",
                         "the base URL of a running TGI, vLLM or embedded server") from exc


def resolve(target: ServerRef, *, api: str | None = None, api_key: str | None = None) -> Target:
    """A `Target` from a URL, a started `Server`, or a Target."""
    if isinstance(target, Target):
        return target
    if isinstance(target, str):
        url, backend, config, server, pid, facts = target.rstrip("/"), "url", None, None, None, {}
    elif hasattr(target, "url") and hasattr(target, "backend"):
        server = target
        if not server.running:
            raise BenchError("server", f"{server!r} is not running", "a started Server (use `with Server(...)`)")
        url, backend, config, pid = server.url, server.backend, server.config, server.pid
        facts = dict(getattr(server, "facts", {}) or {})
        if api_key is None and config is not None:
            api_key = getattr(config, "api_key", None)
    else:
        raise BenchError("url", f"{target!r} is neither a URL nor a Server", "'http://host:port' or a Server")
    if not url.startswith(("http://", "https://")):
        raise BenchError("url", f"{url!r} has no scheme", "http://host:port or https://host:port")
    info = _read_info(url, api_key)
    if api is None:
        api = "completions" if info.get("router") == "vllm" or backend == "vllm" else "tgi"
    if api not in API_KINDS:
        raise BenchError("api", f"{api!r} is not known", ", ".join(API_KINDS))
    return Target(url=url, backend=backend, api=api, info=info, config=config, server=server, pid=pid,
                  api_key=api_key, facts=facts)
