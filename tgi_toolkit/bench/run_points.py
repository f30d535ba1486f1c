"""A run's points (`RunPoints`): which are finished, their progress, and a finished point's rows (its records and
the server's telemetry window turned into the schema's request, point, batch and server rows, then saved); apart
from sending so the rows read in one place."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from tgi_toolkit import schema as S
from tgi_toolkit.bench import phase, stats
from tgi_toolkit.bench.client import StreamRecord
from tgi_toolkit.bench.results import frame
from tgi_toolkit.bench.run_record import RunRecord
from tgi_toolkit.bench.telemetry import Telemetry, client_bound, machine_busy


@dataclass(frozen=True)
class PointRows:
    """A finished point's request rows and its measured summary, by one rule for a measured run (RunPoints.save)
    and a simulated one (simulate.record.SimRun.save_point): `ident`, the columns naming the run and point;
    `workload`, the operating point's columns (None where the scenario has none); `requests`, one row per request;
    `measured`, the (row, record) pairs that are not warm-ups; `windows`, the measured spans (ns); `summary`, the
    point's measured columns; `columns`, the point's own (a closed loop's phase columns added)."""

    ident: dict[str, Any]
    workload: dict[str, Any]
    requests: list[dict[str, Any]]
    measured: list[tuple[dict[str, Any], StreamRecord]]
    windows: list[tuple[int, int]]
    summary: dict[str, Any]
    columns: dict[str, Any]

    @classmethod
    def of(cls, ident: dict[str, Any], workload: dict[str, Any],
           requests: Sequence[tuple[StreamRecord, int, bool, int]], *, clock_ns: int,
           request_columns: Sequence[dict[str, Any]] | None = None,
           windows: Sequence[tuple[int, int]] | None = None, point_columns: dict[str, Any] | None = None,
           slo_ttft_s: float | None = None, slo_tpot_s: float | None = None) -> PointRows:
        """The rows of `requests` ((record, repeat, warm-up, index) each, times from `clock_ns`; `request_columns`:
        per request, columns of its own, in order) and the summary of the measured ones over `windows` (default:
        the first measured send to the last token)."""
        base = {S.USERS: None, S.BATCH_SIZE: None, S.RATE_RPS: None, S.ARRIVAL: None, S.PROMPT_TOKENS: None,
                S.MAX_NEW_TOKENS: None, **workload}
        max_new = base[S.MAX_NEW_TOKENS]
        rows = []
        for record, repeat, warmup, index in requests:
            row = {**ident, **base, S.REPEAT: repeat, S.WARMUP: warmup, S.REQUEST_INDEX: index,
                   **stats.request_metrics(record, clock_ns)}
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
        windows, summary = stats.measured_point(measured, windows, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s)
        columns = dict(point_columns or {})
        if S.RAMP_UP_S in columns:  # a closed loop: were its users in step?
            columns.update(phase.phase_columns([r[S.SENT_S] for r, _ in measured],
                                               summary[S.stat_column("itl", "p50")], columns[S.RAMP_UP_S]))
        return cls(ident, base, rows, measured, windows, summary, columns)

    def point(self, server: dict[str, Any]) -> dict[str, Any]:
        """The points table's row: these columns with the server side's (`server`)."""
        return {**self.ident, **self.workload, **self.summary, **server, **self.columns}


class RunPoints:
    """A run's points, complete when built: which are finished (an earlier session's included) out of how many
    and their progress bars, and each finished point's rows (its records and the server's telemetry window)
    saved through the run's record."""

    def __init__(self, record: RunRecord, *, slo_ttft_s: float | None = None, slo_tpot_s: float | None = None,
                 on_point: Callable[[dict[str, Any]], None] | None = None, progress: bool = True) -> None:
        self.record = record
        self.slo_ttft_s, self.slo_tpot_s, self.on_point, self.progress = slo_ttft_s, slo_tpot_s, on_point, progress
        self.finished: set[str] = set(record.resumed)
        self.total = 0
        self.saved = 0  # points this session saved
        self.bar: Any = None
        self.bars: list[Any] = []  # per-point bars, closed on the way out whatever happens

    def plan(self, point_ids: Sequence[str]) -> None:
        """Announce the points of this run (for the progress bar and the server-death message)."""
        self.total = len(point_ids)
        if self.progress:
            from tgi_toolkit.progress import progress_bar

            done = sum(p in self.finished for p in point_ids)
            self.bar = progress_bar(len(point_ids), f"{self.record.scenario} points", unit="point", initial=done)

    def skip(self, point_id: str) -> bool:
        return point_id in self.finished

    def request_bar(self, total: int, desc: str) -> Any:
        if not self.progress:
            return None
        from tgi_toolkit.progress import progress_bar

        bar = progress_bar(total, desc, unit="req", transient=True)  # None where it cannot be redrawn
        if bar is not None:
            self.bars.append(bar)
        return bar

    def close_bars(self) -> None:
        for bar in [*self.bars, self.bar]:
            if bar is not None:
                bar.close()

    def seconds(self, t_ns: int) -> float:
        return (t_ns - self.record.clock_ns) / 1e9

    async def save(self, telemetry: Telemetry, point_id: str, workload: dict[str, Any],
                   requests: Sequence[tuple[StreamRecord, int, bool, int]], *,
                   windows: Sequence[tuple[int, int]] | None = None,
                   batch_rows: Sequence[dict[str, Any]] = (), send_lag_s: Sequence[float] = (),
                   request_columns: Sequence[dict[str, Any]] | None = None,
                   point_columns: dict[str, Any] | None = None) -> dict[str, Any]:
        """Turn a finished point's records into rows and save them (bench.run.Run.save_point's arguments)."""
        ident = self.record.ident(point_id)
        rows = PointRows.of(ident, workload, requests, clock_ns=self.record.clock_ns, request_columns=request_columns,
                            windows=windows, point_columns=point_columns, slo_ttft_s=self.slo_ttft_s,
                            slo_tpot_s=self.slo_tpot_s)
        server = self.server_side(telemetry, rows.windows, [rec for _, rec in rows.measured], rows.workload,
                                  rows.summary, send_lag_s)
        point = rows.point(server)
        batch = [{**ident, **row} for row in batch_rows]
        self.record.tables.save({"requests": frame(rows.requests, "requests"), "batch": frame(batch, "batch"),
                                 "points": frame([point], "points"), "server": self.server_frame(telemetry)})
        self.finished.add(point_id)
        self.saved += 1
        if self.bar is not None:
            self.bar.update(1)
        if self.on_point is not None:
            self.on_point(point)
        return point

    def server_side(self, telemetry: Telemetry, windows: Sequence[tuple[int, int]], records: Sequence[StreamRecord],
                    base: dict[str, Any], summary: dict[str, Any], send_lag_s: Sequence[float]) -> dict[str, Any]:
        """The point's server-side columns: the telemetry window of its measured spans, the KV capacity (reported,
        estimated from the cache fraction in use, or the server's facts), and whether the client kept up."""
        if telemetry.cpu is not None:
            telemetry.cpu.sample()  # one sample after the window's end
        if not windows:
            window = telemetry.window(math.inf, -math.inf)
        else:
            window = telemetry.window(self.seconds(windows[0][0]), self.seconds(windows[-1][1]))
        capacity = window.kv_capacity_tokens
        if math.isnan(capacity) and window.kv_usage:
            # happy_vllm's estimate: tokens the client knows are in flight / the cache fraction in use
            prompt = base.get(S.PROMPT_TOKENS) or 0
            pairs = [(r, prompt) for r in records]
            samples = [(stats.tokens_in_flight(pairs, self.record.clock_ns + int(t * 1e9))[1], usage)
                       for t, usage in window.kv_usage]
            capacity = stats.kv_capacity_estimate(samples)
        if math.isnan(capacity):
            for fact in ("max_batch_total_tokens", "kv_capacity_tokens"):
                if self.record.target.facts.get(fact):
                    capacity = float(self.record.target.facts[fact])
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

    def server_frame(self, telemetry: Telemetry) -> pd.DataFrame:
        """The server table's rows the telemetry sampled since the last call."""
        samples = telemetry.drain()
        run_id, config_id = self.record.run_id, self.record.config_id
        return frame([{S.RUN_ID: run_id, S.CONFIG_ID: config_id, S.T_S: t, S.METRIC: m,
                       S.LABELS: labels, S.VALUE: v} for t, m, labels, v in samples], "server")
