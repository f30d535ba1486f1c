"""Tuning in simulation first: hundreds of configurations on the simulator, then a few on the real server.

1. The space: tune.space's planner-bounded knobs, each ladder filled out to `levels` values (geometric
   between its ends), every combination (repaired to the launcher's rules): typically hundreds.
2. Each configuration runs the workload on `tgi_toolkit.simulate` (the engine's own scheduler with the
   given cost model, a few milliseconds each), and `select.rank_configs` ranks them as it ranks measured ones.
3. The best `measure` of that ranking, and `spread` more taken evenly from the rest of it (so that the
   agreement is tested on good and bad ones alike), are measured on the real server with the sweep runner.
4. The result is tune.search's: chosen from the measured points only. `result.simulation` (also in
   simulation.json beside tune.json) says how the simulated ranking agreed with the measured one:
   Spearman's rank correlation over the measured configurations, whether both put the same one first, and
   the overlap of their top `measure`.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from tgi_toolkit import schema as S
from tgi_toolkit.sweep.spec import Sweep, Workload, make_config
from tgi_toolkit.tune.result import Round, TuneResult
from tgi_toolkit.tune.search import manifest_entries, overrides_label, workload_points
from tgi_toolkit.tune.select import Objectives, choose, rank_configs
from tgi_toolkit.tune.setup import search_start
from tgi_toolkit.tune.space import DEFAULT_KNOBS, Knob

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.costs.load import CostModelSource


def widen(knob: Knob, levels: int) -> Knob:
    """A numeric ladder filled out to `levels` values, geometric between its ends (integers stay integers)."""
    values = knob.values
    if levels <= len(values) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return knob
    low, high = min(values), max(values)
    if low <= 0 or high <= low:
        return knob
    ratio = (high / low) ** (1 / (levels - 1))
    grid = {low * ratio ** i for i in range(levels)} | set(values)
    if all(isinstance(v, int) for v in values):
        grid = {int(round(v)) for v in grid}
    else:  # e.g. cuda_memory_fraction: 4 significant digits, as tune.sizing shows its own rungs
        grid = {float(f"{v:.4g}") for v in grid}
    return Knob(knob.name, sorted(grid), knob.source + f"; filled out to {levels} values for the simulation")


def _spearman(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) < 2:
        return math.nan
    ra, rb = pd.Series(a).rank(), pd.Series(b).rank()
    if ra.std() == 0 or rb.std() == 0:
        return math.nan
    return float(ra.corr(rb))


def simulate_configs(shared: Any, candidates: Sequence[dict[str, Any]], workload: Workload,
                     cost_model: CostModelSource,
                     objectives: Objectives, *, backend: str = "embedded") -> pd.DataFrame:
    """Every candidate's points on the simulator, ranked by rank_configs (their real config ids and labels)."""
    from tgi_toolkit.costs.load import load_cost_model
    from tgi_toolkit.simulate.api import IGNORED_OPTIONS, RUN_OPTIONS, SCENARIO_FUNCTIONS

    cost = cost_model if hasattr(cost_model, "seconds") else load_cost_model(cost_model)
    function = SCENARIO_FUNCTIONS[workload.scenario]
    import inspect

    accepted = set(inspect.signature(function).parameters) | set(RUN_OPTIONS) | set(IGNORED_OPTIONS)
    params = {k: v for k, v in workload.params.items() if k in accepted}
    rows = []
    configs = []
    for overrides in candidates:
        made = make_config(shared, overrides, backend=backend)
        configs.append({"config_id": made.config_id, "label": overrides_label(overrides), "overrides": overrides})
        if not made.valid:  # broke a launcher rule: the real server would refuse it too
            continue
        run = function(cost, config=made.config, light=True, **params)
        for row in run.point_rows:
            row[S.CONFIG_ID], row[S.CONFIG_LABEL] = made.config_id, made.config_label
            rows.append(row)
    points = pd.DataFrame(rows)
    return rank_configs(points, objectives, configs=configs)


