"""The engine's KV block allocators are TGI's, in `tgi_toolkit.router.blocks` (shared with the simulator)."""

from tgi_toolkit.router.blocks import *  # noqa: F403
from tgi_toolkit.router.blocks import __all__  # noqa: F401
