"""The cost models a simulation runs, read from their JSON by kind: the calibrated linear model
(tgi_toolkit.costs.linear, which the engine's pacing reads too), a GPU's roofline (tgi_toolkit.costs.roofline) or
its measured kernel times (tgi_toolkit.costs.measured)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeAlias

from tgi_toolkit.costs.linear import CostModel, load_linear, read_cost_json

# What the simulator's entry points take as a cost model: one already built, or the JSON (file or dict) of one.
CostModelSource: TypeAlias = CostModel | str | Path | Mapping[str, Any]


def load_cost_model(path_or_dict: str | Path | Mapping[str, Any]) -> CostModel:
    """A cost model from its JSON file (or dict): `kind` linear (calibrated), roofline or measured."""
    data = read_cost_json(path_or_dict)
    kind = data.get("kind", "linear")
    if kind == "measured":
        from tgi_toolkit.costs.measured import MeasuredCostModel

        return MeasuredCostModel.from_dict(data)
    if kind == "roofline":
        from tgi_toolkit.costs.roofline import RooflineCostModel

        return RooflineCostModel.from_dict(data)
    if kind != "linear":
        raise ValueError(f"cost_model: kind {kind!r} is not known (allowed: linear, roofline, measured)")
    return load_linear(data)
