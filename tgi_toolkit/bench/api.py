"""The public Python API: one function per scenario, sync (notebooks, scripts) and async.

Every `run_*` takes the server (a URL or a started `Server`), the scenario's parameters and the
common options below, checks them all before sending anything, and returns `Results`.

Common options:
  output: folder to write to as the run goes (None: memory only); resume: continue the unfinished
  run with the same parameters found there (False: always a new run); progress: tqdm bars;
  tokenizer: local tokenizer name/path/object (None: the server's /tokenize); seed; prefix_tokens
  (shared prompt prefix); dataset (a text/json/jsonl file to cut prompts from); api: tgi |
  completions | chat (None: tgi for TGI-like servers, completions for vLLM); api_key; ignore_eos
  (None: where the server honours it); sampling (dict of TGI parameters, default greedy);
  slo_ttft_s, slo_tpot_s (goodput objectives); scrape_interval (seconds between /metrics scrapes);
  request_timeout (seconds without a byte before a request fails); on_point (called with each saved
  point's row; an exception from it stops the run, finished points kept); command (argv, provenance);
  accept_server_count (a server that counts prompt tokens its own way: measure with its count, kept in
  input_tokens and the provenance's prompt_check, instead of refusing the run).

The sync functions also work inside a running event loop (a Jupyter cell): the run then goes on a
worker thread with its own loop, and Ctrl-C (interrupt) cancels it there.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from tgi_toolkit.bench import scenarios
from tgi_toolkit.bench import schema as S
from tgi_toolkit.bench.checks import (
    batch_workload,
    check_options,
    concurrency_workload,
    decode_stall_workload,
    ingestion_workload,
    length_grid,
    multi_turn_workload,
    rate_workload,
    shared_prefix_workload,
)
from tgi_toolkit.bench.errors import BenchError
from tgi_toolkit.bench.results import Results
from tgi_toolkit.bench.run import Run
from tgi_toolkit.bench.target import Target, resolve


def _run_sync(make: Callable[[], Coroutine[Any, Any, Results]]) -> Results:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    # Inside a running loop: a worker thread with a loop of its own.
    box: dict[str, Any] = {}
    loop = asyncio.new_event_loop()

    def work() -> None:
        asyncio.set_event_loop(loop)
        try:
            box["task"] = loop.create_task(make())
            box["value"] = loop.run_until_complete(box["task"])
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    thread = threading.Thread(target=work, name="tgi-toolkit-bench", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.1)
    except KeyboardInterrupt:
        if "task" in box:
            loop.call_soon_threadsafe(box["task"].cancel)
        thread.join()
        raise
    if "error" in box:
        raise box["error"]
    return box["value"]


def _options(target: Target, options: dict[str, Any]) -> dict[str, Any]:
    allowed = {"output", "resume", "progress", "tokenizer", "seed", "prefix_tokens", "dataset", "ignore_eos",
               "sampling", "slo_ttft_s", "slo_tpot_s", "scrape_interval", "request_timeout", "on_point",
               "command", "accept_server_count"}
    unknown = set(options) - allowed
    if unknown:
        raise BenchError(sorted(unknown)[0], "is not an option", ", ".join(sorted(allowed | {"api", "api_key"})))
    check_options(options)
    return options


def _target(server: Any, options: dict[str, Any]) -> Target:
    return resolve(server, api=options.pop("api", None), api_key=options.pop("api_key", None))


# -- batch ----------------------------------------------------------------------------------------------
async def run_batch_async(server: Any, *, batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32), sequence_length: int = 10,
                          decode_length: int = 8, runs: int = 10, warmups: int = 1, **options: Any) -> Results:
    """text-generation-benchmark over HTTP (defaults are its own): see `run_batch`."""
    target = _target(server, options)
    workload = batch_workload(target, batch_sizes, sequence_length, decode_length, runs, warmups,
                              target.info.get("max_concurrent_requests"))
    sizes = workload["batch_sizes"]
    async with Run(target, "batch", workload, **_options(target, options)) as run:
        await scenarios.batch(run, sizes, sequence_length, decode_length, runs, warmups)
    return run.results()


def run_batch(server: Any, *, batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32), sequence_length: int = 10,
              decode_length: int = 8, runs: int = 10, warmups: int = 1, **options: Any) -> Results:
    """For each batch size B: B prompts of exactly `sequence_length` tokens at once,
    `decode_length` tokens forced, `warmups` + `runs` times. Prefill and decode latency and
    throughput per run in `.batch`; `.tables()` prints them as text-generation-benchmark does."""
    return _run_sync(lambda: run_batch_async(server, batch_sizes=batch_sizes, sequence_length=sequence_length,
                                             decode_length=decode_length, runs=runs, warmups=warmups, **options))


# -- concurrency ------------------------------------------------------------------------------------------
async def run_concurrency_async(server: Any, *, users: Sequence[int] = (1, 2, 4, 8, 16, 32),
                                prompt_tokens: Sequence[int] | int = 128, max_new_tokens: Sequence[int] | int = 128,
                                requests: int | None = None, warmup_requests: int = 0,
                                ramp_up: float | str = "auto", **options: Any) -> Results:
    """N parallel users for each N: see `run_concurrency`."""
    target = _target(server, options)
    grid = length_grid(target, prompt_tokens, max_new_tokens)
    workload = concurrency_workload(users, grid, requests, warmup_requests, ramp_up)
    async with Run(target, "concurrency", workload, **_options(target, options)) as run:
        await scenarios.concurrency(run, workload["users"], workload["grid"], requests, warmup_requests,
                                    workload["ramp_up"])
    return run.results()


def run_concurrency(server: Any, *, users: Sequence[int] = (1, 2, 4, 8, 16, 32),
                    prompt_tokens: Sequence[int] | int = 128, max_new_tokens: Sequence[int] | int = 128,
                    requests: int | None = None, warmup_requests: int = 0, ramp_up: float | str = "auto",
                    **options: Any) -> Results:
    """For each (prompt, output) length pair and each N in `users`: N users each send their next
    request when the last one ends, `requests` in all (default 4 per user, at least 8), after
    `warmup_requests` unmeasured ones. TTFT, TPOT, ITL, E2E, per-request speed, throughput, errors.

    ramp_up: user i sends its first request i/N of this many seconds after the point's start, and the
    requests sent before it ends are not measured (guidellm's rampup_duration). "auto" (default): one
    cycle at the point's load, the mean duration of one request a user sent together first (no ramp for
    one user); 0: all users at once, which keeps equal requests in lockstep (docs/measurement.md, "Ramp-up and phase").
    Each point records the ramp it used (ramp_up_s) and whether its users ran in step (lockstep)."""
    return _run_sync(lambda: run_concurrency_async(server, users=users, prompt_tokens=prompt_tokens,
                                                   max_new_tokens=max_new_tokens, requests=requests,
                                                   warmup_requests=warmup_requests, ramp_up=ramp_up, **options))


# -- rate -------------------------------------------------------------------------------------------------
async def run_rate_async(server: Any, *, rates: Sequence[float] = (1.0, 2.0, 4.0), arrival: str = "poisson",
                         prompt_tokens: Sequence[int] | int = 128, max_new_tokens: Sequence[int] | int = 128,
                         requests: int = 64, max_concurrency: int | None = None, **options: Any) -> Results:
    """Requests at a constant or Poisson rate: see `run_rate`."""
    target = _target(server, options)
    grid = length_grid(target, prompt_tokens, max_new_tokens)
    workload = rate_workload(rates, arrival, grid, requests, max_concurrency)
    rates, grid = workload["rates"], workload["grid"]
    opts = _options(target, options)
    async with Run(target, "rate", workload, **opts) as run:
        await scenarios.rate(run, rates, arrival, grid, requests, opts.get("seed", 0), max_concurrency)
    return run.results()


def run_rate(server: Any, *, rates: Sequence[float] = (1.0, 2.0, 4.0), arrival: str = "poisson",
             prompt_tokens: Sequence[int] | int = 128, max_new_tokens: Sequence[int] | int = 128,
             requests: int = 64, max_concurrency: int | None = None, **options: Any) -> Results:
    """For each rate: `requests` requests leaving on a `constant` or seeded `poisson` schedule,
    whatever is in flight (open loop; `max_concurrency` caps it, hiding queueing in the client).
    Pass slo_ttft_s / slo_tpot_s for goodput."""
    return _run_sync(lambda: run_rate_async(server, rates=rates, arrival=arrival, prompt_tokens=prompt_tokens,
                                            max_new_tokens=max_new_tokens, requests=requests,
                                            max_concurrency=max_concurrency, **options))


# -- happy_vllm's main metrics --------------------------------------------------------------------------
def spread_lengths(low: int, high: int, count: int) -> list[int]:
    """`count` prompt lengths evenly spread from `low` to `high` tokens (fewer where they round alike)."""
    return sorted({int(round(low + (high - low) * i / (count - 1))) for i in range(count)})


def default_ingestion_lengths(target: Target, count: int = 8) -> list[int]:
    """`count` prompt lengths spread from 32 tokens to 90 % of what the server takes (with one new token)."""
    top = int(0.9 * min(target.max_input_tokens or 4096, (target.max_total_tokens or 4097) - 1))
    return spread_lengths(32, max(top, 33), count)


async def measure_ingestion_async(server: Any, *, prompt_tokens: Sequence[int] | None = None, repeats: int = 3,
                                  **options: Any) -> Results:
    """Prompt ingestion speed: see `measure_ingestion`."""
    target = _target(server, options)
    workload = ingestion_workload(target, prompt_tokens, repeats, default_ingestion_lengths)
    lengths = workload["prompt_tokens"]
    async with Run(target, "ingestion", workload, **_options(target, options)) as run:
        await scenarios.ingestion(run, lengths, repeats)
    return run.results()


def measure_ingestion(server: Any, *, prompt_tokens: Sequence[int] | None = None, repeats: int = 3,
                      **options: Any) -> Results:
    """happy_vllm's prompt ingestion speed: one request at a time, one new token, `repeats` prompts
    of each length; `.ingestion()` fits TTFT against length (speed = 1 / slope, outliers dropped)."""
    return _run_sync(lambda: measure_ingestion_async(server, prompt_tokens=prompt_tokens, repeats=repeats,
                                                     **options))


def kv_capacity(server: Any, *, api_key: str | None = None) -> float:
    """KV-cache capacity in tokens as the server states it: TGI's tgi_batch_max_total_tokens, or the
    token count the server logged (vLLM's "KV cache size"); NaN when unknown (for vLLM, the
    concurrency points' kv_capacity_tokens estimate it from cache usage under load)."""
    import httpx

    from tgi_toolkit.bench.prometheus import parse_prometheus

    target = resolve(server, api_key=api_key)
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
    try:
        text = httpx.get(target.url + "/metrics", headers=headers, timeout=10).text
        for name, _labels, value in parse_prometheus(text):
            if name == S.KV_TOTAL_METRIC and value > 0:
                return value
    except httpx.HTTPError:
        pass
    for fact in ("max_batch_total_tokens", "kv_cache_tokens"):
        if target.facts.get(fact):
            return float(target.facts[fact])
    return float(target.info.get("max_batch_total_tokens") or math.nan)


# -- prefix caching and chunked prefill (bench.workloads) -----------------------------------------------
def _no_prefix_option(options: dict[str, Any], instead: str) -> None:
    if options.get("prefix_tokens"):
        raise BenchError("prefix_tokens", "the workload builds its own shared text", instead)


async def run_shared_prefix_async(server: Any, *, groups: int = 4, requests_per_group: int = 4,
                                  prefix_tokens: int = 512, suffix_tokens: int = 32, max_new_tokens: int = 16,
                                  users: int = 4, **options: Any) -> Results:
    """Groups of requests sharing a prefix: see `run_shared_prefix`."""
    from tgi_toolkit.bench import play

    target = _target(server, options)
    workload = shared_prefix_workload(target, groups=groups, requests_per_group=requests_per_group,
                                      prefix_tokens=prefix_tokens, suffix_tokens=suffix_tokens,
                                      max_new_tokens=max_new_tokens, users=users)
    params = {"groups": groups, "requests_per_group": requests_per_group, "prefix_tokens": prefix_tokens,
              "suffix_tokens": suffix_tokens, "max_new_tokens": max_new_tokens, "users": users}
    async with Run(target, workload.scenario, params, **_options(target, options)) as run:
        await play.shared_prefix(run, workload)
    return run.results()


def run_shared_prefix(server: Any, *, groups: int = 4, requests_per_group: int = 4, prefix_tokens: int = 512,
                      suffix_tokens: int = 32, max_new_tokens: int = 16, users: int = 4, **options: Any) -> Results:
    """`groups` groups of `requests_per_group` requests; each prompt is its group's prefix of
    `prefix_tokens` tokens plus a suffix of its own (`suffix_tokens`), token-exact. A group's first
    request goes alone and the rest after it ended (TGI caches a prompt when its request is freed),
    `users` in flight at most. Requests carry `group` and `turn` (0 = the group's first); the point
    carries `prefix_cache_hit_rate` from the engine's counters (NaN on servers without them).
    `plots.shared_prefix_ttft(results.requests)` draws first against later requests."""
    return _run_sync(lambda: run_shared_prefix_async(
        server, groups=groups, requests_per_group=requests_per_group, prefix_tokens=prefix_tokens,
        suffix_tokens=suffix_tokens, max_new_tokens=max_new_tokens, users=users, **options))


async def run_multi_turn_async(server: Any, *, conversations: int = 4, turns: int = 4, user_tokens: int = 64,
                               max_new_tokens: int = 32, system_tokens: int = 0, users: int | None = None,
                               **options: Any) -> Results:
    """Conversations resending their history: see `run_multi_turn`."""
    from tgi_toolkit.bench import play

    target = _target(server, options)
    _no_prefix_option(options, "system_tokens= for a system prompt every conversation starts with")
    workload = multi_turn_workload(target, conversations=conversations, turns=turns, user_tokens=user_tokens,
                                   max_new_tokens=max_new_tokens, system_tokens=system_tokens, users=users)
    params = {"conversations": conversations, "turns": turns, "user_tokens": user_tokens,
              "max_new_tokens": max_new_tokens, "system_tokens": system_tokens, "users": users}
    async with Run(target, workload.scenario, params, **_options(target, options)) as run:
        await play.multi_turn(run, workload)
    return run.results()


def run_multi_turn(server: Any, *, conversations: int = 4, turns: int = 4, user_tokens: int = 64,
                   max_new_tokens: int = 32, system_tokens: int = 0, users: int | None = None,
                   **options: Any) -> Results:
    """`conversations` chats of `turns` turns, as a chat client sends them: turn t resends turn t-1's
    prompt and the answer it got, plus a new user message of `user_tokens`, so its prompt is exactly
    `system_tokens + user_tokens + t * (max_new_tokens + user_tokens)` tokens; `users` conversations
    at once (None: all). Requests carry `group` (the conversation) and `turn`; the point carries
    `prefix_cache_hit_rate`. `plots.ttft_by_turn(results.requests)` draws TTFT per turn."""
    return _run_sync(lambda: run_multi_turn_async(
        server, conversations=conversations, turns=turns, user_tokens=user_tokens, max_new_tokens=max_new_tokens,
        system_tokens=system_tokens, users=users, **options))


async def run_decode_stall_async(server: Any, *, streams: int = 8, long_prompt: int = 2000, stream_prompt: int = 32,
                                 stream_tokens: int = 128, long_max_new_tokens: int = 4, lead_tokens: int = 4,
                                 repeats: int = 3, warmups: int = 1, **options: Any) -> Results:
    """A long prompt joining running streams: see `run_decode_stall`."""
    from tgi_toolkit.bench import play

    target = _target(server, options)
    _no_prefix_option(options, "0 (each prompt is distinct, so that no cache hides the prefill)")
    workload = decode_stall_workload(target, streams=streams, long_prompt=long_prompt, stream_prompt=stream_prompt,
                                     stream_tokens=stream_tokens, long_max_new_tokens=long_max_new_tokens,
                                     lead_tokens=lead_tokens, repeats=repeats, warmups=warmups)
    params = {"streams": streams, "long_prompt": long_prompt, "stream_prompt": stream_prompt,
              "stream_tokens": stream_tokens, "long_max_new_tokens": long_max_new_tokens,
              "lead_tokens": lead_tokens, "repeats": repeats, "warmups": warmups}
    async with Run(target, workload.scenario, params, **_options(target, options)) as run:
        await play.decode_stall(run, workload, repeats, warmups)
    return run.results()


def run_decode_stall(server: Any, *, streams: int = 8, long_prompt: int = 2000, stream_prompt: int = 32,
                     stream_tokens: int = 128, long_max_new_tokens: int = 4, lead_tokens: int = 4, repeats: int = 3,
                     warmups: int = 1, **options: Any) -> Results:
    """`streams` requests start decoding (`stream_prompt` tokens in, `stream_tokens` out); when each
    has `lead_tokens` tokens, one prompt of `long_prompt` tokens arrives. The point keeps the running
    streams' largest and p99 inter-token gap from its send to its first token (`stall_max_gap_s`,
    `stall_p99_gap_s`), their median gap before (`stall_baseline_gap_s`) and its TTFT
    (`long_prompt_ttft_s`), over `repeats` rounds after `warmups`. Compare a server with chunked
    prefill against one without (PREFILL_CHUNKING=0): `plots.decode_stall(results.requests)`."""
    return _run_sync(lambda: run_decode_stall_async(
        server, streams=streams, long_prompt=long_prompt, stream_prompt=stream_prompt, stream_tokens=stream_tokens,
        long_max_new_tokens=long_max_new_tokens, lead_tokens=lead_tokens, repeats=repeats, warmups=warmups,
        **options))


SCENARIO_FUNCTIONS = {"batch": run_batch, "concurrency": run_concurrency, "rate": run_rate,
                      "ingestion": measure_ingestion, "shared_prefix": run_shared_prefix,
                      "multi_turn": run_multi_turn, "decode_stall": run_decode_stall}


def run_scenario(scenario: str, server: Any, **params: Any) -> Results:
    """`run_batch`, `run_concurrency`, `run_rate`, `measure_ingestion`, `run_shared_prefix`, `run_multi_turn`
    or `run_decode_stall` by name (for sweeps)."""
    try:
        function = SCENARIO_FUNCTIONS[scenario]
    except KeyError:
        raise BenchError("scenario", f"{scenario!r} is not known", ", ".join(SCENARIO_FUNCTIONS)) from None
    return function(server, **params)
