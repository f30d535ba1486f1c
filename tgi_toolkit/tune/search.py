"""Searching launcher settings with the sweep runner: a planner-bounded space, a coarse grid, then
bisection around the best, then a second measurement of the winner.

1. Plan: the capacity planner (tgi_toolkit.planner) turns the model, the hardware and the
   workload's lengths into max_input_tokens / max_total_tokens for the workload, the KV capacity
   the server will infer (max_batch_total_tokens) and how many requests fit at once.
2. Space: each knob gets an ordered ladder of candidate values bounded by what can matter:
   max_batch_size 1 .. the workload's concurrency (capped by the requests that fit);
   cuda_memory_fraction for a ladder of KV capacities (tgi_toolkit.tune.sizing); max_batch_prefill_tokens from one
   prompt in one forward (max_input_tokens) up to every concurrent prompt in one prefill. Beyond those
   bounds a setting changes nothing, or does not fit. waiting_served_ratio and max_waiting_tokens have
   short default ladders, only where the server uses them (prefill chunking off: PREFILL_CHUNKING=0);
   any other field (dtype, quantize, ...) is searched over the values given in `space`.
3. Coarse round: up to `levels` values per knob (ends included); when their product exceeds the
   round's budget, a spread subset chosen by farthest-point sampling from the planner's own
   recommendation.
4. Refinement rounds: around the best configuration so far (the closest, when none meets the
   objectives), each knob is bisected toward its nearest tried values on either side.
5. Confirmation: the winner is measured again with other prompts (seed + 1); the result says
   whether it still meets the objectives.
Every configuration runs through `Sweep` into one folder, so an interrupted tuning resumes.

The numbers that bound the space come from tgi_toolkit.tune.sizing (which also explains the KV knob:
--cuda-memory-fraction), the ladders and the router rules from tgi_toolkit.tune.space.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from tgi_toolkit import schema as S
from tgi_toolkit.sweep.spec import Sweep, Workload, make_config
from tgi_toolkit.tune.result import Round, TuneResult
from tgi_toolkit.tune.select import MEETS, Choice, Objectives, choose, config_row, rank_configs
from tgi_toolkit.tune.setup import search_start
from tgi_toolkit.tune.space import DEFAULT_KNOBS, KV_KNOB, Knob

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.sweep.executors import Executor


def _spread(n: int, levels: int) -> list[int]:
    if n <= levels:
        return list(range(n))
    return sorted({round(i * (n - 1) / (levels - 1)) for i in range(levels)})


def coarse(space: Mapping[str, Knob], levels: int, budget: int, seed: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Up to `levels` values per knob (both ends); over `budget` combinations, a spread subset by
    farthest-point sampling that starts at `seed` (the planner's recommendation)."""
    names = list(space)
    per_knob = [_spread(len(space[n].values), max(2, levels)) for n in names]
    grid = list(itertools.product(*per_knob))

    def position(point: Sequence[int]) -> list[float]:
        return [i / (len(space[n].values) - 1) if len(space[n].values) > 1 else 0.0 for n, i in zip(names, point,
                                                                                                     strict=True)]

    if len(grid) > budget:
        start = position([space[n].index(seed[n]) for n in names])
        chosen = [min(grid, key=lambda p: (math.dist(position(p), start), p))]
        while len(chosen) < budget:
            chosen.append(max((p for p in grid if p not in chosen),
                              key=lambda p: (min(math.dist(position(p), position(c)) for c in chosen), p)))
        grid = chosen
    return [{n: space[n].values[i] for n, i in zip(names, point, strict=True)} for point in grid]


def refine(space: Mapping[str, Knob], center: Mapping[str, Any], tried: Sequence[Mapping[str, Any]]
           ) -> list[dict[str, Any]]:
    """Bisect each knob between `center`'s value and the nearest tried values below and above it."""
    out: list[dict[str, Any]] = []
    for name, knob in space.items():
        if name not in center:
            continue
        here = knob.index(center[name])
        seen = sorted({knob.index(t[name]) for t in tried if name in t})
        below = max((i for i in seen if i < here), default=None)
        above = min((i for i in seen if i > here), default=None)
        for other in (below, above):
            if other is None:
                continue
            middle = (here + other) // 2 if other > here else (here + other + 1) // 2
            if middle not in (here, other):
                out.append({**center, name: knob.values[middle]})
    return out


