"""The public Python API: one function per scenario, sync (notebooks, scripts) and async.

Every `run_*` takes the server (a URL or a started `Server`), the scenario's parameters (the fields of its
dataclass in tgi_toolkit.scenarios, with their defaults) and the common options below, checks them all before
sending anything, and returns `Results`; `play_scenario` / `play_scenario_async` take a scenario object instead.

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
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from tgi_toolkit import schema as S
from tgi_toolkit.bench.checks import check_options
from tgi_toolkit.bench.errors import BenchError
from tgi_toolkit.bench.results import Results
from tgi_toolkit.bench.run import PLAY_OPTIONS, Run
from tgi_toolkit.bench.target import Target, resolve
from tgi_toolkit.scenarios.base import Scenario, split, wrapper_signature
from tgi_toolkit.scenarios.kinds import (
    BatchScenario,
    ConcurrencyScenario,
    IngestionScenario,
    RateScenario,
    scenario_class,
)
from tgi_toolkit.scenarios.plans import DecodeStallScenario, MultiTurn, SharedPrefix

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.bench.target import ServerRef


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
    allowed = set(PLAY_OPTIONS)
    unknown = set(options) - allowed
    if unknown:
        raise BenchError(sorted(unknown)[0], "is not an option", ", ".join(sorted(allowed | {"api", "api_key"})))
    check_options(options)
    return options


def _target(server: ServerRef, options: dict[str, Any]) -> Target:
    return resolve(server, api=options.pop("api", None), api_key=options.pop("api_key", None))


def spread_lengths(low: int, high: int, count: int) -> list[int]:
    """`count` prompt lengths evenly spread from `low` to `high` tokens (fewer where they round alike)."""
    return sorted({int(round(low + (high - low) * i / (count - 1))) for i in range(count)})


def default_ingestion_lengths(target: Target, count: int = 8) -> list[int]:
    """`count` prompt lengths spread from 32 tokens to 90 % of what the server takes (with one new token)."""
    top = int(0.9 * min(target.max_input_tokens or 4096, (target.max_total_tokens or 4097) - 1))
    return spread_lengths(32, max(top, 33), count)


def _no_prefix_option(options: dict[str, Any], instead: str) -> None:
    if options.get("prefix_tokens"):
        raise BenchError("prefix_tokens", "the workload builds its own shared text", instead)


async def _send(run: Run, scenario: Scenario, seed: int) -> None:
    from tgi_toolkit.bench import play, scenarios

    if isinstance(scenario, BatchScenario):
        await scenarios.batch(run, scenario)
    elif isinstance(scenario, ConcurrencyScenario):
        await scenarios.concurrency(run, scenario)
    elif isinstance(scenario, RateScenario):
        await scenarios.rate(run, scenario, seed)
    elif isinstance(scenario, IngestionScenario):
        await scenarios.ingestion(run, scenario)
    elif isinstance(scenario, SharedPrefix):
        await play.shared_prefix(run, scenario)
    elif isinstance(scenario, MultiTurn):
        await play.multi_turn(run, scenario)
    elif isinstance(scenario, DecodeStallScenario):
        await play.decode_stall(run, scenario)


async def play_scenario_async(server: ServerRef, scenario: Scenario, **options: Any) -> Results:
    """Send one scenario (a tgi_toolkit.scenarios dataclass) to the server: checked against its limits, then
    measured; the common options as in this module's docstring."""
    target = _target(server, options)
    if isinstance(scenario, IngestionScenario):
        scenario = scenario.with_lengths(default_ingestion_lengths(target))
    if isinstance(scenario, MultiTurn):
        _no_prefix_option(options, "system_tokens= for a system prompt every conversation starts with")
    if isinstance(scenario, DecodeStallScenario):
        _no_prefix_option(options, "0 (each prompt is distinct, so that no cache hides the prefill)")
    scenario.check(target)
    opts = _options(target, options)
    async with Run.of(target, scenario.name, scenario.workload(), **opts) as run:
        await _send(run, scenario, opts.get("seed", 0))
    return run.results()


def play_scenario(server: ServerRef, scenario: Scenario, **options: Any) -> Results:
    """`play_scenario_async` from synchronous code (a script, or a notebook cell inside its running loop)."""
    return _run_sync(lambda: play_scenario_async(server, scenario, **options))


def _wrappers(cls: type[Scenario], doc: str) -> tuple[Any, Any]:
    """The public `run_<scenario>` pair: keywords -> the scenario object -> `play_scenario`; their signature shows the
    scenario's fields, so a notebook's completion and help() list them."""

    async def run_async(server: ServerRef, **params: Any) -> Results:
        scenario, options = split(cls, params)
        return await play_scenario_async(server, scenario, **options)

    def run(server: ServerRef, **params: Any) -> Results:
        scenario, options = split(cls, params)
        return play_scenario(server, scenario, **options)

    for function, text in ((run_async, f"{doc.split(chr(10))[0]} (async): see the sync function."), (run, doc)):
        function.__signature__ = wrapper_signature(cls, "server")  # type: ignore[attr-defined]
        function.__doc__ = text
    return run, run_async


