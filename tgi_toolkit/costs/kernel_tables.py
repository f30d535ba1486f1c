"""Kernel times measured on a card, as tables and the curves read from them: NVIDIA's AIConfigurator operator
database (the PyPI package `aiconfigurator-core`, read in place with pandas: `<package>/systems/data/<system>/<op>/
<framework>/<version>/*.parquet`, latencies in milliseconds per call of one layer's kernel) or a folder of the same
tables that `tgi-toolkit profile-gpu` measured on a user's own card.

Between grid points a time is interpolated in log-log space; past the grid it scales linearly with the work (tokens,
batch, KV length) from the last point. tgi_toolkit.costs.measured prices a forward from these curves.
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tgi_toolkit.costs.server_profiles import version_tuple

TABLES = {"gemm": ("gemm", "gemm_perf"), "context_attention": ("attention", "context_attention_perf"),
          "generation_attention": ("attention", "generation_attention_perf"),
          "allreduce": ("comm", "custom_allreduce_perf"), "nccl": ("comm", "nccl_perf"), "moe": ("moe", "moe_perf"),
          # the toolkit's own (costs.profile): GEMMs compiled as the engine's decode layers compile them, and the
          # host's seconds a torch call
          "compiled_gemm": ("gemm", "compiled_gemm_perf"), "host": ("host", "host_perf")}


def database_root() -> Path:
    """Where aiconfigurator-core's tables are installed (an ImportError names the package when it is not)."""
    try:
        import aiconfigurator_core
    except ImportError as exc:  # pragma: no cover - the README's set-up installs it
        raise ImportError("the measured cost model reads NVIDIA's operator database: pip install "
                          "aiconfigurator-core (the README's set-up does)") from exc
    return Path(aiconfigurator_core.__file__).parent / "systems" / "data"


def versions_held(system: str, op: str, framework: str) -> list[str]:
    folder = database_root() / system / TABLES[op][0] / framework
    name = TABLES[op][1] + ".parquet"
    return sorted((p.name for p in folder.iterdir() if (p / name).exists()), key=_order) if folder.is_dir() else []


def _order(version: str) -> tuple[int, int, int]:
    return version_tuple(version) or (0, 0, 0)


def nearest_version(held: list[str], wanted: str | None) -> str:
    """The version of `held` nearest `wanted` (major, minor, patch); the newest when none is wanted."""
    target = version_tuple(wanted or "")
    if target is None:
        return held[-1]
    return min(held, key=lambda v: (sum(abs(a - b) * w for a, b, w in zip(_order(v), target, (10_000, 100, 1),
                                                                             strict=True)), -held.index(v)))