def overrides_label(overrides: Mapping[str, Any]) -> str:
    """A candidate's name in a tuning's rounds and tables: its overrides, or "base"."""
    return ",".join(f"{k}={v}" for k, v in overrides.items()) or "base"


def manifest_entries(folder: Path, config_ids: set[str]) -> list[dict[str, Any]]:
    """The sweep manifest's entries of these configurations in `folder`."""
    from tgi_toolkit.sweep.manifest import load_manifest

    return [e for e in load_manifest(folder).get("configs", []) if e["config_id"] in config_ids]


def workload_points(folder: Path, entries: Sequence[Mapping[str, Any]], workload: Workload) -> pd.DataFrame:
    """The points `workload` measured for these configurations (other runs in the folder are left out)."""
    from tgi_toolkit.bench.results import load_results

    run_ids = {e["workloads"][workload.key]["run_id"] for e in entries
               if e.get("workloads", {}).get(workload.key, {}).get("run_id")}
    points = load_results(folder).points
    return points[points[S.RUN_ID].isin(run_ids)].reset_index(drop=True)


def _confirm(folder: Path, base: LauncherConfig, backend: str, server: Mapping[str, Any], overrides: dict[str, Any],
             searched: Workload, again: Workload, objectives: Objectives, progress: bool) -> dict[str, Any]:
    """Measure one configuration again with `again` (other prompts); its best point against the objectives."""
    from tgi_toolkit.sweep.config_job import ConfigJob, run_config
    from tgi_toolkit.sweep.manifest import Manifest

    made = make_config(base, overrides)
    manifest = Manifest(folder)
    entry = manifest.entry(made.config_id)
    if entry.get("workloads", {}).get(again.key, {}).get("status") != "complete":
        job = ConfigJob(made.config_id, made.label, made.config, backend, [searched, again], dict(server))
        entry = run_config(job, folder, entry, save=manifest.put, progress=progress)
    points = workload_points(folder, [entry], again)
    if points.empty:
        record = entry.get("workloads", {}).get(again.key, {})
        return {MEETS: False, "error": record.get("error") or entry.get("error")}
    row = rank_configs(points, objectives).iloc[0]
    keep = [MEETS, S.GOODPUT_RPS, S.OUTPUT_THROUGHPUT, S.POINT_ID, S.stat_column("ttft", objectives.percentile),
            S.stat_column("tpot", objectives.percentile), "error_rate", "violation"]
    return {k: (bool(row[k]) if k == MEETS else row[k]) for k in keep} | {"run_id": points[S.RUN_ID].iloc[0]}


