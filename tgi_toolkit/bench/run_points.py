"""A finished point's rows (`RunPoints`): its records and the server's telemetry window turned into the
schema's request, point, batch and server rows, then saved; apart from sending so the rows read in one place."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from tgi_toolkit import schema as S
from tgi_toolkit.bench import phase, stats
from tgi_toolkit.bench.client import StreamRecord
from tgi_toolkit.bench.results import frame
from tgi_toolkit.bench.run_tables import RunTables
from tgi_toolkit.bench.target import Target
from tgi_toolkit.bench.telemetry import Telemetry, client_bound, machine_busy


class RunPoints(RunTables):
    """Rows of a run's points (run.Run sets `target`, `telemetry`, `clock_ns`, the SLOs, `finished`, ...)."""

    target: Target
    scenario: str
    config_id: str
    config_label: str
    clock_ns: int
    telemetry: Telemetry
    slo_ttft_s: float | None
    slo_tpot_s: float | None
    finished: set[str]
    on_point: Callable[[dict[str, Any]], None] | None
    _saved_points: int
    _bar: Any

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
        windows, summary = stats.measured_point(measured, windows, slo_ttft_s=self.slo_ttft_s,
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
            for fact in ("max_batch_total_tokens", "kv_capacity_tokens"):
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
