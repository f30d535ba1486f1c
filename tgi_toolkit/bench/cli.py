"""`tgi-toolkit bench batch|concurrency|rate|ingestion`: the Python API on the command line.

Flags shared with text-generation-benchmark keep its names (`--tokenizer-name`, repeated
`--batch-size`, `--sequence-length`, `--decode-length`, `--runs`, `--warmups`, the sampling flags).
The server is `--url URL`, or `--backend NAME` to launch one for the run, with launcher flags
after `--`:

    tgi-toolkit bench batch --url http://127.0.0.1:3000 -b 1 -b 4 -b 16 --output results/
    tgi-toolkit bench concurrency --backend embedded -u 1 -u 8 --output results/ -- --max-batch-size 8

Bad input is one line on stderr and exit code 2, before any server is launched; a server lost mid-run,
exit code 1; Ctrl-C, 130. Finished points are on disk in every case. An --output that holds a run of
the same command is refused: --resume finishes an interrupted one, --overwrite measures again in its place.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
from collections.abc import Iterator
from typing import Any

from tgi_toolkit.scenarios.base import Scenario
from tgi_toolkit.scenarios.kinds import (
    BatchScenario,
    ConcurrencyScenario,
    IngestionScenario,
    RateScenario,
)
from tgi_toolkit.scenarios.plans import DecodeStallScenario, MultiTurn, SharedPrefix
from tgi_toolkit.schema import SCRAPE_INTERVAL

SCENARIOS = ("batch", "concurrency", "rate", "ingestion", "shared-prefix", "multi-turn", "decode-stall")
LAUNCHABLE = ("embedded", "tgi", "tgi-docker", "vllm")
WORKLOADS = ("shared-prefix", "multi-turn", "decode-stall")  # scenarios.plans: prompts shaped for a prefix cache


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
    rerun = out.add_mutually_exclusive_group()
    rerun.add_argument("--resume", action="store_true",
                       help="finish the interrupted run of these settings in --output (its finished points kept)")
    rerun.add_argument("--overwrite", action="store_true",
                       help="measure again into an --output that holds a run of these settings, replacing it "
                            "(without either, such a folder is refused: nothing is silently reused)")
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
    run.add_argument("--scrape-interval", type=float, default=SCRAPE_INTERVAL,
                     help="seconds between /metrics scrapes (default %(default)s)")
    run.add_argument("--request-timeout", type=float, default=600.0,
                     help="seconds without a byte before a request fails")
    parser.add_argument("launcher_args", nargs=argparse.REMAINDER,
                        help="with --backend: `-- --max-batch-size 8 ...` (text-generation-launcher flags)")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="benchmark a server over its HTTP API",
                                  description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = bench.add_subparsers(dest="scenario", metavar="SCENARIO")
    sub.required = True

    for cls, what in ((BatchScenario, "text-generation-benchmark's prefill/decode tables, over HTTP"),
                      (ConcurrencyScenario, "N parallel users: TTFT, TPOT, ITL, E2E, throughput"),
                      (RateScenario, "constant or Poisson arrivals, with goodput"),
                      (IngestionScenario, "happy_vllm's prompt ingestion speed (TTFT against prompt length)"),
                      (SharedPrefix, "groups of requests sharing a prompt prefix: TTFT, prefix-cache hit rate"),
                      (MultiTurn, "conversations resending their history: TTFT per turn, hit rate"),
                      (DecodeStallScenario, "a long prompt joining running streams: their largest inter-token gap")):
        p = sub.add_parser(cls.name.replace("_", "-"), help=what)
        scenario_flags(p, cls)
    bench.set_defaults(func=main)


def scenario_flags(parser: argparse.ArgumentParser, cls: type[Scenario]) -> None:
    """A scenario's flags, one per field of its dataclass (name, help and default from the field), then the
    flags every scenario takes; a `repeat` field's flag is given once per value (default: the field's)."""
    common = {}
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if meta.get("common"):  # a flag of _common's, whose default and help are this scenario's
            common[f.name] = (f.default, meta["help"])
            continue
        flags = [meta.get("flag") or "--" + f.name.replace("_", "-"), *([meta["short"]] if meta.get("short") else [])]
        extra = {"choices": meta["choices"]} if meta.get("choices") else {}
        if meta.get("metavar"):
            extra["metavar"] = meta["metavar"]
        parser.add_argument(*flags, dest=f.name, type=meta["type"], help=meta["help"], **extra,
                            **({"action": "append"} if meta.get("repeat") else {"default": _shown(f.default)}))
    _common(parser)
    for action in parser._actions:
        if action.dest in common:
            action.default, action.help = common[action.dest]


def _shown(default: Any) -> Any:
    """A flag's default as argparse keeps it: a number or a word; None for a value of the scenario's own type (left
    out of the command line that is recorded, so that it reads as before the parameter existed)."""
    return default if isinstance(default, (int, float, str)) else None


def scenario_params(args: argparse.Namespace) -> dict[str, Any]:
    """The scenario's own parameters from parsed `bench` (or `simulate run`) arguments: its dataclass's fields
    that were given (a repeatable flag left out takes the field's default)."""
    from tgi_toolkit.scenarios.kinds import scenario_class

    return {name: getattr(args, name) for name in scenario_class(args.scenario).parameters()
            if getattr(args, name) is not None}


def run_options(args: argparse.Namespace) -> dict[str, Any]:
    """What every scenario's run takes (output, resume, sampling, ...) from parsed arguments."""
    sampling = {k: getattr(args, k) for k in ("temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
                                              "frequency_penalty", "watermark", "do_sample")}
    return {"output": args.output, "resume": args.resume, "progress": args.progress,
            "tokenizer": args.tokenizer_name, "seed": args.seed, "prefix_tokens": args.prefix_tokens,
            "dataset": args.dataset, "api": args.api, "api_key": args.api_key, "ignore_eos": args.ignore_eos,
            "sampling": {k: v for k, v in sampling.items() if v is not None}, "slo_ttft_s": args.slo_ttft,
            "slo_tpot_s": args.slo_tpot, "scrape_interval": args.scrape_interval,
            "request_timeout": args.request_timeout, "command": command_line(args),
            "accept_server_count": args.accept_server_count}


def command_line(args: argparse.Namespace) -> list[str]:
    """The command line as parsed (provenance): every flag that was set, secrets masked."""
    flags = {"batch_sizes": "--batch-size", "rates": "--rate"}
    out = ["tgi-toolkit", "bench", args.scenario]
    for dest, value in vars(args).items():
        if dest in ("func", "command", "scenario", "launcher_args") or value is None:
            continue
        flag = flags.get(dest, "--" + dest.replace("_", "-"))
        if dest == "progress":
            out += [] if value else ["--no-progress"]
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


def runs_to_replace(args: argparse.Namespace) -> list[dict[str, Any]]:
    """What --output holds of the runs this command line asked for before, checked against --resume and
    --overwrite before any server starts: the runs --overwrite replaces ([] otherwise). A finished run without
    --overwrite, an interrupted one without --resume or --overwrite, and --resume with nothing to finish are
    refused (BenchError), so that a rerun never silently shows an earlier run's numbers."""
    from tgi_toolkit.bench.errors import BenchError
    from tgi_toolkit.bench.run_record import earlier_runs

    if not args.output:
        if args.resume or args.overwrite:
            raise BenchError("--resume" if args.resume else "--overwrite", "needs a results folder", "--output DIR")
        return []
    runs = earlier_runs(args.output, command_line(args))
    if args.overwrite:
        return runs
    latest = runs[-1] if runs else None
    finished = latest is not None and latest.get("status") == "complete"
    if args.resume:
        if latest is None or finished:
            what = f"run {latest['run_id']} is finished" if finished else "none of these settings"
            raise BenchError("--resume", f"{args.output} holds no interrupted run to finish ({what})",
                             "--overwrite to measure again into it, or a new --output folder")
        return []
    if finished:
        raise BenchError("--output", f"{args.output} already holds a finished run of these settings "
                                     f"({latest['run_id']}); nothing is reused",
                         "--overwrite to measure again, replacing it; or a new --output folder "
                         "(--resume only finishes an interrupted run)")
    if latest is not None:
        raise BenchError("--output", f"{args.output} holds an interrupted run of these settings ({latest['run_id']})",
                         "--resume to finish it; --overwrite to start again, replacing it; or a new --output folder")
    return []


def check_before_start(args: argparse.Namespace) -> None:
    """The scenario's values and the run's options checked as the run will check them (bench.checks), before
    a server is launched: with --backend, lengths against the limits its launcher flags set."""
    from tgi_toolkit.bench.checks import LaunchLimits, check_options
    from tgi_toolkit.scenarios.kinds import check_scenario

    limits = None
    if args.backend and not args.url:
        from tgi_toolkit.config import LauncherConfig

        limits = LaunchLimits.of(LauncherConfig.from_cli([a for a in args.launcher_args or [] if a != "--"],
                                                         environ={}))
    check_scenario(args.scenario.replace("-", "_"), scenario_params(args), limits)
    check_options(run_options(args))


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


def summary(results: Any, scenario: str) -> str:
    """The lines the CLI prints after a run: one per point, its main figures."""
    from tgi_toolkit import schema as S

    if scenario == "batch":
        return results.tables()
    if scenario == "decode-stall":
        columns = [S.POINT_ID, S.STALL_MAX_GAP_S, S.STALL_P99_GAP_S, S.STALL_BASELINE_GAP_S, S.LONG_PROMPT_TTFT_S,
                   S.ERRORS]
        return results.points[columns].to_string(index=False, float_format=lambda v: f"{v:.4g}")
    if scenario in ("shared-prefix", "multi-turn"):
        ok = results.requests[~results.requests[S.WARMUP] & results.requests[S.ERROR].isna()]
        turns = ok.groupby(S.TURN)[S.TTFT_S].agg(["count", "median"]).rename(
            columns={"count": "requests", "median": "ttft_p50_s"})
        rate = results.points[S.PREFIX_HIT_RATE].iloc[-1] if len(results.points) else float("nan")
        what = "turn" if scenario == "multi-turn" else "turn (0: the group's first request)"
        return (f"TTFT by {what}:\n{turns.to_string(float_format=lambda v: f'{v:.4g}')}\n"
                f"prefix-cache hit rate: {rate:.3f}" + (" (the server has no prefix-cache counters)"
                                                          if rate != rate else ""))
    if scenario == "ingestion":
        fit = results.ingestion()
        caveat = f"; {fit['unreliable']}" if fit.get("unreliable") else ""
        head = (f"prompt ingestion speed: {fit['speed_tok_s']:.0f} tokens/s (fit r2={fit['r2']:.3f}, "
                f"n={fit['n']:.0f}{caveat})\n")
    else:
        head = ""
    columns = [S.POINT_ID, S.REQUESTS, S.ERRORS, S.stat_column("ttft", "p50"), S.stat_column("tpot", "p50"),
               S.stat_column("itl", "p50"), S.stat_column("e2e", "p50"), S.OUTPUT_THROUGHPUT, S.GOODPUT_RPS,
               S.CLIENT_BOUND, S.MACHINE_BUSY]
    points = results.points
    table = points[columns].to_string(index=False, float_format=lambda v: f"{v:.4g}")
    notes = []
    failed = points[points[S.ERRORS] > 0]
    if len(failed):
        notes.append(f"{len(failed)} point(s) had failed requests (errors column; requests.parquet says why)")
    for column, what in ((S.CLIENT_BOUND, "the client was the bottleneck"),
                         (S.MACHINE_BUSY, "other processes took CPU: latencies stretched"),
                         (S.LOCKSTEP, "the users sent in step (arrival_sync_share): TTFT and ITL show that "
                                      "phase, not the server's steady state; give a --ramp-up")):
        flagged = points[column].fillna(False).astype(bool)
        if flagged.any():
            notes.append(f"{int(flagged.sum())} point(s) {column}: {what}")
    return head + table + "".join(f"\nnote: {n}" for n in notes)


def main(args: argparse.Namespace) -> int:
    from tgi_toolkit.bench.api import run_scenario
    from tgi_toolkit.bench.errors import BenchError, ServerDiedError
    from tgi_toolkit.config import ConfigError
    from tgi_toolkit.server import ServerError

    where = f" (finished points are in {args.output}: --resume finishes the run)" if args.output else ""
    try:
        check_before_start(args)
        replaced = runs_to_replace(args)
        with _server(args) as server:
            if replaced:
                from tgi_toolkit.bench.results import ResultsFolder

                folder = ResultsFolder(args.output)
                for run in replaced:
                    folder.drop_run(run["run_id"])
            options = run_options(args)
            if args.scenario in WORKLOADS:
                prefix = options.pop("prefix_tokens")
                if prefix and args.scenario != "shared-prefix":
                    raise BenchError("--prefix-tokens", "the workload builds its own shared text",
                                     "--system-tokens for multi-turn; 0 for decode-stall")
            results = run_scenario(args.scenario.replace("-", "_"), server, **scenario_params(args), **options)
    except (BenchError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (ServerDiedError, ServerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"interrupted{where}", file=sys.stderr)
        return 130
    print(summary(results, args.scenario))
    if args.output:
        # The summary above is this run's alone; a reused folder also holds other runs' points.
        from pathlib import Path

        others = [p for p in (Path(args.output) / "runs").glob("*.json") if p.stem not in results.run_ids]
        also = f"; the folder also holds {len(others)} other run(s), left out of the summary above" if others else ""
        print(f"\nresults: {args.output} (tgi_toolkit.bench.load_results; this run: "
              f"{', '.join(results.run_ids)}{also})")
    return 0
