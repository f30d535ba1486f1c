"""`tgi-toolkit profile-gpu`: one card's kernel times in minutes, in the tables the measured-kernel cost model reads.

What it measures, for a model's shapes on one shard of `--num-shard` (tgi_toolkit.costs.measured reads the first
three the way it reads NVIDIA's AIConfigurator database, `systems/data/<gpu>/<op>/<framework>/<version>/`):

- `gemm_perf.parquet`: `x @ W.T` (`torch.nn.functional.linear`, the engine's prompt path; cuBLAS on a card) at the
  model's projections (fused QKV, O, fused gate/up, down, the LM head) over token counts m in a geometric grid
  1..8192, in the model's dtype, and in fp8 (`torch._scaled_mm`) where the card has it;
- `context_attention_perf.parquet`: causal SDPA over `batch_size` prompts of `isl` tokens (`step` 0);
- `generation_attention_perf.parquet`: one query row per sequence over `step` cached positions (`isl` 1), in the
  engine's grouped layout (the query heads sharing a key head are its queries), as the decode step runs it;
- `mem_perf.parquet`: a device-to-device copy of `bytes` bytes (the weight read's bound);
- `host_perf.parquet` (the toolkit's own): the host's seconds to issue a small kernel from Python (`torch_call`)
  and, on a card, to launch a CUDA graph (`graph_replay`): what an eager forward's calls cost beside its kernels;
- `compiled_gemm_perf.parquet` (the toolkit's own table, in `gemm_perf`'s columns): the four projections of a decoder
  layer at the engine's `--compile-sizes` (one row by default on a card), compiled as the engine compiles its decode
  layers there (inductor, config.embedded's CUDA_COMPILE_OPTIONS) and timed as its CUDA graphs replay them; the
  LM head stays outside the engine's compiled layers, and so out of this table; with
- `collection_meta.yaml`: the card, torch, CUDA, the driver, the date, and `framework: tgi_toolkit` at its version.

Latencies in milliseconds, each the median of `repeats` timed calls after `warmup` untimed ones: CUDA events on a
card, `time.perf_counter` on a CPU; a compiled GEMM's median is of graph replays of 20 calls on a card, so that no
launch from Python is counted, and so is any other kernel's timed under 0.5 ms (a GEMM's over copies of its weight
past the card's L2: kernel_timing's GRAPH_BELOW_MS, L2_BYTES; `timing` in the metadata). The grid is walked cheapest
first, the compiled GEMMs last, and stops at `budget_s` (5 minutes by default; the metadata says where); `tiny`
profiles a 2-layer toy shape on short grids, in seconds (CI).
"""

from __future__ import annotations

import datetime as dt
import platform
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tgi_toolkit.costs.kernel_timing import TIMING, Clock, Profile, Shard, Walk

FRAMEWORK = "tgi_toolkit"
GEMM_TOKENS = tuple(2**i for i in range(14))  # 1 .. 8192
GENERATION_BATCHES = (1, 2, 4, 8, 16, 32, 64)
GENERATION_STEPS = (128, 256, 512, 1024, 2048, 4096, 8192)
CONTEXT_BATCHES = (1, 2, 4, 8)
CONTEXT_LENGTHS = (128, 256, 512, 1024, 2048, 4096, 8192)
COPY_BYTES = tuple(2**i for i in range(20, 32, 2))  # 1 MiB .. 1 GiB
# A toy Llama for `--tiny` (CI on a CPU): the same code, grids a few points long.
TINY_CONFIG = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
               "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 512}
TINY_GRIDS = {"tokens": (1, 4, 16, 64), "generation_batches": (1, 4), "generation_steps": (16, 64),
              "context_batches": (1, 2), "context_lengths": (16, 64), "copy_bytes": (2**16, 2**20)}
DEFAULT_BUDGET_S = 300.0


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


