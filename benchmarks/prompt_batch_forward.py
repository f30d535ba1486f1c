"""One forward of B new prompts of n tokens each (the batch table's prefill), as the runner runs it: its wall time and
the torch calls it makes from Python (a TorchFunctionMode count: the host's share, which a GPU's eager prompt path
pays call by call; docs/gpu-probe.md).

    .venv/bin/python benchmarks/prompt_batch_forward.py [--batch 4 16] [--tokens 128] [--repeats 7]
        [--cached] [--pad-limit 0 1.25]

Prints one JSON line per batch size (and pad limit). `--cached`: each prompt's first 1-3 tokens computed before the
timed forward, as the prefix cache found them in the H200's served batch table, so that its chunks have several
lengths and start after cached positions. `--pad-limit`: attention.PAD_LIMIT for the forward (0: no padding, one
SDPA call a chunk), the limits taken in turn at each repeat, so that their ratio is measured side by side. To
compare two versions of the runner, run it from both checkouts in turn on one machine
(benchmarks/results/prompt_batch_forward.txt: before and after new prompts of one length attended in one SDPA call;
counted then with a tensor's attribute reads, which TorchCalls now leaves out).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from tgi_toolkit.engine import attention
from tgi_toolkit.engine.host_calls import TorchCalls
from tgi_toolkit.engine.model import load_model
from tgi_toolkit.engine.runner import LlamaRunner
from tgi_toolkit.models.files import DEFAULT_MODEL_ID, resolve_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--cached", action="store_true", help="each prompt after 1-3 cached tokens")
    parser.add_argument("--pad-limit", type=float, nargs="+", default=[attention.PAD_LIMIT])
    args = parser.parse_args()
    loaded = load_model(resolve_model(DEFAULT_MODEL_ID))
    vocab = loaded.config.vocab_size
    runner = LlamaRunner(loaded.model, max(args.batch), args.tokens + 1)

    def forward(batch: int, limit: float, mode: TorchCalls | None = None) -> float:
        seqs = [runner.new_seq() for _ in range(batch)]
        rows = [(seq, [(17 * i + 31 * j) % vocab for j in range(args.tokens)]) for i, seq in enumerate(seqs)]
        if args.cached:
            runner.forward([(seq, ids[:1 + i % 3]) for i, (seq, ids) in enumerate(rows)])
            rows = [(seq, ids[1 + i % 3:]) for i, (seq, ids) in enumerate(rows)]
        attention.PAD_LIMIT = limit
        began = time.perf_counter()
        if mode is None:
            runner.forward(rows)
        else:
            with mode:
                runner.forward(rows)
        seconds = time.perf_counter() - began
        for seq in reversed(seqs):
            runner.release(seq)
        return seconds

    with torch.inference_mode():
        for batch in args.batch:
            walls: dict[float, list[float]] = {limit: [] for limit in args.pad_limit}
            for limit in args.pad_limit:
                forward(batch, limit)
            for _ in range(args.repeats):
                for limit in args.pad_limit:
                    walls[limit].append(forward(batch, limit))
            for limit in args.pad_limit:
                calls = TorchCalls()
                forward(batch, limit, calls)
                print(json.dumps({"batch": batch, "tokens": args.tokens, "cached": args.cached, "pad_limit": limit,
                                  "dtype": str(loaded.dtype), "forward_ms": round(statistics.median(walls[limit]) * 1e3,
                                                                                  1),
                                  "torch_calls": calls.n}), flush=True)


if __name__ == "__main__":
    main()
