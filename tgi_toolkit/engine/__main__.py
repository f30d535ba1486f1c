import sys

from tgi_toolkit.engine.lifeline import watch_parent

watch_parent()  # first: the model takes a while to load, and a parent may die meanwhile
from tgi_toolkit.engine.cli import main  # noqa: E402

sys.exit(main())
