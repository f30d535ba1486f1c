"""The engine process's own behaviour: start-up errors, concurrency slots, auth, shutdown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.conftest import engine_process, free_port

pytestmark = pytest.mark.slow


def run_engine(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tgi_toolkit.engine", "--port", str(free_port()), *args],
                          capture_output=True, text=True, timeout=timeout)


def test_missing_model_fails_before_the_port_opens_naming_what_was_looked_for(tmp_path):
    missing = tmp_path / "no-such-model"
    done = run_engine("--model-id", str(missing))
    assert done.returncode != 0
    assert f"model {str(missing)!r} not found" in done.stderr
    assert "local path" in done.stderr
    hub = run_engine("--model-id", "some-org/not-cached-model", timeout=120)
    assert hub.returncode != 0
    assert "Hugging Face cache" in hub.stderr and "not found" in hub.stderr


def test_unreadable_model_is_a_clear_error(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf file")
    done = run_engine("--model-id", str(broken))
    assert done.returncode != 0
    assert "cannot read model" in done.stderr and "broken.gguf" in done.stderr


@pytest.mark.parametrize("args,phrase", [
    (["--num-shard", "2"], "runs the model in one process"),
    (["--quantize", "gptq"], "GPTQ checkpoints need GPU kernels"),
])
def test_flags_that_cannot_apply_are_refused_with_a_sentence(args, phrase):
    done = run_engine(*args)
    assert done.returncode == 2
    assert phrase in done.stderr


def test_concurrency_slots_disconnects_api_key_and_sigterm(tmp_path):
    with engine_process("--max-concurrent-requests", "2", "--api-key", "s3cret", "--max-total-tokens", "512",
                        tmp=tmp_path) as eng:
        auth = {"Authorization": "Bearer s3cret"}
        body = {"inputs": "Tell me a long story.", "parameters": {"max_new_tokens": 200, "ignore_eos": True}}

        # --api-key: POST routes need the bearer token, GET routes do not.
        assert httpx.post(eng.url + "/generate", json=body).status_code == 401
        assert httpx.post(eng.url + "/generate", json=body, headers={"Authorization": "Bearer nope"}).status_code == 401
        assert httpx.get(eng.url + "/health").status_code == 200
        assert httpx.get(eng.url + "/info").status_code == 200

        # Two streams hold both slots; a third request gets 429 overloaded.
        streams, started = [], threading.Barrier(3)

        def hold(i: int) -> None:
            with httpx.stream("POST", eng.url + "/generate_stream", json=body, headers=auth, timeout=120) as r:
                lines = r.iter_lines()
                next(line for line in lines if line.startswith("data:"))
                started.wait(60)
                streams.append(i)
                time.sleep(1.0)
            # leaving the `with` closes the connection mid-stream: the slot must come back

        threads = [threading.Thread(target=hold, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        started.wait(60)
        third = httpx.post(eng.url + "/generate", json=body, headers=auth, timeout=60)
        assert third.status_code == 429
        assert third.json() == {"error": "Model is overloaded", "error_type": "overloaded"}
        for t in threads:
            t.join(60)
        assert sorted(streams) == [0, 1]

        # Both clients went away mid-stream: their slots and batch rows are free again.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            metrics = httpx.get(eng.url + "/metrics").text
            if "tgi_batch_current_size 0.0" in metrics:
                break
            time.sleep(0.2)
        assert "tgi_batch_current_size 0.0" in metrics
        small = {"inputs": "Hi", "parameters": {"max_new_tokens": 2}}
        results = [httpx.post(eng.url + "/generate", json=small, headers=auth, timeout=60) for _ in range(2)]
        assert [r.status_code for r in results] == [200, 200]

        # SIGTERM stops the server cleanly within a few seconds.
        began = time.monotonic()
        os.killpg(eng.proc.pid, signal.SIGTERM)
        eng.proc.wait(15)
        assert time.monotonic() - began < 10
        assert eng.proc.returncode == 0
    log = eng.log()
    assert "Connected" in log and "Setting max batch total tokens to" in log
    # its start-up heap was frozen before it served (engine.serve.freeze_heap)
    assert "objects left out of the garbage collector's passes" in log


def test_freezing_the_heap_leaves_what_lives_now_out_and_still_collects_what_comes_after(monkeypatch):
    import gc
    import weakref

    from tgi_toolkit.engine.metrics import CollectorClock
    from tgi_toolkit.engine.serve import freeze_heap

    class Node:
        pass

    def cycle() -> weakref.ref:
        a, b = Node(), Node()
        a.other, b.other = b, a
        return weakref.ref(a)

    monkeypatch.setenv("TGI_TOOLKIT_GC_FREEZE", "0")
    assert freeze_heap() == 0 and gc.get_freeze_count() == 0
    monkeypatch.delenv("TGI_TOOLKIT_GC_FREEZE")
    before = cycle()  # garbage already: the freeze's own collection takes it
    CollectorClock.install()
    counted = CollectorClock.seconds
    try:
        frozen = freeze_heap()
        assert frozen == gc.get_freeze_count() > 1000 and before() is None
        # that collection is start-up's: the forward trace's collector clock does not count it
        assert CollectorClock.seconds == counted
        after = cycle()  # made after the freeze: a pass still finds it
        assert after() is not None
        gc.collect()
        assert after() is None and gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_greedy_requests_batched_together_equal_each_run_alone_through_the_server(tmp_path):
    """Continuous batching through the scheduler is exact in float32: joining a running batch,
    leaving it at different steps and the row moves that follow change no token."""
    prompts = {"The capital of France is": 12, "def fibonacci(n):": 5,
               "Once upon a time, in a land far away, there lived a": 16, "1, 2, 3, 4,": 9}

    def ask(url: str, prompt: str, n: int) -> list[int]:
        body = {"inputs": prompt, "parameters": {"max_new_tokens": n, "ignore_eos": True, "details": True}}
        answer = httpx.post(url + "/generate", json=body, timeout=120).json()
        return [token["id"] for token in answer["details"]["tokens"]]

    with engine_process("--dtype", "float32", "--max-total-tokens", "256", "--max-input-tokens", "128",
                        tmp=tmp_path) as eng:
        assert httpx.get(eng.url + "/info").json()["model_dtype"] == "float32"
        alone = {prompt: ask(eng.url, prompt, n) for prompt, n in prompts.items()}
        together: dict[str, list[int]] = {}

        def late(prompt: str, n: int, delay: float) -> None:
            time.sleep(delay)  # the later ones arrive while the first two are decoding
            together[prompt] = ask(eng.url, prompt, n)

        def decode_steps() -> float:
            text = httpx.get(eng.url + "/metrics").text
            return float(next(line.split()[-1] for line in text.splitlines()
                              if line.startswith('tgi_batch_forward_duration_count{method="decode"}')))

        before = decode_steps()
        threads = [threading.Thread(target=late, args=(prompt, n, delay))
                   for (prompt, n), delay in zip(prompts.items(), (0, 0, 0.15, 0.3), strict=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        shared = decode_steps() - before
    assert together == alone
    assert shared < sum(n - 1 for n in prompts.values())  # they did share decode steps
