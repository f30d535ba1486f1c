"""A diagnostic for vllm_predict's shared-prefix workloads: how many prompt tokens vLLM finds in its prefix cache when
bench sends prompts that share a prefix, read from vLLM's own counters (vllm:prefix_cache_hits, _queries).

    .venv/bin/python benchmarks/vllm_prefix_hits.py   (about a minute)

vllm_predict's SERVER settings. One user sends prompts sharing a prefix (416 tokens of which 384 shared, twice, then
800 of which 768), then set 5's shared-prefix workload plays; the counters' change over each. The simulator assumes
every shared token after a group's first request is a hit (whole 32-token blocks here): this checks that bench's
token-exact prompts give vLLM exactly that. Compared with nothing.
"""

import re
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import vllm_predict as P  # noqa: E402

from tgi_toolkit.bench import api as bench  # noqa: E402

COUNTERS = ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", "vllm:prompt_tokens_total")


def counters(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics").text
    found = {name: re.search(rf"^{re.escape(name)}\{{[^}}]*\}} (\S+)", text, re.M) for name in COUNTERS}
    return {name.split(":")[1]: float(m.group(1)) for name, m in found.items() if m}


def main() -> int:
    with P.vllm_server(str(ROOT / ".venv-vllm/bin/vllm")) as server:
        for prompt, prefix in ((416, 384), (416, 384), (800, 768)):
            before = counters(server.url)
            res = bench.run_concurrency(server, users=[1], requests=4, prompt_tokens=prompt, max_new_tokens=2,
                                        ramp_up=0, prefix_tokens=prefix, progress=False)
            after = counters(server.url)
            sent = (after["prompt_tokens_total"] - before["prompt_tokens_total"]) / prompt
            print(f"{sent:.0f} prompts of {prompt} tokens sharing {prefix} ({len(res.requests)} measured, the rest "
                  "bench's length check): "
                  + ", ".join(f"{k} {after[k] - before[k]:.0f}" for k in before), flush=True)
        before = counters(server.url)
        res = bench.play_scenario(server, P.SET_5["shared prefix"], seed=999, progress=False)
        after = counters(server.url)
        print(f"set 5's shared prefix ({len(res.requests)} prompts, 3 groups sharing 384 tokens): "
              + ", ".join(f"{k} {after[k] - before[k]:.0f}" for k in before))
    return 0


if __name__ == "__main__":
    sys.exit(main())
