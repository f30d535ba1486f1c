"""The engine's scheduler is TGI's router rules in `tgi_toolkit.router.scheduler` (shared with the simulator)."""

from tgi_toolkit.router.scheduler import *  # noqa: F403
from tgi_toolkit.router.scheduler import __all__  # noqa: F401
