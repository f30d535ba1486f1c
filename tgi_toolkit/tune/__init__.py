"""Auto-tuning: search launcher settings for the most goodput under latency objectives.

    from tgi_toolkit.sweep import Workload
    from tgi_toolkit.tune import Objectives, tune

    result = tune({"model_id": "HuggingFaceTB/SmolLM2-135M-Instruct"},
                  Workload("concurrency", users=[4], prompt_tokens=64, max_new_tokens=16, requests=8),
                  Objectives(ttft_s=1.0, tpot_s=0.25), output="results/tune")
    result.choice.best           # the configuration to use (None when none met the objectives)
    result.choice.closest        # then: the one nearest to meeting them
    result.choice.table          # every configuration tried, ranked
    result.choice.pareto         # operating points on the latency/throughput frontier
    result.searched.space        # the knobs' ladders and where their bounds came from; result.rounds: the rounds
    result.to_launcher_config()  # the winner as a LauncherConfig

The capacity planner bounds the space (tgi_toolkit.tune.sizing explains how, and why the KV knob is
cuda_memory_fraction: TGI 3 ignores a given max_batch_total_tokens), the sweep runner
measures each candidate into one folder (resumable), the selection (tgi_toolkit.tune.select) ranks
them, and tune.json beside the results keeps the outcome (`load_tune(folder)`).
`tgi-toolkit tune --ttft 1 --tpot 0.25 --users 4 --output results/tune` does the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tgi_toolkit._lazy import lazy_getattr
from tgi_toolkit.tune.cli import add_parser

_LAZY = {
    "tune": ".search", "build_space": ".space", "workload_demand": ".sizing", "plan_for": ".sizing", "Knob": ".space",
    "DEFAULT_KNOBS": ".space", "KvSizing": ".sizing", "kv_sizing": ".sizing",
    "Objectives": ".select", "Choice": ".select", "TuneResult": ".result", "Searched": ".result", "Round": ".result",
    "choose": ".select", "rank_configs": ".select", "pareto_points": ".select", "evaluate_points": ".select",
    "load_tune": ".result",
    "tune_simulated": ".simulated", "TuningSetup": ".setup",
}

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.tune.result import Round, Searched, TuneResult, load_tune
    from tgi_toolkit.tune.search import tune
    from tgi_toolkit.tune.select import Choice, Objectives, choose, evaluate_points, pareto_points, rank_configs
    from tgi_toolkit.tune.setup import TuningSetup
    from tgi_toolkit.tune.simulated import tune_simulated
    from tgi_toolkit.tune.sizing import KvSizing, kv_sizing, plan_for, workload_demand
    from tgi_toolkit.tune.space import DEFAULT_KNOBS, Knob, build_space


__getattr__ = lazy_getattr(__name__, _LAZY)


__all__ = [
    "DEFAULT_KNOBS", "Choice", "Knob", "KvSizing", "Objectives", "Round", "Searched", "TuneResult", "TuningSetup",
    "add_parser", "build_space",
    "choose", "evaluate_points", "kv_sizing", "load_tune", "pareto_points", "plan_for", "rank_configs", "tune",
    "tune_simulated", "workload_demand",
]
