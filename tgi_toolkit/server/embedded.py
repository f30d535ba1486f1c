"""The embedded engine: `python -m tgi_toolkit.engine` with the launcher's flags, on the CPU."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from tgi_toolkit.server.tgi import TgiBackend, launcher_argv

if TYPE_CHECKING:
    from tgi_toolkit.config.launcher import LauncherConfig


class EmbeddedBackend(TgiBackend):
    name = "embedded"
    executable = None  # this interpreter
    default_health_timeout = 300.0  # the first start converts the bundled GGUF model once

    def command(self, config: LauncherConfig, host: str, port: int, env: dict[str, str]) -> list[str]:
        return [sys.executable, "-m", "tgi_toolkit.engine", *launcher_argv(config, host, port)]
