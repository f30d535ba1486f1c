"""`tgi-toolkit bench batch|concurrency|rate|ingestion`: the Python API on the command line.

Flags shared with text-generation-benchmark keep its names (`--tokenizer-name`, repeated
`--batch-size`, `--sequence-length`, `--decode-length`, `--runs`, `--warmups`, the sampling flags).
The server is `--url URL`, or `--backend NAME` to launch one for the run, with launcher flags
after `--`:

    tgi-toolkit bench batch --url http://127.0.0.1:3000 -b 1 -b 4 -b 16 --output results/
    tgi-toolkit bench concurrency --backend embedded -u 1 -u 8 --output results/ -- --max-batch-size 8

Bad input is one line on stderr and exit code 2; a server lost mid-run, exit code 1; Ctrl-C, 130.
Finished points are on disk in every case.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

SCENARIOS = ("batch", "concurrency", "rate", "ingestion")
LAUNCHABLE = ("embedded", "tgi", "tgi-docker", "vllm")


def _common(parser: argparse.ArgumentParser) -> None:
    where = parser.add_argument_group("server")
    where.add_argument("--url", help="base URL of a running server (TGI, vLLM, the embedded engine, ...)")
    where.add_argument("--backend", choices=LAUNCHABLE,
                       help="launch this backend for the run instead (launcher flags after `--`)")
    where.add_argument("--api", choices=("tgi", "completions", "chat"),
                       help="route to stream from (default: tgi for TGI-like servers, completions for vLLM)")
    where.add_argument("--api-key", default=os.environ.get("TGI_TOOLKIT_API_KEY"),
                       help="Bearer token (default: $TGI_TOOLKIT_API_KEY)")
    out = parser.add_argument_group("results")
    out.add_argument("--output", "-o", metavar="DIR", help="folder to write results to as the run goes")
    out.add_argument("--no-resume", dest="resume", action="store_false",
                     help="start a new run even if an unfinished one with these settings is in --output")
    out.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    prompts = parser.add_argument_group("prompts")
    prompts.add_argument("--tokenizer-name", help="local tokenizer (name or path); default: the server's /tokenize")
    prompts.add_argument("--accept-server-count", action="store_true",
                         help="measure a server that counts prompt tokens its own way: keep the prompts built "
                              "with the tokenizer, record the server's count (input_tokens) instead of stopping")
    prompts.add_argument("--seed", type=int, default=0, help="seed of prompts and arrivals (default 0)")
    prompts.add_argument("--prefix-tokens", type=int, default=0, help="tokens every prompt shares (default 0)")
    prompts.add_argument("--dataset", help="a .txt/.json/.jsonl file to cut prompts from instead of word salad")
    sampling = parser.add_argument_group("sampling (text-generation-benchmark's flags; default greedy)")
    sampling.add_argument("--temperature", type=float)
    sampling.add_argument("--top-k", type=int)
    sampling.add_argument("--top-p", type=float)
    sampling.add_argument("--typical-p", type=float)
    sampling.add_argument("--repetition-penalty", type=float)
    sampling.add_argument("--frequency-penalty", type=float)
    sampling.add_argument("--watermark", action="store_true", default=None)
    sampling.add_argument("--do-sample", action="store_true", default=None)
    eos = sampling.add_mutually_exclusive_group()
    eos.add_argument("--ignore-eos", dest="ignore_eos", action="store_true", default=None,
                     help="always send ignore_eos (default: where the server honours it)")
    eos.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false")
    run = parser.add_argument_group("measurement")
    run.add_argument("--slo-ttft", type=float, metavar="SECONDS", help="TTFT objective for goodput")
    run.add_argument("--slo-tpot", type=float, metavar="SECONDS", help="TPOT objective for goodput")
    run.add_argument("--scrape-interval", type=float, default=1.0, help="seconds between /metrics scrapes")
    run.add_argument("--request-timeout", type=float, default=600.0,
                     help="seconds without a byte before a request fails")
    parser.add_argument("launcher_args", nargs=argparse.REMAINDER,
                        help="with --backend: `-- --max-batch-size 8 ...` (text-generation-launcher flags)")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="benchmark a server over its HTTP API",
                                  description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = bench.add_subparsers(dest="scenario", metavar="SCENARIO")
    sub.required = True

    p = sub.add_parser("batch", help="text-generation-benchmark's prefill/decode tables, over HTTP")
    p.add_argument("--batch-size", "-b", type=int, action="append", dest="batch_sizes",
                   help="repeat for several (default 1 2 4 8 16 32)")
    p.add_argument("--sequence-length", "-s", type=int, default=10, help="prompt tokens (default 10)")
    p.add_argument("--decode-length", "-d", type=int, default=8, help="new tokens (default 8)")
    p.add_argument("--runs", "-r", type=int, default=10, help="measured runs per batch size (default 10)")
    p.add_argument("--warmups", "-w", type=int, default=1, help="warm-up runs per batch size (default 1)")
    _common(p)

    p = sub.add_parser("concurrency", help="N parallel users: TTFT, TPOT, ITL, E2E, throughput")
    p.add_argument("--users", "-u", type=int, action="append", help="repeat for several (default 1 2 4 8 16 32)")
    p.add_argument("--prompt-tokens", type=int, action="append", help="repeat for several (default 128)")
    p.add_argument("--max-new-tokens", type=int, action="append", help="repeat for several (default 128)")
    p.add_argument("--requests", type=int, help="measured requests per point (default 4 per user, at least 8)")
    p.add_argument("--warmup-requests", type=int, default=0, help="unmeasured requests first (default 0)")
    _common(p)

    p = sub.add_parser("rate", help="constant or Poisson arrivals, with goodput")
    p.add_argument("--rate", type=float, action="append", dest="rates",
                   help="requests per second, repeat for several; inf = all at once (default 1 2 4)")
    p.add_argument("--arrival", choices=("constant", "poisson"), default="poisson")
    p.add_argument("--prompt-tokens", type=int, action="append", help="repeat for several (default 128)")
    p.add_argument("--max-new-tokens", type=int, action="append", help="repeat for several (default 128)")
    p.add_argument("--requests", type=int, default=64, help="requests per point (default 64)")
    p.add_argument("--max-concurrency", type=int, help="cap on requests in flight (default none)")
    _common(p)

    p = sub.add_parser("ingestion", help="happy_vllm's prompt ingestion speed (TTFT against prompt length)")
    p.add_argument("--prompt-tokens", type=int, action="append",
                   help="repeat for several (default 8 lengths up to 90%% of max_input_tokens)")
    p.add_argument("--repeats", type=int, default=3, help="requests per length (default 3)")
    _common(p)
    bench.set_defaults(func=main)


def _scenario_params(args: argparse.Namespace) -> dict[str, Any]:
    def given(name: str, default: Any) -> Any:
        value = getattr(args, name)
        return value if value is not None else default

    if args.scenario == "batch":
        return {"batch_sizes": given("batch_sizes", [1, 2, 4, 8, 16, 32]), "sequence_length": args.sequence_length,
                "decode_length": args.decode_length, "runs": args.runs, "warmups": args.warmups}
    if args.scenario == "concurrency":
        return {"users": given("users", [1, 2, 4, 8, 16, 32]), "prompt_tokens": given("prompt_tokens", [128]),
                "max_new_tokens": given("max_new_tokens", [128]), "requests": args.requests,
                "warmup_requests": args.warmup_requests}
    if args.scenario == "rate":
        return {"rates": given("rates", [1.0, 2.0, 4.0]), "arrival": args.arrival,
                "prompt_tokens": given("prompt_tokens", [128]), "max_new_tokens": given("max_new_tokens", [128]),
                "requests": args.requests, "max_concurrency": args.max_concurrency}
    return {"prompt_tokens": args.prompt_tokens, "repeats": args.repeats}


def _options(args: argparse.Namespace) -> dict[str, Any]:
    sampling = {k: getattr(args, k) for k in ("temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
                                              "frequency_penalty", "watermark", "do_sample")}
    return {"output": args.output, "resume": args.resume, "progress": args.progress,
            "tokenizer": args.tokenizer_name, "seed": args.seed, "prefix_tokens": args.prefix_tokens,
            "dataset": args.dataset, "api": args.api, "api_key": args.api_key, "ignore_eos": args.ignore_eos,
            "sampling": {k: v for k, v in sampling.items() if v is not None}, "slo_ttft_s": args.slo_ttft,
            "slo_tpot_s": args.slo_tpot, "scrape_interval": args.scrape_interval,
            "request_timeout": args.request_timeout, "command": _command(args),
            "accept_server_count": args.accept_server_count}


def _command(args: argparse.Namespace) -> list[str]:
    """The command line as parsed (provenance): every flag that was set, secrets masked."""
    flags = {"batch_sizes": "--batch-size", "rates": "--rate"}
    out = ["tgi-toolkit", "bench", args.scenario]
    for dest, value in vars(args).items():
        if dest in ("func", "command", "scenario", "launcher_args") or value is None:
            continue
        flag = flags.get(dest, "--" + dest.replace("_", "-"))
        if dest in ("resume", "progress"):
            out += [] if value else [f"--no-{dest}"]
        elif dest == "ignore_eos":
            out.append("--ignore-eos" if value else "--no-ignore-eos")
        elif isinstance(value, bool):
            out += [flag] if value else []
        elif isinstance(value, list):
            for item in value:
                out += [flag, str(item)]
        else:
            out += [flag, "***" if dest == "api_key" else str(value)]
    extra = [a for a in args.launcher_args or [] if a != "--"]
    return out + (["--", *extra] if extra else [])


@contextlib.contextmanager
def _server(args: argparse.Namespace) -> Iterator[Any]:
    from tgi_toolkit.bench.errors import BenchError

    extra = [a for a in args.launcher_args if a != "--"] if args.launcher_args else []
    if args.url and args.backend:
        raise BenchError("--url/--backend", "give one, not both", "--url URL, or --backend NAME")
    if args.url:
        if extra:
            raise BenchError("launcher flags", f"{extra} need --backend (a server to launch)", "--backend NAME")
        yield args.url
        return
    if not args.backend:
        raise BenchError("--url/--backend", "no server given", "--url URL, or --backend " + "|".join(LAUNCHABLE))
    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.server import Server

    config = LauncherConfig.from_cli(extra, environ={})
    with Server(config, backend=args.backend, startup_progress=args.progress) as server:
        yield server


def _summary(results: Any, scenario: str) -> str:
    from tgi_toolkit.bench import schema as S

    if scenario == "batch":
        return results.tables()
    if scenario == "ingestion":
        fit = results.ingestion()
        head = f"prompt ingestion speed: {fit['speed_tok_s']:.0f} tokens/s (fit r2={fit['r2']:.3f}, n={fit['n']:.0f})\n"
    else:
        head = ""
    columns = [S.POINT_ID, S.REQUESTS, S.ERRORS, S.stat_column("ttft", "p50"), S.stat_column("tpot", "p50"),
               S.stat_column("itl", "p50"), S.stat_column("e2e", "p50"), S.OUTPUT_THROUGHPUT, S.GOODPUT_RPS,
               S.CLIENT_BOUND]
    return head + results.points[columns].to_string(index=False, float_format=lambda v: f"{v:.4g}")


def main(args: argparse.Namespace) -> int:
    from tgi_toolkit.bench.api import run_scenario
    from tgi_toolkit.bench.errors import BenchError, ServerDiedError
    from tgi_toolkit.config import ConfigError
    from tgi_toolkit.server import ServerError

    where = f" (finished points are in {args.output})" if args.output else ""
    try:
        with _server(args) as server:
            results = run_scenario(args.scenario, server, **_scenario_params(args), **_options(args))
    except (BenchError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (ServerDiedError, ServerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"interrupted{where}", file=sys.stderr)
        return 130
    print(_summary(results, args.scenario))
    if args.output:
        print(f"\nresults: {args.output} (tgi_toolkit.bench.load_results)")
    return 0
