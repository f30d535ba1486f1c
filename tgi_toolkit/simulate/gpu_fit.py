"""Fitting the roofline to published figures, and measuring its error on figures it was not fitted to.

The parameters are the kernel factors every GPU and server shares (roofline.KERNEL_BOUNDS) and each server
generation's host terms (server_profiles.HOST_BOUNDS), in log space within those bounds. The fit minimises the squared
log ratio of predicted to published (the closed form of figures.steady), each figure weighted by one over the
square root of its source's count so that one long table does not outvote eight blog posts, plus a prior that
pulls each parameter towards its starting point (a factor of 1.5 for a kernel factor, of 3 for a host term is
one standard deviation), so a server with few figures keeps plausible host terms.

Cross-validation leaves one source out at a time: every figure of one publication is predicted by a fit to the
others, by the simulator (figures.simulated), and that is the error reported.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from tgi_toolkit.costs.roofline import KERNEL_BOUNDS, KERNEL_PRIOR, RooflineCostModel, roofline
from tgi_toolkit.costs.server_profiles import HOST_BOUNDS, HOST_TERMS, SERVERS
from tgi_toolkit.simulate.corpus import Figure
from tgi_toolkit.simulate.figures import simulated, steady

KERNEL_SIGMA = math.log(1.5)
HOST_SIGMA = math.log(3.0)
PRIOR_WEIGHT = 0.2  # the prior counts as a twenty-fifth of one source per parameter and standard deviation
ROBUST_SCALE = 0.3  # past a log error of 0.3 (35 %) a figure pulls linearly, not quadratically: outliers
# (a saturated rate, a chart misread) must not drag the factors every other figure agrees on
SATURATED = math.log(10.0)  # the residual of a rate the model cannot sustain


def cost_for(figure: Figure, models: dict[str, dict[str, Any]]) -> RooflineCostModel:
    if figure.model_id not in models:
        raise ValueError(f"figure {figure.id}: model {figure.model_id!r} has no shape in gpu_models.json")
    return roofline(figure.gpu, models[figure.model_id], num_shard=figure.num_gpus, dtype=figure.dtype,
                    quantize=figure.quantize, server=figure.server)


class Parameters:
    """The fitted parameters as one vector: the kernel factors, then each server's host terms."""

    def __init__(self, servers: Iterable[str]) -> None:
        self.servers = sorted(set(servers))
        self.names = [*KERNEL_BOUNDS, *(f"{s}.{t}" for s in self.servers for t in HOST_TERMS)]
        bounds = [*KERNEL_BOUNDS.values(), *(HOST_BOUNDS[t] for _ in self.servers for t in HOST_TERMS)]
        self.low = np.log([b[0] for b in bounds])
        self.high = np.log([b[1] for b in bounds])
        prior = [*KERNEL_PRIOR.values(), *(getattr(SERVERS[s], t) for s in self.servers for t in HOST_TERMS)]
        self.prior = np.log(prior)
        hosts = len(self.names) - len(KERNEL_BOUNDS)
        self.sigma = np.array([KERNEL_SIGMA] * len(KERNEL_BOUNDS) + [HOST_SIGMA] * hosts)

    def apply(self, x: np.ndarray, cost: RooflineCostModel) -> RooflineCostModel:
        values = np.exp(x)
        for name, value in zip(KERNEL_BOUNDS, values[:len(KERNEL_BOUNDS)], strict=True):
            setattr(cost, name, float(value))
        i = len(KERNEL_BOUNDS) + self.servers.index(cost.server) * len(HOST_TERMS)
        for k, term in enumerate(HOST_TERMS):
            setattr(cost, term, float(values[i + k]))
        return cost

    def as_dict(self, x: np.ndarray) -> dict[str, Any]:
        values = np.exp(x)
        factors = {name: float(v) for name, v in zip(KERNEL_BOUNDS, values[:len(KERNEL_BOUNDS)], strict=True)}
        first = len(KERNEL_BOUNDS)
        servers = {s: {t: float(values[first + i * len(HOST_TERMS) + k]) for k, t in enumerate(HOST_TERMS)}
                   for i, s in enumerate(self.servers)}
        return {"factors": factors, "servers": servers}


def fit(figures: Sequence[Figure], models: dict[str, dict[str, Any]],
        servers: Iterable[str] | None = None) -> dict[str, Any]:
    """The factors and host terms that best predict `figures` (module docstring); `servers` adds profiles
    whose host terms stay at their prior (a server the figures never measured)."""
    from scipy.optimize import least_squares

    params = Parameters([*(f.server for f in figures), *(servers or ())])
    costs = [cost_for(f, models) for f in figures]
    per_source = Counter(f.source_id for f in figures)
    weights = np.array([1 / math.sqrt(per_source[f.source_id]) for f in figures])
    published = np.log([f.value for f in figures])

    def residuals(x: np.ndarray) -> np.ndarray:
        pred = np.array([steady(f, params.apply(x, c)) for f, c in zip(figures, costs, strict=True)])
        logs = np.where(np.isfinite(pred) & (pred > 0), np.log(np.where(pred > 0, pred, 1.0)) - published,
                        SATURATED)
        return np.concatenate([weights * logs, PRIOR_WEIGHT * (x - params.prior) / params.sigma])

    x0 = np.clip(params.prior, params.low + 1e-9, params.high - 1e-9)
    # a server's host terms move only its own figures: finite differences perturb every server's at once
    kernels = len(KERNEL_BOUNDS)
    sparsity = np.zeros((len(figures) + len(x0), len(x0)), dtype=bool)
    sparsity[: len(figures), :kernels] = True
    for i, f in enumerate(figures):
        first = kernels + params.servers.index(f.server) * len(HOST_TERMS)
        sparsity[i, first: first + len(HOST_TERMS)] = True
    sparsity[len(figures):, :] = np.eye(len(x0), dtype=bool)
    result = least_squares(residuals, x0, bounds=(params.low, params.high), x_scale=1.0, diff_step=1e-3,
                           jac_sparsity=sparsity, loss="soft_l1", f_scale=ROBUST_SCALE)
    return params.as_dict(result.x)


