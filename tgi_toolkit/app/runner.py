"""The benchmark tab without Gradio: its settings, the app's one engine, and a run as a stream of updates.

    session = EngineSession(log_dir="work/")
    settings = BenchSettings.parse({"scenario": "concurrency", "users": "1, 2", ...})
    for update in run_benchmark(session, config, settings, "work/runs/r1"):
        print(update.message)          # the UI shows each one as it comes (points as they finish)
    session.stop()

The engine takes 5-20 s to start on a small CPU, so the app keeps one for its whole life and
restarts it only when the launcher settings change. Everything a user can get wrong (a setting,
a length over the server's limit, a model the engine cannot find) ends as an `Update` whose
message says what and where, never as a traceback.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from tgi_toolkit.config.errors import ConfigError

log = logging.getLogger(__name__)

SCENARIOS = ("concurrency", "batch", "ingestion")
SCENARIO_HELP = {
    "concurrency": "N parallel users, each sending its next request when the last one ends (happy_vllm's load "
                   "test): throughput, TTFT, TPOT, ITL per number of users.",
    "batch": "text-generation-benchmark over HTTP: B prompts at once, prefill and decode latency and "
             "throughput per batch size.",
    "ingestion": "One request at a time with growing prompts: the prompt ingestion speed (1 / slope of TTFT "
                 "against prompt length).",
}


@dataclass(frozen=True)
class BenchLimits:
    """Caps on one benchmark, so that a shared CPU Space stays usable for the next visitor."""

    max_points: int = 16
    max_users: int = 32
    max_requests: int = 128
    max_tokens: int = 4096
    max_runs: int = 10


class SettingsError(ValueError):
    """Benchmark settings that cannot run; `problems` maps each bad field to its message."""

    def __init__(self, problems: Mapping[str, str]) -> None:
        self.problems = dict(problems)
        super().__init__("; ".join(f"{LABELS[name]}: {message}" for name, message in self.problems.items()))


# Field -> its label in the app (messages name fields by these labels).
LABELS = {
    "scenario": "Scenario", "users": "Parallel users", "prompt_tokens": "Prompt tokens",
    "max_new_tokens": "Generated tokens", "requests": "Requests per point", "batch_sizes": "Batch sizes",
    "sequence_length": "Sequence length", "decode_length": "Decode length", "runs": "Runs per batch size",
    "ingestion_lengths": "Prompt lengths", "repeats": "Requests per length",
}
LISTED = frozenset({"users", "batch_sizes", "ingestion_lengths"})  # fields holding several numbers
# Which fields each scenario reads (the others are ignored, and not checked).
SCENARIO_FIELDS = {
    "concurrency": ("users", "prompt_tokens", "max_new_tokens", "requests"),
    "batch": ("batch_sizes", "sequence_length", "decode_length", "runs"),
    "ingestion": ("ingestion_lengths", "repeats"),
}


@dataclass(frozen=True)
class BenchSettings:
    """One benchmark the app can run. Defaults take well under a minute on 2 CPU cores."""

    scenario: str = "concurrency"
    users: tuple[int, ...] = (1, 2, 4)
    prompt_tokens: int = 64
    max_new_tokens: int = 16
    requests: int = 8
    batch_sizes: tuple[int, ...] = (1, 2, 4)
    sequence_length: int = 64
    decode_length: int = 8
    runs: int = 2
    ingestion_lengths: tuple[int, ...] = (32, 128, 256, 512)
    repeats: int = 2

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The fields in the order the app passes their raw values."""
        return tuple(f.name for f in fields(cls))

    def raw(self) -> dict[str, str]:
        """Each field as its text box holds it ("1, 2, 4")."""
        return {name: (", ".join(map(str, value)) if isinstance(value, tuple) else str(value))
                for name, value in ((f.name, getattr(self, f.name)) for f in fields(self))}

    @classmethod
    def parse(cls, raw: Mapping[str, Any], limits: BenchLimits | None = None) -> BenchSettings:
        """Settings from text-box values; SettingsError naming every bad field of the chosen scenario."""
        limits = limits or BenchLimits()
        scenario = str(raw.get("scenario", "concurrency")).strip()
        if scenario not in SCENARIOS:
            raise SettingsError({"scenario": f"{scenario!r} is not one of {', '.join(SCENARIOS)}"})
        values: dict[str, Any] = {"scenario": scenario}
        problems: dict[str, str] = {}
        caps = {"users": limits.max_users, "batch_sizes": limits.max_users, "requests": limits.max_requests,
                "runs": limits.max_runs, "repeats": limits.max_runs}
        for name in SCENARIO_FIELDS[scenario]:
            cap = caps.get(name, limits.max_tokens)
            try:
                values[name] = (tuple(_ints(raw.get(name, ""), cap)) if name in LISTED
                                else _ints(raw.get(name, ""), cap, one=True)[0])
            except ValueError as exc:
                problems[name] = str(exc)
        if not problems:
            settings = cls(**values)
            if settings.point_count() > limits.max_points:
                first = SCENARIO_FIELDS[scenario][0]
                problems[first] = (f"{settings.point_count()} points in one run; the app runs at most "
                                   f"{limits.max_points}")
            if scenario == "ingestion" and len(set(settings.ingestion_lengths)) < 2:
                problems["ingestion_lengths"] = "the fit needs at least two different lengths"
        if problems:
            raise SettingsError(problems)
        return cls(**values)

    def point_count(self) -> int:
        return {"concurrency": len(self.users), "batch": len(self.batch_sizes),
                "ingestion": len(self.ingestion_lengths)}[self.scenario]

    def describe(self) -> str:
        """One line saying what will run, for the status box."""
        if self.scenario == "concurrency":
            return (f"concurrency: {', '.join(map(str, self.users))} parallel users, {self.prompt_tokens}-token "
                    f"prompts, {self.max_new_tokens} tokens generated, {self.requests} requests per point")
        if self.scenario == "batch":
            return (f"batch: batch sizes {', '.join(map(str, self.batch_sizes))}, sequence length "
                    f"{self.sequence_length}, decode length {self.decode_length}, {self.runs} runs each")
        return (f"ingestion: prompts of {', '.join(map(str, self.ingestion_lengths))} tokens, "
                f"{self.repeats} requests each")

    def run(self, server: Any, **options: Any) -> Any:
        """Run this benchmark against `server` with the harness's common options (output=, on_point=, ...)."""
        from tgi_toolkit.bench import measure_ingestion, run_batch, run_concurrency

        if self.scenario == "concurrency":
            return run_concurrency(server, users=list(self.users), prompt_tokens=self.prompt_tokens,
                                   max_new_tokens=self.max_new_tokens, requests=self.requests, **options)
        if self.scenario == "batch":
            return run_batch(server, batch_sizes=list(self.batch_sizes), sequence_length=self.sequence_length,
                             decode_length=self.decode_length, runs=self.runs, warmups=1, **options)
        return measure_ingestion(server, prompt_tokens=list(self.ingestion_lengths), repeats=self.repeats,
                                 **options)


