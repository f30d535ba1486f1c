"""tgi_toolkit: configure, launch, benchmark and sweep text-generation servers.

The heavy parts (torch, the engine) are imported lazily so that `import tgi_toolkit` stays cheap
for the CLI, the notebooks and the Space.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tgi_toolkit._lazy import lazy_getattr
from tgi_toolkit.version import __version__

_LAZY = {
    "LauncherConfig": "tgi_toolkit.config",
    "ConfigError": "tgi_toolkit.config",
    "Server": "tgi_toolkit.server",
    "run_batch": "tgi_toolkit.bench",
    "run_concurrency": "tgi_toolkit.bench",
    "run_rate": "tgi_toolkit.bench",
    "measure_ingestion": "tgi_toolkit.bench",
    "load_results": "tgi_toolkit.bench",
    "Results": "tgi_toolkit.bench",
    "Sweep": "tgi_toolkit.sweep",
    "Workload": "tgi_toolkit.sweep",
    "Objectives": "tgi_toolkit.tune",
}

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.bench import Results, load_results, measure_ingestion, run_batch, run_concurrency, run_rate
    from tgi_toolkit.config import ConfigError, LauncherConfig
    from tgi_toolkit.server import Server
    from tgi_toolkit.sweep import Sweep, Workload
    from tgi_toolkit.tune import Objectives


__getattr__ = lazy_getattr(__name__, _LAZY)


# `tune` and `advise` are not re-exported: `tgi_toolkit.tune` and `tgi_toolkit.advise` are their packages
# (from tgi_toolkit.tune import tune; from tgi_toolkit.advise import advise).
__all__ = ["ConfigError", "LauncherConfig", "Objectives", "Results", "Server", "Sweep", "Workload", "__version__",
           "load_results", "measure_ingestion", "run_batch", "run_concurrency", "run_rate"]
