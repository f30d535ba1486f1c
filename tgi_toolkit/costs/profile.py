"""`tgi-toolkit profile-gpu`: one card's kernel times in minutes, in the tables the measured-kernel cost model reads.

What it measures, for a model's shapes on one shard of `--num-shard` (tgi_toolkit.costs.measured reads the first
three the way it reads NVIDIA's AIConfigurator database, `systems/data/<gpu>/<op>/<framework>/<version>/`):

- `gemm_perf.parquet`: `x @ W.T` (`torch.nn.functional.linear`, the engine's prompt path; cuBLAS on a card) at the
  model's projections (fused QKV, O, fused gate/up, down, the LM head) over token counts m in a geometric grid
  1..8192, in the model's dtype, and in fp8 (`torch._scaled_mm`) where the card has it;
- `context_attention_perf.parquet`: causal SDPA over `batch_size` prompts of `isl` tokens (`step` 0);
- `generation_attention_perf.parquet`: one query row per sequence over `step` cached positions (`isl` 1), in the
  engine's grouped layout (the query heads sharing a key head are its queries), as the decode step runs it;
- `mem_perf.parquet`: a device-to-device copy of `bytes` bytes (the weight read's bound), with
- `collection_meta.yaml`: the card, torch, CUDA, the driver, the date, and `framework: tgi_toolkit` at its version.

Latencies in milliseconds, each the median of `repeats` timed calls after `warmup` untimed ones: CUDA events on a
card, `time.perf_counter` on a CPU. The grid is walked cheapest first and stops at `budget_s` (5 minutes by
default; the metadata says where); `tiny` profiles a 2-layer toy shape on short grids, in seconds (CI).
"""

from __future__ import annotations

import datetime as dt
import math
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

FRAMEWORK = "tgi_toolkit"
GEMM_KERNEL = "torch.nn.functional.linear"
FP8_KERNEL = "torch._scaled_mm"
ATTENTION_KERNEL = "torch.nn.functional.scaled_dot_product_attention"
GEMM_TOKENS = tuple(2**i for i in range(14))  # 1 .. 8192
GENERATION_BATCHES = (1, 2, 4, 8, 16, 32, 64)
GENERATION_STEPS = (128, 256, 512, 1024, 2048, 4096, 8192)
CONTEXT_BATCHES = (1, 2, 4, 8)
CONTEXT_LENGTHS = (128, 256, 512, 1024, 2048, 4096, 8192)
CONTEXT_TOKENS = 16384  # batch x isl at most: past it a prefill is chunked anyway
COPY_BYTES = tuple(2**i for i in range(20, 32, 2))  # 1 MiB .. 1 GiB
# A toy Llama for `--tiny` (CI on a CPU): the same code, grids a few points long.
TINY_CONFIG = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
               "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 512}
TINY_GRIDS = {"tokens": (1, 4, 16, 64), "generation_batches": (1, 4), "generation_steps": (16, 64),
              "context_batches": (1, 2), "context_lengths": (16, 64), "copy_bytes": (2**16, 2**20)}
DEFAULT_BUDGET_S = 300.0


