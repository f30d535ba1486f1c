"""The embedded engine under abuse, as a user meets it (issue 15 items 3, 8, 9): one real engine
process with an API key and tiny limits, driven by its own OpenAPI document (schemathesis; the document is
held against TGI's spec where that reference is at hand), a burst of 10x its concurrency, a bench point that
must leave the key nowhere, and a bounded soak."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest

from tgi_toolkit.bench.provenance import redact_argv

from .conftest import ROOT, SHARED, EngineProcess, engine_process

KEY = "s3cret-KEY-4f1c9e"
AUTH = {"Authorization": f"Bearer {KEY}"}
SLOTS = 4
SPEC = SHARED / "reference" / "tgi-openapi.json"  # TGI's own document, beside this project's checkout only
# Examples per operation and generation mode (twice as many invalid ones): 28 send over 500 requests across
# the engine's ten operations (GETs without parameters have no invalid case), 84 to each route with a body;
# 56 (over 1,000) passed as well in every full run and took twice as long on 2 cores.
EXAMPLES = int(os.environ.get("TGI_TOOLKIT_SPEC_EXAMPLES", "28"))
# TGI routes the engine does not serve, and why.
NOT_SERVED = {"/invocations": "SageMaker's alias of /", "/chat_tokenize": "the chat template's tokenization"}
# TGI's request properties the engine's document lacks (it accepts and ignores them): tools and structured
# output in chat, and /tokenize's generate parameters (the engine reads inputs and add_special_tokens).
BODY_DIFFERENCES = {
    "/v1/chat/completions": {"logit_bias", "presence_penalty", "response_format", "tool_choice", "tool_prompt",
                             "tools"},
    "/v1/completions": {"repetition_penalty", "suffix"},
    "/tokenize": {"parameters"},
}
# Tiny limits: every generation is at most 15 tokens, so random requests from the spec stay quick on 2 cores.
ARGS = ("--api-key", KEY, "--max-input-tokens", "8", "--max-total-tokens", "16",
        "--max-concurrent-requests", str(SLOTS))


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    with engine_process(*ARGS, tmp=tmp_path_factory.mktemp("keyed-engine")) as handle:
        yield handle


def test_redact_argv_hides_secret_flags_variables_and_hub_tokens():
    token = "hf_" + "a1B2" * 9
    argv = ["HF_TOKEN=" + token, "tgi-toolkit", "bench", "concurrency", "--api-key", "k1", "--users", "2",
            "--api-key=k2", "--", "--ngrok-authtoken", "n3", f"--revision={token}"]
    assert redact_argv(argv) == ["HF_TOKEN=***", "tgi-toolkit", "bench", "concurrency", "--api-key", "***",
                                 "--users", "2", "--api-key=***", "--", "--ngrok-authtoken", "***",
                                 "--revision=***"]
    assert redact_argv(None) is None


@pytest.mark.slow
def test_api_key_is_required_and_left_in_no_result_file_or_log_line(keyed, tmp_path):
    r = httpx.post(keyed.url + "/generate", json={"inputs": "Hi", "parameters": {"max_new_tokens": 2}})
    assert r.status_code == 401 and r.json() == {"error": "Unauthorized", "error_type": "unauthorized"}
    wrong = httpx.post(keyed.url + "/generate", headers={"Authorization": f"Bearer {KEY[:-1]}x"},
                       json={"inputs": "Hi", "parameters": {"max_new_tokens": 2}})
    assert wrong.status_code == 401
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "tgi_toolkit.cli", "bench", "concurrency", "--url", keyed.url, "--api-key", KEY,
         "--users", "1", "--prompt-tokens", "4", "--max-new-tokens", "4", "--requests", "2", "--no-progress",
         "--output", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name.endswith(".json") for p in files), files
    holding = [str(p) for p in files if KEY.encode() in p.read_bytes()]
    assert not holding, f"the API key is written in {holding}"
    runs = [json.loads(p.read_text()) for p in files if p.parent.name == "runs" and p.suffix == ".json"]
    assert runs and runs[0]["command"][runs[0]["command"].index("--api-key") + 1] == "***"
    assert KEY not in done.stdout + done.stderr
    assert KEY not in keyed.log(), "the API key is in the server's log"


def _no_5xx_from_the_document(url: str, document: dict, examples: int) -> tuple[list[str], dict[int, int]]:
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis.errors import Unsatisfiable

    schema = schemathesis.openapi.from_dict(document)
    errors: list[str] = []
    seen: dict[int, int] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode, count in ((schemathesis.GenerationMode.POSITIVE, examples),
                            (schemathesis.GenerationMode.NEGATIVE, 2 * examples)):

            # No shrinking: a 5xx is recorded with its body and the run goes on, bounded in time.
            @settings(max_examples=count, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
                      suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode))
            def call(case: object) -> None:
                response = case.call(base_url=url, headers=AUTH, timeout=120)  # type: ignore[attr-defined]
                seen[response.status_code] = seen.get(response.status_code, 0) + 1
                if response.status_code >= 500:
                    errors.append(f"{case.method} {case.path} {case.body!r:.300} -> "  # type: ignore[attr-defined]
                                  f"{response.status_code} {response.text[:300]}")

            try:
                call()
            except Unsatisfiable:  # nothing invalid to send to a GET without parameters
                pass
    return errors, seen


def _own_document(url: str) -> dict:
    response = httpx.get(url + "/api-doc/openapi.json", headers=AUTH)
    assert response.status_code == 200, response.text[:300]
    return response.json()


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a bound on a hang: 30 s on 2 quiet cores, 634 s (pyproject's 600 s hit) at load 15
def test_the_engines_own_openapi_document_drives_no_server_error(keyed):
    errors, seen = _no_5xx_from_the_document(keyed.url, _own_document(keyed.url), EXAMPLES)
    assert not errors, "\n".join(errors)
    assert seen.get(200, 0) > 0 and sum(n for code, n in seen.items() if 400 <= code < 500) > 0, seen
    if "TGI_TOOLKIT_SPEC_EXAMPLES" not in os.environ:
        assert sum(seen.values()) >= 500, seen
    assert httpx.get(keyed.url + "/health").status_code == 200


def _body(document: dict, path: str) -> tuple[set[str], set[str]]:
    """The properties and required properties of `path`'s JSON request body."""
    schema = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return set(schema.get("properties", {})), set(schema.get("required", []))


