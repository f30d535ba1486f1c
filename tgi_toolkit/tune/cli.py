"""`tgi-toolkit tune`: search launcher settings for the most goodput under TTFT/TPOT objectives.

    tgi-toolkit tune --ttft 1.0 --tpot 0.25 --users 4 --prompt-tokens 64 --max-new-tokens 16 --output results/tune
    tgi-toolkit tune --ttft 2 --tpot 0.1 --backend tgi --gpu A100-80GB --model-config config.json \\
        --users 32 --knob max_batch_size --knob cuda_memory_fraction --output results/tune -- --model-id org/model
    tgi-toolkit tune ... --values max_batch_prefill_tokens=32,64   # search a field over given values too

The KV knob is --cuda-memory-fraction, its values chosen for a ladder of KV capacities in tokens (on
the embedded engine a share of TGI_TOOLKIT_KV_CACHE_GIB): TGI 3 ignores --max-batch-total-tokens on
flash models, so it is no knob (tgi_toolkit.tune.sizing explains the arithmetic).

Launcher flags after `--` are the settings every candidate shares. Exit codes: 0 a configuration
met the objectives; 1 none did (the closest is printed); 2 bad input; 130 interrupted (run the
same command again to resume).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("tune", help="search launcher settings for the most goodput under latency objectives",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    goals = p.add_argument_group("objectives")
    goals.add_argument("--ttft", type=float, metavar="SECONDS", help="TTFT limit at the percentile")
    goals.add_argument("--tpot", type=float, metavar="SECONDS", help="TPOT limit at the percentile")
    goals.add_argument("--percentile", default="p90", help="p50, p75, p90 or p99 (default p90)")
    goals.add_argument("--max-error-rate", type=float, default=0.0, help="share of failed requests allowed (default 0)")
    load = p.add_argument_group("workload")
    load.add_argument("--scenario", choices=("concurrency", "rate", "batch"), default="concurrency")
    load.add_argument("--users", "-u", type=int, action="append", help="parallel users, repeat for several (default 4)")
    load.add_argument("--rate", type=float, action="append", dest="rates", help="requests per second (scenario rate)")
    load.add_argument("--batch-size", "-b", type=int, action="append", dest="batch_sizes", help="(scenario batch)")
    load.add_argument("--prompt-tokens", type=int, default=64, help="prompt length (default 64)")
    load.add_argument("--max-new-tokens", type=int, default=16, help="output length (default 16)")
    load.add_argument("--requests", type=int, help="measured requests per point")
    load.add_argument("--ramp-up", metavar="SECONDS",
                      help="concurrency: user i starts at i/N of this (default auto: one cycle at the load)")
    search = p.add_argument_group("search")
    search.add_argument("--knob", action="append", dest="knobs", metavar="FIELD",
                        help="field to search with a planner-bounded ladder, repeat for several "
                             "(default: max_batch_size, cuda_memory_fraction, max_batch_prefill_tokens; also "
                             "waiting_served_ratio, max_waiting_tokens with PREFILL_CHUNKING=0)")
    search.add_argument("--values", action="append", default=[], metavar="FIELD=V1,V2",
                        help="search FIELD over these values (replaces its ladder)")
    search.add_argument("--max-configs", type=int, default=8, help="configurations measured in all (default 8)")
    search.add_argument("--levels", type=int, default=3, help="values per knob in the coarse round (default 3)")
    search.add_argument("--rounds", type=int, default=2, help="coarse round + refinement rounds (default 2)")
    search.add_argument("--confirm", type=int, default=1, help="best configurations to measure again (default 1)")
    sim = p.add_argument_group("search in simulation first (tgi_toolkit.tune.simulated)")
    sim.add_argument("--simulate", action="store_true",
                     help="rank hundreds of configurations on the simulator, then measure the best few")
    sim.add_argument("--cost-model", metavar="COST_JSON",
                     help="with --simulate: `tgi-toolkit simulate profile` output (default for GPU backends: the "
                          "roofline of --gpu and --model-config)")
    sim.add_argument("--sim-levels", type=int, default=8, help="values per knob in the simulation (default 8)")
    sim.add_argument("--measure", type=int, default=3, help="the simulation's best measured on the server (default 3)")
    sim.add_argument("--spread", type=int, default=2,
                     help="more configurations measured from the rest of the simulated ranking (default 2)")
    where = p.add_argument_group("server and planner")
    where.add_argument("--backend", choices=("embedded", "tgi", "tgi-docker", "vllm"), default="embedded")
    where.add_argument("--gpu", help="for GPU backends: a card (A100-80GB, L4, ...) or a memory size (24GiB)")
    where.add_argument("--model-config", help="config.json or model directory (default: the local model's)")
    where.add_argument("--health-timeout", type=float, help="seconds to wait for each server to be healthy")
    where.add_argument("--executor", choices=("local", "ray"), default="local")
    p.add_argument("--output", "-o", required=True, metavar="DIR", help="results folder (tune.json is written there)")
    p.add_argument("--no-resume", dest="resume", action="store_false", help="measure everything again")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    p.add_argument("launcher_args", nargs=argparse.REMAINDER,
                   help="`-- --model-id ...`: settings every candidate shares")
    p.set_defaults(func=main)


def _values(items: list[str]) -> dict[str, list[Any]]:
    import yaml

    from tgi_toolkit.sweep.spec import field_name

    out = {}
    for item in items:
        name, eq, rest = item.partition("=")
        if not eq or not rest:
            raise ValueError(f"--values {item!r}: expected FIELD=V1,V2")
        out[field_name(name)] = yaml.safe_load(f"[{rest}]")
    return out


def _workload(args: argparse.Namespace) -> dict[str, Any]:
    workload: dict[str, Any] = {"scenario": args.scenario}
    if args.scenario == "batch":
        workload.update(batch_sizes=args.batch_sizes or [4], sequence_length=args.prompt_tokens,
                        decode_length=args.max_new_tokens)
        return workload
    workload.update(prompt_tokens=args.prompt_tokens, max_new_tokens=args.max_new_tokens)
    if args.scenario == "rate":
        workload["rates"] = args.rates or [1.0]
    else:
        workload["users"] = args.users or [4]
        if args.ramp_up is not None:
            workload["ramp_up"] = args.ramp_up
    if args.requests is not None:
        workload["requests"] = args.requests
    return workload


def main(args: argparse.Namespace) -> int:
    from tgi_toolkit import schema as S
    from tgi_toolkit.config import ConfigError, LauncherConfig
    from tgi_toolkit.tune.search import tune
    from tgi_toolkit.tune.select import Objectives
    from tgi_toolkit.tune.space import DEFAULT_KNOBS

    try:
        extra = [a for a in args.launcher_args if a != "--"] if args.launcher_args else []
        base = LauncherConfig.from_cli(extra, environ={})
        objectives = Objectives(ttft_s=args.ttft, tpot_s=args.tpot, percentile=args.percentile,
                                max_error_rate=args.max_error_rate)
        server = {"health_timeout": args.health_timeout} if args.health_timeout else {}
        if args.simulate:
            return _simulated(args, base, objectives, server)
        result = tune(base, _workload(args), objectives, output=args.output, backend=args.backend,
                      knobs=args.knobs or DEFAULT_KNOBS, space=_values(args.values), model_config=args.model_config,
                      gpu=args.gpu, max_configs=args.max_configs, levels=args.levels, rounds=args.rounds,
                      confirm=args.confirm, server=server, executor=args.executor, resume=args.resume,
                      progress=args.progress)
    except (ValueError, ConfigError) as exc:  # SweepError is a ValueError too
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted: run the same command again to resume ({args.output})", file=sys.stderr)
        return 130
    p = objectives.percentile
    shown = [c for c in ("rank", "label", "status", "meets", S.GOODPUT_RPS, S.OUTPUT_THROUGHPUT,
                         S.stat_column("ttft", p), S.stat_column("tpot", p), S.POINT_ID) if c in result.choice.table]
    print(result.message + "\n")
    print(result.choice.table[shown].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    pareto = result.choice.pareto
    front = [c for c in (S.CONFIG_LABEL, S.POINT_ID, S.OUTPUT_THROUGHPUT, S.stat_column("ttft", p)) if c in pareto]
    if not pareto.empty:
        print("\nPareto set (output throughput against TTFT):")
        print(pareto[front].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if result.met:
        print("\nserve it with: " + result.command())
    print(f"\nsaved: {result.path}")
    return 0 if result.met else 1


def _simulated(args: argparse.Namespace, base: Any, objectives: Any, server: dict[str, Any]) -> int:
    from tgi_toolkit.tune.simulated import agreement_text, tune_simulated
    from tgi_toolkit.tune.space import DEFAULT_KNOBS

    if args.cost_model:
        cost: Any = args.cost_model
    elif args.gpu and args.model_config:
        from tgi_toolkit.costs.measured import gpu_cost_model

        # measured kernel times where the operator database covers the card, else the roofline
        cost = gpu_cost_model(args.gpu, args.model_config, num_shard=base.num_shard or 1, quantize=base.quantize)
    else:
        print("error: --simulate needs --cost-model COST_JSON (tgi-toolkit simulate profile), or --gpu and "
              "--model-config for the roofline model", file=sys.stderr)
        return 2
    try:
        result = tune_simulated(base, _workload(args), objectives, output=args.output, cost_model=cost,
                                backend=args.backend, knobs=args.knobs or DEFAULT_KNOBS,
                                space=_values(args.values), model_config=args.model_config, gpu=args.gpu,
                                levels=args.sim_levels, measure=args.measure, spread=args.spread, server=server,
                                resume=args.resume, progress=args.progress)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result.message + "\n")
    print(agreement_text(result.simulation))
    if result.met:
        print("\nserve it with: " + result.command())
    print(f"\nsaved: {result.path}")
    return 0 if result.met else 1