run_batch, run_batch_async = _wrappers(BatchScenario, """For each batch size B: B prompts of exactly
    `sequence_length` tokens at once, `decode_length` tokens forced, `warmups` + `runs` times. Prefill and decode
    latency and throughput per run in `.batch`; `.tables()` prints them as text-generation-benchmark does.""")
run_concurrency, run_concurrency_async = _wrappers(ConcurrencyScenario, """For each (prompt, output) length pair
    and each N in `users`: N users each send their next request when the last one ends, `requests` in all
    (default 4 per user, at least 8), after `warmup_requests` unmeasured ones. TTFT, TPOT, ITL, E2E, per-request
    speed, throughput, errors.

    ramp_up: user i sends its first request i/N of this many seconds after the point's start, and the
    requests sent before it ends are not measured (guidellm's rampup_duration). "auto" (default): one
    cycle at the point's load, the mean duration of one request a user sent together first (no ramp for
    one user); 0: all users at once, which keeps equal requests in lockstep (docs/measurement.md, "Ramp-up and
    phase"). Each point records the ramp it used (ramp_up_s) and whether its users ran in step (lockstep).""")
run_rate, run_rate_async = _wrappers(RateScenario, """For each rate: `requests` requests leaving on a `constant`
    or seeded `poisson` schedule, whatever is in flight (open loop; `max_concurrency` caps it, hiding queueing in
    the client). Pass slo_ttft_s / slo_tpot_s for goodput.""")
measure_ingestion, measure_ingestion_async = _wrappers(IngestionScenario, """happy_vllm's prompt ingestion speed:
    one request at a time, one new token, `repeats` prompts of each length (default: 8 lengths up to 90 % of
    what the server takes); `.ingestion()` fits TTFT against length (speed = 1 / slope, outliers dropped).""")
run_shared_prefix, run_shared_prefix_async = _wrappers(SharedPrefix, """`groups` groups of
    `requests_per_group` requests; each prompt is its group's prefix of `prefix_tokens` tokens plus a suffix of
    its own (`suffix_tokens`), token-exact. A group's first request goes alone and the rest after it ended (TGI
    caches a prompt when its request is freed), `users` in flight at most. Requests carry `group` and `turn`
    (0 = the group's first); the point carries `prefix_cache_hit_rate` from the engine's counters (NaN on servers
    without them). `plots.shared_prefix_ttft(results.requests)` draws first against later requests.""")
run_multi_turn, run_multi_turn_async = _wrappers(MultiTurn, """`conversations` chats of `turns` turns, as a
    chat client sends them: turn t resends turn t-1's prompt and the answer it got, plus a new user message of
    `user_tokens`, so its prompt is exactly `system_tokens + user_tokens + t * (max_new_tokens + user_tokens)`
    tokens; `users` conversations at once (None: all). Requests carry `group` (the conversation) and `turn`; the
    point carries `prefix_cache_hit_rate`. `plots.ttft_by_turn(results.requests)` draws TTFT per turn.""")
run_decode_stall, run_decode_stall_async = _wrappers(DecodeStallScenario, """`streams` requests start decoding
    (`stream_prompt` tokens in, `stream_tokens` out); when each has `lead_tokens` tokens, one prompt of
    `long_prompt` tokens arrives. The point keeps the running streams' largest and p99 inter-token gap from its
    send to its first token (`stall_max_gap_s`, `stall_p99_gap_s`), their median gap before
    (`stall_baseline_gap_s`) and its TTFT (`long_prompt_ttft_s`), over `repeats` rounds after `warmups`. Compare a
    server with chunked prefill against one without (PREFILL_CHUNKING=0): `plots.decode_stall(results.requests)`.""")


SCENARIO_FUNCTIONS = {"batch": run_batch, "concurrency": run_concurrency, "rate": run_rate,
                      "ingestion": measure_ingestion, "shared_prefix": run_shared_prefix,
                      "multi_turn": run_multi_turn, "decode_stall": run_decode_stall}


def run_scenario(scenario: str, server: ServerRef, **params: Any) -> Results:
    """`run_batch`, `run_concurrency`, `run_rate`, `measure_ingestion`, `run_shared_prefix`, `run_multi_turn`
    or `run_decode_stall` by name (for sweeps)."""
    scenario_class(scenario)  # an unknown name refused, listing the known ones
    return SCENARIO_FUNCTIONS[scenario.replace("-", "_")](server, **params)


def kv_capacity_tokens(server: ServerRef, *, api_key: str | None = None) -> float:
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
    for fact in ("max_batch_total_tokens", "kv_capacity_tokens"):
        if target.facts.get(fact):
            return float(target.facts[fact])
    return float(target.info.get("max_batch_total_tokens") or math.nan)
