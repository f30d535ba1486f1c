"""`tgi-toolkit launch`: start a server with launcher flags and keep it in the foreground until Ctrl-C."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

DESCRIPTION = """\
Start a text-generation server and keep it running until Ctrl-C (or SIGTERM), then stop it and
everything it started. Every other flag is a text-generation-launcher flag (--model-id,
--max-total-tokens, --quantize, ...; their environment variables work too), rendered for the
chosen backend. Without --port a free port is picked. The URL is printed once /health answers."""


def _own_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tgi-toolkit launch", description=DESCRIPTION, add_help=False,
                                     allow_abbrev=False)  # never mistake a launcher flag for ours
    own = parser.add_argument_group("launch options")
    own.add_argument("--backend", default="embedded",
                     choices=["embedded", "tgi", "tgi-docker", "vllm", "url"],
                     help="what runs the server (default: embedded, the CPU engine in this package)")
    own.add_argument("--url", help="with --backend url: the running server to attach to")
    own.add_argument("--log-file", help="write the server's log here (default: a file under the temp dir)")
    own.add_argument("--health-timeout", type=float, help="seconds to wait for /health (default per backend)")
    own.add_argument("--grace", type=float, default=10.0,
                     help="seconds between SIGTERM and SIGKILL when stopping (default 10)")
    own.add_argument("--quiet", action="store_true",
                     help="do not echo the server's log; show a progress line while starting")
    own.add_argument("-h", "--help", action="store_true", help="show this help and the launcher flags")
    return parser


def _print_help(parser: argparse.ArgumentParser) -> None:
    from tgi_toolkit.config import LauncherConfig

    parser.print_help()
    launcher = argparse.ArgumentParser(prog="tgi-toolkit launch", add_help=False,
                                       usage=argparse.SUPPRESS)
    LauncherConfig.add_arguments(launcher)
    print("\nlauncher flags:")
    launcher.print_help()


def main(argv: list[str]) -> int:
    from tgi_toolkit.config import ConfigError, LauncherConfig
    from tgi_toolkit.server import Server, ServerError

    parser = _own_parser()
    opts, launcher_args = parser.parse_known_args(argv)
    if opts.help:
        _print_help(parser)
        return 0
    try:
        config = LauncherConfig.from_cli(launcher_args, environ=os.environ)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    echo = None if opts.quiet else _echo
    server = Server(config, backend=opts.backend, url=opts.url, log_path=opts.log_file, on_log=echo,
                    health_timeout=opts.health_timeout, startup_progress=opts.quiet)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.start()
        print(f"Serving at {server.url}  (backend {server.backend}, pid {server.pid}, log {server.log_path}). "
              f"Ctrl-C to stop.", flush=True)
        if server.backend == "url":
            signal.pause()  # nothing of ours runs: wait for Ctrl-C
            return 0
        code = server.wait()
        print(f"server exited with code {code}; last log lines:\n" + "\n".join(server.logs()), file=sys.stderr)
        return code if code and code > 0 else 1  # killed by a signal (negative) is a failure too
    except (ConfigError, ServerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopping...", file=sys.stderr, flush=True)
        return 0
    finally:
        server.stop(grace=opts.grace)
        signal.signal(signal.SIGTERM, previous)


def _echo(line: str) -> None:
    print(line, flush=True)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "launch", help="start a server (embedded, tgi, tgi-docker, vllm) in the foreground until Ctrl-C",
        add_help=False, prefix_chars="\0",  # every argument goes through to main()
    )
    parser.add_argument("args", nargs=argparse.REMAINDER)
    parser.set_defaults(func=lambda args: main(args.args))
