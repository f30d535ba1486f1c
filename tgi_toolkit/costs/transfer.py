"""From the GPU you have to the one you don't: a cost model measured on one card, carried to another.

A forward measured on card A is split into the server's host time (the fitted host terms of its server
profile, never more than the whole forward) and the rest, the kernels; the host part is kept and the kernel
part is scaled by the roofline's kernel time on card B over card A (the datasheets' ratio, through the
model's shape):

    t_B = h + (t_A - h) x kernel_B / kernel_A,   h = min(t_A, host_A)

so what the measurement knew about this server and model (its real efficiencies, its front end) stays, and
only what the card changes is predicted. benchmarks/gpu_accuracy.py checks the same rule on published pairs:
one source's figure on one GPU predicted from its figure on another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tgi_toolkit.costs.features import Shape
from tgi_toolkit.costs.linear import CostModel
from tgi_toolkit.costs.roofline import RooflineCostModel

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.costs.load import CostModelSource
    from tgi_toolkit.planner.shape import ModelConfigSource, ModelShape


@dataclass
class TransferredCostModel:
    measured: CostModel  # measured on `source.gpu` (a LinearCostModel from `simulate profile`)
    source: RooflineCostModel  # the card it was measured on, with the same model, server and shards
    target: RooflineCostModel  # the card to predict

    def __post_init__(self) -> None:
        if self.source.shape.config != self.target.shape.config or self.source.server != self.target.server:
            raise ValueError("source and target must describe the same model and server; only the GPU changes")
        self.request_overhead_s = self.measured.request_overhead_s
        self.frontend_s = self.measured.frontend_s
        self.frontend_stalls_forwards = self.measured.frontend_stalls_forwards
        self.jitter_cv = self.measured.jitter_cv
        self.name = f"{getattr(self.measured, 'name', 'measured')} on {self.source.gpu}, carried to {self.target.gpu}"

    def seconds(self, shape: Shape) -> float:
        measured = self.measured.seconds(shape)
        host = min(measured, self.source.host_seconds(shape))
        return host + (measured - host) * self.target.kernel_seconds(shape) / self.source.kernel_seconds(shape)

    def server_defaults(self) -> dict[str, Any]:
        """The target card's KV capacity and launcher limits (a GPU's memory decides them, not the profile)."""
        return self.target.server_defaults()

    def hardware(self) -> dict[str, Any]:
        return self.target.hardware()

    def describe(self) -> dict[str, Any]:
        return {"kind": "transferred", "name": self.name, "measured_on": self.source.gpu, "gpu": self.target.gpu,
                "server": self.target.server, "num_shard": self.target.num_shard,
                "request_overhead_s": self.request_overhead_s, "measured": self.measured.describe(),
                "source": {"rule": "host kept, kernels scaled by the datasheet ratio (tgi_toolkit.costs.transfer)",
                           "hardware": self.target.hardware()}}


def transfer(measured: CostModelSource, *, measured_on: str, gpu: str, model: ModelShape | ModelConfigSource,
             server: str | None = None, num_shard: int = 1, dtype: str = "bfloat16",
             quantize: str | None = None) -> TransferredCostModel:
    """`measured` (a cost model, or its JSON path) carried from card `measured_on` to card `gpu` for `model`
    (config.json path or dict) served by `server` (default: the profile's, else tgi-3)."""
    from tgi_toolkit.costs.load import load_cost_model
    from tgi_toolkit.costs.roofline import roofline
    from tgi_toolkit.costs.server_profiles import DEFAULT_SERVER

    base = measured if hasattr(measured, "seconds") else load_cost_model(measured)
    server = server or DEFAULT_SERVER
    both = {"num_shard": num_shard, "dtype": dtype, "quantize": quantize, "server": server}
    return TransferredCostModel(base, roofline(measured_on, model, **both), roofline(gpu, model, **both))
