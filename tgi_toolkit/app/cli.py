"""`tgi-toolkit app` (and `python -m tgi_toolkit.app`): start the web app, blocking until Ctrl-C."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME") or "127.0.0.1",
                        help="address to listen on (default 127.0.0.1, or GRADIO_SERVER_NAME; 0.0.0.0 exposes it)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT") or 7860),
                        help="port (default 7860, or GRADIO_SERVER_PORT)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where runs, uploads and downloads go (default: a new temporary folder)")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="the data/ folder the explorer offers (default: the package's, or TGI_TOOLKIT_DATA)")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("app", help="start the web app: launcher form, live benchmark, results explorer")
    _arguments(parser)
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    from tgi_toolkit.app import create_app

    app = create_app(work_dir=args.work_dir, data_dir=args.data_dir)
    print(f"tgi_toolkit app: results and logs under {app.work_dir}", flush=True)
    app.launch(server_name=args.host, server_port=args.port)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tgi_toolkit.app", description=__doc__)
    _arguments(parser)
    return _main(parser.parse_args(argv))