@pytest.mark.slow
def test_the_engines_openapi_document_holds_to_tgis(keyed):
    if not SPEC.is_file():
        pytest.skip(f"a transcription check against TGI's own OpenAPI document, which is not at {SPEC} (the "
                    "shared/ folder beside this project's checkout); the engine's own document is fuzzed without it")
    tgi, ours = json.loads(SPEC.read_text()), _own_document(keyed.url)
    routes = {(path, method) for path, item in tgi["paths"].items() for method in item}
    served = {(path, method) for path, item in ours["paths"].items() for method in item}
    assert served <= routes, f"routes TGI does not have: {sorted(served - routes)}"
    assert {path for path, _ in routes - served} == set(NOT_SERVED), sorted(routes - served)
    for path, method in served:
        if method == "post" and "requestBody" in tgi["paths"][path]["post"]:
            (theirs, their_required), (mine, my_required) = _body(tgi, path), _body(ours, path)
            assert their_required <= my_required, (path, their_required - my_required)
            assert theirs - mine == BODY_DIFFERENCES.get(path, set()), (path, theirs - mine)


@pytest.mark.slow
async def test_burst_of_ten_times_the_slots_gets_quick_429s_and_completes_the_rest(keyed):
    body = {"inputs": "Tell me a story", "parameters": {"max_new_tokens": 8, "ignore_eos": True}}

    async def one(client: httpx.AsyncClient) -> tuple[int, float, dict]:
        started = time.perf_counter()
        r = await client.post("/generate", json=body)
        return r.status_code, time.perf_counter() - started, r.json()

    limits = httpx.Limits(max_connections=10 * SLOTS)
    async with httpx.AsyncClient(base_url=keyed.url, headers=AUTH, timeout=120, limits=limits) as client:
        results = await asyncio.gather(*(one(client) for _ in range(10 * SLOTS)))
    codes = [code for code, _, _ in results]
    admitted = [(s, b) for code, s, b in results if code == 200]
    refused = [(s, b) for code, s, b in results if code == 429]
    assert len(admitted) + len(refused) == 10 * SLOTS, codes  # 424 here: a request failed inside the engine
    assert len(admitted) >= SLOTS and refused
    assert all(b == {"error": "Model is overloaded", "error_type": "overloaded"} for _, b in refused)
    assert all(b["generated_text"] for _, b in admitted)
    # A refusal does not wait for a slot: it comes back while the admitted requests are still generating.
    assert max(s for s, _ in refused) < max(s for s, _ in admitted)
    assert httpx.get(keyed.url + "/health").status_code == 200
    after = httpx.post(keyed.url + "/generate", headers=AUTH, json=body, timeout=60)
    assert after.status_code == 200 and after.json()["generated_text"]


