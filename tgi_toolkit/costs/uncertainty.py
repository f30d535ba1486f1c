"""How far to trust a GPU prediction: the error the roofline (or the measured-kernel model) made on published
figures it was not fitted to.

benchmarks/gpu_accuracy.py fits the roofline's factors leaving one publication out at a time, and predicts a
test set that no fit or design choice saw; it writes, per regime, how far those predictions fell from the
published figures (data/reference/gpu_fit.json). A prediction carries the worse of its regime's two errors,
and says so when it lies outside what the corpus covers (a GPU, server, model size or shard count no
published figure measured): there the error is a guess.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.costs.linear import CostModel

REGIMES = ("batch1_decode", "batched_decode", "prefill", "tensor_parallel")
REGIME_LABELS = {"batch1_decode": "batch-1 decode", "batched_decode": "batched decode",
                 "prefill": "prefill / TTFT", "tensor_parallel": "tensor parallel"}
METRICS = ("ttft", "tpot", "e2e", "throughput")
FIT_FILE = "gpu_fit.json"
MIN_TEST_FIGURES = 5  # fewer test-set figures of a regime say too little to move its stated error


def regime_of(metric: str, *, rows: int = 1, num_shard: int = 1) -> str:
    """The corpus regime a predicted metric falls in: anything on several GPUs is tensor parallel; time to
    first token is prefill; per-token time and throughput are decode, batch-1 or batched by `rows`."""
    if metric not in METRICS:
        raise ValueError(f"metric {metric!r} is not one of {', '.join(METRICS)}")
    if num_shard > 1:
        return "tensor_parallel"
    if metric == "ttft":
        return "prefill"
    return "batch1_decode" if rows <= 1 else "batched_decode"


@dataclass(frozen=True)
class Uncertainty:
    regime: str
    error: float | None  # 80th percentile of |predicted / published - 1| over held-out figures of the regime
    median_error: float | None
    figures: int  # how many published figures that error comes from
    covered: bool  # the prediction lies inside what the corpus measured
    note: str = ""  # why not covered, or why no error is known

    def label(self) -> str:
        """'±20 % (at least 80 % of 24 held-out published batched decode figures within it)', and the coverage
        note. Each check has 80 % of its figures within its own 80th percentile, so the worse check's holds at
        least 80 % of them all."""
        if self.error is None:
            text = "error unknown"
        else:
            text = (f"±{100 * self.error:.0f} % (at least 80 % of {self.figures} held-out published "
                    f"{REGIME_LABELS.get(self.regime, self.regime)} figures within it)")
        return f"{text}; {self.note}" if self.note else text

    def band(self, value: float) -> tuple[float, float]:
        """(low, high) around `value`; NaNs when no error is known."""
        if self.error is None:
            return math.nan, math.nan
        return value * (1 - self.error), value * (1 + self.error)


def fit_path() -> Path:
    from tgi_toolkit.data_folder import REFERENCE_SUBDIR, default_data_dir

    return default_data_dir() / REFERENCE_SUBDIR / FIT_FILE


@functools.lru_cache(maxsize=4)
def load_fit(path: str | None = None) -> dict[str, Any]:
    """The fit benchmarks/gpu_accuracy.py wrote; {} when there is none."""
    p = Path(path) if path else fit_path()
    return json.loads(p.read_text()) if p.is_file() else {}


def coverage_notes(cost: Any, fit: dict[str, Any]) -> list[str]:
    """Why a roofline lies outside the corpus: a GPU, server, shard count, size or quantization never measured."""
    cov = fit.get("coverage") or {}
    notes = []
    if cov.get("gpus") and cost.gpu not in cov["gpus"]:
        unmeasured = "" if cost.reach.measured else \
            " nor a measured matmul or copy speed (its datasheet at the measured cards' typical fraction)"
        notes.append(f"no published figure on {cost.gpu}{unmeasured}")
    if cov.get("servers") and cost.server not in cov["servers"]:
        notes.append(f"no published figure of {cost.server}")
    if cov.get("num_gpus") and cost.num_shard > max(cov["num_gpus"]):
        notes.append(f"no published figure on more than {max(cov['num_gpus'])} GPUs")
    low, high = cov.get("params_b") or (0, math.inf)
    size = cost.shape.parameters() / 1e9
    if not (low / 1.5 <= size <= high * 1.5):
        notes.append(f"a {size:.1f}B-parameter model, outside the {low:.1f}B-{high:.0f}B the corpus measured")
    if cost.quantize and cov.get("quantize") is not None and cost.quantize not in cov["quantize"]:
        notes.append(f"no published figure quantized with {cost.quantize}")
    return notes


def regime_error(fit: dict[str, Any], regime: str) -> tuple[float, float, int] | None:
    """(80th-percentile error, median error, figures) of `regime`: the larger of the two checks' (leave one
    source out over the corpus; the test set, where it has at least MIN_TEST_FIGURES of the regime), since a
    prediction is bet on whichever is worse."""
    loso = ((fit.get("cross_validated") or {}).get("by_regime") or {}).get(regime)
    if not loso:
        return None
    test = ((fit.get("test_set") or {}).get("by_regime") or {}).get(regime)
    checks = [loso, *([test] if test and test["figures"] >= MIN_TEST_FIGURES else [])]
    worst = max(checks, key=lambda c: c["p80_error"])
    return float(worst["p80_error"]), float(worst["median_error"]), sum(int(c["figures"]) for c in checks)


def uncertainty(cost: CostModel, metric: str, *, rows: int = 1, fit: dict[str, Any] | None = None) -> Uncertainty:
    """The held-out error of `cost` (a RooflineCostModel) predicting `metric` ('ttft', 'tpot', 'e2e',
    'throughput') with `rows` sequences decoding together."""
    fit = load_fit() if fit is None else fit
    regime = regime_of(metric, rows=rows, num_shard=getattr(cost, "num_shard", 1))
    if not hasattr(cost, "kernel_seconds"):  # a calibrated profile is judged where it was measured
        return Uncertainty(regime, None, None, 0, False, "a calibrated profile: no published GPU figure judges it "
                                                          "(benchmarks/simulate_accuracy.py does, on its machine)")
    # kernel times read from measured tables are judged by their own record: nothing was fitted to the
    # corpus, so every published figure they priced is held out (gpu_accuracy.py's "measured" section)
    measured = bool(getattr(cost, "priced", None))
    known = regime_error(fit.get("measured") or {}, regime) if measured else regime_error(fit, regime)
    if known is None:
        return Uncertainty(regime, None, None, 0, False,
                           "no cross-validated error: run benchmarks/gpu_accuracy.py to write " + FIT_FILE)
    notes = coverage_notes(cost, fit) if hasattr(cost, "shape") else []
    outside = "outside the published corpus: " + ", ".join(notes) if notes else ""
    return Uncertainty(regime, known[0], known[1], known[2], not notes, outside)


def accuracy_table(fit: dict[str, Any] | None = None) -> Any:
    """The GPU models' error on figures they were not fitted to, one row per model, check and regime (and all):
    the roofline leaving one source out over the corpus and on the test set no design choice saw; the
    measured-kernel model, fitted to nothing, on the corpus's and the test set's figures on cards it covers
    (gpu_fit.json's, as gpu_accuracy.py wrote)."""
    import pandas as pd

    fit = load_fit() if fit is None else fit
    if not fit:
        raise FileNotFoundError(f"no {FIT_FILE}: run benchmarks/gpu_accuracy.py")
    rows = []
    measured = fit.get("measured") or {}
    checks = (("roofline", "leave one source out", fit["cross_validated"]),
              ("roofline", "test set", fit.get("test_set") or {}),
              ("measured kernels", "corpus, nothing fitted", measured.get("cross_validated") or {}),
              ("measured kernels", "test set", measured.get("test_set") or {}))
    for model, name, part in checks:
        for regime, s in {**(part.get("by_regime") or {}), "all": part.get("all")}.items():
            if s:
                rows.append({"model": model, "check": name, "regime": REGIME_LABELS.get(regime, regime),
                             "figures": s["figures"], "median |error|": s["median_error"],
                             "80th percentile": s["p80_error"], "within ±30 %": s["within_30"]})
    return pd.DataFrame(rows)
