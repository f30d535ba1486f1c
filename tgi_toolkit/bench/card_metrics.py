"""How happy_vllm's "Main metrics" (seeds 001 and 003) are computed from one set of results.

`tgi_toolkit.bench.main_metrics` is the public face (it also takes a results folder); this module
sits below `tgi_toolkit.bench.results`, whose `Results.main_metrics()` calls `main_metrics_of`, so it
names what it reads from a Results by a protocol instead of importing the class.

The three numbers: prompt ingestion speed, mean per-request generation speed for 10 parallel
requests with a 1024-token prompt and 128 generated tokens, and the KV-cache capacity. Each says
how it was obtained (`basis`): a small CPU run rarely holds the exact 10 x 1024/128 point, and a
model with a short context cannot take it at all, so the nearest measured point is used and named
instead of being passed off as the asked-for one.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from tgi_toolkit import schema as S


class ResultTables(Protocol):
    """What the metrics read from a `tgi_toolkit.bench.results.Results` (a dataclass with these fields)."""

    requests: pd.DataFrame
    points: pd.DataFrame
    batch: pd.DataFrame
    server: pd.DataFrame
    runs: list[dict[str, Any]]
    path: Path | None

    def ingestion(self) -> Any: ...

# happy_vllm's reference point for the generation speed (seeds 001 and 003).
CARD_USERS = 10
CARD_PROMPT_TOKENS = 1024
CARD_MAX_NEW_TOKENS = 128

# The metric keys: the `metric` column of data/reference/*/main_metrics.csv and of `main_metrics`.
INGESTION = "prompt_ingestion_speed"
GENERATION = "generation_speed_per_request"
KV_CAPACITY = "kv_cache_capacity"
METRICS = (INGESTION, GENERATION, KV_CAPACITY)

# The columns of `main_metrics`.
CONFIG_LABEL = "config_label"
COLUMNS = (CONFIG_LABEL, "metric", "label", "value", "unit", "text", "basis", "point")


@dataclass(frozen=True)
class MainMetric:
    """One row of the card's main metrics table."""

    key: str  # INGESTION | GENERATION | KV_CAPACITY
    label: str  # the row name as happy_vllm prints it
    value: float  # NaN when the results cannot give it
    unit: str  # tokens/s or tokens
    text: str  # the table cell, e.g. "~864 t/s"
    basis: str  # how the value was obtained, in one sentence
    point: str = ""  # where it was measured, for the generation speed: "10 users, 1024/128 tokens"

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.key, "label": self.label, "value": self.value, "unit": self.unit, "text": self.text,
                "basis": self.basis, "point": self.point}


def approx(value: float) -> str:
    """happy_vllm's '~13500': three significant digits, no decimals from 10 up."""
    if not math.isfinite(value):
        return "-"
    if abs(value) >= 100:
        digits = int(math.floor(math.log10(abs(value)))) - 2
        return f"~{int(round(value, -digits))}"
    return f"~{value:.0f}" if abs(value) >= 10 else f"~{value:.2g}"


def kv_text(tokens: float) -> str:
    """The KV-capacity cell as happy_vllm prints it: '~100k tokens', or '~2050 tokens' below 10k."""
    if not math.isfinite(tokens):
        return "-"
    return f"~{tokens / 1000:.0f}k tokens" if tokens >= 10_000 else f"{approx(tokens)} tokens"


def point_text(users: int, prompt_tokens: int, max_new_tokens: int) -> str:
    """Where a generation speed was measured, e.g. '10 users, 1024/128 tokens'."""
    return f"{users} users, {prompt_tokens}/{max_new_tokens} tokens"


def generation_label(users: int, prompt_tokens: int, max_new_tokens: int) -> str:
    """happy_vllm's row name for the generation speed at a point."""
    return (f"Mean generation speed for {users} parallel requests with a prompt of {prompt_tokens} tokens and "
            f"{max_new_tokens} tokens generated")


INGESTION_LABEL = "Prompt ingestion speed"
KV_CAPACITY_LABEL = "Estimate of the max nb of tokens in KV cache"