def _ints(text: Any, cap: int, one: bool = False) -> list[int]:
    """'1, 2, 4' -> [1, 2, 4]: whole numbers from 1 to `cap`; ValueError saying what is wrong."""
    parts = [p.strip() for p in str(text or "").replace(";", ",").split(",") if p.strip()]
    if not parts:
        raise ValueError("needs a value" if one else "needs at least one value, e.g. 1, 2, 4")
    if one and len(parts) > 1:
        raise ValueError(f"takes one number, got {len(parts)}")
    out = []
    for part in parts:
        try:
            value = int(part)
        except ValueError:
            raise ValueError(f"{part!r} is not a whole number") from None
        if not 1 <= value <= cap:
            raise ValueError(f"{value} is out of range (1 to {cap})")
        out.append(value)
    return out


# -- the engine ----------------------------------------------------------------------------------------
class EngineSession:
    """The app's one server: started on the first benchmark, kept while the launcher settings stay the
    same, restarted when they change, stopped by `stop()` (the app calls it when it closes)."""

    def __init__(self, backend: str = "embedded", log_dir: str | Path | None = None,
                 health_timeout: float | None = None) -> None:
        self.backend = backend
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.health_timeout = health_timeout
        self.server: Any = None
        self._key: dict[str, Any] | None = None
        self._lock = threading.Lock()
        # Held by the benchmark thread while it runs: a run the user stopped may still be finishing
        # its point, and the next one must not share the engine with it.
        self.bench_lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self.server is not None and self.server.running

    def describe(self) -> str:
        if not self.running:
            return "no engine running"
        return f"{self.backend} engine at {self.server.url} (pid {self.server.pid})"

    def server_for(self, config: Any) -> Any:
        """A running server with `config`'s settings, started (or restarted) if need be.

        Raises ConfigError (a launcher rule is broken) or ServerError (it could not start: its
        message, exit code and last log lines)."""
        from tgi_toolkit.server import Server

        key = config.to_dict(redact=False)
        with self._lock:
            if self.running and key == self._key:
                return self.server
            self._stop_locked()
            log_path = None
            if self.log_dir is not None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                log_path = self.log_dir / f"engine-{time.strftime('%Y%m%d-%H%M%S')}.log"
            server = Server(config, backend=self.backend, log_path=log_path, health_timeout=self.health_timeout,
                            startup_progress=False)
            server.start()
            self.server, self._key = server, key
            return server

    def stop(self) -> None:
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        if self.server is not None:
            try:
                self.server.stop()
            finally:
                self.server, self._key = None, None


# -- one run -------------------------------------------------------------------------------------------
@dataclass
class Update:
    """What the UI shows while a run goes: `kind` is status (waiting), point (one more point saved in
    `folder`), done, stopped or failed; `message` is Markdown."""

    kind: str
    message: str
    done: int = 0
    total: int = 0
    folder: Path | None = None

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0

    @property
    def final(self) -> bool:
        return self.kind in ("done", "stopped", "failed")