@dataclass
class KernelTables:
    """One card's kernel times, op by op (a DataFrame each, aiconfigurator-core's columns), and where each came
    from ("h100_sxm, vllm 0.24.0")."""

    tables: dict[str, Any]
    sources: dict[str, str]
    _grids: dict[str, GemmGrid] = field(default_factory=dict, repr=False)

    def gemm(self, dtype: str) -> GemmGrid:
        """The GEMM grid of `dtype` (KeyError when the table has none), built once."""
        if dtype not in self._grids:
            self._grids[dtype] = GemmGrid.of(self.tables["gemm"], dtype)
        return self._grids[dtype]

    @classmethod
    def database(cls, system: str, framework: str, version: str | None = None) -> KernelTables:
        """The database's tables for `system` measured inside `framework`, each op at the version nearest
        `version` (the newest when None); the all-reduce from NCCL's table where the framework has none.
        Read once per process and shared (the files are tens of megabytes)."""
        return _database(system, framework, version)

    @classmethod
    def read_database(cls, system: str, framework: str, version: str | None) -> KernelTables:
        import pandas as pd

        tables, sources = {}, {}
        for op in ("gemm", "context_attention", "generation_attention", "moe", "allreduce"):
            held = versions_held(system, op, framework)
            if held:
                v = nearest_version(held, version)
                tables[op] = pd.read_parquet(database_root() / system / TABLES[op][0] / framework / v /
                                             (TABLES[op][1] + ".parquet"))
                sources[op] = f"{system}, {framework} {v}"
        held = versions_held(system, "nccl", "nccl")
        if held:
            v = held[-1]
            tables["nccl"] = pd.read_parquet(database_root() / system / "comm" / "nccl" / v / "nccl_perf.parquet")
            sources["nccl"] = f"{system}, nccl {v}"
        return cls(tables, sources)

    @classmethod
    def from_dir(cls, path: str | Path) -> KernelTables:
        """Tables a profile run wrote (`tgi-toolkit profile-gpu`): `<op table>.parquet` files in one folder."""
        import pandas as pd

        folder = Path(path)
        if not folder.is_dir():
            raise ValueError(f"kernel_times: {str(folder)!r} is not a folder of kernel tables")
        tables, sources = {}, {}
        for op, (_, name) in TABLES.items():
            file = folder / f"{name}.parquet"
            if file.exists():
                tables[op] = pd.read_parquet(file)
                device = str(tables[op]["device"].iloc[0]) if "device" in tables[op] and len(tables[op]) else "?"
                sources[op] = f"{folder.name} ({device}, measured by profile-gpu)"
        if not tables:
            raise ValueError(f"kernel_times: {str(folder)!r} holds none of "
                             f"{', '.join(n + '.parquet' for _, n in TABLES.values())}")
        return cls(tables, sources)


@functools.lru_cache(maxsize=32)
def _database(system: str, framework: str, version: str | None) -> KernelTables:
    return KernelTables.read_database(system, framework, version)


@dataclass(frozen=True)
class Curve:
    """Latency (seconds) against one size on a grid, interpolated in log-log space; below the grid the first
    point's (a kernel's floor), above it scaled in proportion to the size from the last point."""

    xs: np.ndarray
    ys: np.ndarray
    # the logs as plain floats: a simulation prices tens of thousands of forwards, each a few lookups, and
    # bisecting a list is ten times quicker than numpy on one scalar
    _lx: list[float] = field(init=False, repr=False, compare=False)
    _ly: list[float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_lx", [math.log(x) for x in self.xs])
        object.__setattr__(self, "_ly", [math.log(y) for y in self.ys])

    def __call__(self, x: float) -> float:
        if x <= 0:
            return 0.0
        lx, ly = self._lx, self._ly
        if x > self.xs[-1]:
            return float(self.ys[-1]) * x / float(self.xs[-1])
        at = math.log(x)
        i = bisect.bisect_left(lx, at)
        if i == 0:
            return math.exp(ly[0])
        w = (at - lx[i - 1]) / (lx[i] - lx[i - 1])
        return math.exp(ly[i - 1] + w * (ly[i] - ly[i - 1]))

    def beyond(self, x: float) -> bool:
        return x > self.xs[-1]

    @classmethod
    def of(cls, xs: Any, ys: Any) -> Curve:
        pairs = sorted((float(x), float(y)) for x, y in zip(xs, ys, strict=True) if y == y and y > 0)
        if not pairs:
            raise ValueError("no measured point")
        return cls(np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]))