def run_info(results: ResultTables) -> dict[str, Any]:
    """The server's /info of the latest run (max_input_tokens, max_total_tokens, model_id, ...)."""
    for run in reversed(results.runs):
        if run.get("info"):
            return run["info"]
    return {}


def ingestion_speed(results: ResultTables) -> MainMetric:
    """Prompt ingestion speed: 1 / slope of TTFT against prompt length over the ingestion runs'
    requests (happy_vllm's method; `Results.ingestion`)."""
    fit = results.ingestion()
    speed = fit["speed_tok_s"]
    if not math.isfinite(speed):
        why = ("no ingestion run in these results (`tgi-toolkit bench ingestion`)" if fit["n"] == 0
               else f"the fit over {fit['n']:.0f} requests has no positive slope")
        return MainMetric(INGESTION, INGESTION_LABEL, math.nan, "tokens/s", "-", why)
    rows = results.requests[results.requests[S.SCENARIO] == "ingestion"]
    lengths = rows[S.INPUT_TOKENS].astype("float64").fillna(rows[S.PROMPT_TOKENS].astype("float64"))
    trimmed = int(fit["measured"] - fit["n"])
    fitted = (f"{trimmed} of them trimmed as outliers, r\u00b2 {fit['r2']:.2f} over the {fit['n']:.0f} fitted"
              if trimmed else "none trimmed")
    basis = (f"1 / slope of TTFT against prompt length: {fit['measured']:.0f} requests one at a time, prompts of "
             f"{lengths.min():.0f} to {lengths.max():.0f} tokens, r\u00b2 = {fit['r2_all']:.2f} over all of them "
             f"({fitted})")
    text = f"{approx(speed)} t/s"
    unreliable = fit.get("unreliable")
    if unreliable:  # never the number alone: the cell itself says why it is not to be quoted
        text += f", {unreliable}"
        basis += f"; {unreliable}: measure again with more prompts, on an idle machine"
    return MainMetric(INGESTION, INGESTION_LABEL, speed, "tokens/s", text, basis)


def card_point(results: ResultTables, users: int = CARD_USERS, prompt_tokens: int = CARD_PROMPT_TOKENS,
               max_new_tokens: int = CARD_MAX_NEW_TOKENS) -> tuple[tuple[int, int, int], str]:
    """The (users, prompt, output) point to report the generation speed at: the asked-for one, cut
    to what the server takes (max_input_tokens, max_total_tokens from /info), and why if cut."""
    info = run_info(results)
    prompt, output, notes = prompt_tokens, max_new_tokens, []
    max_input, max_total = info.get("max_input_tokens"), info.get("max_total_tokens")
    if max_input and prompt > max_input:
        prompt = int(max_input)
        notes.append(f"max_input_tokens is {max_input}")
    if max_total and prompt + output > max_total:
        output = max(1, int(max_total) - prompt)
        notes.append(f"max_total_tokens is {max_total}")
    return (users, prompt, output), "; ".join(notes)