@pytest.mark.slow
def test_bounded_soak_keeps_resident_memory_flat(keyed):
    # 45 s: ~11 s to grow what a first use allocates, then 34 s of 4 users that must not grow it by 10 %
    # (75 s passed as well in every full run)
    soak_s = float(os.environ.get("TGI_TOOLKIT_SOAK_S", "45"))
    process = psutil.Process(keyed.proc.pid)
    bodies = [
        ("/generate", {"inputs": "Once upon a time", "parameters": {"max_new_tokens": 8, "details": True}}),
        ("/generate_stream", {"inputs": "The sea is", "parameters": {"max_new_tokens": 8, "top_n_tokens": 2}}),
        ("/generate", {"inputs": "Hi", "parameters": {"max_new_tokens": 4, "best_of": 2, "do_sample": True}}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6}),
        ("/generate", {"inputs": "x" * 40, "parameters": {"max_new_tokens": 4}}),  # 422: too long
        ("/generate", {"inputs": "Hi", "parameters": {"top_k": -1}}),  # 422
    ]
    codes: dict[int, int] = {}
    stop = threading.Event()

    def user(offset: int) -> None:
        with httpx.Client(base_url=keyed.url, headers=AUTH, timeout=120) as client:
            i = offset
            while not stop.is_set():
                route, body = bodies[i % len(bodies)]
                code = client.post(route, json=body).status_code
                codes[code] = codes.get(code, 0) + 1
                i += 1

    users = [threading.Thread(target=user, args=(i,), daemon=True) for i in range(SLOTS)]
    for thread in users:
        thread.start()
    # The first part of the load grows what a first use allocates (KV rows, allocator pools); the rest must not.
    time.sleep(soak_s / 4)
    baseline = process.memory_info().rss
    peak = baseline
    deadline = time.monotonic() + soak_s * 3 / 4
    while time.monotonic() < deadline:
        time.sleep(1.0)
        peak = max(peak, process.memory_info().rss)
    stop.set()
    for thread in users:
        thread.join(120)
    final = process.memory_info().rss
    assert set(codes) <= {200, 422}, codes
    assert codes.get(200, 0) >= 10, codes
    growth = (final - baseline) / baseline
    assert growth < 0.10, f"RSS {baseline / 2**20:.0f} -> {final / 2**20:.0f} MiB (peak {peak / 2**20:.0f})"
    assert httpx.get(keyed.url + "/health").status_code == 200


def test_vllm_gets_the_api_key_through_its_environment_not_its_command_line():
    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.server.vllm import VllmBackend

    env: dict[str, str] = {}
    argv = VllmBackend().command(LauncherConfig(api_key=KEY), "127.0.0.1", 8000, env)
    assert KEY not in " ".join(argv) and "--api-key" not in argv  # vLLM logs its non-default arguments
    assert env["VLLM_API_KEY"] == KEY
