"""The set-up every tuning starts from (`TuningSetup`): the capacity plan for the workload's demand, the shared
settings with the request limits it derives, how the KV capacity follows --cuda-memory-fraction, and from those
the knobs' ladders. Built once here for tune.search, tune.simulated and advise.evaluate, which had each
repeated the same four calls (tune.sizing's and tune.space's).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tgi_toolkit.sweep.spec import Workload, as_base
from tgi_toolkit.tune.result import TUNE_FILE, Round, Searched, TuneResult
from tgi_toolkit.tune.select import Choice, Objectives
from tgi_toolkit.tune.sizing import Demand, KvSizing, kv_sizing, plan_for, tuned_base, workload_demand
from tgi_toolkit.tune.space import DEFAULT_KNOBS, Knob, build_space, repair

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.planner import Plan
    from tgi_toolkit.planner.shape import ModelConfigSource

# The plan's fields a TuneResult keeps (its Searched.plan, tune.json's "plan").
PLAN_RECORD = ("model", "gpu", "dtype", "quantize", "kv_capacity_tokens", "concurrent_users", "tokens_per_request",
               "max_input_tokens", "max_total_tokens", "max_batch_prefill_tokens", "max_batch_size", "steps")


@dataclass(frozen=True)
class TuningSetup:
    """What a tuning of `backend` for `demand` searches from: `base`, the settings every candidate shares (with the
    plan's request limits where the caller set none), the capacity `plan` and the KV sizing `kv` that bound the
    knobs' ladders (`space`)."""

    base: LauncherConfig
    backend: str
    demand: Demand
    plan: Plan
    kv: KvSizing

    @classmethod
    def prepare(cls, base: LauncherConfig, backend: str, workload: Workload, *,
                model_config: ModelConfigSource | None = None, gpu: str | int | None = None,
                env: Mapping[str, str] | None = None) -> TuningSetup:
        """Plan `base` on `backend` for `workload`'s demand (model_config / gpu / env: as tune.sizing.plan_for)."""
        demand = workload_demand(workload)
        plan = plan_for(base, backend, demand, model_config=model_config, gpu=gpu, env=env)
        shared = tuned_base(base, plan)
        kv = kv_sizing(shared, backend, demand, plan, model_config=model_config, gpu=gpu, env=env)
        return cls(shared, backend, demand, plan, kv)

    def space(self, knobs: Sequence[str] = DEFAULT_KNOBS,
              given: Mapping[str, Sequence[Any]] | None = None) -> dict[str, Knob]:
        """The knobs' planner-bounded ladders (tune.space.build_space), `given` values replacing theirs."""
        return build_space(self.base, self.demand, self.plan, knobs, given, kv=self.kv)

    def repair(self, candidate: dict[str, Any]) -> dict[str, Any]:
        """`candidate` brought within the launcher's rules for these shared settings (tune.space.repair)."""
        return repair(candidate, self.base, self.kv)

    def result(self, choice: Choice, searched: Workload, space: Mapping[str, Knob], rounds: Sequence[Round],
               folder: str | Path, simulation: Mapping[str, Any] | None = None) -> TuneResult:
        """The tuning's result, whole: `choice` (tune.select.choose's, from the measured points), what was searched
        (these shared settings, redacted and as the config itself, the backend, `searched`, the knobs' ladders and
        the plan's record), the `rounds`, where it is saved (tune.json in `folder`) and, for tune --simulate, how
        the `simulation` agreed."""
        what = Searched(self.backend, self.base.to_dict(non_default_only=True, redact=True), searched.to_dict(),
                        {n: k.to_dict() for n, k in space.items()}, self.plan_record(), self.base)
        return TuneResult(choice, what, tuple(rounds), Path(folder) / TUNE_FILE,
                          None if simulation is None else dict(simulation))

    def plan_record(self) -> dict[str, Any]:
        """The plan as a TuneResult keeps it: its sizing fields and the steps that derived them."""
        record = self.plan.to_dict()
        return {k: record[k] for k in PLAN_RECORD}


def server_env(server: Mapping[str, Any] | None) -> dict[str, str]:
    """The environment the server will run in, as the sweep gives it (KV space, scheduling mode): the tuner's
    arithmetic must be the server's."""
    return {**os.environ, **{str(k): str(v) for k, v in ((server or {}).get("env") or {}).items()}}


def search_start(base: LauncherConfig | Mapping[str, Any] | str | None, backend: str,
                 workload: Workload | Mapping[str, Any], objectives: Objectives | Mapping[str, Any], *,
                 model_config: ModelConfigSource | None = None, gpu: str | int | None = None,
                 server: Mapping[str, Any] | None = None) -> tuple[Objectives, TuningSetup, Workload]:
    """What tune and tune --simulate both start from: the objectives (refused when they set no limit: a search needs
    one to meet), the set-up for the workload's demand in the server's environment (`server_env`), and the workload
    searched, the objectives its SLOs (`searched_workload`)."""
    objectives = Objectives.of(objectives)
    if not objectives.limits():
        raise ValueError("objectives: give ttft_s and/or tpot_s (seconds at the percentile) to tune for")
    workload = Workload.from_dict(workload)
    setup = TuningSetup.prepare(as_base(base), backend, workload, model_config=model_config, gpu=gpu,
                                env=server_env(server))
    return objectives, setup, searched_workload(workload, objectives)


def searched_workload(workload: Workload, objectives: Objectives) -> Workload:
    """`workload` with the objectives as its SLOs: they define goodput, so they win over any it carried."""
    slo = {k: v for k, v in (("slo_ttft_s", objectives.ttft_s), ("slo_tpot_s", objectives.tpot_s)) if v is not None}
    return Workload(workload.scenario, name=workload.name, **{**workload.params, **slo})