def generation_speed(results: ResultTables, users: int = CARD_USERS, prompt_tokens: int = CARD_PROMPT_TOKENS,
                     max_new_tokens: int = CARD_MAX_NEW_TOKENS) -> MainMetric:
    """Mean per-request generation speed at the concurrency point of `users` users, a
    `prompt_tokens`-token prompt and `max_new_tokens` generated; where the results do not hold that
    point (or the server cannot take it), the nearest measured one, named in the label and basis.

    Nearest: the smallest sum of |log(measured / wanted)| over users, prompt and output length, so
    that 5 users is as far from 10 as 20 is."""
    (want_users, want_prompt, want_output), limit = card_point(results, users, prompt_tokens, max_new_tokens)
    speed_column = S.stat_column(S.SPEED_METRIC, "mean")
    points = results.points[(results.points[S.SCENARIO] == "concurrency") & results.points[speed_column].notna()]
    asked = f"{users} parallel requests with a prompt of {prompt_tokens} tokens and {max_new_tokens} tokens generated"
    if points.empty:
        return MainMetric(GENERATION, f"Mean generation speed for {asked}", math.nan, "tokens/s", "-",
                          "no concurrency point in these results (`tgi-toolkit bench concurrency`)")
    measured = points[[S.USERS, S.PROMPT_TOKENS, S.MAX_NEW_TOKENS]].astype("float64")
    distance = sum((measured[c] / want).apply(math.log).abs()
                   for c, want in ((S.USERS, want_users), (S.PROMPT_TOKENS, want_prompt),
                                   (S.MAX_NEW_TOKENS, want_output)))
    best = points.loc[distance.idxmin()]
    got = (int(best[S.USERS]), int(best[S.PROMPT_TOKENS]), int(best[S.MAX_NEW_TOKENS]))
    value = float(best[speed_column])
    # A simulated point (tgi-toolkit simulate) is a prediction, and says so.
    simulated = best.get(S.BACKEND) == "simulated"
    measured_word = "predicted by simulation" if simulated else "measured"
    if got == (users, prompt_tokens, max_new_tokens):
        basis = f"{measured_word} at that point ({int(best[S.REQUESTS])} requests)"
    elif got == (want_users, want_prompt, want_output):
        basis = (f"the card's point ({asked}) is over the server's limits ({limit}); "
                 f"{measured_word} at the nearest it takes ({int(best[S.REQUESTS])} requests)")
    else:
        cut = f"; the server takes at most {want_prompt}/{want_output} ({limit})" if limit else ""
        basis = (f"the nearest point these results hold to the card's {asked}{cut} "
                 f"({int(best[S.REQUESTS])} requests)")
        if simulated:
            basis = f"predicted by simulation: {basis}"
    error = best.get(S.PREDICTION_ERRORS["tpot"]) if simulated else None
    if error is not None and pd.notna(error):  # a GPU roofline: its regime's error on unseen published figures
        basis += f"; ±{100 * float(error):.0f} % (cross-validated on published GPU figures it was not fitted to)"
    flagged = [name for column, name in ((S.MACHINE_BUSY, "the machine was busy (other processes took CPU)"),
                                         (S.CLIENT_BOUND, "the benchmark client was the bottleneck"),
                                         (S.LOCKSTEP, "the users sent in step (lockstep)"))
               if column in best and pd.notna(best[column]) and bool(best[column])]
    if flagged:
        basis += "; measured while " + " and ".join(flagged)
    short = int(best[S.SHORT_OUTPUTS]) if pd.notna(best[S.SHORT_OUTPUTS]) else 0
    if short:
        basis += f"; {short} request(s) stopped before {got[2]} tokens (EOS could not be ignored)"
    return MainMetric(GENERATION, generation_label(*got), value, "tokens/s", f"{approx(value)} t/s for each request",
                      basis, point_text(*got))


def kv_cache_capacity(results: ResultTables) -> MainMetric:
    """Tokens the KV cache holds: the server's own budget where it states one (TGI's
    tgi_batch_max_total_tokens, the embedded engine likewise), else happy_vllm's estimate from
    the cache usage under load (the points' kv_capacity_tokens)."""
    capacity = results.points[S.KV_CAPACITY_TOKENS].dropna()
    stated = results.server[results.server[S.METRIC] == S.KV_TOTAL_METRIC][S.VALUE].dropna()
    info_budget = run_info(results).get("max_batch_total_tokens")
    if len(stated):
        value, basis = float(stated.max()), ("stated by the server: tgi_batch_max_total_tokens, the token budget "
                                             "its warm-up found room for")
    elif len(capacity):
        value = float(capacity.median())
        stated_by_info = info_budget is not None and math.isclose(value, float(info_budget))
        basis = ("stated by the server's /info (max_batch_total_tokens)" if stated_by_info else
                 f"estimated from the KV-cache usage under load (happy_vllm's method), median of {len(capacity)} "
                 f"point(s)")
    elif info_budget:
        value, basis = float(info_budget), "stated by the server's /info (max_batch_total_tokens)"
    else:
        return MainMetric(KV_CAPACITY, KV_CAPACITY_LABEL, math.nan, "tokens", "-",
                          "the server stated no budget and no point sampled its cache usage")
    return MainMetric(KV_CAPACITY, KV_CAPACITY_LABEL, value, "tokens", kv_text(value), basis)


