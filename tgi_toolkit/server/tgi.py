"""`text-generation-launcher` found on PATH (a TGI install, or inside TGI's image)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tgi_toolkit.server.base import Backend
from tgi_toolkit.server.capacity_log import CAPACITY_PATTERNS

if TYPE_CHECKING:
    from tgi_toolkit.config.launcher import LauncherConfig


def set_flag(argv: list[str], flag: str, value: str) -> list[str]:
    """`argv` with `flag` given exactly once, as `value`."""
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == flag:
            i += 2
            continue
        if arg.startswith(flag + "="):
            i += 1
            continue
        out.append(arg)
        i += 1
    return [*out, flag, value]


def launcher_argv(config: LauncherConfig, host: str, port: int) -> list[str]:
    # Host and port always on the command line: the launcher would otherwise fall back to
    # $HOSTNAME (usually the machine's name) and its own 0.0.0.0 / 3000 defaults.
    argv = list(config.to_cli())
    return set_flag(set_flag(argv, "--hostname", host), "--port", str(port))


class TgiBackend(Backend):
    name = "tgi"
    executable = "text-generation-launcher"
    fact_patterns = {
        "max_batch_total_tokens": CAPACITY_PATTERNS["max_batch_total_tokens"],
        "shard_ready_seconds": re.compile(r"Shard ready in ([\d.]+)m?s"),
    }
    ready_pattern = re.compile(r"\bConnected\b")

    def command(self, config: LauncherConfig, host: str, port: int, env: dict[str, str]) -> list[str]:
        return [self.executable, *launcher_argv(config, host, port)]
