"""The engine's TGI 3 path with the real model: chunked prefill and prefix-cache hits change when a
token is computed, never which token (greedy, float32), and a forward that fails frees what it held."""

from __future__ import annotations

import time

import pytest

from tgi_toolkit.engine.backend import ModelBackend
from tgi_toolkit.engine.events import Event, GenerationError
from tgi_toolkit.engine.infer import Engine
from tgi_toolkit.engine.model import load_model
from tgi_toolkit.engine.runner import LlamaRunner
from tgi_toolkit.engine.sampling import SamplingParams
from tgi_toolkit.engine.validation import ValidRequest
from tgi_toolkit.models.files import DEFAULT_MODEL_ID, resolve_model
from tgi_toolkit.router import Observer, SchedulerConfig

pytestmark = pytest.mark.slow

STORY = ("Once upon a time, in a land far away, there lived a king who had three daughters. "
         "The youngest was the most beautiful, and every morning she walked to the ")
PROMPTS = [STORY + "river.", STORY + "forest, where", "The capital of France is", STORY + "old mill and"]


@pytest.fixture(scope="module")
def loaded():
    return load_model(resolve_model(DEFAULT_MODEL_ID), dtype="float32")


@pytest.fixture(scope="module")
def alone(loaded) -> list[list[int]]:
    """Each prompt's greedy tokens when it runs by itself, whole, with no cache."""
    return [run(make_engine(loaded, prefix_caching=False), [request(loaded, p)])[0] for p in PROMPTS]


def make_engine(loaded, observer: Observer | None = None, **config) -> Engine:
    settings = SchedulerConfig(**{"max_batch_prefill_tokens": 4096, "max_batch_total_tokens": 4000, **config})
    runner = LlamaRunner(loaded.model, max_rows=16, max_positions=512,
                         pool_slots=settings.slots if settings.prefix_caching else None)
    backend = ModelBackend(runner, loaded.tokenizer, loaded.eos_token_ids)
    return Engine(backend, settings, observer)


def request(loaded, text: str, n: int = 12) -> ValidRequest:
    return ValidRequest(text, loaded.tokenizer.encode(text), n, SamplingParams(), ignore_eos=True)


def run(engine: Engine, requests: list[ValidRequest], steps_between: int = 0) -> list[list[int]]:
    """Submit the requests (`steps_between` scheduler steps apart) and step until all finish."""
    outputs: list[list[int]] = [[] for _ in requests]
    errors: list[BaseException] = []

    def sink(i: int):
        def emit(event):
            if isinstance(event, Event):
                outputs[i].append(event.token.id)
            else:
                errors.append(event)
        return emit

    for i, req in enumerate(requests):
        engine.submit(req, sink(i))
        for _ in range(steps_between):
            engine.scheduler.step()
    for _ in range(1000):
        if not engine.scheduler.step():
            break
    assert not errors
    return outputs


def test_chunked_prefill_and_joining_a_running_batch_give_each_request_its_alone_tokens(loaded, alone):
    # A budget of 16 tokens cuts every prompt into chunks; requests arriving 3 steps apart join a
    # running batch in mixed forwards (decode rows beside prompt chunks).
    engine = make_engine(loaded, max_batch_prefill_tokens=16, prefix_caching=False)
    together = run(engine, [request(loaded, p) for p in PROMPTS], steps_between=3)
    assert together == alone


class Prefixes(Observer):
    def __init__(self) -> None:
        self.found: list[int] = []

    def allocation(self, prefix_len: int, suffix_len: int) -> None:
        self.found.append(prefix_len)


def test_prefix_cache_hits_reuse_kv_and_give_the_same_tokens(loaded, alone):
    seen = Prefixes()
    engine = make_engine(loaded, observer=seen)
    first = run(engine, [request(loaded, PROMPTS[0])])
    ids = [loaded.tokenizer.encode(p) for p in PROMPTS]
    assert engine.scheduler.allocator.trie.cached_blocks() == len(ids[0])  # cached once it finished
    rest = run(engine, [request(loaded, p) for p in PROMPTS[1:]] + [request(loaded, PROMPTS[0])])
    assert [first[0], *rest] == [*alone, alone[0]]
    # What the cache held for each: the story's shared tokens, nothing for an unrelated prompt, and
    # the whole of the repeated prompt (of which the scheduler still computes the last token).
    shared = [next(i for i, (a, b) in enumerate(zip(ids[0], other, strict=False)) if a != b) for other in ids[1:]]
    assert seen.found == [0, shared[0], 0, shared[2], len(ids[0])]
    assert shared[0] > 20 and shared[2] > 20


