"""One run of a scenario: its lifetime (client, telemetry, progress) around the pieces it is made of.

Scenarios (scenarios.py) only decide what to send when; `Run` sends it (run_requests.py), builds its prompts
(run_prompts.py), keeps its provenance and resume key (run_record.py), and saves each point's rows as it
finishes (run_points.py, through run_tables.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from tgi_toolkit import schema as S
from tgi_toolkit.bench import provenance
from tgi_toolkit.bench.checks import check_options
from tgi_toolkit.bench.client import make_client
from tgi_toolkit.bench.errors import BenchError, ServerDiedError
from tgi_toolkit.bench.prompts import PromptFactory
from tgi_toolkit.bench.results import ResultsFolder
from tgi_toolkit.bench.run_points import RunPoints
from tgi_toolkit.bench.run_prompts import RunPrompts
from tgi_toolkit.bench.run_record import RunRecord, _utc_now
from tgi_toolkit.bench.target import Target
from tgi_toolkit.bench.telemetry import Telemetry, frozen_gc


def _tokenizer_name(tokenizer: Any) -> str | None:
    # a name that stays the same from one session to the next (it is part of the resume key)
    if tokenizer is None or isinstance(tokenizer, (str, Path)):
        return None if tokenizer is None else str(tokenizer)
    return str(getattr(tokenizer, "name_or_path", None) or getattr(tokenizer, "name", None) or type(tokenizer).__name__)


class Run(RunRecord, RunPrompts, RunPoints):
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
        check_options({"sampling": sampling, "slo_ttft_s": slo_ttft_s, "slo_tpot_s": slo_tpot_s,
                       "scrape_interval": scrape_interval, "request_timeout": request_timeout,
                       "prefix_tokens": prefix_tokens})
        self.sampling = {k: v for k, v in (sampling or {}).items() if v is not None}
        self.ignore_eos = target.takes_ignore_eos if ignore_eos is None else bool(ignore_eos)
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
