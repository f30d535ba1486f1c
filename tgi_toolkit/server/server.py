"""`Server`: one text-generation server as a resource: start, wait until healthy, ask, stop.

Port rule: the `port=` argument wins; else `config.port` when it was set explicitly (given to the
constructor, read from a command line or environment, or set with `model_copy(update=...)`, i.e.
it is in `config.model_fields_set`); else a free port is picked. After `start()`, `server.config`
holds the port actually used.

Environment: the process gets this process's environment, minus the launcher's own variables
(`MAX_TOTAL_TOKENS`, `PORT`, `HOSTNAME`, ... every option's UPPER_SNAKE name, except the cache
location HUGGINGFACE_HUB_CACHE) so that the config object alone decides the settings, plus `env=`.
GPU visibility (CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES) passes through unchanged, and the
Docker backend turns it into `--gpus`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

# the same test as the bench's and the sweep's progress: a terminal or a notebook kernel
from tgi_toolkit.progress import redraws_in_place as _redraws_in_place
from tgi_toolkit.server.base import TAIL_LINES, Backend, ManagedProcess, ServerError
from tgi_toolkit.server.docker import DockerBackend
from tgi_toolkit.server.embedded import EmbeddedBackend
from tgi_toolkit.server.ports import client_host, free_port, port_is_free
from tgi_toolkit.server.startup import LogLines, RedrawnLine, StartupDisplay
from tgi_toolkit.server.tgi import TgiBackend
from tgi_toolkit.server.url import UrlBackend
from tgi_toolkit.server.vllm import VllmBackend

if TYPE_CHECKING:
    from tgi_toolkit.config.launcher import LauncherConfig

BACKENDS: dict[str, type[Backend]] = {
    "embedded": EmbeddedBackend,
    "tgi": TgiBackend,
    "tgi-docker": DockerBackend,
    "vllm": VllmBackend,
    "url": UrlBackend,
}
# Launcher variables that name a place, not a serving setting: they keep passing through.
PASS_THROUGH = {"HUGGINGFACE_HUB_CACHE"}
POLL_SECONDS = 0.25

_running: set[Server] = set()
_running_lock = threading.RLock()  # re-entered when SIGTERM's handler (below) interrupts its holder


class Server:
    """A text-generation server for one LauncherConfig, on one backend.

    >>> with Server(LauncherConfig(max_total_tokens=1024)) as server:
    ...     server.info()["max_total_tokens"]
    1024

    backend: "embedded" (default; the CPU engine in this package), "tgi" (`text-generation-launcher`
    on PATH), "tgi-docker" (TGI's image through `docker run`), "vllm" (`vllm serve`: the `vllm` that
    TGI_TOOLKIT_VLLM names, else the one on PATH), or "url" (attach to a server already running at
    `url`; the default when `url` is given).
    log_path: where the process's stdout and stderr go (default: a new file under the temp dir).
    on_log: called with each log line (no newline), from a reader thread.
    env: extra environment variables for the process.
    health_timeout: seconds to wait for `/health` to answer 200 (default per backend: embedded 300,
    tgi and vllm 600, tgi-docker 1800, url 30).
    startup_progress: show progress on stderr while waiting: on a terminal or in a notebook, one line
    (tqdm.auto) redrawn with the time and the latest log line; elsewhere (a pipe, a file: CI and
    papermill logs) each new log line once, as it arrives, then one line when the server is healthy.
    """

    def __init__(self, config: Any = None, backend: str | None = None, *, url: str | None = None,
                 port: int | None = None, log_path: str | os.PathLike[str] | None = None,
                 on_log: Callable[[str], None] | None = None, env: dict[str, str] | None = None,
                 health_timeout: float | None = None, startup_progress: bool = True) -> None:
        backend = backend or ("url" if url else "embedded")
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r} is not one of {sorted(BACKENDS)}")
        if url is not None and backend != "url":
            raise ValueError(f"url= attaches to a running server: use backend='url', not {backend!r}")
        if config is None and (backend != "url" or url is None):
            from tgi_toolkit.config import LauncherConfig

            config = LauncherConfig()
        self.config = config
        self.backend = backend
        self._impl = BACKENDS[backend]()
        self._url = url.rstrip("/") if url else None
        self._port_arg = port
        self._log_path_arg = Path(log_path) if log_path is not None else None
        self.on_log = on_log
        self.env = dict(env or {})
        self.health_timeout = self._impl.default_health_timeout if health_timeout is None else health_timeout
        self.startup_progress = startup_progress
        self.facts: dict[str, Any] = {}  # what the server said about itself in its log
        self.command: list[str] | None = None
        self.log_path: Path | None = None
        self.port: int | None = port
        self.returncode: int | None = None
        self.seconds_to_healthy: float | None = None
        self._proc: ManagedProcess | None = None
        self._startup: StartupDisplay | None = None  # while start() waits: its progress display

    # ------------------------------------------------------------------ state

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:41234 (known once started, or given)."""
        if self._url is None:
            raise ServerError("the server has no URL yet: call start() first")
        return self._url

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """The process is alive (for `url`: the server was reached by start())."""
        if self.backend == "url":
            return self._url is not None and self.seconds_to_healthy is not None
        return self._proc is not None and self._proc.alive()

    @property
    def max_batch_total_tokens(self) -> int | None:
        """The KV-token budget TGI (or the engine) reported at start-up ("Setting max batch total tokens to N")."""
        return self.facts.get("max_batch_total_tokens")

    @property
    def kv_capacity_tokens(self) -> int | None:
        """The KV capacity in tokens the server reported at start-up, whichever it is: TGI's (and the engine's)
        max batch total tokens, or vLLM's "GPU KV cache size: N tokens"."""
        return self.facts.get("max_batch_total_tokens") or self.facts.get("kv_capacity_tokens")

    def __repr__(self) -> str:
        where = self._url or "not started"
        state = "running" if self.running else "stopped"
        return f"Server(backend={self.backend!r}, url={where!r}, pid={self.pid}, {state})"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Server:
        """Start the process (or reach the URL) and wait until `/health` answers 200; return self.

        Raises ConfigError for a config that breaks a launcher rule, and ServerError when the
        executable is missing, the port is taken, the process exits during start-up (with its exit
        code and last log lines), or it is not healthy within `health_timeout` (it is stopped first).
        """
        if self.running:
            raise ServerError(f"already running: {self!r}")
        if self.backend == "url":
            if self._url is None:
                host = client_host(self.config.hostname)
                self._url = f"http://{host}:{self._port_arg or self.config.port}"
            self._startup = self._startup_display()
            self._wait_healthy()
            return self

        cfg = self.config
        # The child's environment holds ATTENTION / PREFILL_CHUNKING, which decide TGI 3's rules.
        cfg.validate(self._child_env(cfg), backend=self.backend)
        host = cfg.hostname
        port = self._choose_port(cfg)
        cfg = cfg.model_copy(update={"port": port})
        env = self._child_env(cfg)
        argv = self._impl.command(cfg, host, port, env)
        exe = shutil.which(argv[0], path=env.get("PATH"))
        if exe is None:
            raise ServerError(f"`{argv[0]}` not found on PATH: backend={self.backend!r} needs it "
                              f"(the default backend 'embedded' needs nothing installed)")
        self.config, self.port, self.command = cfg, port, argv
        self._url = f"http://{client_host(host)}:{port}"
        self.log_path = self._log_path_arg or _default_log_path(self.backend, port)
        self.facts, self.returncode, self.seconds_to_healthy = {}, None, None
        self._startup = self._startup_display()  # before the process: its first log lines are shown too
        try:
            self._proc = ManagedProcess(argv, env=env, log_path=self.log_path, on_line=self._on_line)
        except BaseException:
            self._end_startup()
            raise
        with _running_lock:
            _running.add(self)
        _stop_on_sigterm()
        try:
            self._wait_healthy()
        except BaseException:
            self.stop(grace=min(10.0, self.health_timeout))
            raise
        return self

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after `grace` seconds; reap; return the exit code (None for `url`).

        Everything the server started is gone afterwards, including children in process groups of
        their own and, for tgi-docker, the container. Calling it again returns the same code.
        """
        proc = self._proc
        if proc is None:
            return None
        if not proc.stopped:
            self._impl.before_stop(grace)
            self.returncode = proc.stop(grace)
        with _running_lock:
            _running.discard(self)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """Block until the process exits (or `timeout` passes: None); return its exit code."""
        proc = self._proc
        if proc is None:
            return None
        # Poll rather than block: descendants started after start-up (a vLLM engine core, a
        # respawned shard) must be recorded while their parent lives, or stop() cannot find
        # them once they are orphaned.
        deadline = None if timeout is None else time.monotonic() + timeout
        while proc.alive() and (deadline is None or time.monotonic() < deadline):
            proc.track()
            with contextlib.suppress(Exception):
                left = POLL_SECONDS if deadline is None else min(POLL_SECONDS, max(deadline - time.monotonic(), 0))
                proc.popen.wait(left)
        return proc.returncode

    def __enter__(self) -> Server:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ asking it

    def health(self) -> bool:
        """`/health` answers 200 now."""
        if self._url is None:
            return False
        try:
            return httpx.get(self._url + self._impl.health_path, timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def info(self) -> dict[str, Any]:
        """The server's `/info` (for vLLM: the same keys from /v1/models and /version)."""
        try:
            with httpx.Client(base_url=self.url, timeout=10.0) as client:
                return self._impl.info(client)
        except httpx.HTTPError as exc:
            raise ServerError(f"cannot read {self.url}/info: {exc}") from exc

    def logs(self, n: int | None = TAIL_LINES) -> list[str]:
        """The last `n` log lines (all of them with n=None, read back from the log file)."""
        if self._proc is None:
            return []
        if n is None and self.log_path is not None and self.log_path.exists():
            return self.log_path.read_text(errors="replace").splitlines()
        return self._proc.tail(n)

    def reported_config(self) -> LauncherConfig | None:
        """The launcher's own `Args { ... }` log line read back into a LauncherConfig (None if absent)."""
        line = self.facts.get("args_line")
        if line is None:
            return None
        return type(self.config).from_args_log(line)

    # ------------------------------------------------------------------ inner workings

    def _on_line(self, line: str) -> None:
        startup = self._startup
        if startup is not None:
            startup.log_line(line)
        self._impl.parse_line(line, self.facts)
        if self.on_log is not None:
            self.on_log(line)

    def _startup_display(self) -> StartupDisplay | None:
        if not self.startup_progress:
            return None
        return RedrawnLine(self) if _redraws_in_place(sys.stderr) else LogLines(self, sys.stderr)

    def _choose_port(self, cfg: Any) -> int:
        if self._port_arg is not None:
            port = self._port_arg
        elif "port" in cfg.model_fields_set:
            port = cfg.port
        else:
            return free_port(cfg.hostname)
        if not port_is_free(cfg.hostname, port):
            raise ServerError(f"port {port} on {cfg.hostname} is already in use: pass another port, "
                              f"or leave it unset to have a free one picked")
        return port

    def _child_env(self, cfg: Any) -> dict[str, str]:
        env = dict(os.environ)
        for name in type(cfg).model_fields:
            if name.upper() not in PASS_THROUGH:
                env.pop(name.upper(), None)
        env.update(self.env)
        return env

    def _error(self, message: str) -> ServerError:
        return ServerError(message, exit_code=self.returncode, log_tail=self.logs(TAIL_LINES),
                           log_path=self.log_path)

    def _wait_healthy(self) -> None:
        began = time.monotonic()
        deadline = began + self.health_timeout
        display = self._startup
        health_url = self.url + self._impl.health_path
        last_status = "no answer"
        try:
            with httpx.Client(timeout=2.0) as client:
                while True:
                    proc = self._proc
                    if proc is not None:
                        proc.track()
                        if not proc.alive():
                            proc.wait_output(2.0)
                            self.returncode = proc.returncode
                            raise self._error(f"{self.backend} server exited during start-up")
                    try:
                        response = client.get(health_url)
                        if response.status_code == 200:
                            break
                        last_status = f"HTTP {response.status_code}"
                    except httpx.HTTPError as exc:
                        last_status = type(exc).__name__
                    if time.monotonic() > deadline:
                        if proc is not None:
                            self.returncode = self.stop(grace=min(10.0, self.health_timeout))
                        raise self._error(f"{self.backend} server not healthy after {self.health_timeout:g} s "
                                          f"(GET {health_url}: {last_status})")
                    if display is not None:
                        display.tick(time.monotonic() - began)
                    time.sleep(POLL_SECONDS)
            self.seconds_to_healthy = time.monotonic() - began
        finally:
            self._end_startup()

    def _end_startup(self) -> None:
        display, self._startup = self._startup, None  # the lines that follow are the server's work
        if display is not None:
            display.close(self.seconds_to_healthy)


def _default_log_path(backend: str, port: int) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    # Not "tgi_toolkit/": run from the temp dir, Python would import that folder as a namespace
    # package ahead of the installed toolkit.
    return Path(tempfile.gettempdir()) / "tgi-toolkit-logs" / f"{backend}-{port}-{stamp}.log"


def _stop_on_sigterm() -> None:
    """Make SIGTERM stop this process's servers before it ends the process, where nobody else handles it.

    SIGTERM's default action (`kill`, `timeout`, a CI cancellation) ends Python with no `finally` and no
    atexit, and each server runs in a process group of its own: it would outlive the script. Only the
    main thread may install a handler; a handler someone else installed (the `serve` CLI's) is theirs.
    """
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame: Any) -> None:
    _stop_all()
    signal.signal(signum, signal.SIG_DFL)  # then die of it, as the sender expects
    os.kill(os.getpid(), signum)


@atexit.register
def _stop_all() -> None:
    # The safety net for servers a notebook or script forgot to stop: they run in their own
    # process groups, so nothing else would stop them when this interpreter exits.
    with _running_lock:
        servers = list(_running)
    for server in servers:
        with contextlib.suppress(Exception):
            server.stop(grace=5.0)
