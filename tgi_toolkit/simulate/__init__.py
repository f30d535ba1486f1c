"""Simulate before you buy: the engine's own TGI scheduler on a virtual clock, with a cost model per forward.

    from tgi_toolkit.simulate import run_concurrency, roofline, load_cost_model

    cost = load_cost_model("cost.json")            # `tgi-toolkit simulate profile` measured it
    res = run_concurrency(cost, users=[1, 8, 32], prompt_tokens=512, max_new_tokens=128)
    h100 = gpu_cost_model("H100", "meta-llama/Llama-3.1-8B")  # or: the card's measured kernel times (its
                                                   # datasheet's roofline where none were measured) and the shape
    res = run_concurrency(h100, users=[10], prompt_tokens=1024, max_new_tokens=128, output="results/sim")

Modules: events (virtual clock, SimBackend, the event loop), workloads (bench's scenarios as simulated
clients), calibrate (profiling a running server for the calibrated model), target (scheduler settings),
record (results folders), api (run_* functions), cli (`tgi-toolkit simulate`). The cost models it runs (linear,
roofline, measured kernels) are tgi_toolkit.costs'; it re-exports the ones a simulation starts from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tgi_toolkit._lazy import lazy_getattr

_LAZY = {
    "run_batch": ".api", "run_concurrency": ".api", "run_rate": ".api", "measure_ingestion": ".api",
    "run_scenario": ".api", "kv_capacity_tokens": ".api", "SCENARIO_FUNCTIONS": ".api", "run_shared_prefix": ".api",
    "run_multi_turn": ".api", "run_decode_stall": ".api", "play_scenario": ".api",
    "LinearCostModel": "tgi_toolkit.costs.linear", "fit_linear": "tgi_toolkit.costs.linear",
    "shape_of": "tgi_toolkit.costs.features", "Shape": "tgi_toolkit.costs.features",
    "load_cost_model": "tgi_toolkit.costs.load",
    "RooflineCostModel": "tgi_toolkit.costs.roofline", "roofline": "tgi_toolkit.costs.roofline",
    "MeasuredCostModel": "tgi_toolkit.costs.measured", "gpu_cost_model": "tgi_toolkit.costs.measured",
    "profile": ".calibrate", "Profiling": ".calibrate", "SimTarget": ".target", "make_target": ".target",
    "Simulator": ".events", "SimRequest": ".drivers", "VirtualClock": ".events",
}

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.costs.features import Shape, shape_of
    from tgi_toolkit.costs.linear import LinearCostModel, fit_linear
    from tgi_toolkit.costs.load import load_cost_model
    from tgi_toolkit.costs.measured import MeasuredCostModel, gpu_cost_model
    from tgi_toolkit.costs.roofline import RooflineCostModel, roofline
    from tgi_toolkit.simulate.api import (
        SCENARIO_FUNCTIONS,
        kv_capacity_tokens,
        measure_ingestion,
        play_scenario,
        run_batch,
        run_concurrency,
        run_decode_stall,
        run_multi_turn,
        run_rate,
        run_scenario,
        run_shared_prefix,
    )
    from tgi_toolkit.simulate.calibrate import Profiling, profile
    from tgi_toolkit.simulate.drivers import SimRequest
    from tgi_toolkit.simulate.events import Simulator, VirtualClock
    from tgi_toolkit.simulate.target import SimTarget, make_target

__getattr__ = lazy_getattr(__name__, _LAZY)

__all__ = [
    "SCENARIO_FUNCTIONS", "LinearCostModel", "MeasuredCostModel", "RooflineCostModel", "Shape", "SimRequest",
    "SimTarget", "Simulator", "VirtualClock", "fit_linear", "gpu_cost_model", "kv_capacity_tokens", "load_cost_model",
    "make_target", "measure_ingestion", "profile", "Profiling", "roofline", "run_batch", "run_concurrency",
    "run_decode_stall", "run_multi_turn", "run_rate", "run_scenario", "run_shared_prefix", "shape_of", "play_scenario",
]