def test_a_cache_that_holds_one_request_serves_prompts_that_share_part_of_a_cached_one(loaded, alone):
    # The tuner's smallest KV cache holds exactly the longest request. The two story prompts share most
    # tokens, and the second's unshared rest does not fit beside the whole of the first: it fits only if
    # the unmatched part of the cached prompt may be evicted (before, the server waited forever).
    seen = Prefixes()
    ids = [loaded.tokenizer.encode(p) for p in PROMPTS[:2]]
    n = 12
    total = max(len(i) for i in ids) + n  # block 0 is reserved: input + n - 1 tokens fit
    shared = next(i for i, (a, b) in enumerate(zip(*ids, strict=False)) if a != b)
    assert len(ids[1]) + n - 1 - shared > total - 1 - len(ids[0])  # what TGI's rule would leave free
    engine = make_engine(loaded, observer=seen, max_batch_total_tokens=total)
    first = run(engine, [request(loaded, PROMPTS[0], n)])
    second = run(engine, [request(loaded, PROMPTS[1], n)])
    assert [first[0], second[0]] == alone[:2]
    assert seen.found == [0, shared]


class Forwards(Observer):
    """Each forward's rows as (request prompt, tokens computed); `after_first` runs once the first one ended."""

    def __init__(self, after_first=None) -> None:
        self.rows: list[list[tuple[str, int]]] = []
        self.after_first = after_first

    def ran(self, forward, seconds: float) -> None:
        self.rows.append([(row.entry.request.request.inputs, row.length) for row in forward.rows])
        if len(self.rows) == 1 and self.after_first is not None:
            self.after_first()


def test_a_request_queued_after_a_forward_ended_joins_one_forward_later_with_its_alone_tokens(loaded, alone):
    # B8 on the real engine: a request that reaches the queue during the bookkeeping after a forward (here
    # from the forward hook, where a closed-loop user's next request lands) missed TGI's poll at the
    # forward's end. A decodes alone once, then B's prompt joins A's decoding row.
    a, b = PROMPTS[2], PROMPTS[0]
    outputs: dict[str, list[int]] = {a: [], b: []}

    def sink(prompt: str):
        return lambda event: outputs[prompt].append(event.token.id)

    seen = Forwards(lambda: engine.submit(request(loaded, b), sink(b)))
    engine = make_engine(loaded, observer=seen)
    engine.submit(request(loaded, a), sink(a))
    for _ in range(100):
        if not engine.scheduler.step():
            break
    n_a, n_b = len(loaded.tokenizer.encode(a)), len(loaded.tokenizer.encode(b))
    assert seen.rows[:3] == [[(a, n_a)], [(a, 1)], [(a, 1), (b, n_b)]]
    assert [outputs[a], outputs[b]] == [alone[2], alone[0]]


def test_from_idle_requests_queued_apart_start_with_the_first_alone(loaded, alone):
    # B8 from idle: TGI's loop wakes at the first arrival and polls before a front end's next request.
    seen = Forwards()
    engine = make_engine(loaded, observer=seen)
    outputs: list[list[int]] = [[], [], []]
    for i, prompt in enumerate(PROMPTS[:3]):  # queued 2 ms apart while the scheduler waits
        engine.submit(request(loaded, prompt), lambda event, i=i: outputs[i].append(event.token.id))
        time.sleep(0.002)
    for _ in range(100):
        if not engine.scheduler.step():
            break
    first, second, third = (len(loaded.tokenizer.encode(p)) for p in PROMPTS[:3])
    assert seen.rows[0] == [(PROMPTS[0], first)]
    assert seen.rows[1] == [(PROMPTS[0], 1), (PROMPTS[1], second), (PROMPTS[2], third)]
    assert outputs == alone[:3]


