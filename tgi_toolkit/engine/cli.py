"""`python -m tgi_toolkit.engine` and `tgi-toolkit serve`: text-generation-launcher's flags."""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None, prog: str = "python -m tgi_toolkit.engine") -> int:
    """Serve with the launcher flags in `argv`; `prog` is the command the help names (how it was started)."""
    from tgi_toolkit.config import ConfigError, LauncherConfig
    from tgi_toolkit.engine.model import ModelNotFoundError
    from tgi_toolkit.engine.runner import UnsupportedModelError
    from tgi_toolkit.engine.serve import UnsupportedSetting, serve

    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        parser = argparse.ArgumentParser(
            prog=prog,
            description="The embedded TGI-compatible engine. Takes text-generation-launcher's flags "
                        "and environment variables.")
        LauncherConfig.add_arguments(parser)
        parser.print_help()
        return 0
    try:
        cfg = LauncherConfig.from_cli(argv, environ=os.environ)
        return serve(cfg)
    except (ConfigError, UnsupportedSetting, ModelNotFoundError, UnsupportedModelError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve", help="start the embedded TGI-compatible engine (text-generation-launcher flags)",
        add_help=False, prefix_chars="\0",  # every argument goes through to the launcher parser
    )
    parser.add_argument("launcher_args", nargs=argparse.REMAINDER)
    parser.set_defaults(func=lambda args: main(args.launcher_args, prog="tgi-toolkit serve"))