def tune_simulated(base: Any, workload: Workload | Mapping[str, Any], objectives: Objectives | Mapping[str, Any], *,
                   output: str | Path, cost_model: CostModelSource, backend: str = "embedded",
                   knobs: Sequence[str] = DEFAULT_KNOBS, space: Mapping[str, Sequence[Any]] | None = None,
                   model_config: Any = None, gpu: str | int | None = None, levels: int = 8, measure: int = 3,
                   spread: int = 2, server: Mapping[str, Any] | None = None, resume: bool = True,
                   progress: bool = True) -> TuneResult:
    """Search in simulation with `cost_model` (a CostModel or cost.json), then measure the best `measure`
    and `spread` others on `backend`; the TuneResult carries `.simulation` (module docstring)."""
    if measure < 1 or spread < 0 or levels < 2:
        raise ValueError("measure must be >= 1, spread >= 0, levels >= 2")
    objectives, setup, searched = search_start(base, backend, workload, objectives, model_config=model_config,
                                               gpu=gpu, server=server)
    shared = setup.base
    knob_space = {n: widen(k, levels) for n, k in setup.space(knobs, space).items()}

    candidates: list[dict[str, Any]] = []
    for combo in itertools.product(*(k.values for k in knob_space.values())):
        fixed = setup.repair(dict(zip(knob_space, combo, strict=True)))
        if fixed not in candidates:
            candidates.append(fixed)
    started = time.perf_counter()
    simulated = simulate_configs(shared, candidates, searched, cost_model, objectives, backend=backend)
    seconds = time.perf_counter() - started

    ranked = [r for r in simulated[S.CONFIG_ID] if isinstance(r, str)]
    by_id = {make_config(shared, c, backend=backend).config_id: c for c in candidates}
    chosen = ranked[:measure]
    rest = ranked[measure:]
    if spread and rest:
        step = max(1, len(rest) // spread)
        chosen += rest[step - 1::step][:spread]
    folder = Path(output).resolve()
    configs = [by_id[c] for c in chosen]
    Sweep(shared, workloads=[searched], configs=configs, backend=backend, server=dict(server or {}),
          name="tune --simulate: measured").run(folder, resume=resume, progress=progress)
    entries = manifest_entries(folder, set(chosen))
    measured_points = workload_points(folder, entries, searched)
    choice = choose(measured_points, objectives, configs=entries, knobs=list(knob_space))

    sim_rank = {cid: i + 1 for i, cid in enumerate(ranked)}
    measured_rank = {str(cid): int(rank) for cid, rank in zip(choice.table[S.CONFIG_ID], choice.table["rank"],
                                                                strict=True)}
    both = [c for c in chosen if c in measured_rank]
    order_sim = sorted(both, key=lambda c: sim_rank[c])
    order_measured = sorted(both, key=lambda c: measured_rank[c])
    k = min(measure, len(both))
    agreement = {
        "simulated_configs": len(simulated), "simulation_seconds": round(seconds, 3),
        "measured_configs": len(both),
        "spearman": _spearman([sim_rank[c] for c in both], [measured_rank[c] for c in both]),
        "same_first": bool(both) and order_sim[0] == order_measured[0],
        "top_k": k, "top_k_overlap": len(set(order_sim[:k]) & set(order_measured[:k])) / k if k else math.nan,
        "ranks": [{"config_id": c, "label": overrides_label(by_id[c]),
                   "simulated_rank": sim_rank[c], "measured_rank": measured_rank[c]} for c in order_sim],
        "cost_model": getattr(cost_model, "name", str(cost_model)),
    }
    rounds = [Round(1, f"simulation of {len(simulated)} configurations"),
              Round(2, "measured: the simulation's best and a spread", tuple(a["label"] for a in agreement["ranks"]),
                    (choice.best or choice.closest or {}).get("label"))]
    tuned = setup.result(choice, searched, knob_space, rounds, folder, simulation=agreement)
    tuned.save(folder)
    (folder / "simulation.json").write_text(json.dumps(
        {**agreement, "simulated_table": json.loads(simulated.head(50).to_json(orient="records",
                                                                               default_handler=str))},
        indent=2, default=str) + "\n")
    return tuned


def agreement_text(simulation: Mapping[str, Any]) -> str:
    rho = simulation["spearman"]
    lines = [f"simulated {simulation['simulated_configs']} configurations in {simulation['simulation_seconds']:.1f} s "
             f"({simulation['cost_model']}); measured {simulation['measured_configs']}:",
             f"  Spearman rank correlation, simulated against measured: "
             f"{'n/a' if rho != rho else f'{rho:+.2f}'}; same first: {simulation['same_first']}; "
             f"top-{simulation['top_k']} overlap {simulation['top_k_overlap']:.0%}"]
    for row in simulation["ranks"]:
        lines.append(f"  simulated #{row['simulated_rank']:<4} measured #{row['measured_rank']:<3} {row['label']}")
    return "\n".join(lines)
