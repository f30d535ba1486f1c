import sys

from tgi_toolkit.engine.cli import main

sys.exit(main())
