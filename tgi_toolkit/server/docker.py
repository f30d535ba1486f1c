"""TGI's Docker image: `docker run` in the foreground, the container stopped by name.

The container runs under the Docker daemon, not under our process, so signals to the `docker run`
client are not enough (a SIGKILLed client leaves the container running): every container gets a
name, and stopping runs `docker stop --time <grace> <name>` first.
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
from typing import TYPE_CHECKING

from tgi_toolkit.server.tgi import TgiBackend, set_flag

if TYPE_CHECKING:
    from tgi_toolkit.config.launcher import LauncherConfig

CONTAINER_PORT = "80"  # TGI's image listens on $PORT=80
# `docker run` options that take a value (the image is the first word that is neither)
_VALUED = {"--name", "-p", "--publish", "-e", "--env", "-v", "--volume", "--gpus", "--shm-size", "--ipc",
           "--network", "--entrypoint", "-w", "--workdir", "--user", "-u", "--env-file", "--runtime",
           "--device", "--mount", "--label", "-l", "--platform", "--pull", "--cpus", "--memory", "-m"}

def gpus_for(env: dict[str, str]) -> str | None:
    """`--gpus` value that gives the container the GPUs this process may use.

    CUDA_VISIBLE_DEVICES (or else NVIDIA_VISIBLE_DEVICES) restricts it to those devices; set to an
    empty string or "none" it means no GPU (no `--gpus`); unset means all GPUs.
    """
    for var in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        if var in env:
            devices = env[var].strip()
            if devices in ("", "none", "void", "-1"):
                return None
            return "all" if devices == "all" else f'"device={devices}"'
    return "all"

def split_run(argv: list[str]) -> tuple[list[str], list[str], str, list[str]]:
    """["docker", "run", *options, image, *args] -> (["docker", "run"], options, image, args)."""
    try:
        run = argv.index("run")
    except ValueError as exc:
        raise ValueError(f"not a `docker run` command: {argv}") from exc
    i = run + 1
    while i < len(argv) and argv[i].startswith("-"):
        i += 1 if "=" in argv[i] or argv[i] not in _VALUED else 2
    if i >= len(argv):
        raise ValueError(f"no image in docker command: {argv}")
    return argv[: run + 1], argv[run + 1: i], argv[i], argv[i + 1:]

def set_option(options: list[str], names: tuple[str, ...], value: str | None) -> list[str]:
    """`options` with the option called any of `names` given once as `value` (removed when None)."""
    out, i = [], 0
    while i < len(options):
        arg = options[i]
        flag = arg.split("=", 1)[0]
        if flag in names:
            i += 1 if "=" in arg else 2
            continue
        out.append(arg)
        i += 1
    return out if value is None else [*out, names[0], value]

class DockerBackend(TgiBackend):
    name = "tgi-docker"
    executable = "docker"
    default_health_timeout = 1800.0  # a first run pulls a multi-GB image, then the weights

    def __init__(self) -> None:
        self.container: str | None = None
        self._docker = "docker"

    def command(self, config: LauncherConfig, host: str, port: int, env: dict[str, str]) -> list[str]:
        self.container = f"tgi-toolkit-{port}-{secrets.token_hex(3)}"
        head, options, image, args = split_run(list(config.docker_command()))
        self._docker = head[0]
        publish = f"{port}:{CONTAINER_PORT}" if host in ("0.0.0.0", "::") else f"{host}:{port}:{CONTAINER_PORT}"
        options = set_option(options, ("-p", "--publish"), publish)
        options = set_option(options, ("--gpus",), gpus_for(env))
        options = set_option(options, ("--name",), self.container)
        if "--rm" not in options:
            options.append("--rm")
        # Inside the container the launcher listens on every interface of the container's own network.
        args = set_flag(set_flag(args, "--hostname", "0.0.0.0"), "--port", CONTAINER_PORT)
        return [*head, *options, image, *args]

    def before_stop(self, grace: float) -> None:
        if self.container is None:
            return
        # `docker stop` sends SIGTERM, then SIGKILL after --time; it also covers a client that was killed.
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([self._docker, "stop", "-t", str(max(int(grace), 0)), self.container],
                           capture_output=True, timeout=grace + 30)

