"""`tgi_toolkit.vllm_args` is `tgi_toolkit.config.vllm_args`: the module moved under config/ with the rest of the
launcher configuration; this name stays importable and is the very same module object (so patching
either name patches both)."""

import sys

from tgi_toolkit.config import vllm_args as _moved

sys.modules[__name__] = _moved
