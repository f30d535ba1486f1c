"""`tgi_toolkit.widgets` is `tgi_toolkit.config.widgets`: the module moved under config/ with the rest of the
launcher configuration; this name stays importable and is the very same module object (so patching
either name patches both)."""

import sys

from tgi_toolkit.config import widgets as _moved

sys.modules[__name__] = _moved