def test_a_forward_that_fails_frees_its_blocks_and_rows_and_the_engine_goes_on(loaded, alone):
    engine = make_engine(loaded)
    runner = engine.backend.runner
    free_before = engine.scheduler.allocator.free_count
    real_forward = runner.forward
    calls = {"n": 0}

    def fail_once(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("injected failure")
        return real_forward(*args, **kwargs)

    runner.forward = fail_once
    errors: list[BaseException] = []
    for p in PROMPTS[:2]:
        engine.submit(request(loaded, p), lambda e: errors.append(e) if isinstance(e, BaseException) else None)
    for _ in range(100):
        if not engine.scheduler.step():
            break
    assert len(errors) == 2 and all(isinstance(e, GenerationError) for e in errors)
    assert engine.scheduler.running == [] and runner.cache.seqs == []
    # Everything the failed requests held is free again; nothing they half-computed was cached.
    assert engine.scheduler.allocator.free_count == free_before
    assert engine.scheduler.allocator.trie.cached_blocks() == 0
    # ...and the engine serves the next request normally, with its full capacity.
    assert run(engine, [request(loaded, PROMPTS[2])]) == [alone[2]]


def test_a_paced_forward_lasts_its_price_and_computes_the_same_tokens(loaded, alone, tmp_path):
    """TGI_TOOLKIT_PACE: a forward's tokens leave no earlier than the cost model's price of it. With 0.2 s a
    forward and 0.1 s more for one that computes prompt tokens: the first token 0.3 s after the step began
    (one prefill of the whole prompt), then one every 0.2 s (decode steps); the tokens are the alone ones."""
    import itertools
    import json
    import time

    from tgi_toolkit.engine.serve import _pace

    path = tmp_path / "pace.json"
    path.write_text(json.dumps({"kind": "linear", "forward_s": 0.2, "prefill_forward_s": 0.1}))
    engine = make_engine(loaded, prefix_caching=False)
    engine.backend.pace = _pace(str(path))
    stamps: list[float] = []
    tokens: list[int] = []

    def emit(event):
        stamps.append(time.perf_counter())
        tokens.append(event.token.id)

    engine.submit(request(loaded, PROMPTS[0], n=4), emit)
    began = time.perf_counter()
    while engine.scheduler.step():
        pass
    assert tokens == alone[0][:4]
    assert stamps[0] - began >= 0.3
    assert all(b - a >= 0.2 for a, b in itertools.pairwise(stamps))
    # unpaced, the same steps give the same tokens (their own time is the machine's: not asserted, issue 43)
    engine.backend.pace = None
    stamps.clear()
    tokens.clear()
    engine.submit(request(loaded, PROMPTS[0], n=4), emit)
    while engine.scheduler.step():
        pass
    assert tokens == alone[0][:4]


def test_a_forward_held_past_the_stall_threshold_logs_where_the_backend_holds_it(loaded, tmp_path, caplog):
    """TGI_TOOLKIT_STALL_MS with the real backend: each forward paced to 0.4 s (TGI_TOOLKIT_PACE's sleep, inside
    the backend's forward) and a 0.1 s threshold; the log names the forward and the pace's line, and only while
    forwards run."""
    import json

    from tgi_toolkit.engine.serve import _pace
    from tgi_toolkit.engine.watchdog import StallWatch

    path = tmp_path / "pace.json"
    path.write_text(json.dumps({"kind": "linear", "forward_s": 0.4}))
    engine = make_engine(loaded, prefix_caching=False)
    engine.backend.pace = _pace(str(path))
    engine.backend.watch = StallWatch(0.1)
    prompt = request(loaded, PROMPTS[2], n=2)
    with caplog.at_level("WARNING", logger="tgi_toolkit.engine"):
        engine.submit(prompt, lambda event: None)
        while engine.scheduler.step():
            pass
    engine.backend.watch.close()
    logged = [r.getMessage() for r in caplog.records if "has run" in r.getMessage()]
    # a prefill of the whole prompt, then a decode step: both held 0.4 s in the pace's sleep (`_hold`); a line may
    # also catch the model computing, on a busy machine
    for what in (f"prefill of 1 rows, {len(prompt.input_ids)} tokens", "decode of 1 rows, 1 tokens"):
        assert any(m.startswith(f"A forward ({what}) has run ") and "its thread is in: backend.py:" in m
                   and " _hold <- " in m for m in logged)
    assert all(m.startswith(("A forward (prefill of 1 rows", "A forward (decode of 1 rows")) for m in logged)


def test_a_finished_requests_objects_go_with_their_last_reference_not_at_a_pass_of_the_collector(loaded):
    """Its queue entry and its state referred to each other, so each request's tokens, events and chooser waited for
    a pass of the collector, which stops the engine (docs/engine.md); the backend unlinks them when it releases."""
    import gc
    import weakref

    engine = make_engine(loaded, prefix_caching=False)
    released, release = [], engine.backend.release

    def watched(entry):
        released.append((weakref.ref(entry), weakref.ref(entry.request)))
        release(entry)

    engine.backend.release = watched
    gc.collect()
    gc.disable()
    try:
        run(engine, [request(loaded, p, n=4) for p in PROMPTS[2:]])
        assert len(released) == 2 and all(entry() is None and state() is None for entry, state in released)
    finally:
        gc.enable()