@dataclass(frozen=True)
class Shard:
    """The sizes one shard computes: heads and KV heads on it, and each projection's (n, k)."""

    heads: int
    kv_heads: int
    head_dim: int
    gemms: dict[str, tuple[int, int]]

    @classmethod
    def of(cls, config: Mapping[str, Any], num_shard: int = 1) -> Shard:
        """Column-parallel QKV and gate/up split n, row-parallel O and down split k, the LM head splits the vocab
        (as TGI shards them); KV heads fewer than shards are replicated, one per shard."""
        heads = int(config["num_attention_heads"])
        kv = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
        hidden, inter = int(config["hidden_size"]), int(config["intermediate_size"])
        if heads % num_shard:
            raise ValueError(f"--num-shard {num_shard} must divide the model's {heads} attention heads")
        h, k = heads // num_shard, max(1, kv // num_shard)
        gemms = {"qkv": ((h + 2 * k) * head_dim, hidden), "o": (hidden, h * head_dim),
                 "gate_up": (2 * inter // num_shard, hidden), "down": (hidden, inter // num_shard),
                 "lm_head": (math.ceil(int(config["vocab_size"]) / num_shard), hidden)}
        return cls(h, k, head_dim, gemms)


@dataclass
class Clock:
    """Median milliseconds of a call: CUDA events around each call on a card, perf_counter on a CPU."""

    device: str
    warmup: int = 3
    repeats: int = 10

    def median_ms(self, call: Callable[[], Any]) -> float:
        import torch

        for _ in range(self.warmup):
            call()
        times = []
        if self.device == "cuda":
            torch.cuda.synchronize()
            for _ in range(self.repeats):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                call()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
        else:
            for _ in range(self.repeats):
                began = time.perf_counter()
                call()
                times.append((time.perf_counter() - began) * 1e3)
        return float(statistics.median(times))


@dataclass
class Profile:
    """The rows measured so far, table by table, and what the budget left out."""

    device_name: str
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.rows.setdefault(table, []).append(row)


def device_name(device: str) -> str:
    """The card's name as torch gives it (the database's `device` column: "NVIDIA H100 80GB HBM3"), or the CPU's."""
    import torch

    if device == "cuda":
        return torch.cuda.get_device_name()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def driver_version() -> str | None:
    """The NVIDIA driver's version from nvidia-smi, or None where there is none."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


def provenance(device: str) -> dict[str, Any]:
    """The card (or CPU), torch, CUDA, the driver, the date, and the toolkit: what a measured table came from."""
    import torch

    from tgi_toolkit.version import __version__

    return {"device": device_name(device), "device_type": device, "torch": str(torch.__version__),
            "cuda": str(torch.version.cuda) if device == "cuda" else None,
            "driver": driver_version() if device == "cuda" else None,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "framework": FRAMEWORK, "version": __version__}


def profile(config: Mapping[str, Any], out: str | Path, *, num_shard: int = 1, device: str = "cuda",
            dtype: str = "bfloat16", tiny: bool = False, budget_s: float = DEFAULT_BUDGET_S,
            clock: Clock | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure `config`'s kernels on `device` and write the tables and `collection_meta.yaml` into `out`; returns
    the metadata written (with `files`, each table's path)."""
    import torch

    from tgi_toolkit.version import __version__

    if tiny:
        config = TINY_CONFIG
    shard = Shard.of(config, num_shard)
    grids = TINY_GRIDS if tiny else {"tokens": GEMM_TOKENS, "generation_batches": GENERATION_BATCHES,
                                     "generation_steps": GENERATION_STEPS, "context_batches": CONTEXT_BATCHES,
                                     "context_lengths": CONTEXT_LENGTHS, "copy_bytes": COPY_BYTES}
    clock = clock or (Clock(device, warmup=1, repeats=3) if tiny else Clock(device))
    meta = provenance(device)
    result = Profile(meta["device"])
    deadline = time.perf_counter() + budget_s
    torch_dtype = getattr(torch, dtype)
    common = {"framework": FRAMEWORK, "version": __version__, "device": result.device_name}
    started = time.perf_counter()
    with torch.inference_mode():
        _copies(result, grids["copy_bytes"], device, clock, deadline)
        _gemms(result, shard, grids["tokens"], device, torch_dtype, dtype, clock, deadline, common)
        _generation(result, shard, grids, device, torch_dtype, dtype, clock, deadline, common)
        _context(result, shard, grids, device, torch_dtype, dtype, clock, deadline, common)
    meta.update(seconds=round(time.perf_counter() - started, 1), budget_s=budget_s, tiny=tiny, num_shard=num_shard,
                dtype=dtype, model={k: v for k, v in config.items() if not str(k).startswith("_")},
                skipped_for_budget=dict(result.skipped))
    meta["files"] = _write(result, Path(out), meta)
    log(f"profile-gpu: {sum(map(len, result.rows.values()))} kernel times on {result.device_name} in "
        f"{meta['seconds']} s -> {out}" + (f" (budget reached: {result.skipped} left out)" if result.skipped else ""))
    return meta


def _within(result: Profile, table: str, deadline: float) -> bool:
    if time.perf_counter() < deadline:
        return True
    result.skipped[table] = result.skipped.get(table, 0) + 1
    return False


def _copies(result: Profile, sizes: tuple[int, ...], device: str, clock: Clock, deadline: float) -> None:
    import torch

    for size in sizes:
        if not _within(result, "mem_perf", deadline):
            continue
        src = torch.empty(size, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        ms = clock.median_ms(partial(dst.copy_, src))
        result.add("mem_perf", {"device": result.device_name, "op_name": "copy", "bytes": size, "latency": ms})


def _gemms(result: Profile, shard: Shard, tokens: tuple[int, ...], device: str, torch_dtype: Any, dtype: str,
           clock: Clock, deadline: float, common: dict[str, Any]) -> None:
    import torch
    import torch.nn.functional as F

    from tgi_toolkit.config.embedded import has_fp8

    fp8 = has_fp8(device)
    for n, k in dict.fromkeys(shard.gemms.values()):  # O and down share (n, k) when hidden == intermediate
        weight = torch.randn(n, k, device=device, dtype=torch_dtype) * 0.02
        w8 = weight.to(torch.float8_e4m3fn) if fp8 else None
        one = torch.ones((), device=device)
        for m in tokens:
            if not _within(result, "gemm_perf", deadline):
                continue
            x = torch.randn(m, k, device=device, dtype=torch_dtype)
            ms = clock.median_ms(partial(F.linear, x, weight))
            result.add("gemm_perf", {**common, "op_name": "gemm", "kernel_source": GEMM_KERNEL, "gemm_dtype": dtype,
                                     "m": m, "n": n, "k": k, "latency": ms})
            if w8 is not None:
                x8 = x.to(torch.float8_e4m3fn)
                try:
                    ms = clock.median_ms(partial(torch._scaled_mm, x8, w8.t(), one, one, out_dtype=torch_dtype))
                except RuntimeError as exc:  # a shape cuBLASLt's fp8 kernels refuse: the bf16 row stands
                    result.skipped[f"fp8 m={m} n={n} k={k}: {exc}"[:120]] = 1
                    continue
                result.add("gemm_perf", {**common, "op_name": "gemm", "kernel_source": FP8_KERNEL,
                                         "gemm_dtype": "fp8", "m": m, "n": n, "k": k, "latency": ms})


def _attention_row(common: dict[str, Any], shard: Shard, op: str, batch: int, isl: int, step: int, dtype: str,
                   ms: float) -> dict[str, Any]:
    return {**common, "op_name": op, "kernel_source": ATTENTION_KERNEL, "batch_size": batch, "isl": isl,
            "num_heads": shard.heads, "num_key_value_heads": shard.kv_heads, "head_dim": shard.head_dim,
            "beam_width": 1, "attn_dtype": dtype, "kv_cache_dtype": dtype, "step": step, "window_size": 0,
            "latency": ms}


def _generation(result: Profile, shard: Shard, grids: Mapping[str, tuple[int, ...]], device: str, torch_dtype: Any,
                dtype: str, clock: Clock, deadline: float, common: dict[str, Any]) -> None:
    import torch
    import torch.nn.functional as F

    group = shard.heads // shard.kv_heads
    for step in grids["generation_steps"]:
        for batch in grids["generation_batches"]:
            if not _within(result, "generation_attention_perf", deadline):
                continue
            q = torch.randn(batch, shard.kv_heads, group, shard.head_dim, device=device, dtype=torch_dtype)
            k = torch.randn(batch, shard.kv_heads, step, shard.head_dim, device=device, dtype=torch_dtype)
            v = torch.randn_like(k)
            ms = clock.median_ms(partial(F.scaled_dot_product_attention, q, k, v))
            result.add("generation_attention_perf",
                       _attention_row(common, shard, "generation_attention", batch, 1, step, dtype, ms))


def _context(result: Profile, shard: Shard, grids: Mapping[str, tuple[int, ...]], device: str, torch_dtype: Any,
             dtype: str, clock: Clock, deadline: float, common: dict[str, Any]) -> None:
    import torch
    import torch.nn.functional as F

    gqa = shard.heads != shard.kv_heads
    for isl in grids["context_lengths"]:
        for batch in grids["context_batches"]:
            if batch * isl > CONTEXT_TOKENS or not _within(result, "context_attention_perf", deadline):
                continue
            q = torch.randn(batch, shard.heads, isl, shard.head_dim, device=device, dtype=torch_dtype)
            k = torch.randn(batch, shard.kv_heads, isl, shard.head_dim, device=device, dtype=torch_dtype)
            v = torch.randn_like(k)
            ms = clock.median_ms(partial(F.scaled_dot_product_attention, q, k, v, is_causal=True, enable_gqa=gqa))
            result.add("context_attention_perf",
                       _attention_row(common, shard, "context_attention", batch, isl, 0, dtype, ms))


TABLE_FILES = ("gemm_perf", "context_attention_perf", "generation_attention_perf", "mem_perf")


def _write(result: Profile, out: Path, meta: dict[str, Any]) -> dict[str, str]:
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    out.mkdir(parents=True, exist_ok=True)
    files = {}
    # the database's parquet types: string (not pandas' large_string), int64, double
    types = {str: pa.string(), int: pa.int64(), float: pa.float64()}
    for table in TABLE_FILES:
        rows = result.rows.get(table)
        if rows:
            path = out / f"{table}.parquet"
            schema = pa.schema([(name, types[type(value)]) for name, value in rows[0].items()])
            pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
            files[table] = str(path)
    # aiconfigurator-core's collection_meta.yaml keys first (schema_version, provenance, runtime, tables), then ours
    doc = {"schema_version": 1, "provenance": "local",
           "runtime": {"framework": FRAMEWORK, "version": meta["version"]},
           "tables": {table: {"status": "complete" if table not in result.skipped else "partial"}
                      for table in files},
           **{k: v for k, v in meta.items() if k != "files"}}
    (out / "collection_meta.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    files["collection_meta"] = str(out / "collection_meta.yaml")
    return files


# -- CLI ------------------------------------------------------------------------------------------------------
def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "profile-gpu", help="measure this card's kernel times (GEMMs, attention, copies) for the measured cost model",
        description="Measure the kernel times `simulate --cost-model measured --kernel-times DIR` reads, on this "
                    "card, for a model's shapes, in at most --budget-s seconds; written as NVIDIA's AIConfigurator "
                    "tables (parquet, milliseconds) with a collection_meta.yaml.")
    parser.add_argument("--model", default=None,
                        help="config.json, a model directory, or a shipped model id (e.g. meta-llama/Llama-3.1-8B); "
                             "required unless --tiny")
    parser.add_argument("--num-shard", type=int, default=1, help="tensor-parallel shards: the sizes one GPU computes")
    parser.add_argument("--device", default=None, metavar="{cuda,cpu}",
                        help="cuda (default where torch sees a GPU) or cpu")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--out", required=True, help="folder to write the tables into")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                        help=f"stop measuring after this many seconds (default {DEFAULT_BUDGET_S:.0f})")
    parser.add_argument("--tiny", action="store_true", help="a toy 2-layer shape on short grids, in seconds (CI)")
    parser.set_defaults(func=main)


def main(args: Any) -> int:
    import sys

    from tgi_toolkit.config.embedded import UnsupportedSetting, resolve_device
    from tgi_toolkit.planner.shape import load_config

    try:
        device = resolve_device(args.device)
        if args.num_shard < 1:
            raise ValueError(f"--num-shard must be >= 1; got {args.num_shard}")
        if not args.budget_s > 0:
            raise ValueError(f"--budget-s must be > 0 seconds; got {args.budget_s}")
        if args.model is None and not args.tiny:
            raise ValueError("--model is required (a config.json, a model directory or a shipped id) unless --tiny")
        config = TINY_CONFIG if args.tiny else load_config(args.model)
        Shard.of(config, args.num_shard)  # a bad split is refused before anything is measured
    except (UnsupportedSetting, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    profile(config, args.out, num_shard=args.num_shard, device=device, dtype=args.dtype, tiny=args.tiny,
            budget_s=args.budget_s)
    return 0
