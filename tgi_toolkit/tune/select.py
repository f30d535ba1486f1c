"""Choosing a configuration from measured points: objectives, goodput ranking, the Pareto set.

Pure functions of the points table (tgi_toolkit.schema.POINT_COLUMNS), so they apply to any
results folder, not only one the tuner made.

A point *meets* the objectives when its TTFT and TPOT at the chosen percentile are within the
limits and its error rate is at most `max_error_rate` (a missing value, e.g. TPOT of one-token
outputs, does not meet a limit). A configuration's score is its goodput (requests meeting the
per-request objectives per second, the bench's goodput_rps) at its best point that meets them: the
load at which it delivers the most useful work without breaking the objectives. Ties go to more
output throughput, then lower TTFT. When no point of a configuration meets them, its distance is
the worst ratio value / limit at its least-violating point; the closest configuration is the
one with the smallest distance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tgi_toolkit import schema as S
from tgi_toolkit.pareto import pareto_front

OPERATING_POINT = (S.POINT_ID, S.USERS, S.BATCH_SIZE, S.RATE_RPS, S.PROMPT_TOKENS, S.MAX_NEW_TOKENS)
MEETS, VIOLATION, ERROR_RATE, SCORE = "meets", "violation", "error_rate", "score"


@dataclass(frozen=True)
class Objectives:
    """Latency limits a configuration must meet: TTFT and TPOT at `percentile`, and an error budget.

    >>> Objectives(ttft_s=1.0, tpot_s=0.2)          # TTFT p90 <= 1 s and TPOT p90 <= 200 ms
    """

    ttft_s: float | None = None
    tpot_s: float | None = None
    percentile: str = "p90"
    max_error_rate: float = 0.0

    def __post_init__(self) -> None:
        if self.percentile not in S.PERCENTILES:
            raise ValueError(f"percentile {self.percentile!r} is not one the points table holds "
                             f"(allowed: {', '.join(S.PERCENTILES)})")
        for name in ("ttft_s", "tpot_s"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"{name} must be a number of seconds > 0, or None; got {value!r}")
        if not 0 <= self.max_error_rate < 1:
            raise ValueError(f"max_error_rate must be in [0, 1); got {self.max_error_rate!r}")

    def limits(self) -> dict[str, float]:
        """Points-table column -> limit, for the limits that are set."""
        out = {}
        if self.ttft_s is not None:
            out[S.stat_column("ttft", self.percentile)] = float(self.ttft_s)
        if self.tpot_s is not None:
            out[S.stat_column("tpot", self.percentile)] = float(self.tpot_s)
        return out

    def describe(self) -> str:
        parts = [f"TTFT {self.percentile} <= {self.ttft_s:g} s" if self.ttft_s is not None else "",
                 f"TPOT {self.percentile} <= {self.tpot_s:g} s" if self.tpot_s is not None else "",
                 f"errors <= {self.max_error_rate:.0%}" if self.max_error_rate else "no errors"]
        return ", ".join(p for p in parts if p)

    def to_dict(self) -> dict[str, Any]:
        return {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "percentile": self.percentile,
                "max_error_rate": self.max_error_rate}

    @classmethod
    def of(cls, value: Objectives | Mapping[str, Any] | None) -> Objectives:
        if isinstance(value, Objectives):
            return value
        return cls(**dict(value or {}))


def evaluate_points(points: pd.DataFrame, objectives: Objectives) -> pd.DataFrame:
    """The points with `meets`, `violation` (worst value / limit; <= 1 meets), `error_rate` and `score`."""
    df = points.copy().reset_index(drop=True)
    requests = pd.to_numeric(df[S.REQUESTS], errors="coerce").astype("float64")
    errors = pd.to_numeric(df[S.ERRORS], errors="coerce").fillna(0).astype("float64")
    df[ERROR_RATE] = (errors / requests.where(requests > 0)).fillna(1.0)
    ratios = []
    for column, limit in objectives.limits().items():
        value = pd.to_numeric(df[column], errors="coerce").astype("float64")
        ratios.append((value / limit).fillna(math.inf))  # unmeasured cannot be shown to meet a limit
    violation = pd.concat(ratios, axis=1).max(axis=1) if ratios else pd.Series(0.0, index=df.index)
    df[VIOLATION] = violation
    df[MEETS] = (violation <= 1.0) & (df[ERROR_RATE] <= objectives.max_error_rate) & (requests > 0)
    goodput = pd.to_numeric(df[S.GOODPUT_RPS], errors="coerce").astype("float64")
    # Without SLOs the bench leaves goodput empty: then every successful request counts.
    df[SCORE] = goodput.fillna(pd.to_numeric(df[S.REQUEST_THROUGHPUT], errors="coerce")).fillna(0.0)
    return df


def _best_point(group: pd.DataFrame, ttft: str) -> pd.Series:
    meeting = group[group[MEETS]]
    if not meeting.empty:
        order = meeting.sort_values([SCORE, S.OUTPUT_THROUGHPUT, ttft], ascending=[False, False, True],
                                    na_position="last", kind="stable")
        return order.iloc[0]
    return group.sort_values([VIOLATION, ERROR_RATE], ascending=True, na_position="last").iloc[0]


def rank_configs(points: pd.DataFrame, objectives: Objectives, *, configs: Sequence[Mapping[str, Any]] = (),
                 knobs: Sequence[str] = ()) -> pd.DataFrame:
    """One row per configuration, best first: those meeting the objectives by goodput, then the rest
    by distance to the objectives, then those that measured nothing (failed or invalid).

    configs: manifest entries (tgi_toolkit.sweep.manifest) to name each configuration's knob values,
    status and error, and to list configurations without points. knobs: fields to show as columns.
    """
    p = objectives.percentile
    metric_columns = [S.GOODPUT_RPS, S.OUTPUT_THROUGHPUT, S.REQUEST_THROUGHPUT, S.stat_column("ttft", p),
                      S.stat_column("tpot", p), ERROR_RATE, VIOLATION, SCORE]
    evaluated = evaluate_points(points, objectives) if not points.empty else None
    rows: list[dict[str, Any]] = []
    measured: set[str] = set()
    if evaluated is not None:
        for config_id, group in evaluated.groupby(S.CONFIG_ID, sort=False):
            best = _best_point(group, S.stat_column("ttft", p))
            row = {S.CONFIG_ID: config_id, S.CONFIG_LABEL: best[S.CONFIG_LABEL], MEETS: bool(best[MEETS]),
                   "points": len(group), "points_meeting": int(group[MEETS].sum()), S.RUN_ID: best[S.RUN_ID]}
            row.update({c: best[c] for c in (*metric_columns, *OPERATING_POINT)})
            rows.append(row)
            measured.add(str(config_id))
    by_id = {str(e["config_id"]): e for e in configs}
    for row in rows:
        entry = by_id.get(str(row[S.CONFIG_ID]))
        if entry is not None:
            row.update(label=entry.get("label"), status=entry.get("status"), error=entry.get("error"))
    for config_id, entry in by_id.items():
        if config_id not in measured:
            rows.append({S.CONFIG_ID: config_id, S.CONFIG_LABEL: entry.get("config_label"), "label": entry.get("label"),
                         MEETS: False, VIOLATION: math.inf, SCORE: 0.0, "points": 0, "points_meeting": 0,
                         "status": entry.get("status"),
                         "error": entry.get("error") or "; ".join(x["rule"] for x in entry.get("problems", []))})
    table = pd.DataFrame(rows)
    if table.empty:
        return pd.DataFrame(columns=["rank", S.CONFIG_ID, "label", *knobs, MEETS, *metric_columns])
    for column in (*metric_columns, *OPERATING_POINT):  # absent when no configuration measured a point
        if column not in table.columns:
            table[column] = np.nan
    for knob in knobs:
        values = []
        for config_id in table[S.CONFIG_ID]:
            entry = by_id.get(str(config_id), {})
            settings = {**(entry.get("launcher_config") or {}), **entry.get("overrides", {})}
            values.append(settings.get(knob))
        table[knob] = pd.Series(values, index=table.index, dtype=object).convert_dtypes()
    # Meeting configurations by goodput; the others by their distance alone (their goodput is moot).
    meets = table[table[MEETS]].sort_values([SCORE, S.OUTPUT_THROUGHPUT, S.stat_column("ttft", p)],
                                            ascending=[False, False, True], na_position="last", kind="stable")
    rest = table[~table[MEETS]].sort_values([VIOLATION, ERROR_RATE], na_position="last", kind="stable")
    table = pd.concat([meets, rest]).reset_index(drop=True)
    table.insert(0, "rank", range(1, len(table) + 1))
    for column in ("label", "status", "error"):
        if column not in table.columns:
            table[column] = None
    first = ["rank", S.CONFIG_ID, "label", *knobs, "status", MEETS]
    return table[first + [c for c in table.columns if c not in first]]


def pareto_points(points: pd.DataFrame, objectives: Objectives, *, throughput: str = S.OUTPUT_THROUGHPUT,
                  latency: str | None = None) -> pd.DataFrame:
    """The measured points no other point beats on both throughput (more) and latency (less),
    across configurations and loads, by throughput; `latency` defaults to TTFT at the percentile."""
    latency = latency or S.stat_column("ttft", objectives.percentile)
    if points.empty:
        return points.iloc[0:0]
    evaluated = evaluate_points(points, objectives)
    front = evaluated[pareto_front(evaluated, throughput, latency)]
    return front.sort_values(throughput).reset_index(drop=True)


@dataclass(frozen=True)
class Choice:
    """What a ranking of measured points chose (`choose`): `table`, every configuration tried, ranked
    (rank_configs); `best`, its top configuration meeting the objectives (a row of `table` plus its overrides and
    launcher settings; after a confirmation, its second measurement too), None when none did; `closest`: then the
    configuration nearest to meeting them; `pareto`: the operating points on the latency/throughput frontier
    (pareto_points)."""

    objectives: Objectives
    table: pd.DataFrame
    pareto: pd.DataFrame
    best: dict[str, Any] | None = None
    closest: dict[str, Any] | None = None

    @property
    def met(self) -> bool:
        """Some configuration met the objectives in the search (see `confirmed` for the second look)."""
        return self.best is not None

    @property
    def confirmed(self) -> bool | None:
        """Whether the best still met the objectives when measured again (None: not measured again)."""
        confirmation = (self.best or {}).get("confirmation")
        return None if confirmation is None else bool(confirmation[MEETS])

    @property
    def message(self) -> str:
        if self.best is not None:
            b = self.best
            text = (f"best: {b['label']} — goodput {b[S.GOODPUT_RPS]:.3g} req/s, output "
                    f"{b[S.OUTPUT_THROUGHPUT]:.3g} tok/s at {b[S.POINT_ID]}; {_measured(b, self.objectives)} "
                    f"(objectives: {self.objectives.describe()})")
            confirmation = b.get("confirmation")
            if confirmation is not None:
                verdict = "confirmed" if confirmation[MEETS] else "NOT confirmed"
                text += f"; {verdict} by a second measurement: {_measured(confirmation, self.objectives)}"
            return text
        text = f"no configuration met the objectives ({self.objectives.describe()})"
        if self.closest is not None:
            c = self.closest
            text += (f"; closest: {c['label']} at {c.get(S.POINT_ID)}: {_measured(c, self.objectives)} "
                     f"({c[VIOLATION]:.3g}x the tightest limit)")
        return text

    def __str__(self) -> str:
        return self.message


def _seconds(value: Any) -> str:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return "n/a"
    return "n/a" if math.isnan(value) else f"{value:.3g} s"


def _measured(row: Mapping[str, Any], objectives: Objectives) -> str:
    p = objectives.percentile
    return (f"TTFT {p} {_seconds(row.get(S.stat_column('ttft', p)))}, "
            f"TPOT {p} {_seconds(row.get(S.stat_column('tpot', p)))}")


def choose(points: pd.DataFrame, objectives: Objectives | Mapping[str, Any], *,
           configs: Sequence[Mapping[str, Any]] = (), knobs: Sequence[str] = (),
           latency: str | None = None) -> Choice:
    """Rank the configurations in `points` against `objectives` and pick the best (or the closest)."""
    objectives = Objectives.of(objectives)
    table = rank_configs(points, objectives, configs=configs, knobs=knobs)
    best = closest = None
    if not table.empty:
        top = config_row(table, table.iloc[0][S.CONFIG_ID], configs)
        if top[MEETS]:
            best = top
        elif np.isfinite(top[VIOLATION]):
            closest = top
    return Choice(objectives, table, pareto_points(points, objectives, latency=latency), best, closest)


def config_row(table: pd.DataFrame, config_id: str, configs: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """One configuration's row of a ranked table, with its overrides and launcher settings (from `configs`)."""
    row = table[table[S.CONFIG_ID] == config_id].iloc[0]
    out = {k: (None if v is pd.NA else v) for k, v in row.items()}
    entry = next((e for e in configs if str(e["config_id"]) == str(config_id)), {})
    out["overrides"] = dict(entry.get("overrides", {}))
    out["launcher_config"] = entry.get("launcher_config")
    if not out.get("label"):
        out["label"] = ",".join(f"{k}={v}" for k, v in out["overrides"].items()) or row.get(S.CONFIG_LABEL)
    return out