def split_by_config(results: ResultTables) -> dict[str, ResultTables]:
    """One Results per configuration (config_id), keyed by its label, in the order first run."""
    ids: list[str] = []
    for run in results.runs:
        if run.get("config_id", "") not in ids:
            ids.append(run.get("config_id", ""))
    for table in (results.points, results.requests, results.batch):
        for cid in table[S.CONFIG_ID].dropna().unique():
            if cid not in ids:
                ids.append(cid)
    if len(ids) <= 1:
        return {_config_label(results, ids[0] if ids else ""): results}
    out = {}
    for cid in ids:
        def pick(df: pd.DataFrame, cid: str = cid) -> pd.DataFrame:
            return df[df[S.CONFIG_ID] == cid].reset_index(drop=True)

        part = dataclasses.replace(  # a Results (a dataclass) of the rows of this configuration
            results, requests=pick(results.requests), points=pick(results.points), batch=pick(results.batch),
            server=pick(results.server), runs=[r for r in results.runs if r.get("config_id", "") == cid])
        out[_config_label(part, cid)] = part
    return out


def _config_label(results: ResultTables, cid: str) -> str:
    for run in results.runs:
        if run.get("config_id", "") == cid and run.get("config_label"):
            return str(run["config_label"])
    labels = results.points[S.CONFIG_LABEL].dropna()
    return str(labels.iloc[0]) if len(labels) and labels.iloc[0] else (cid or "default")


def main_metrics_of(results: ResultTables, users: int = CARD_USERS, prompt_tokens: int = CARD_PROMPT_TOKENS,
                    max_new_tokens: int = CARD_MAX_NEW_TOKENS) -> pd.DataFrame:
    """`tgi_toolkit.bench.main_metrics.main_metrics` for a Results already loaded."""
    rows = []
    for config, part in split_by_config(results).items():
        for metric in (ingestion_speed(part), generation_speed(part, users, prompt_tokens, max_new_tokens),
                       kv_cache_capacity(part)):
            rows.append({CONFIG_LABEL: config, **metric.as_dict()})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def main_metrics_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """`main_metrics` as the card shows it: one row per metric (happy_vllm's row names), one column
    per configuration, the cells' text. Where configurations were measured at different points for
    the generation speed, the row says what was asked and each cell names its point.

    Frames of several sources concatenated (ours and `Reference.card_metrics()`) come out side by side."""
    configs = list(dict.fromkeys(metrics[CONFIG_LABEL]))
    rows: dict[str, list[str]] = {}
    for key in METRICS:
        part = metrics[metrics["metric"] == key].set_index(CONFIG_LABEL)
        labels = set(part["label"])
        cells = [part.loc[c, "text"] if c in part.index else "-" for c in configs]
        if len(labels) > 1:
            cells = [f"{t} ({part.loc[c, 'point']})" if c in part.index else t
                     for c, t in zip(configs, cells, strict=True)]
            label = "Mean generation speed (see each cell for the point)"
        else:
            label = labels.pop() if labels else key
        rows[label] = cells
    return pd.DataFrame.from_dict(rows, orient="index", columns=configs)


__all__ = [
    "CARD_MAX_NEW_TOKENS", "CARD_PROMPT_TOKENS", "CARD_USERS", "COLUMNS", "CONFIG_LABEL", "GENERATION", "INGESTION",
    "KV_CAPACITY", "METRICS", "MainMetric", "ResultTables", "approx", "card_point", "generation_label",
    "generation_speed", "ingestion_speed", "kv_cache_capacity", "kv_text", "main_metrics_of", "main_metrics_table",
    "point_text", "run_info", "split_by_config",
]
