"""`tgi-toolkit advise`: which GPUs to run a model on, at your traffic and latency objectives, and what it costs.

    tgi-toolkit advise --model Qwen/Qwen3-8B --rate 20 --prompt-tokens 512 --max-new-tokens 128 --ttft 1 --tpot 0.05
    tgi-toolkit advise --model meta-llama/Llama-3.1-8B --users 64 --dataset lengths.jsonl --ttft 2 --tpot 0.1 \\
        --gpus A10G,L4,A100-80GB,H100 --shards 1,2,4 --quantize none,awq,fp8 --prices my_prices.yaml --output DIR

Every candidate (GPU kind x GPUs per replica x quantization) is checked by the capacity planner, simulated with
TGI's scheduler and the roofline cost model of its datasheet, its prefill budget and KV memory tuned in
simulation, and its sustained request rate per replica found by bisection; the table ranks them by cost per
million output tokens. Prices: the shipped dated table (tgi_toolkit/advise/gpu_prices.yaml) unless --prices.
Exit codes: 0 a candidate meets the objectives; 1 none does; 2 bad input.
"""

from __future__ import annotations

import argparse
import sys


def _list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("advise", help="the cheapest GPUs that meet your latency objectives at your traffic",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, metavar="MODEL",
                   help="a shipped model shape by id (meta-llama/Llama-3.1-8B, Qwen/Qwen3-8B, ...: data/models/), "
                        "or the model's config.json or directory")
    load = p.add_argument_group("traffic (one of --rate, --users)")
    load.add_argument("--rate", type=float, help="requests per second (Poisson arrivals)")
    load.add_argument("--users", type=int, help="parallel users (closed loop)")
    load.add_argument("--prompt-tokens", type=int, default=512, help="prompt length (default 512)")
    load.add_argument("--max-new-tokens", type=int, default=128, help="output length (default 128)")
    load.add_argument("--dataset", metavar="FILE", help=".jsonl/.json/.csv of prompt_tokens, output_tokens per request")
    load.add_argument("--requests", type=int, default=120, help="simulated requests per load tried (default 120)")
    goals = p.add_argument_group("objectives")
    goals.add_argument("--ttft", type=float, metavar="SECONDS", help="TTFT limit at the percentile")
    goals.add_argument("--tpot", type=float, metavar="SECONDS", help="TPOT limit at the percentile")
    goals.add_argument("--percentile", default="90", help="50, 75, 90 or 99 (default 90)")
    cands = p.add_argument_group("candidates")
    cands.add_argument("--gpus", type=_list, default=None,
                       help="GPU kinds, comma-separated (default A10G,L4,A100-80GB,H100)")
    cands.add_argument("--shards", type=_list, default=None, help="GPUs per replica (default 1,2,4,8)")
    cands.add_argument("--quantize", type=_list, default=None, help="none,awq,fp8,... (default none)")
    cands.add_argument("--no-tune", dest="tune", action="store_false", help="TGI 3's defaults only, no knob search")
    cands.add_argument("--cost-model", choices=("auto", "measured", "roofline"), default="auto",
                       help="how a GPU is priced: measured kernel times (NVIDIA's operator database), the roofline "
                            "(datasheet), or auto: measured where the database covers the card (default)")
    p.add_argument("--prices", metavar="YAML", help="prices per GPU-hour (default: the shipped dated table)")
    p.add_argument("--output", "-o", metavar="DIR", help="results folder: one simulated configuration per candidate")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from tgi_toolkit.advise.api import advise
    from tgi_toolkit.advise.candidates import DEFAULT_GPUS, DEFAULT_SHARDS
    from tgi_toolkit.bench.errors import BenchError
    from tgi_toolkit.config import ConfigError

    try:
        shards = [int(s) for s in args.shards] if args.shards else list(DEFAULT_SHARDS)
    except ValueError:
        print(f"error: --shards: {','.join(args.shards)} is not a list of integers (e.g. 1,2,4,8)", file=sys.stderr)
        return 2
    try:
        advice = advise(args.model, rate=args.rate, users=args.users, prompt_tokens=args.prompt_tokens,
                        max_new_tokens=args.max_new_tokens, ttft=args.ttft, tpot=args.tpot,
                        percentile=args.percentile, gpus=args.gpus or list(DEFAULT_GPUS), shards=shards,
                        quantize=args.quantize or ["none"], prices=args.prices, dataset=args.dataset,
                        requests=args.requests, tune=args.tune, output=args.output, progress=args.progress,
                        cost_model=args.cost_model)
    except (ValueError, KeyError, BenchError, ConfigError, FileNotFoundError) as exc:
        print(f"error: {str(exc).strip(chr(39))}", file=sys.stderr)
        return 2
    print(advice.summary())
    if args.output:
        print(f"results: {args.output} (tgi_toolkit.bench.load_results; advise.json: tgi_toolkit.advise.load_advice)")
    return 0 if advice.best is not None else 1
