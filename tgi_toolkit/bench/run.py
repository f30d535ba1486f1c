"""One run of a scenario: its lifetime (client, telemetry, progress) around the parts it is made of.

Scenarios (scenarios.py, play.py) only decide what to send when; `Run` holds four parts, each complete when
built and each owning one job: `sender` (run_requests.py: the target server, its client, what every request
carries, the server-death check), `record` (run_record.py: where the results go, provenance, the resume key and
an earlier session's finished points), `prompts` (run_prompts.py: the token-exact texts and the server's count of
them) and `points` (run_points.py: which points are done, and each finished point's rows, saved through the
record's tables, run_tables.py).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tgi_toolkit import schema as S
from tgi_toolkit.bench.checks import check_options
from tgi_toolkit.bench.client import StreamRecord
from tgi_toolkit.bench.errors import BenchError, ServerDiedError
from tgi_toolkit.bench.results import Results
from tgi_toolkit.bench.run_points import RunPoints
from tgi_toolkit.bench.run_prompts import RunPrompts, tokenizer_name
from tgi_toolkit.bench.run_record import RunRecord
from tgi_toolkit.bench.run_requests import Sender
from tgi_toolkit.bench.target import Target
from tgi_toolkit.bench.telemetry import Telemetry, frozen_gc


class Run:
    """Context for one scenario call, made of its parts (`Run.of` builds them from play_scenario's options);
    use `async with Run.of(...) as run`."""

    def __init__(self, sender: Sender, record: RunRecord, prompts: RunPrompts, points: RunPoints, *,
                 scrape_interval: float = S.SCRAPE_INTERVAL) -> None:
        self.sender, self.record, self.prompts, self.points = sender, record, prompts, points
        self.target, self.scenario, self.workload = sender.target, record.scenario, record.workload
        self.scrape_interval = scrape_interval

    @classmethod
    def of(cls, target: Target, scenario: str, workload: dict[str, Any], *,
           output: str | Path | None = None, resume: bool = True, progress: bool = True,
           tokenizer: Any = None, seed: int = 0, prefix_tokens: int = 0, dataset: str | Path | None = None,
           ignore_eos: bool | None = None, sampling: dict[str, Any] | None = None,
           slo_ttft_s: float | None = None, slo_tpot_s: float | None = None,
           scrape_interval: float = S.SCRAPE_INTERVAL, request_timeout: float = 600.0,
           on_point: Callable[[dict[str, Any]], None] | None = None,
           command: Sequence[str] | None = None, accept_server_count: bool = False) -> Run:
        """A run of `scenario` (its `workload` parameters) on `target`, each option given to the part it is for
        (the options as play_scenario documents them), checked first."""
        check_options({"sampling": sampling, "slo_ttft_s": slo_ttft_s, "slo_tpot_s": slo_tpot_s,
                       "scrape_interval": scrape_interval, "request_timeout": request_timeout,
                       "prefix_tokens": prefix_tokens})
        ignore_eos = target.takes_ignore_eos if ignore_eos is None else bool(ignore_eos)
        sampling = {k: v for k, v in (sampling or {}).items() if v is not None}
        # what was measured: the scenario's parameters and every option that changes the numbers (the resume key)
        measured = {**workload, "seed": seed, "prefix_tokens": prefix_tokens,
                    "dataset": str(dataset) if dataset is not None else None, "tokenizer": tokenizer_name(tokenizer),
                    "api": target.api, "ignore_eos": ignore_eos, "sampling": sampling,
                    "slo_ttft_s": slo_ttft_s, "slo_tpot_s": slo_tpot_s}
        record = RunRecord(target, scenario, measured, output=output, resume=resume, command=command)
        points = RunPoints(record, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s, on_point=on_point,
                           progress=progress)
        sender = Sender(target, points, record.output, ignore_eos=ignore_eos, sampling=sampling,
                        request_timeout=request_timeout)
        prompts = RunPrompts(sender, record, tokenizer=tokenizer, seed=seed, prefix_tokens=prefix_tokens,
                             dataset=dataset, accept_server_count=accept_server_count)
        return cls(sender, record, prompts, points, scrape_interval=scrape_interval)

    # -- context ----------------------------------------------------------------------------------
    async def __aenter__(self) -> Run:
        self._gc = frozen_gc()
        self._gc.__enter__()
        client = self.sender.client
        client.open()
        self.telemetry = Telemetry(self.target.url, self.record.clock_ns, session=client.session,
                                   headers={k: v for k, v in client.headers.items() if k == "Authorization"},
                                   interval=self.scrape_interval, pid=self.target.pid)
        await self.telemetry.start()
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        refused = isinstance(exc, BenchError) and self.points.saved == 0 and self.record.sessions == 1
        try:
            await self.telemetry.stop()
            if not refused:
                self.record.tables.save({"server": self.points.server_frame(self.telemetry)})
        finally:
            await self.sender.client.close()
            self.points.close_bars()
            self.prompts.close()
            self.record.finish(exc)
            if refused:
                self.record.forget()
            else:
                self.record.write()
            self._gc.__exit__(None, None, None)
        if isinstance(exc, ServerDiedError):
            exc.results = self.results()  # finished points, also for callers without an output folder

    # -- what the scenarios call --------------------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def provenance(self) -> dict[str, Any]:
        return self.record.provenance

    def plan(self, point_ids: Sequence[str]) -> None:
        """Announce the points of this run (for the progress bar and the server-death message)."""
        self.points.plan(point_ids)

    def skip(self, point_id: str) -> bool:
        """Whether an earlier session of this run finished the point already."""
        return self.points.skip(point_id)

    def request_bar(self, total: int, desc: str) -> Any:
        return self.points.request_bar(total, desc)

    async def prompt_list(self, length: int, n: int, point_id: str) -> list[str]:
        return await self.prompts.prompt_list(length, n, point_id)

    def encode(self, prompt: str, max_new_tokens: int) -> bytes:
        return self.sender.encode(prompt, max_new_tokens)

    async def request(self, body: bytes, point_id: str | None = None, record: StreamRecord | None = None,
                      ) -> StreamRecord:
        return await self.sender.request(body, point_id, record)

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
        return await self.points.save(self.telemetry, point_id, workload, requests, windows=windows,
                                      batch_rows=batch_rows, send_lag_s=send_lag_s,
                                      request_columns=request_columns, point_columns=point_columns)

    def results(self) -> Results:
        """This run's tables: read back from the folder (with earlier sessions' points) or from memory."""
        return self.record.results()


# play_scenario's options: Run.of's keywords, one list (bench.api refuses any other, naming these).
PLAY_OPTIONS = tuple(name for name, p in inspect.signature(Run.of).parameters.items() if p.kind is p.KEYWORD_ONLY)
