"""`tgi-toolkit simulate SCENARIO`: bench's scenarios on a virtual clock, and `simulate profile`.

    tgi-toolkit simulate profile --backend embedded --output cost.json
    tgi-toolkit simulate profile --url http://127.0.0.1:3000 --output cost.json
    tgi-toolkit simulate concurrency --cost-model cost.json -u 1 -u 8 -u 32 --prompt-tokens 512
    tgi-toolkit simulate concurrency --gpu H100 --model meta-llama/Llama-3.1-8B -u 10 --prompt-tokens 1024 \\
        --max-new-tokens 128 --output results/sim -- --max-batch-prefill-tokens 8192

SCENARIO is one of bench's (batch, concurrency, rate, ingestion, shared-prefix, multi-turn, decode-stall)
with bench's flags for it (`tgi-toolkit bench SCENARIO --help`); the server is a cost model instead:
`--cost-model cost.json` (calibrated by `simulate profile`, or a saved roofline) or `--gpu NAME --model
CONFIG_JSON [--num-shard N] [--quantize Q] [--server tgi-3]` (the roofline model, fitted to published figures;
each prediction's cross-validated error is printed with it), or both: `--cost-model cost.json --measured-on A100
--gpu H100 --model CONFIG_JSON`, a profile measured on one card carried to another (tgi_toolkit.costs.transfer).
Launcher flags after `--` set the
scheduler (max_batch_prefill_tokens, max_batch_size, ...); ATTENTION, PREFIX_CACHING and PREFILL_CHUNKING
are read from the environment as TGI reads them, or given with --attention / --[no-]prefix-caching /
--[no-]chunking. With `--server vllm-v1` the scheduler is vLLM V1's (docs/vllm-rules.md) and the flags after `--`
are `vllm serve`'s: --max-num-batched-tokens, --max-num-seqs, --gpu-memory-utilization, --block-size,
--[no-]enable-prefix-caching, --max-model-len, and --kv-capacity-tokens N (the capacity its log states, "GPU KV cache
size: N tokens", which wins over the memory arithmetic); a TGI flag is refused there, naming vLLM's.
It prints bench's tables; `--output` writes bench's results folder, marked simulated.
Bad input is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tgi_toolkit.costs.server_profiles import DEFAULT_SERVER, SERVERS

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.bench.results import Results
    from tgi_toolkit.costs.linear import CostModel

SCENARIOS = ("batch", "concurrency", "rate", "ingestion", "shared-prefix", "multi-turn", "decode-stall")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("simulate", help="predict bench's results with TGI's scheduler on a virtual clock",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", choices=("profile", *SCENARIOS), metavar="SCENARIO",
                   help="profile, or one of: " + ", ".join(SCENARIOS))
    p.add_argument("rest", nargs=argparse.REMAINDER, help="the scenario's flags (see the description)")
    p.set_defaults(func=main)


def _model_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tgi-toolkit simulate SCENARIO", add_help=False)
    g = p.add_argument_group("cost model (one of)")
    g.add_argument("--cost-model", metavar="COST_JSON|measured|roofline",
                   help="a cost model saved by `simulate profile` (or a GPU model's JSON); or, with --gpu and "
                        "--model, how the GPU is priced: measured (kernel times from NVIDIA's operator database, "
                        "or --kernel-times) or roofline (the datasheet); default: measured where the database "
                        "covers the card and the server, else roofline")
    g.add_argument("--kernel-times", metavar="DIR", help="with --gpu: kernel times `tgi-toolkit profile-gpu` wrote "
                                                         "(your own card's, or one the database lacks)")
    g.add_argument("--server-version", metavar="VERSION",
                   help="with --gpu: the server's release; the measured model reads the tables nearest it")
    g.add_argument("--gpu", help="GPU model: a card (H100, A100-80GB, L4, ...)")
    g.add_argument("--model", metavar="MODEL", help="GPU model: a shipped model shape by id (meta-llama/Llama-3.1-8B, "
                   "Qwen/Qwen3-8B, ...: data/models/), or the model's config.json or directory")
    g.add_argument("--num-shard", type=int, default=1, help="roofline model: tensor-parallel GPUs (default 1)")
    g.add_argument("--quantize", help="roofline model: quantization (bitsandbytes, gptq, awq, fp8, ...)")
    g.add_argument("--dtype", default="bfloat16", help="roofline model: weights' dtype (default bfloat16)")
    g.add_argument("--server", metavar="PROFILE",
                   help=f"the server it stands for, one of {', '.join(SERVERS)}: its host terms (GPU models) and "
                        f"its scheduling rules (vllm-v1: vLLM V1's) (default: the cost model's, else {DEFAULT_SERVER})")
    g.add_argument("--measured-on", metavar="GPU",
                   help="with --cost-model and --gpu: the card the profile was measured on")
    m = p.add_argument_group("scheduling mode (default: $ATTENTION, $PREFIX_CACHING, $PREFILL_CHUNKING)")
    m.add_argument("--attention", choices=("flashinfer", "flashdecoding", "paged"))
    m.add_argument("--prefix-caching", dest="prefix_caching", action="store_true", default=None)
    m.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_false")
    m.add_argument("--chunking", dest="chunking", action="store_true", default=None)
    m.add_argument("--no-chunking", dest="chunking", action="store_false")
    return p


def _profile_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tgi-toolkit simulate profile",
                                description="measure a server's forward times and fit the calibrated cost model")
    p.add_argument("--url", help="a running server")
    p.add_argument("--backend", choices=("embedded", "tgi", "tgi-docker", "vllm"), help="launch one for the profile")
    p.add_argument("--output", "-o", required=True, metavar="COST_JSON", help="where to write the cost model")
    p.add_argument("--full", action="store_true", help="the fuller grid (default: the quick one)")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("launcher_args", nargs=argparse.REMAINDER, help="with --backend: `-- --max-batch-size 8 ...`")
    return p


def _cost_model(ns: argparse.Namespace) -> Any:
    from tgi_toolkit.bench.errors import BenchError

    if ns.server is not None and ns.server not in SERVERS:
        raise BenchError("--server", f"{ns.server!r} is not a server profile", ", ".join(SERVERS))
    from tgi_toolkit.costs.measured import COST_MODELS

    roof = {"num_shard": ns.num_shard, "dtype": ns.dtype, "quantize": ns.quantize,
            "server": ns.server or DEFAULT_SERVER}
    how = ns.cost_model if ns.cost_model in COST_MODELS else None
    if how or ns.kernel_times or ((ns.gpu or ns.model) and not ns.cost_model):
        return _gpu_model(ns, how or "auto", roof)
    if ns.cost_model and (ns.gpu or ns.model):
        if not (ns.gpu and ns.model and ns.measured_on):
            raise BenchError("--cost-model/--gpu", "a profile carried to another card needs the card it was "
                             "measured on, the card to predict and the model", "--cost-model COST_JSON "
                             "--measured-on GPU --gpu GPU --model CONFIG_JSON, or --cost-model alone")
        from tgi_toolkit.costs.transfer import transfer

        try:
            return transfer(ns.cost_model, measured_on=ns.measured_on, gpu=ns.gpu, model=ns.model, **roof)
        except ValueError as exc:
            raise BenchError("--cost-model/--measured-on/--gpu", str(exc).removeprefix("cost_model: ")) from None
    if ns.measured_on:
        raise BenchError("--measured-on", "only with --cost-model and --gpu", "--cost-model COST_JSON "
                         "--measured-on GPU --gpu GPU --model CONFIG_JSON")
    if ns.cost_model:
        from tgi_toolkit.costs.load import load_cost_model

        try:
            return load_cost_model(ns.cost_model)
        except ValueError as exc:
            raise BenchError("--cost-model", str(exc).removeprefix("cost_model: ")) from None
    raise BenchError("--cost-model/--gpu", "no cost model given",
                     "--cost-model COST_JSON, or --gpu NAME --model CONFIG_JSON [--cost-model measured|roofline]")


def _gpu_model(ns: argparse.Namespace, how: str, roof: dict[str, Any]) -> Any:
    """The GPU cost model `--cost-model measured|roofline` (or neither: auto) names for --gpu and --model."""
    from tgi_toolkit.bench.errors import BenchError
    from tgi_toolkit.costs.measured import gpu_cost_model

    if not (ns.gpu and ns.model):
        raise BenchError("--gpu/--model", "a GPU cost model needs both the card and the model",
                         "--gpu NAME --model CONFIG_JSON [--cost-model measured|roofline]")
    if ns.measured_on:
        raise BenchError("--measured-on", "only with --cost-model COST_JSON (a profile carried to another card)",
                         "--cost-model COST_JSON --measured-on GPU --gpu GPU --model CONFIG_JSON")
    try:
        return gpu_cost_model(ns.gpu, ns.model, cost_model=how, kernel_times=ns.kernel_times,
                              server_version=ns.server_version, **roof)
    except ValueError as exc:
        field = str(exc).split(":", 1)[0] if ":" in str(exc) else ""
        flag = {"cost_model": "--cost-model", "kernel_times": "--kernel-times"}.get(field, "--gpu/--model")
        raise BenchError(flag, str(exc).removeprefix(field + ": ") if field in ("cost_model", "kernel_times")
                         else str(exc)) from None


def _bench_args(scenario: str, rest: list[str]) -> argparse.Namespace:
    """bench's own parser for the scenario's flags, so the two commands cannot drift apart."""
    from tgi_toolkit.bench import cli as bench_cli

    root = argparse.ArgumentParser(prog="tgi-toolkit simulate")
    bench_cli.add_parser(root.add_subparsers(dest="command"))
    return root.parse_args(["bench", scenario, *rest])


def simulate_main(scenario: str, rest: list[str]) -> int:
    from tgi_toolkit.bench import cli as bench_cli
    from tgi_toolkit.bench.errors import BenchError
    from tgi_toolkit.config import ConfigError
    from tgi_toolkit.simulate.api import run_scenario
    from tgi_toolkit.simulate.events import SimulationError

    try:
        own, remaining = _model_parser().parse_known_args(rest)
        args = _bench_args(scenario, remaining)
        if getattr(args, "url", None) or getattr(args, "backend", None):
            raise BenchError("--url/--backend", "a simulation has no server", "--cost-model, or --gpu and --model")
        options = bench_cli.run_options(args)
        extra = [a for a in args.launcher_args or [] if a != "--"]
        kept = ("output", "seed", "prefix_tokens", "slo_ttft_s", "slo_tpot_s", "scrape_interval")
        if scenario in ("shared-prefix", "multi-turn", "decode-stall"):
            kept = tuple(k for k in kept if k != "prefix_tokens")  # their --prefix-tokens is the workload's
        sim_options = {k: options[k] for k in kept if k in options}
        sim_options["command"] = ["tgi-toolkit", "simulate", scenario, *rest]
        if extra:
            sim_options["config"] = extra
        for key in ("attention", "prefix_caching", "chunking", "server"):
            if getattr(own, key) is not None:
                sim_options[key] = getattr(own, key)
        cost = _cost_model(own)
        results = run_scenario(scenario, cost, **bench_cli.scenario_params(args), **sim_options)
    except (BenchError, ConfigError, SimulationError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(bench_cli.summary(results, scenario))
    run = results.runs[-1] if results.runs else {}
    print(f"\nsimulated: {run.get('cost_model', {}).get('name', '')}; scheduler {run.get('scheduler')}")
    if hasattr(cost, "provenance"):
        print(f"priced by: {cost.provenance()}")
    for line in uncertainty_lines(cost, results):
        print(line)
    if sim_options.get("output"):
        print(f"results: {sim_options['output']} (tgi_toolkit.bench.load_results)")
    return 0


def uncertainty_lines(cost: CostModel, results: Results) -> list[str]:
    """How far to trust a GPU prediction: each metric's cross-validated error on published figures."""
    from tgi_toolkit.costs.uncertainty import uncertainty

    if not hasattr(cost, "kernel_seconds"):
        return []
    points = getattr(results, "points", None)
    rows = 1
    if points is not None and len(points):
        for column in ("users", "batch_size"):
            if column in points:
                rows = max(rows, int(points[column].fillna(1).max()))
    lines = ["predicted for a GPU; how far such predictions fell from published figures they were not fitted to:"]
    for metric, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("throughput", "throughput")):
        lines.append(f"  {label}: {uncertainty(cost, metric, rows=rows).label()}")
    return lines


