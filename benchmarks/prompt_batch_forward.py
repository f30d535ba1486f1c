"""One forward of B new prompts of n tokens each (the batch table's prefill), as the runner runs it: its wall time and
the torch calls it makes from Python (a TorchFunctionMode count: the host's share, which a GPU's eager prompt path
pays call by call; docs/gpu-probe.md).

    .venv/bin/python benchmarks/prompt_batch_forward.py [--batch 4 16] [--tokens 128] [--repeats 7]

Prints one JSON line per batch size. To compare two versions of the runner side by side, run it from both
checkouts in turn on one machine (benchmarks/results/prompt_batch_forward.txt: before and after new prompts of
one length attended in one SDPA call; counted then with a tensor's attribute reads, which TorchCalls now leaves out).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from tgi_toolkit.engine.host_calls import TorchCalls
from tgi_toolkit.engine.model import load_model
from tgi_toolkit.engine.runner import LlamaRunner
from tgi_toolkit.models.files import DEFAULT_MODEL_ID, resolve_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    loaded = load_model(resolve_model(DEFAULT_MODEL_ID))
    vocab = loaded.config.vocab_size
    runner = LlamaRunner(loaded.model, max(args.batch), args.tokens + 1)

    def forward(batch: int, mode: TorchCalls | None = None) -> float:
        seqs = [runner.new_seq() for _ in range(batch)]
        rows = [(seq, [(17 * i + 31 * j) % vocab for j in range(args.tokens)]) for i, seq in enumerate(seqs)]
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
            forward(batch)
            wall = statistics.median(forward(batch) for _ in range(args.repeats))
            calls = TorchCalls()
            forward(batch, calls)
            print(json.dumps({"batch": batch, "tokens": args.tokens, "dtype": str(loaded.dtype),
                              "forward_ms": round(wall * 1e3, 1), "torch_calls": calls.n}), flush=True)


if __name__ == "__main__":
    main()
