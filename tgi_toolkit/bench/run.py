"""One run of a scenario: the client, telemetry, prompts, provenance, resume and saving points.

Scenarios (scenarios.py) only decide what to send when; `Run` sends it, watches the server and the
client, turns records into the schema's rows, and saves each point as it finishes.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import hashlib
import json
import math
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pandas as pd

from tgi_toolkit.bench import phase, provenance, stats
from tgi_toolkit.bench import schema as S
from tgi_toolkit.bench.client import SAMPLING_KEYS, GenerationRequest, StreamRecord, make_client, now_ns
from tgi_toolkit.bench.errors import BenchError, ServerDiedError
from tgi_toolkit.bench.prompts import PromptFactory, make_tokenizer
from tgi_toolkit.bench.results import Results, ResultsFolder, frame, load_results
from tgi_toolkit.bench.target import Target
from tgi_toolkit.bench.telemetry import Telemetry, client_bound, frozen_gc, machine_busy

# Errors the client raised itself (no answer, connection lost) rather than ones the server sent.
LOST = {"ClientConnectorError", "ServerDisconnectedError", "ClientPayloadError", "ClientOSError",
        "ClientConnectionResetError", "ConnectionResetError", "incomplete_stream"}


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _tokenizer_name(tokenizer: Any) -> str | None:
    # a name that stays the same from one session to the next (it is part of the resume key)
    if tokenizer is None or isinstance(tokenizer, (str, Path)):
        return None if tokenizer is None else str(tokenizer)
    return str(getattr(tokenizer, "name_or_path", None) or getattr(tokenizer, "name", None) or type(tokenizer).__name__)


async def gather_all(aws: Iterable[Awaitable[Any]]) -> list[Any]:
    """Like asyncio.gather, but the first failure cancels the rest (no orphan requests)."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


# The prompt index of the length check's own request (measured prompts are 0, 1, ...).
CHECK_PROMPT_INDEX = -1


class RunTables:
    """Where a run's tables go as its points finish: its folder (if any) and memory. Shared by measured
    runs and simulated ones (tgi_toolkit.simulate), which set `folder`, `run_id`, `provenance`, `_memory`."""

    folder: ResultsFolder | None
    run_id: str
    provenance: dict[str, Any]
    _memory: dict[str, list[pd.DataFrame]]

    def _save(self, tables: dict[str, pd.DataFrame]) -> None:
        for name, df in tables.items():
            if not df.empty:
                self._memory[name].append(df)
        if self.folder is not None:
            self.folder.append(tables)

    def results(self) -> Results:
        """This run's tables: read back from the folder (with earlier sessions' points) or from memory."""
        if self.folder is not None:
            return load_results(self.folder.path, run_id=self.run_id)
        tables = {name: frame(pd.concat(dfs, ignore_index=True), name) if dfs else frame([], name)
                  for name, dfs in self._memory.items()}
        return Results(tables["requests"], tables["points"], tables["batch"], tables["server"],
                       [json.loads(json.dumps(self.provenance, default=str))])


