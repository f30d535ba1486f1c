"""`tgi-toolkit plan`: the capacity plan for a model on a GPU, with the launcher flags it recommends."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tgi_toolkit.planner.dtypes import QUANT_SCHEMES
from tgi_toolkit.planner.gpus import KNOWN_GPUS, parse_size


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "plan", help="predict the KV-cache capacity and launcher settings for a model on a GPU",
        description="Plan a deployment before launching it: weights, KV cache per token, the "
                    "max-batch-total-tokens that fits, concurrent users, and recommended launcher flags.")
    p.add_argument("--model", required=True, metavar="MODEL",
                   help="a shipped model shape by id (meta-llama/Llama-3.1-8B, Qwen/Qwen3-8B, ...: data/models/), "
                        "a config.json, a model directory holding one, or a model as `tgi-toolkit serve "
                        "--model-id` takes it (the default HuggingFaceTB/SmolLM2-135M-Instruct by name, a .gguf "
                        "file, a hub id already in the local cache)")
    p.add_argument("--gpu", required=True,
                   help=f"a card ({', '.join(KNOWN_GPUS)}), a memory size ('24GiB', '80GB'), "
                        "or 'embedded' for this toolkit's CPU engine")
    p.add_argument("--model-id", help="model id to put in the recommended command line")
    p.add_argument("--dtype", default=None,
                   help="float16, bfloat16 or float32 (default: bfloat16; the engine's own default for 'embedded')")
    p.add_argument("--quantize", choices=sorted(QUANT_SCHEMES))
    p.add_argument("--kv-cache-dtype", choices=["fp8_e4m3fn", "fp8_e5m2"])
    p.add_argument("--num-shard", type=int, default=1)
    p.add_argument("--memory-fraction", "--cuda-memory-fraction", dest="memory_fraction", type=float, default=1.0)
    p.add_argument("--prompt-tokens", type=int)
    p.add_argument("--output-tokens", type=int)
    p.add_argument("--max-input-tokens", type=int)
    p.add_argument("--max-total-tokens", type=int)
    p.add_argument("--max-batch-prefill-tokens", type=int)
    p.add_argument("--overhead", help="fixed reserve per GPU besides weights and activations (default 1GiB)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from tgi_toolkit.planner.capacity import check_arguments, plan

    common = dict(quantize=args.quantize, memory_fraction=args.memory_fraction, prompt_tokens=args.prompt_tokens,
                  output_tokens=args.output_tokens, max_input_tokens=args.max_input_tokens,
                  max_total_tokens=args.max_total_tokens, max_batch_prefill_tokens=args.max_batch_prefill_tokens,
                  model_id=args.model_id)
    lengths = {k: common[k] for k in ("prompt_tokens", "output_tokens", "max_input_tokens", "max_total_tokens",
                                      "max_batch_prefill_tokens")}
    try:  # the flags first: a typo is answered before the model is read (a GGUF header takes a second)
        overhead = parse_size(args.overhead, field="--overhead") if args.overhead else None
        check_arguments(args.gpu, dtype=args.dtype, kv_cache_dtype=args.kv_cache_dtype, num_shard=args.num_shard,
                        memory_fraction=args.memory_fraction, **lengths)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    path = Path(args.model).expanduser()
    named = not path.exists() and not args.model.startswith(("/", ".", "~")) and not args.model.endswith(".json")
    if args.model_id is None and named:
        common["model_id"] = args.model  # the recommended command names the model as it was asked for
    try:
        # a config.json, a model folder, a shipped shape by id, a .gguf (its header) or a cached model id:
        # planner.shape.load_config reads each without loading weights
        result = plan(args.model, args.gpu, dtype=args.dtype, kv_cache_dtype=args.kv_cache_dtype,
                      num_shard=args.num_shard, overhead_bytes=overhead, **common)
    except ValueError as exc:
        message = str(exc)
        if message.startswith("model_config"):  # the shape's own errors: name the model they are about
            message = f"--model ({args.model}){message.removeprefix('model_config')}"
        print(f"error: {message}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(result.explain())
    return 0 if result.fits else 1