def predict(figure: Figure, models: dict[str, dict[str, Any]], fitted: dict[str, Any],
            how: Callable[[Figure, Any], float] = simulated) -> float:
    """`figure` predicted with the fitted factors and its server's fitted host terms."""
    cost = cost_for(figure, models)
    for name, value in {**fitted["factors"], **fitted["servers"].get(figure.server, {})}.items():
        setattr(cost, name, value)
    return how(figure, cost)


def cross_validate(figures: Sequence[Figure], models: dict[str, dict[str, Any]], *,
                   progress: Callable[[str], None] | None = None
                   ) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Leave one source out: each figure predicted (by the simulator) from a fit to the other sources.
    Returns the rows and each source's fold (the fit that left it out)."""
    rows, folds = [], {}
    sources = sorted({f.source_id for f in figures})
    for i, source in enumerate(sources):
        held = [f for f in figures if f.source_id == source]
        fitted = folds[source] = fit([f for f in figures if f.source_id != source], models,
                                     servers={f.server for f in held})
        for f in held:
            rows.append(figure_row(f, predict(f, models, fitted)))
        if progress:
            progress(f"[{i + 1}/{len(sources)}] held out {source}: {len(held)} figures")
    return rows, folds


def figure_row(f: Figure, predicted: float) -> dict[str, Any]:
    ratio = predicted / f.value if predicted == predicted else math.nan
    return {"id": f.id, "source_id": f.source_id, "regime": f.regime, "server": f.server, "gpu": f.gpu,
            "num_gpus": f.num_gpus, "model_id": f.model_id, "metric": f.metric, "published": f.value,
            "predicted": predicted, "ratio": ratio}


def error(ratio: float) -> float:
    """|predicted / published - 1|, the error a reader reads ('30 % off'); inf for a missing prediction."""
    return abs(ratio - 1) if ratio == ratio and ratio > 0 else math.inf


def summarize(rows: Sequence[dict[str, Any]], key: str) -> dict[str, dict[str, float]]:
    """Per value of `key` (regime, server): figures, median and 80th-percentile error, share within ±30 %."""
    groups: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        groups[r[key]].append(error(r["ratio"]))
    return {k: stats(v) for k, v in sorted(groups.items())}


def stats(errors: Sequence[float]) -> dict[str, float]:
    ordered = sorted(errors)
    p80 = ordered[min(len(ordered) - 1, math.ceil(0.8 * len(ordered)) - 1)]
    return {"figures": len(ordered), "median_error": statistics.median(ordered), "p80_error": p80,
            "within_30": sum(e <= 0.30 for e in ordered) / len(ordered)}


def pairs(figures: Sequence[Figure], models: dict[str, dict[str, Any]],
          folds: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Within one source, figures that differ only in the GPU: each predicted from the other by the datasheet
    ratio, pub_B = pub_A x sim_B / sim_A, with the fit that left the source out (`folds[source_id]`)."""
    key = lambda f: (f.source_id, f.model_id, f.num_gpus, f.server, f.quantize, f.batch_size, f.users,  # noqa: E731
                     f.request_rate, f.input_tokens, f.output_tokens, f.metric)
    groups: dict[tuple, list[Figure]] = defaultdict(list)
    for f in figures:
        groups[key(f)].append(f)
    out = []
    for group in groups.values():
        for a in group:
            for b in group:
                if a.gpu == b.gpu:
                    continue
                fitted = folds[a.source_id]
                sim_a, sim_b = (predict(x, models, fitted, steady) for x in (a, b))
                predicted = a.value * sim_b / sim_a
                out.append({"from": a.id, "to": b.id, "from_gpu": a.gpu, "to_gpu": b.gpu, "metric": b.metric,
                            "published": b.value, "predicted": predicted, "ratio": predicted / b.value})
    return out


def coverage(figures: Sequence[Figure], models: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What the corpus measured: GPUs, servers, shard counts, model sizes, quantizations."""
    from tgi_toolkit.planner.shape import ModelShape

    sizes = [ModelShape.from_config(models[f.model_id]).parameters() / 1e9 for f in figures]
    return {"gpus": sorted({f.gpu for f in figures}), "servers": sorted({f.server for f in figures}),
            "num_gpus": sorted({f.num_gpus for f in figures}), "params_b": [min(sizes), max(sizes)],
            "quantize": sorted({f.quantize for f in figures if f.quantize})}