@dataclass(frozen=True)
class Surface:
    """Latency against (batch, length): one Curve over length for each measured batch size, interpolated
    across batch sizes in log-log space, scaled in proportion to the batch past the largest."""

    batches: np.ndarray
    curves: tuple[Curve, ...]
    _lb: list[float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_lb", [math.log(b) for b in self.batches])

    def __call__(self, batch: float, length: float) -> float:
        if batch <= 0:
            return 0.0
        b = self.batches
        if batch >= b[-1]:
            return self.curves[-1](length) * batch / float(b[-1])
        if batch <= b[0]:
            return self.curves[0](length)
        i = bisect.bisect_left(self._lb, math.log(batch))
        lo, hi = self.curves[i - 1](length), self.curves[i](length)
        w = (math.log(batch) - self._lb[i - 1]) / (self._lb[i] - self._lb[i - 1])
        return math.exp((1 - w) * math.log(lo) + w * math.log(hi))

    @classmethod
    def of(cls, frame: Any, batch: str, length: str) -> Surface:
        curves, batches = [], []
        for b, group in frame.groupby(batch):
            try:
                curves.append(Curve.of(group[length], group["latency"] / 1e3))
                batches.append(float(b))
            except ValueError:
                continue
        if not curves:
            raise ValueError("no measured point")
        return cls(np.array(batches), tuple(curves))


def nearest_value(values: Any, want: float) -> float:
    values = sorted({float(v) for v in values})
    return min(values, key=lambda v: (abs(math.log(v / want)), v))


@dataclass(frozen=True)
class GemmGrid:
    """One dtype's GEMM times as an array over the measured n x k x m grid (NaN where not measured), the
    fastest kernel the framework has for each shape."""

    ns: np.ndarray
    ks: np.ndarray
    ms: np.ndarray
    seconds: np.ndarray

    @classmethod
    def of(cls, table: Any, dtype: str) -> GemmGrid:
        rows = table[table["gemm_dtype"] == dtype]
        if rows.empty:
            raise KeyError(dtype)
        best = rows.groupby(["n", "k", "m"])["latency"].min()
        ns, ks, ms = (np.array(sorted(best.index.get_level_values(x).unique()), dtype=float) for x in "nkm")
        cube = np.full((len(ns), len(ks), len(ms)), np.nan)
        idx = [np.searchsorted(axis, best.index.get_level_values(x).to_numpy(dtype=float))
               for axis, x in ((ns, "n"), (ks, "k"), (ms, "m"))]
        cube[idx[0], idx[1], idx[2]] = best.to_numpy() / 1e3
        return cls(ns, ks, ms, cube)

    def column(self, i: int, j: int) -> Curve | None:
        try:
            return Curve.of(self.ms, self.seconds[i, j])
        except ValueError:
            return None

    def curve(self, n: int, k: int) -> tuple[Curve, str]:
        """Seconds of one GEMM of `n` output and `k` input features against its token count m: bilinear in
        log n, log k between the measured shapes around it; else the nearest measured shape scaled by n k."""
        def bracket(axis: np.ndarray, x: float) -> tuple[int, int]:
            hi = int(np.searchsorted(axis, x))
            if hi < len(axis) and axis[hi] == x:
                return hi, hi
            return max(hi - 1, 0), min(hi, len(axis) - 1)

        (n0, n1), (k0, k1) = bracket(self.ns, n), bracket(self.ks, k)
        corners = {(a, b): self.column(a, b) for a in {n0, n1} for b in {k0, k1}}
        inside = self.ns[n0] <= n <= self.ns[n1] and self.ks[k0] <= k <= self.ks[k1]
        if inside and all(c is not None and len(c.xs) == len(self.ms) for c in corners.values()):
            wn = 0.0 if n1 == n0 else math.log(n / self.ns[n0]) / math.log(self.ns[n1] / self.ns[n0])
            wk = 0.0 if k1 == k0 else math.log(k / self.ks[k0]) / math.log(self.ks[k1] / self.ks[k0])
            logs = {c: np.log(curve.ys) for c, curve in corners.items()}
            low = (1 - wk) * logs[(n0, k0)] + wk * logs[(n0, k1)]
            high = (1 - wk) * logs[(n1, k0)] + wk * logs[(n1, k1)]
            return Curve(self.ms, np.exp((1 - wn) * low + wn * high)), "interpolated"
        measured = [(i, j) for i in range(len(self.ns)) for j in range(len(self.ks))
                    if np.isfinite(self.seconds[i, j]).all()]
        i, j = min(measured, key=lambda c: abs(math.log(self.ns[c[0]] / n)) + abs(math.log(self.ks[c[1]] / k)))
        scale = n * k / (self.ns[i] * self.ks[j])
        return Curve(self.ms, self.seconds[i, j] * scale), f"scaled from n={self.ns[i]:.0f}, k={self.ks[j]:.0f}"


def attention_surface(table: Any, heads: int, kv_heads: int, head_dim: int, length: str,
                      *, by: str) -> tuple[Surface, str]:
    """One layer's attention (context: over prompt length `isl`; generation: over KV length `step`) for the
    model's heads per GPU, from the rows nearest them; a time measured at other head counts is scaled by the
    heads (`by`: 'num_heads' for context attention, compute-bound, 'num_key_value_heads' for generation,
    which reads the KV cache)."""
    rows = table
    for column, value in (("kv_cache_dtype", "bfloat16"), ("attn_dtype", "bfloat16"), ("window_size", 0),
                          ("beam_width", 1)):
        if column in rows and (rows[column] == value).any():
            rows = rows[rows[column] == value]
    note = "measured"
    picked = {}
    for column, want in (("head_dim", head_dim), ("num_key_value_heads", kv_heads), ("num_heads", heads)):
        have = nearest_value(rows[column].unique(), want)
        if have != want:
            note = "scaled"
        picked[column] = have
        rows = rows[rows[column] == have]
    rows = rows.groupby(["batch_size", length], as_index=False)["latency"].min()
    scale = {"num_heads": heads, "num_key_value_heads": kv_heads}[by] / picked[by] * head_dim / picked["head_dim"]
    rows["latency"] = rows["latency"] * scale
    return Surface.of(rows, "batch_size", length), note


def moe_curve(table: Any, s: Any, n: int, dtype: str | None) -> tuple[Curve | None, str]:
    """The MoE layer's seconds against tokens from the database's MoE table, at model shape `s`'s experts, top-k,
    expert width and `n`-way TP split (all experts on every GPU, each GPU a slice of every expert: vLLM's default
    without expert parallelism), and a note of how it was read."""
    rows = table[(table["moe_dtype"] == (dtype or "bfloat16")) & (table["moe_ep_size"] == 1)]
    if rows.empty:
        return None, ""
    for column, want in (("num_experts", s.num_experts), ("topk", s.experts_per_token),
                         ("moe_tp_size", n)):
        rows = rows[rows[column] == nearest_value(rows[column].unique(), want)]
    dist = "power_law_1.01" if (rows["distribution"] == "power_law_1.01").any() else "balanced"
    rows = rows[rows["distribution"] == dist]
    inter = s.expert_intermediate_size or s.intermediate_size
    key = min({(h, i) for h, i in zip(rows["hidden_size"], rows["inter_size"], strict=True)},
              key=lambda c: abs(math.log(c[0] / s.hidden_size)) + abs(math.log(c[1] / inter)))
    rows = rows[(rows["hidden_size"] == key[0]) & (rows["inter_size"] == key[1])]
    best = rows.groupby("num_tokens", as_index=False)["latency"].min()
    scale = s.hidden_size * inter / (key[0] * key[1])
    curve = Curve.of(best["num_tokens"], best["latency"] / 1e3 * scale)
    note = "measured shape" if scale == 1 else f"scaled from hidden {key[0]}, expert width {key[1]}"
    return curve, f"{dist} routing, {note}"


def comm_curve(table: Any, num_gpus: int, kernel: str | None) -> Curve | None:
    """One all-reduce's seconds against its message bytes at `num_gpus` (None when not measured there)."""
    rows = table[(table["num_gpus"] == num_gpus)]
    if "op_name" in rows:
        rows = rows[rows["op_name"] == "all_reduce"]
    for column in ("allreduce_dtype", "nccl_dtype"):
        if column in rows and rows[column].nunique() > 1:
            rows = rows[rows[column].isin(["bfloat16", "half"])]
    if kernel is not None:
        rows = rows[rows["kernel_source"] == kernel]
    if rows.empty:
        return None
    best = rows.groupby("message_size", as_index=False)["latency"].min()
    return Curve.of(best["message_size"], best["latency"] / 1e3)
