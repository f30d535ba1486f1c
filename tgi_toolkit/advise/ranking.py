"""From evaluated candidates to the ranked table: replicas, GPUs, cost per hour and per million output tokens,
and which candidates the error bars cannot separate.

- cost per hour = replicas x GPUs per replica x price per GPU-hour;
- output tokens per hour = the traffic's: rate x mean output tokens x 3600 (open loop), or the users' share of
  the deployed replica's simulated output throughput x replicas (closed loop);
- cost per million output tokens = cost per hour / output tokens per hour x 10^6.
Ties: each candidate's sustained load has a band (the load it would sustain if TTFT and TPOT were off by their
regime's cross-validated error, `capacity.band`), hence a cost band. A candidate whose cheapest cost in its band
is not above the winner's dearest is tied with it: the error bars cannot say which is cheaper. Without known
errors only equal costs tie.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from tgi_toolkit import schema as S
from tgi_toolkit.advise.evaluate import Evaluation, replicas
from tgi_toolkit.advise.prices import Prices
from tgi_toolkit.advise.traffic import Traffic
from tgi_toolkit.tune.select import Objectives

COST = "cost_per_million_tokens"


def cost_per_hour(replica_count: int, num_shard: int, gpu_hour: float) -> float:
    return replica_count * num_shard * gpu_hour


def cost_per_million(hourly: float, output_tokens_per_s: float) -> float:
    return hourly / (output_tokens_per_s * 3600) * 1e6 if output_tokens_per_s > 0 else math.inf


def output_tokens_per_s(traffic: Traffic, evaluation: Evaluation) -> float:
    if not traffic.closed_loop:
        return traffic.demand * traffic.mean_output_tokens
    row = evaluation.row
    per_user = float(row.get(S.OUTPUT_THROUGHPUT) or 0.0) / max(evaluation.load_per_replica or 1.0, 1.0)
    return per_user * traffic.demand


def _row(e: Evaluation, traffic: Traffic, objectives: Objectives, prices: Prices) -> dict[str, Any]:
    c, p = e.candidate, objectives.percentile
    gpu_hour = prices.gpu_hour(c.gpu, c.num_shard)
    hourly = cost_per_hour(e.replicas, c.num_shard, gpu_hour)
    tokens = output_tokens_per_s(traffic, e)
    low = high = hourly
    if e.band is not None:
        slow, fast = e.band
        high = cost_per_hour(replicas(traffic.demand, slow), c.num_shard, gpu_hour) if slow > 0 else math.inf
        low = cost_per_hour(replicas(traffic.demand, fast), c.num_shard, gpu_hour)
    ttft, tpot = S.stat_column("ttft", p), S.stat_column("tpot", p)
    return {
        "candidate": c.name, "gpu": c.gpu, "num_shard": c.num_shard, "quantize": c.quantize or "none",
        "replicas": e.replicas, "gpus": e.replicas * c.num_shard,
        "sustained_per_replica": e.sustained, "sustained_is_lower_bound": e.lower_bound,
        "default_sustained_per_replica": e.default_sustained,
        "load_per_replica": e.load_per_replica, "price_per_gpu_hour": gpu_hour, "cost_per_hour": hourly,
        COST: cost_per_million(hourly, tokens), "cost_low": cost_per_million(low, tokens),
        "cost_high": cost_per_million(high, tokens), ttft: e.row.get(ttft), "ttft_error": e.ttft.label(),
        tpot: e.row.get(tpot), "tpot_error": e.tpot.label(), "ttft_relative_error": e.ttft.error,
        "tpot_relative_error": e.tpot.error, "settings": ",".join(f"{k}={v}" for k, v in e.overrides.items())
        or "TGI 3 defaults", "command": " ".join(e.launcher.to_cli()), S.CONFIG_ID: e.row.get(S.CONFIG_ID),
        "simulations": e.simulations, "seconds": round(e.seconds, 2), "note": e.note,
        "priced_by": e.cost.provenance() if hasattr(e.cost, "provenance") else getattr(e.cost, "name", ""),
    }


def tie_with_first(table: pd.DataFrame) -> pd.Series:
    """True for rows (after the first) whose cost band reaches the first's: the error bars cannot order them."""
    if table.empty:
        return pd.Series([], dtype=bool)
    first_high = float(table["cost_high"].iloc[0])
    first = float(table[COST].iloc[0])
    tied = (table["cost_low"] <= first_high) | (table[COST] <= first)
    tied.iloc[0] = False
    return tied


def rank(evaluations: Sequence[Evaluation], traffic: Traffic, objectives: Objectives,
         prices: Prices) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(ranked table of candidates that meet the objectives, table of those that cannot at any load)."""
    rows = [_row(e, traffic, objectives, prices) for e in evaluations if e.sustained is not None]
    missed = pd.DataFrame([{"candidate": e.candidate.name, "gpu": e.candidate.gpu, "num_shard": e.candidate.num_shard,
                            "quantize": e.candidate.quantize or "none", "reason": e.note}
                           for e in evaluations if e.sustained is None],
                          columns=["candidate", "gpu", "num_shard", "quantize", "reason"])
    table = pd.DataFrame(rows)
    if table.empty:
        return table, missed
    ttft = S.stat_column("ttft", objectives.percentile)
    table = table.sort_values([COST, "gpus", ttft], kind="stable").reset_index(drop=True)
    table.insert(0, "rank", range(1, len(table) + 1))
    table["tied_with_first"] = tie_with_first(table).to_numpy()
    return table, missed
