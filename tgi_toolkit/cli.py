"""`tgi-toolkit` command line: one sub-command per concept, each defined next to its concept.

A sub-command module exposes `add_parser(subparsers)` which registers its parser and sets
`func=callable(args) -> int`. Modules are imported lazily so `tgi-toolkit --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# name -> module that defines `add_parser`
COMMANDS: dict[str, str] = {
    "serve": "tgi_toolkit.engine.cli",
    "quickstart": "tgi_toolkit.quickstart",
    "launch": "tgi_toolkit.server.cli",
    "bench": "tgi_toolkit.bench.cli",
    "simulate": "tgi_toolkit.simulate.cli",
    "profile-gpu": "tgi_toolkit.costs.profile",
    "sweep": "tgi_toolkit.sweep",
    "tune": "tgi_toolkit.tune",
    "report": "tgi_toolkit.report",
    "plan": "tgi_toolkit.planner",
    "advise": "tgi_toolkit.advise",
    "app": "tgi_toolkit.app.cli",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tgi-toolkit",
        description="Configure, launch, benchmark and sweep text-generation servers.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=f"(see `tgi-toolkit {name} --help`)")
            continue
        importlib.import_module(module).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Build only the chosen sub-command's parser: importing every concept costs seconds.
    only = argv[0] if argv and argv[0] in COMMANDS else None
    parser = build_parser(only)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        # Each command reports bad input itself (one line naming the field or file, exit 2); anything
        # that still escapes is a bug, shown as one line unless its traceback is asked for.
        if os.environ.get("TGI_TOOLKIT_TRACEBACK"):
            raise
        message = " ".join(str(exc).split())
        print(f"error: {type(exc).__name__}: {message} (unexpected: set TGI_TOOLKIT_TRACEBACK=1 to see where, "
              "and please report it)", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