def profile_main(rest: list[str]) -> int:
    from tgi_toolkit.bench.errors import BenchError
    from tgi_toolkit.config import ConfigError
    from tgi_toolkit.simulate.calibrate import profile

    args = _profile_parser().parse_args(rest)
    extra = [a for a in args.launcher_args if a != "--"] if args.launcher_args else []
    try:
        if bool(args.url) == bool(args.backend):
            raise BenchError("--url/--backend", "give exactly one", "--url URL, or --backend NAME")
        if args.url:
            if extra:
                raise BenchError("launcher flags", f"{extra} need --backend (a server to launch)", "--backend NAME")
            model = profile(args.url, quick=not args.full, progress=args.progress, output=args.output)
        else:
            from tgi_toolkit.config import LauncherConfig
            from tgi_toolkit.server import Server

            config = LauncherConfig.from_cli(extra, environ={})
            with tempfile.TemporaryDirectory() as tmp:
                # the embedded engine's forward trace: every forward's shape and seconds join the fit
                trace = str(Path(tmp) / "forwards.jsonl")
                env = {"TGI_TOOLKIT_FORWARD_TRACE": trace} if args.backend == "embedded" else {}
                with Server(config, backend=args.backend, env=env, startup_progress=args.progress) as server:
                    model = profile(server, quick=not args.full, progress=args.progress, output=args.output)
    except (BenchError, ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(model.formula())
    traced = model.source.get("traced_forwards")
    print(f"request overhead {model.request_overhead_s * 1e3:.3g} ms (front end {model.frontend_s * 1e3:.3g} ms a "
          f"request, one at a time); fitted to {len(model.points)} measurements"
          f"{f' and {traced} traced forwards' if traced else ''}, "
          f"worst ratio {max(abs(p['ratio'] - 1) for p in model.points):.1%} off")
    print(f"saved: {args.output}")
    return 0


def main(args: argparse.Namespace) -> int:
    rest = list(args.rest or [])
    if args.scenario == "profile":
        return profile_main(rest)
    return simulate_main(args.scenario, rest)