def tune(base: LauncherConfig | Mapping[str, Any] | str | None, workload: Workload | Mapping[str, Any],
         objectives: Objectives | Mapping[str, Any], *, output: str | Path, backend: str = "embedded",
         knobs: Sequence[str] = DEFAULT_KNOBS, space: Mapping[str, Sequence[Any]] | None = None,
         model_config: Any = None, gpu: str | int | None = None, max_configs: int = 8, levels: int = 3,
         rounds: int = 2, confirm: int = 1, server: Mapping[str, Any] | None = None,
         executor: str | Executor = "local",
         resume: bool = True, progress: bool = True) -> TuneResult:
    """Search launcher settings for the most goodput under `objectives` on `workload`; save tune.json.

    base: settings every candidate shares (model, dtype, quantize, ...). workload: the traffic to
    tune for (concurrency, rate or batch). objectives: Objectives(ttft_s=, tpot_s=, percentile=).
    knobs: the fields searched with planner-bounded ladders; space: explicit values for any field
    (they replace the ladder). model_config / gpu: for the planner (default: the model's local
    config.json; gpu is needed for GPU backends). max_configs: configurations measured in all;
    levels: values per knob in the coarse round; rounds: coarse + refinement rounds; confirm: how
    many of the best to measure again until one still meets the objectives (0: none).
    Returns a TuneResult: .choice (.best, .closest, .table, .pareto), .searched, .rounds, .to_launcher_config().
    """
    if max_configs < 1 or rounds < 1 or levels < 2:
        raise ValueError("max_configs and rounds must be >= 1, levels >= 2")
    server = dict(server or {})
    objectives, setup, searched = search_start(base, backend, workload, objectives, model_config=model_config,
                                               gpu=gpu, server=server)
    shared, plan, kv = setup.base, setup.plan, setup.kv
    knob_space = setup.space(knobs, space)
    folder = Path(output).resolve()

    # The coarse round starts from what the planner would launch for this workload.
    recommended = {"max_batch_size": plan.limits.max_batch_size, KV_KNOB: kv.top,
                   "max_batch_prefill_tokens": plan.limits.max_batch_prefill_tokens}
    seed = {}
    for name, knob in knob_space.items():
        value = recommended.get(name)
        usable = value is not None and (value in knob.values or isinstance(value, (int, float)))
        seed[name] = value if usable else knob.values[-1]
    first_budget = max_configs if rounds == 1 else max(2, math.ceil(max_configs / 2))
    candidates = coarse(knob_space, levels, min(first_budget, max_configs), seed)
    tried: list[dict[str, Any]] = []
    history: list[Round] = []
    choice: Choice | None = None
    for number in range(1, rounds + 1):
        new = []
        for candidate in candidates:
            fixed = setup.repair(candidate)
            if fixed not in tried and fixed not in new:
                new.append(fixed)
        new = new[:max_configs - len(tried)]
        if not new:
            break
        tried += new
        kind = "coarse grid" if number == 1 else f"refinement around {history[-1].center}"
        Sweep(shared, workloads=[searched], configs=tried, backend=backend, server=server,
              name=f"tune round {number}").run(folder, resume=resume, progress=progress, executor=executor)
        ids = {make_config(shared, c).config_id for c in tried}
        entries = manifest_entries(folder, ids)
        choice = choose(workload_points(folder, entries, searched), objectives, configs=entries,
                        knobs=list(knob_space))
        center = choice.best or choice.closest
        history.append(Round(number, kind, tuple(overrides_label(c) for c in new),
                             center["label"] if center else None))
        if center is None:
            break
        candidates = refine(knob_space, {n: center["overrides"].get(n) for n in knob_space}, tried)
    if choice is None:  # pragma: no cover - the coarse round always has a candidate
        raise ValueError("nothing to try: the search space is empty")

    best, table = choice.best, choice.table
    if best is not None and confirm > 0:
        again = Workload(searched.scenario, name=searched.name,
                         **{**searched.params, "seed": int(searched.params.get("seed", 0)) + 1})
        meeting = [r for _, r in table.iterrows() if r[MEETS]][:confirm]
        confirmations = []
        for row in meeting:
            overrides = next(e["overrides"] for e in entries if e["config_id"] == row[S.CONFIG_ID])
            check = _confirm(folder, shared, backend, server, overrides, searched, again, objectives, progress)
            confirmations.append((row, check))
            if check[MEETS]:
                break
        row, check = next(((r, c) for r, c in confirmations if c[MEETS]), confirmations[0])
        if row[S.CONFIG_ID] != best[S.CONFIG_ID]:  # the first winner did not hold; the next one did
            best = config_row(table, row[S.CONFIG_ID], entries)
        best = {**best, "confirmation": check}
        history.append(Round(len(history) + 1, "confirmation (seed + 1)", tuple(r["label"] for r, _ in confirmations),
                             best["label"]))
        if S.CONFIG_ID in table:
            table = table.assign(confirmed=table[S.CONFIG_ID].map({r[S.CONFIG_ID]: c[MEETS] for r, c in confirmations}))

    tuned = setup.result(dataclasses.replace(choice, best=best, table=table), searched, knob_space, history, folder)
    tuned.save(folder)
    return tuned