class Run(RunTables):
    """Context for one scenario call; use `async with Run(...) as run`."""

    def __init__(self, target: Target, scenario: str, workload: dict[str, Any], *,
                 output: str | Path | None = None, resume: bool = True, progress: bool = True,
                 tokenizer: Any = None, seed: int = 0, prefix_tokens: int = 0, dataset: str | Path | None = None,
                 ignore_eos: bool | None = None, sampling: dict[str, Any] | None = None,
                 slo_ttft_s: float | None = None, slo_tpot_s: float | None = None,
                 scrape_interval: float = S.SCRAPE_INTERVAL, request_timeout: float = 600.0,
                 on_point: Callable[[dict[str, Any]], None] | None = None,
                 command: Sequence[str] | None = None, accept_server_count: bool = False) -> None:
        self.target, self.scenario = target, scenario
        unknown = set(sampling or {}) - set(SAMPLING_KEYS)
        if unknown:
            raise BenchError("sampling", f"unknown parameter(s) {sorted(unknown)}", ", ".join(SAMPLING_KEYS))
        self.sampling = {k: v for k, v in (sampling or {}).items() if v is not None}
        self.ignore_eos = target.takes_ignore_eos if ignore_eos is None else bool(ignore_eos)
        for name, value in (("slo_ttft_s", slo_ttft_s), ("slo_tpot_s", slo_tpot_s)):
            if value is not None and not value > 0:
                raise BenchError(name, f"{value!r} is not a positive number of seconds", "numbers > 0, or None")
        if not scrape_interval > 0:
            raise BenchError("scrape_interval", f"{scrape_interval!r}", "numbers of seconds > 0")
        self.slo_ttft_s, self.slo_tpot_s = slo_ttft_s, slo_tpot_s
        self.output = Path(output) if output is not None else None
        # A server that counts prompt tokens its own way (another tokenizer, words, ...): keep the
        # prompts, record its count (input_tokens) and the difference instead of refusing to run.
        self.accept_server_count = bool(accept_server_count)
        # A run refused before its first point leaves no folder behind that it created itself.
        self._created_folder = self.output is not None and not self.output.exists()
        self._saved_points = 0
        self.resume, self.progress, self.on_point = resume, progress, on_point
        self.scrape_interval, self.request_timeout = scrape_interval, request_timeout
        self.prompt_options = {"tokenizer": tokenizer, "seed": seed, "prefix_tokens": prefix_tokens,
                               "dataset": dataset}
        self.workload = {**workload, "seed": seed, "prefix_tokens": prefix_tokens,
                         "dataset": str(dataset) if dataset is not None else None,
                         "tokenizer": _tokenizer_name(tokenizer),
                         "api": target.api, "ignore_eos": self.ignore_eos, "sampling": self.sampling,
                         "slo_ttft_s": slo_ttft_s, "slo_tpot_s": slo_tpot_s}
        self.command = provenance.redact_argv(command)  # `-- --api-key X` passes launcher flags through
        self.config_id = provenance.config_id(target.config)
        self.config_label = provenance.config_label(target.config)
        self.folder = ResultsFolder(self.output) if self.output is not None else None
        self.finished: set[str] = set()
        self.total_points = 0
        self.prompts: PromptFactory | None = None
        self._checked_lengths: set[int] = set()
        self._memory: dict[str, list[pd.DataFrame]] = {"requests": [], "points": [], "batch": [], "server": []}
        self._alive_at = 0.0
        self._alive_lock = asyncio.Lock()
        self._bar: Any = None
        self._bars: list[Any] = []  # per-point bars, closed on the way out whatever happens

    # -- identity and provenance ---------------------------------------------------------------
    def resume_key(self) -> str:
        ident = {"scenario": self.scenario, "workload": self.workload, "config_id": self.config_id,
                 "model_id": self.target.model_id}
        if self.target.config is None:  # a server we did not launch: its address is its identity
            ident["url"] = self.target.url
        return hashlib.sha1(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def _start_provenance(self) -> None:
        prior = self.folder.find_run(self.resume_key()) if self.folder is not None and self.resume else None
        if prior is not None:
            self.run_id, self.started_at = prior["run_id"], prior["started_at"]
            self.finished = self.folder.finished_points(self.run_id)
            self.folder.drop_unfinished(self.run_id, self.finished)
            sessions = int(prior.get("sessions", 1)) + 1
        else:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            self.run_id, self.started_at, sessions = f"{self.scenario}-{stamp}-{uuid.uuid4().hex[:6]}", _utc_now(), 1
        # Measured prompts are new to the server in every run, point and resumed session (PromptFactory).
        self.prompt_salt = f"{self.run_id}:{sessions}"
        # The run clock continues across resumed sessions: zero is the run's first start.
        started = _dt.datetime.fromisoformat(self.started_at).timestamp()
        self.clock_ns = now_ns() - int((time.time() - started) * 1e9)
        config = self.target.config
        self.provenance: dict[str, Any] = {
            "run_id": self.run_id, "config_id": self.config_id, "scenario": self.scenario,
            "started_at": self.started_at, "finished_at": None, "status": "running",
            "launcher_config": config.to_dict(redact=True) if config is not None else None,
            "backend": self.target.backend, "url": self.target.url, "info": self.target.info,
            "workload": self.workload, "versions": provenance.versions(), "hardware": provenance.hardware(),
            "placement": provenance.placement(self.target.pid),
            "git": provenance.git_revision(), "command": self.command,
            # beyond PROVENANCE_KEYS
            "config_label": self.config_label, "resume_key": self.resume_key(), "sessions": sessions,
            "server_facts": {k: v for k, v in self.target.facts.items() if k != "args_line"},
            "prompt_check": {}, "error": None,
        }
        self._write_provenance()

    def _write_provenance(self) -> None:
        if self.folder is not None:
            self.folder.write_run(self.provenance)

    # -- context ----------------------------------------------------------------------------------
    async def __aenter__(self) -> Run:
        self._gc = frozen_gc()
        self._gc.__enter__()
        self._start_provenance()
        t = self.target
        self.client = make_client(t.api, t.url, api_key=t.api_key, model=t.model_name,
                                  read_timeout=self.request_timeout)
        self.client.open()
        self.telemetry = Telemetry(t.url, self.clock_ns, session=self.client.session,
                                   headers={k: v for k, v in self.client.headers.items() if k == "Authorization"},
                                   interval=self.scrape_interval, pid=t.pid)
        await self.telemetry.start()
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        refused = isinstance(exc, BenchError) and self._saved_points == 0 and self.provenance["sessions"] == 1
        try:
            await self.telemetry.stop()
            if not refused:
                self._save({"server": self._server_frame()})
        finally:
            await self.client.close()
            for bar in [*self._bars, self._bar]:
                if bar is not None:
                    bar.close()
            tokenizer = getattr(self.prompts, "tokenizer", None)
            if hasattr(tokenizer, "close"):
                tokenizer.close()
            self.provenance["finished_at"] = _utc_now()
            if exc is None:
                self.provenance["status"] = "complete"
            else:
                self.provenance["status"] = "failed"
                if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt)):
                    self.provenance["error"] = "interrupted"
                else:
                    self.provenance["error"] = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if refused:
                self._forget()
            else:
                self._write_provenance()
            self._gc.__exit__(None, None, None)
        if isinstance(exc, ServerDiedError):
            exc.results = self.results()  # finished points, also for callers without an output folder

    def _forget(self) -> None:
        """Nothing was measured (bad input found on the way): no run record, and no folder if this run made it."""
        if self.folder is None:
            return
        (self.folder.path / "runs" / f"{self.run_id}.json").unlink(missing_ok=True)
        if self._created_folder:
            leftovers = [p for p in self.folder.path.rglob("*") if p.is_file() and p.name != ".lock"]
            if not leftovers:
                shutil.rmtree(self.folder.path, ignore_errors=True)

    # -- points -------------------------------------------------------------------------------------
    def plan(self, point_ids: Sequence[str]) -> None:
        """Announce the points of this run (for the progress bar and the server-death message)."""
        self.total_points = len(point_ids)
        if self.progress:
            from tgi_toolkit.progress import progress_bar

            done = sum(p in self.finished for p in point_ids)
            self._bar = progress_bar(len(point_ids), f"{self.scenario} points", unit="point", initial=done)

    def skip(self, point_id: str) -> bool:
        return point_id in self.finished

    def request_bar(self, total: int, desc: str) -> Any:
        if not self.progress:
            return None
        from tgi_toolkit.progress import progress_bar

        bar = progress_bar(total, desc, unit="req", transient=True)  # None where it cannot be redrawn
        if bar is not None:
            self._bars.append(bar)
        return bar

    async def prompt_list(self, length: int, n: int, point_id: str) -> list[str]:
        """`n` distinct token-exact prompts of `length` tokens for one point, none of them sent before by
        this run or an earlier one (built off the event loop)."""
        if self.prompts is None:
            t = self.target
            tok = await asyncio.to_thread(make_tokenizer, t.url, self.prompt_options["tokenizer"],
                                          api_key=t.api_key, model=t.model_name)
            opts = self.prompt_options
            self.prompts = PromptFactory(tok, seed=opts["seed"], prefix_tokens=opts["prefix_tokens"],
                                         dataset=opts["dataset"])
            self.provenance["prompts"] = self.prompts.describe()
        try:
            prompts = await asyncio.to_thread(self.prompts.prompts, length, n, f"{self.prompt_salt}:{point_id}")
            # The length check sends a prompt of its own (index -1, never measured): a server with a
            # prefix cache (TGI 3, vLLM) would answer a measured prompt it had just seen from its cache.
            probe = None if length in self._checked_lengths else \
                await asyncio.to_thread(self.prompts.prompt, length, CHECK_PROMPT_INDEX, self.prompt_salt)
        except httpx.HTTPError as exc:  # the server's /tokenize did not answer
            if not await asyncio.to_thread(self.target.alive):
                raise self._died(f"{type(exc).__name__}: {exc}", None) from exc
            raise BenchError("tokenizer", f"{self.prompts.tokenizer.name}: {exc}") from exc
        if probe is not None:
            await self._check_length(probe, length)
        return prompts

    async def _check_length(self, prompt: str, length: int) -> None:
        """The server's own count of a built prompt must be the requested length (pitfall 2)."""
        if length in self._checked_lengths:
            return
        record = await self.client.stream(GenerationRequest(prompt, 1, sampling={}))
        await self.check_record(record, None)
        if record.error is not None:
            raise BenchError("prompt_tokens", f"the server refused a prompt of {length} tokens: "
                                              f"{record.error}: {record.error_message}")
        reported = record.input_tokens
        check = "unverified (the server reports no input length)" if reported is None else int(reported)
        if self.target.api == "chat":
            check = f"{reported} (includes the chat template)"
        elif reported is not None and reported != length and self.accept_server_count:
            check = f"{int(reported)} by the server's own count (accepted; asked {length})"
        elif reported is not None and reported != length:
            raise BenchError("tokenizer", f"a prompt of {length} tokens by {self.prompts.tokenizer.name} is "
                                          f"{reported} tokens for the server",
                             "the server's own tokenizer (no --tokenizer-name) or the served model's; or "
                             "--accept-server-count to measure with the server's count")
        self.provenance["prompt_check"][str(length)] = check
        self._checked_lengths.add(length)

    def encode(self, prompt: str, max_new_tokens: int) -> bytes:
        return self.client.encode(GenerationRequest(prompt, max_new_tokens, self.ignore_eos, self.sampling))

    async def request(self, body: bytes, point_id: str | None = None, record: StreamRecord | None = None,
                      ) -> StreamRecord:
        record = await self.client.stream(body, record)
        await self.check_record(record, point_id)
        return record

    async def check_record(self, record: StreamRecord, point_id: str | None) -> None:
        """A request that lost its connection may mean the server died: then stop the run."""
        if record.error not in LOST:
            return
        async with self._alive_lock:
            if time.monotonic() - self._alive_at < 1.0:
                return  # checked a moment ago: it was alive
            alive = await asyncio.to_thread(self.target.alive)
            if alive:
                self._alive_at = time.monotonic()
                return
        raise self._died(f"{record.error}: {record.error_message}", point_id)

    def _died(self, message: str, point_id: str | None) -> ServerDiedError:
        return ServerDiedError(message, url=self.target.url, point_id=point_id, finished=len(self.finished),
                               total=self.total_points, output=self.output)

    def seconds(self, t_ns: int) -> float:
        return (t_ns - self.clock_ns) / 1e9

    async def save_point(self, point_id: str, workload: dict[str, Any],
                         requests: Sequence[tuple[StreamRecord, int, bool, int]], *,
                         windows: Sequence[tuple[int, int]] | None = None,
                         batch_rows: Sequence[dict[str, Any]] = (), send_lag_s: Sequence[float] = (),
                         request_columns: Sequence[dict[str, Any]] | None = None,
                         point_columns: dict[str, Any] | None = None) -> dict[str, Any]:
        """Turn a finished point's records into rows and save them.

        requests: (record, repeat, warmup, request_index). windows: the measured (start, end) ns
        spans, summed for the duration (default: first send to last token of measured requests).
        request_columns: per request, columns of its own (group, turn, its prompt length), in order;
        point_columns: the point's scenario-specific columns (prefix-cache hit rate, stall gaps); a closed
        loop's ramp (ramp_up_s) gets its phase check (bench.phase) beside it.
        """
        ident = {S.RUN_ID: self.run_id, S.CONFIG_ID: self.config_id, S.CONFIG_LABEL: self.config_label,
                 S.BACKEND: self.target.backend, S.MODEL_ID: self.target.model_id, S.SCENARIO: self.scenario,
                 S.POINT_ID: point_id}
        base = {S.USERS: None, S.BATCH_SIZE: None, S.RATE_RPS: None, S.ARRIVAL: None, S.PROMPT_TOKENS: None,
                S.MAX_NEW_TOKENS: None, **workload}
        max_new = base[S.MAX_NEW_TOKENS]
        rows = []
        for record, repeat, warmup, index in requests:
            row = {**ident, **base, S.REPEAT: repeat, S.WARMUP: warmup, S.REQUEST_INDEX: index,
                   **stats.request_metrics(record, self.clock_ns)}
            if request_columns is not None:
                row.update(request_columns[len(rows)])
                max_new = row[S.MAX_NEW_TOKENS]
            row[S.SHORT_OUTPUT] = bool(record.ok and max_new is not None and row[S.OUTPUT_TOKENS] < max_new)
            if row[S.FINISH_REASON] == "eos_token" and max_new is not None and row[S.OUTPUT_TOKENS] >= max_new:
                # The output reached its cap: that is a length stop whatever the server called it
                # (some OpenAI servers say "stop" there); server_finish_reason keeps its word.
                row[S.FINISH_REASON] = "length"
            rows.append(row)
        measured = [(r, rec) for r, (rec, _, warm, _) in zip(rows, requests, strict=True) if not warm]
        if windows is None:
            recs = [rec for _, rec in measured if rec.token_ns]
            windows = [(min(r.sent_ns for r in recs), max(r.token_ns[-1] for r in recs))] if recs else []
        duration = sum(end - start for start, end in windows) / 1e9
        summary = stats.point_summary([r for r, _ in measured], duration_s=duration, slo_ttft_s=self.slo_ttft_s,
                                      slo_tpot_s=self.slo_tpot_s)
        point_columns = dict(point_columns or {})
        if S.RAMP_UP_S in point_columns:  # a closed loop: were its users in step?
            point_columns.update(phase.phase_columns([r[S.SENT_S] for r, _ in measured],
                                                     summary[S.stat_column("itl", "p50")], point_columns[S.RAMP_UP_S]))
        point = {**ident, **base, **summary, **self._server_side(windows, [rec for _, rec in measured], base,
                                                                 summary, send_lag_s), **point_columns}
        batch = [{**ident, **row} for row in batch_rows]
        self._save({"requests": frame(rows, "requests"), "batch": frame(batch, "batch"),
                    "points": frame([point], "points"), "server": self._server_frame()})
        self.finished.add(point_id)
        self._saved_points += 1
        if self._bar is not None:
            self._bar.update(1)
        if self.on_point is not None:
            self.on_point(point)
        return point

    def _server_side(self, windows: Sequence[tuple[int, int]], records: Sequence[StreamRecord],
                     base: dict[str, Any], summary: dict[str, Any], send_lag_s: Sequence[float]) -> dict[str, Any]:
        if self.telemetry.cpu is not None:
            self.telemetry.cpu.sample()  # one sample after the window's end
        if not windows:
            window = self.telemetry.window(math.inf, -math.inf)
        else:
            window = self.telemetry.window(self.seconds(windows[0][0]), self.seconds(windows[-1][1]))
        capacity = window.kv_capacity_tokens
        if math.isnan(capacity) and window.kv_usage:
            # happy_vllm's estimate: tokens the client knows are in flight / the cache fraction in use
            prompt = base.get(S.PROMPT_TOKENS) or 0
            pairs = [(r, prompt) for r in records]
            samples = [(stats.tokens_in_flight(pairs, self.clock_ns + int(t * 1e9))[1], usage)
                       for t, usage in window.kv_usage]
            capacity = stats.kv_capacity_estimate(samples)
        if math.isnan(capacity):
            for fact in ("max_batch_total_tokens", "kv_cache_tokens"):
                if self.target.facts.get(fact):
                    capacity = float(self.target.facts[fact])
                    break
        bound = client_bound(window.lag_p99_ms, summary[S.stat_column("itl", "p50")], window.client_cpu,
                             summary[S.stat_column("ttft", "p50")], window.loop_cpu, window.loop_wait,
                             window.loop_blocks)
        busy = machine_busy(window.loop_wait, window.other_cpu, window.cores)
        if send_lag_s and float(pd.Series(send_lag_s).quantile(0.99)) > 0.01:
            bound = True  # the client could not keep the arrival schedule
        return {S.CLIENT_LAG_P99_MS: window.lag_p99_ms, S.CLIENT_LAG_MAX_MS: window.lag_max_ms,
                S.CLIENT_BOUND: bound, S.MACHINE_BUSY: busy, S.CLIENT_LOOP_CPU: window.loop_cpu,
                S.CLIENT_LOOP_WAIT: window.loop_wait, S.CLIENT_LOOP_BLOCKS: window.loop_blocks,
                S.OTHER_CPU_CORES: window.other_cpu,
                S.SERVER_BATCH_SIZE_MAX: window.batch_size_max,
                S.SERVER_QUEUE_SIZE_MAX: window.queue_size_max, S.KV_CAPACITY_TOKENS: capacity,
                S.KV_USAGE_MAX: window.kv_usage_max}

    def _server_frame(self) -> pd.DataFrame:
        samples = self.telemetry.drain()
        return frame([{S.RUN_ID: self.run_id, S.CONFIG_ID: self.config_id, S.T_S: t, S.METRIC: m,
                       S.LABELS: labels, S.VALUE: v} for t, m, labels, v in samples], "server")