def nvidia_smi(field: str) -> str | None:
    """One `nvidia-smi --query-gpu` field of the first card (driver_version, uuid, ...), or None where there is none."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


def provenance(device: str) -> dict[str, Any]:
    """The card (or CPU) and its UUID, torch, CUDA, the driver, the date, and the toolkit: what a measured table came
    from."""
    import torch

    from tgi_toolkit.version import __version__

    return {"device": device_name(device), "device_type": device, "torch": str(torch.__version__),
            "cuda": str(torch.version.cuda) if device == "cuda" else None,
            "driver": nvidia_smi("driver_version") if device == "cuda" else None,
            # which card: leases of one kind may lend different cards, and the kernel tables move between them
            "card_uuid": nvidia_smi("uuid") if device == "cuda" else None,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "framework": FRAMEWORK, "version": __version__}


def profile(config: Mapping[str, Any], out: str | Path, *, num_shard: int = 1, device: str = "cuda",
            dtype: str = "bfloat16", tiny: bool = False, budget_s: float = DEFAULT_BUDGET_S,
            compile_sizes: Sequence[int] | None = None, clock: Clock | None = None,
            log: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure `config`'s kernels on `device` and write the tables and `collection_meta.yaml` into `out`; returns
    the metadata written (with `files`, each table's path). `compile_sizes`: the row counts of the compiled GEMMs
    (None: the engine's default on a card, COMPILE_SIZES_DEFAULT, and none on a CPU)."""
    import torch

    from tgi_toolkit.config.embedded import COMPILE_SIZES_DEFAULT
    from tgi_toolkit.version import __version__

    if compile_sizes is None:
        compile_sizes = COMPILE_SIZES_DEFAULT if device == "cuda" else ()
    if tiny:
        config = TINY_CONFIG
    shard = Shard.of(config, num_shard)
    grids = TINY_GRIDS if tiny else {"tokens": GEMM_TOKENS, "generation_batches": GENERATION_BATCHES,
                                     "generation_steps": GENERATION_STEPS, "context_batches": CONTEXT_BATCHES,
                                     "context_lengths": CONTEXT_LENGTHS, "copy_bytes": COPY_BYTES}
    clock = clock or (Clock(device, warmup=1, repeats=3) if tiny else Clock(device))
    meta = provenance(device)
    result = Profile(meta["device"])
    walk = Walk(result, shard, device, dtype, clock, time.perf_counter() + budget_s,
                {"framework": FRAMEWORK, "version": __version__, "device": result.device_name})
    started = time.perf_counter()
    with torch.inference_mode():
        walk.copies(grids["copy_bytes"])
        walk.host()
        walk.gemms(grids["tokens"])
        walk.generation_attention(grids["generation_batches"], grids["generation_steps"])
        walk.context_attention(grids["context_batches"], grids["context_lengths"])
        walk.compiled_gemms(tuple(compile_sizes))
    meta.update(seconds=round(time.perf_counter() - started, 1), budget_s=budget_s, tiny=tiny, num_shard=num_shard,
                dtype=dtype, compile_sizes=list(compile_sizes), timing=TIMING if device == "cuda" else "one call",
                model={k: v for k, v in config.items() if not str(k).startswith("_")},
                skipped_for_budget=dict(result.skipped),
                retimed={row: [round(first, 6), round(second, 6)] for row, (first, second) in result.retimed.items()})
    meta["files"] = _write(result, Path(out), meta)
    log(f"profile-gpu: {sum(map(len, result.rows.values()))} kernel times on {result.device_name} in "
        f"{meta['seconds']} s -> {out}" + (f" (budget reached: {result.skipped} left out)" if result.skipped else "")
        + (f"; {len(result.retimed)} GEMM(s) timed again (collection_meta.yaml: retimed)" if result.retimed else ""))
    return meta


TABLE_FILES = ("gemm_perf", "context_attention_perf", "generation_attention_perf", "mem_perf", "compiled_gemm_perf",
               "host_perf")


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
    parser.add_argument("--compile-sizes", default=None, metavar="N[,N...]",
                        help="row counts at which to time the decode layers' GEMMs compiled as the engine's "
                             "--compile-sizes compiles them (default: the engine's, 1, on a card; none on a CPU; "
                             "0: none)")
    parser.set_defaults(func=main)


def main(args: Any) -> int:
    import sys

    from tgi_toolkit.config.embedded import UnsupportedSetting, parse_sizes, resolve_device
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
        sizes = None if args.compile_sizes is None else parse_sizes(args.compile_sizes, "--compile-sizes")
    except (UnsupportedSetting, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    profile(config, args.out, num_shard=args.num_shard, device=device, dtype=args.dtype, tiny=args.tiny,
            budget_s=args.budget_s, compile_sizes=sizes)
    return 0

