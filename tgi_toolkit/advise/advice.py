"""What `advise` answers: the ranked table, the refused candidates, the winner's launch command, the prices used,
a cost-against-latency figure, and advise.json beside the results folder (`load_advice` reads it back)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from tgi_toolkit import schema as S
from tgi_toolkit.advise.candidates import Refusal
from tgi_toolkit.advise.prices import Prices, parse_prices
from tgi_toolkit.advise.ranking import COST
from tgi_toolkit.advise.traffic import Traffic
from tgi_toolkit.tune.select import Objectives

ADVICE_FILE = "advise.json"


@dataclass
class Advice:
    table: pd.DataFrame
    refused: list[Refusal]
    missed: pd.DataFrame
    traffic: Traffic
    objectives: Objectives
    prices: Prices
    evaluations: list[Any] = field(default_factory=list, repr=False)
    model: str = ""
    seconds: float = 0.0
    output: Path | None = None

    @property
    def best(self) -> dict[str, Any] | None:
        return None if self.table.empty else dict(self.table.iloc[0])

    @property
    def run_ids(self) -> list[str]:
        """The deployed points' runs this advice wrote to its results folder (one per evaluated candidate)."""
        return [e.run_id for e in self.evaluations if e.run_id]

    @property
    def tied(self) -> list[str]:
        """Candidates the error bars cannot tell from the winner."""
        if self.table.empty:
            return []
        return list(self.table.loc[self.table["tied_with_first"], "candidate"])

    @property
    def command(self) -> str | None:
        """The winner's `text-generation-launcher` command (one replica)."""
        best = self.best
        return None if best is None else f"text-generation-launcher {best['command']}"

    def refused_table(self) -> pd.DataFrame:
        return pd.DataFrame([{"candidate": r.candidate.name, "gpu": r.candidate.gpu, "num_shard": r.candidate.num_shard,
                              "quantize": r.candidate.quantize or "none", "reason": r.reason} for r in self.refused],
                            columns=["candidate", "gpu", "num_shard", "quantize", "reason"])

    def figure(self, latency: str = "ttft") -> Any:
        from tgi_toolkit.plots.advise import cost_latency

        return cost_latency(self.table, percentile=self.objectives.percentile, latency=latency,
                            objectives=self.objectives.to_dict(), currency=self.prices.currency)

    def summary(self) -> str:
        p = self.objectives.percentile
        lines = [f"advise: {self.model}; {self.traffic.describe()}; objectives {self.objectives.describe()}",
                 self.prices.describe()]
        if self.table.empty:
            lines.append("no candidate meets the objectives at any load")
        else:
            unit = "users" if self.traffic.closed_loop else "req/s"
            cur = self.prices.currency
            lines.append(f"{'#':>2} {'candidate':22} {'cost/M tok':>11} {'range':>17} {'/hour':>9} {'repl':>4} "
                         f"{'GPUs':>4} {unit + '/repl':>10} {'TTFT ' + p:>10} {'TPOT ' + p:>10}  settings")
            for _, r in self.table.iterrows():
                band = f"{r['cost_low']:.3g}-{r['cost_high']:.3g}" if math.isfinite(r["cost_high"]) else "-"
                tie = "  (tied with #1)" if r["tied_with_first"] else ""
                lines.append(f"{r['rank']:>2} {r['candidate']:22} {r[COST]:>11.4g} {band:>17} "
                             f"{r['cost_per_hour']:>9.2f} {r['replicas']:>4} {r['gpus']:>4} "
                             f"{_load(r['sustained_per_replica'], r['sustained_is_lower_bound']):>10} "
                             f"{r[S.stat_column('ttft', p)]:>9.3g}s {r[S.stat_column('tpot', p)]:>9.3g}s  "
                             f"{r['settings']}{tie}")
            best = self.table.iloc[0]
            lines += [f"cost per million output tokens in {cur}; range: with the predictions off by their errors; "
                      f">=: one replica carries at least twice the traffic (the search stops there)",
                      f"TTFT error: {best['ttft_error']}", f"TPOT error: {best['tpot_error']}",
                      f"winner: {best['candidate']}, {best['replicas']} replica(s); launch each with:",
                      f"  {self.command}"]
            if self.tied:
                lines.append(f"tied with the winner (the error bars overlap): {', '.join(self.tied)}")
        for r in self.refused:
            lines.append(f"refused: {r.candidate.name}: {r.reason}")
        for _, r in self.missed.iterrows():
            lines.append(f"cannot meet the objectives: {r['candidate']}: {r['reason']}")
        lines.append(f"searched {len(self.evaluations)} candidates in {self.seconds:.1f} s")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "traffic": {k: v for k, v in self.traffic.__dict__.items() if k != "lengths"},
                "objectives": self.objectives.to_dict(), "prices": self.prices.to_dict(),
                "table": json.loads(self.table.to_json(orient="records")),
                "refused": json.loads(self.refused_table().to_json(orient="records")),
                "missed": json.loads(self.missed.to_json(orient="records")), "command": self.command,
                "tied": self.tied, "seconds": round(self.seconds, 2)}

    def save(self, folder: str | Path) -> Path:
        path = Path(folder) / ADVICE_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n")
        return path

    def _repr_markdown_(self) -> str:
        return "```\n" + self.summary() + "\n```"


def _load(value: float, lower_bound: bool) -> str:
    return (">=" if lower_bound else "") + format(value, ".3g")


def load_advice(folder: str | Path) -> dict[str, Any]:
    """advise.json of a results folder, with `table`, `refused` and `missed` as DataFrames and `prices` parsed."""
    data = json.loads((Path(folder) / ADVICE_FILE).read_text())
    for key in ("table", "refused", "missed"):
        data[key] = pd.DataFrame(data[key])
    prices = data["prices"]
    data["prices"] = parse_prices({"gpus": prices["per_gpu_hour"], "currency": prices["currency"],
                                   "date": prices["date"], "source": prices["source"]}, prices["path"])
    return data
