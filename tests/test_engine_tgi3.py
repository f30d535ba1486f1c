"""TGI 3's scheduling through the real engine process: long prompts are chunked, repeated prefixes are
not computed again, and /metrics shows both."""

from __future__ import annotations

import random

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import engine_process

pytestmark = pytest.mark.slow

LONG = ["--max-input-tokens", "1000", "--max-total-tokens", "1200", "--max-batch-prefill-tokens", "256",
        "--max-concurrent-requests", "8"]


def prompt_of(url: str, tokens: int, seed: int) -> str:
    """A prompt of exactly `tokens` tokens by the server's own count (random words, so no two share a prefix)."""
    rng = random.Random(seed)
    words = "river stone cloud apple market window garden silver engine paper".split()
    text = " ".join(rng.choice(words) for _ in range(tokens))
    ids = httpx.post(url + "/tokenize", json={"inputs": text}, timeout=30).json()
    return text[: ids[tokens - 1]["stop"]] if len(ids) > tokens else text


def metric(url: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=10).text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def counted(url: str) -> dict[str, float]:
    """Forwards run, prompt tokens computed and prompt tokens found in the prefix cache, so far."""
    forwards = sum(metric(url, "tgi_batch_inference_count_total", method=m) for m in ("prefill", "decode"))
    return {"forwards": forwards, "computed": metric(url, "tgi_toolkit_prefill_computed_tokens_total"),
            "cached": metric(url, "tgi_toolkit_prefix_cache_hit_tokens_total")}


def test_a_repeated_1000_token_prompt_is_served_from_the_prefix_cache(engine_url):
    # What makes the repeats' TTFT a fraction of the first's (benchmarks/engine_tgi3.py measures it), counted
    # by the engine instead of timed, which a busy machine would upset.
    text = prompt_of(engine_url, 1000, seed=12)
    before = counted(engine_url)
    for _ in range(3):
        answer = httpx.post(engine_url + "/generate", timeout=120,
                            json={"inputs": text, "parameters": {"max_new_tokens": 2}})
        assert answer.status_code == 200, answer.text
    after = counted(engine_url)
    done = {k: after[k] - before[k] for k in after}
    # Each of the 3 x 1000 prompt tokens computed or found cached; the second and third requests found 999
    # cached tokens each (the last one is always computed), so at most 1000 + 1 + 1 were computed (the first
    # request may find a few of its first words cached by other tests' prompts of the same ten words).
    assert done["computed"] + done["cached"] == 3 * 1000, done
    assert done["cached"] >= 2 * 999 and done["computed"] <= 1000 + 2, done
    # One prefill forward a request (1000 tokens fit the 2048-token budget) and one decode for its second token.
    assert done["forwards"] == 3 * 2, done


def test_a_prompt_longer_than_the_prefill_budget_is_chunked_while_others_decode(tmp_path):
    trace = tmp_path / "forwards.jsonl"
    with engine_process(*LONG, env={"TGI_TOOLKIT_FORWARD_TRACE": str(trace)}, tmp=tmp_path) as server:
        text = prompt_of(server.url, 900, seed=3)
        with httpx.Client(timeout=120) as client:
            # A request already decoding when the long one arrives: the long prompt joins its batch.
            with client.stream("POST", server.url + "/generate_stream",
                               json={"inputs": "Once upon a time", "parameters": {"max_new_tokens": 40}}) as first:
                lines = first.iter_lines()
                next(line for line in lines if line.startswith("data:"))
                answer = client.post(server.url + "/generate",
                                     json={"inputs": text, "parameters": {"max_new_tokens": 3, "details": True}})
                assert answer.status_code == 200, answer.text
                assert answer.json()["details"]["generated_tokens"] == 3
                for _ in lines:
                    pass
        assert metric(server.url, "tgi_batch_concat_total", reason="chunking") >= 1
        assert metric(server.url, "tgi_toolkit_prefill_computed_tokens_total") >= 900
        log = server.log()
        assert "Prefix caching" in log and "prefill chunking on" in log
        assert "`waiting_served_ratio` and `max_waiting_tokens` will be ignored" in log
    # The forward trace (TGI_TOOLKIT_FORWARD_TRACE) shows the same: the 900-token prompt computed in forwards
    # of at most 256 prompt tokens, beside the decoding request's row (2 rows, up to 256 + 1 tokens), the
    # chunks' tokens adding up to the prompt; and each forward's own seconds.
    from tgi_toolkit.simulate.trace import read_trace

    forwards, _ = read_trace(str(trace))
    beside = [shape for shape, _ in forwards if shape.prefilling and shape.rows == 2]
    assert beside and all(shape.tokens <= 257 for shape in beside)
    assert sum(shape.tokens - 1 for shape in beside) >= 900 - 256  # every chunk but perhaps the first joined it
    assert all(seconds > 0 for _, seconds in forwards)


def test_without_chunking_such_limits_are_refused_at_start_up(tmp_path):
    with pytest.raises(RuntimeError) as refused, \
            engine_process(*LONG, env={"PREFILL_CHUNKING": "0"}, tmp=tmp_path, timeout=120):
        pass
    assert "--max-batch-prefill-tokens (256) must be >= --max-input-tokens (1000)" in str(refused.value)


def test_non_streaming_completions_bypass_the_prefix_cache_as_in_tgi(engine_url):
    # TGI's /v1/completions sets decoder_input_details = !stream, and such requests never look up.
    text = prompt_of(engine_url, 200, seed=99)
    lookups = metric(engine_url, "tgi_toolkit_prefix_cache_lookup_tokens_total")
    for _ in range(2):
        answer = httpx.post(engine_url + "/v1/completions", timeout=120,
                            json={"model": "m", "prompt": text, "max_tokens": 2, "temperature": 0})
        assert answer.status_code == 200, answer.text
    assert metric(engine_url, "tgi_toolkit_prefix_cache_lookup_tokens_total") == lookups
    with httpx.stream("POST", engine_url + "/v1/completions", timeout=120,
                      json={"model": "m", "prompt": text, "max_tokens": 2, "stream": True}) as streamed:
        for _ in streamed.iter_lines():
            pass
    assert metric(engine_url, "tgi_toolkit_prefix_cache_lookup_tokens_total") == lookups + 200


def test_measured_prompts_are_never_prefix_cache_hits_across_points_repeats_and_runs(engine_url):
    # A prefix-caching server (TGI 3, vLLM) keeps every prompt it served: a prompt sent again by a later
    # point, repeat or run, or by the harness's own length check, would be measured from its cache.
    from tgi_toolkit.bench import measure_ingestion, run_batch, run_concurrency

    hits = metric(engine_url, "tgi_toolkit_prefix_cache_hit_tokens_total")
    for _ in range(2):  # the same run twice, as a user re-running a cell would
        measure_ingestion(engine_url, prompt_tokens=[64, 256], repeats=2, progress=False)
    run_concurrency(engine_url, users=[1, 2], prompt_tokens=64, max_new_tokens=2, requests=2, progress=False)
    run_batch(engine_url, batch_sizes=[1], sequence_length=64, decode_length=2, runs=2, warmups=1,
              progress=False)
    # 21 prompts of random text (5 of them length checks): at most a shared leading word each, never a whole prompt
    # (a repeat would add 63 or 255 hit tokens).
    assert metric(engine_url, "tgi_toolkit_prefix_cache_hit_tokens_total") - hits <= 21 * 2
