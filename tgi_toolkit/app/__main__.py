import sys

from tgi_toolkit.app.cli import main

sys.exit(main())