class RunStopped(Exception):
    """Raised from the point callback when the user asked to stop: the harness then stops the run,
    keeping the finished points."""


def describe_error(exc: BaseException) -> str:
    """An exception as the message a user reads (Markdown): what went wrong and what to do, no traceback."""
    from tgi_toolkit.bench.errors import BenchError, ServerDiedError
    from tgi_toolkit.server.base import ServerError

    if isinstance(exc, ConfigError):
        lines = "\n".join(f"- {p.message} (fields: {', '.join(p.fields) or '-'})" for p in exc.problems)
        return f"**The launcher settings are not valid:**\n{lines}"
    if isinstance(exc, ServerError):
        tail = "\n".join(exc.log_tail[-8:])
        code = f" (exit code {exc.exit_code})" if exc.exit_code is not None else ""
        return (f"**The engine could not start{code}:** {exc.message}"
                + (f"\n\nLast lines of its log:\n```\n{tail}\n```" if tail else ""))
    if isinstance(exc, BenchError):
        return f"**The benchmark refused its settings:** {exc}"
    if isinstance(exc, ServerDiedError):
        return f"**The server stopped answering:** {exc}"
    log.error("benchmark failed", exc_info=exc)  # the traceback goes to the app's log, not to the page
    return f"**The benchmark failed:** {type(exc).__name__}: {exc}"


def run_benchmark(session: EngineSession, config: Any, settings: BenchSettings, output: str | Path,
                  stop: threading.Event | None = None, poll_s: float = 0.5) -> Iterator[Update]:
    """Start (or reuse) the engine with `config`, run `settings` into the folder `output`, and yield an
    Update while waiting (every `poll_s`), after each finished point, and at the end.

    Setting `stop` (or closing the generator) stops the run after the point in progress; finished
    points stay in `output`. The last Update is final (done, stopped or failed)."""
    stop = stop or threading.Event()
    output = Path(output)
    total = settings.point_count()
    events: queue.Queue[tuple[str, Any]] = queue.Queue()
    began = time.monotonic()

    def elapsed() -> str:
        return f"{time.monotonic() - began:.0f} s"

    def start() -> None:
        try:
            events.put(("ready", session.server_for(config)))
        except BaseException as exc:  # handed to the generator, which words it for the user
            events.put(("error", exc))

    try:
        what = "Starting the embedded engine" if not session.running else "Checking the engine"
        threading.Thread(target=start, name="tgi-toolkit-app-start", daemon=True).start()
        while True:
            try:
                kind, value = events.get(timeout=poll_s)
                break
            except queue.Empty:
                yield Update("status", f"{what} ({elapsed()}; the first start takes 5-20 s on a small CPU) ...",
                             0, total)
        if kind == "error":
            yield Update("failed", describe_error(value), 0, total)
            return
        server = value
        if stop.is_set():
            yield Update("stopped", "Stopped before the first point.", 0, total)
            return

        def on_point(point: dict[str, Any]) -> None:
            events.put(("point", point))
            if stop.is_set():
                raise RunStopped()

        def bench() -> None:
            with session.bench_lock:
                try:
                    settings.run(server, output=output, on_point=on_point, progress=False, resume=False)
                    events.put(("done", None))
                except RunStopped:
                    events.put(("stopped", None))
                except BaseException as exc:
                    events.put(("error", exc))

        if session.bench_lock.locked():
            yield Update("status", "Waiting for the previous run to finish its point ...", 0, total)
        threading.Thread(target=bench, name="tgi-toolkit-app-bench", daemon=True).start()
        done = 0
        yield Update("status", f"Engine ready at {server.url}. Running {settings.describe()} ...", 0, total, output)
        while True:
            try:
                kind, value = events.get(timeout=poll_s)
            except queue.Empty:
                yield Update("status", f"Running point {done + 1} of {total} ({elapsed()}) ...", done, total,
                             output if done else None)
                continue
            if kind == "point":
                done += 1
                yield Update("point", f"Point {done} of {total} finished: `{value.get('point_id')}` "
                                      f"({elapsed()}).", done, total, output)
            elif kind == "done":
                yield Update("done", f"Finished {done} point{'s' if done != 1 else ''} in {elapsed()}: "
                                     f"{settings.describe()}.", done, total, output)
                return
            elif kind == "stopped":
                yield Update("stopped", f"Stopped after {done} of {total} points; the finished points are kept.",
                             done, total, output if done else None)
                return
            else:
                yield Update("failed", describe_error(value), done, total, output if done else None)
                return
    finally:
        stop.set()  # a closed generator (the user left or pressed Stop) stops the run at its next point


__all__ = ["LABELS", "SCENARIOS", "SCENARIO_FIELDS", "SCENARIO_HELP", "BenchSettings", "EngineSession", "BenchLimits",
           "RunStopped", "SettingsError", "Update", "describe_error", "run_benchmark"]
