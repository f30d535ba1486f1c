"""The GPU probe (issue 41, 4): what one short lease of a card can tell, in one command of at most 8 minutes.

On whatever device it finds (or `--device`), in this order, into one folder (default
data/measured/gpu/<card>-<date>/):

1. `profile-gpu`: the card's kernel times for the model's shapes (kernels/, tgi_toolkit.costs.profile);
2. predictions, before anything is served: bench's batch table and closed-loop users simulated from the card's
   datasheet (the roofline, tgi_toolkit.costs.roofline) and from the kernel times just measured
   (tgi_toolkit.costs.measured), the latter twice: with the TGI 3 profile's host terms, and with the engine's own
   host (its calls counted from its code at the host's measured seconds a call, its loop between forwards), each
   as bench's Results (predicted/roofline/, predicted/measured/, predicted/measured-host/); and, where another
   card's probe is in data/measured/gpu/ (or `--carry-from`), the `measured` prediction from that card's kernel
   times carried to this card by the two datasheets (predicted/carried/, tgi_toolkit.costs.kernel_carry): issue 41's
   GPU to GPU, judged by what this card then measures;
3. the engine served over HTTP (`tgi-toolkit serve --random-weights`, Llama-3.1-8B's shape; CUDA graphs at the
   batch sizes measured) and measured with the toolkit's own bench: the batch table (batch 1-64) and 1, 8 and 32
   users (measured/);
4. the engine's forwards alone (engine_forwards.json): the runner built in this process after the server has
   gone, its prompt forwards of the batch table (one prompt; B - 1 prompts beside a decode row) and a one-row
   decode step run eagerly, each timed (wall, with the card synchronised), profiled (the card's busy time per
   operator) and counted (torch calls from Python, beside the calls the measured-host rule counts for it): what a
   forward costs without HTTP, against its price; and the
   one-row step as the server builds it, captured with the eager layers and with the compiled ones, and the largest
   batch's step as it serves it (`graph_steps`): against the served steps in the trace, the host's share of a
   step apart from the card's; and the one-prompt forward beside a thread that takes the GIL in slices, as the
   front end's loop does (benchmarks/gil_contention.py): what the front end's Python costs a forward on this host;
5. summary.json and summary.md: every point predicted beside measured, the decode step at batch 1 against the
   weights' read time at the measured copy bandwidth, and the provenance (card, driver, torch, CUDA).

`--device cpu --tiny` runs the same steps on a toy random model in about a minute (CI:
tests/test_gpu_probe.py). A CPU has no datasheet: pass `--card H100` to run the predictions' code anyway, for
that card's datasheet (the summary says so). docs/gpu-probe.md says how to run it on a lent GPU in one call.

One module past 400 lines because it is one script for one lease: every step is carried to the lent machine as
this file with the working tree, and its steps share the plan, the folder and the summary they fill.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import re
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout without installing (the lent GPU's python)
    sys.path.insert(0, str(ROOT))
if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.costs.engine_forward import EngineCalls

MODEL = "meta-llama/Llama-3.1-8B"
# Llama-3.1-8B's config.json (its Hugging Face repository), for a checkout without the shipped shapes
LLAMA_31_8B = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "head_dim": 128,
    "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "tie_word_embeddings": False, "hidden_act": "silu", "bos_token_id": 128000, "eos_token_id": 128001,
    "torch_dtype": "bfloat16"}
# A toy Llama for --tiny: the bundled tokenizer's 49152 ids, so its prompts are in the vocabulary.
TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 49152, "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
PLANS = {
    "full": {"batch_sizes": [1, 2, 4, 8, 16, 32, 64], "sequence_length": 128, "decode_length": 64, "runs": 3,
             "users": [1, 8, 32], "prompt_tokens": 256, "max_new_tokens": 128, "profile_budget_s": 150.0,
             "max_total_tokens": 4096, "max_batch_prefill_tokens": 8192},
    "tiny": {"batch_sizes": [1, 4, 16], "sequence_length": 16, "decode_length": 8, "runs": 2,
             "users": [1, 8], "prompt_tokens": 16, "max_new_tokens": 8, "profile_budget_s": 30.0,
             "max_total_tokens": 256, "max_batch_prefill_tokens": 512, "kv_tokens": 65536},
}
SERVER_PROFILE = "tgi-3"  # the simulator's server: the engine schedules by TGI 3's rules
KINDS = ("roofline", "measured", "measured-host")  # the predictions (`predict`)
# Step 4 starts only this many seconds into the probe, and builds the compiled step only before the second: the
# lease's call stops the probe at 400 s (docs/gpu-probe.md). Step 4 has not run on a card yet: it builds the 8B model
# again (11 s on the H200) and times a few forwards; a compile that missed inductor's cache may take a minute more.
FORWARDS_UNTIL_S = 300.0
COMPILED_UNTIL_S = 240.0
# The served engine logs its compute thread's stack while a forward runs past this (engine.watchdog): on the H200 of
# 2026-11-28 the ramp's prompt forwards took 115-130 ms where the batch table's took 14-18, and one ~1 s with the card
# idle (docs/gpu-probe.md). The line as the engine's log format (engine.serve.LOG_FORMAT) writes it
STALL_MS = 100
STALL_LINE = re.compile(r"^(?P<at>\S+ \S+) WARNING \S+: A forward \((?P<forward>.+?)\) has run (?P<ran_ms>\d+) ms; "
                        r"its thread is in: (?P<where>.*)$")


def requests_for(users: int) -> int:
    """Measured requests at `users` closed-loop users: at least two rounds, and 8 at one user."""
    return max(8, 2 * users)


def launcher_flags(plan: dict[str, Any], device: str) -> list[str]:
    """The engine's limits, the same for the server and the simulator."""
    flags = ["--max-concurrent-requests", str(max(max(plan["batch_sizes"]), max(plan["users"]))),
             "--max-best-of", "1", "--max-total-tokens", str(plan["max_total_tokens"]),
             "--max-input-tokens", str(plan["max_total_tokens"] // 2),
             "--max-batch-prefill-tokens", str(plan["max_batch_prefill_tokens"])]
    if device == "cuda":
        flags += ["--cuda-graphs", ",".join(map(str, plan["batch_sizes"]))]
    return flags


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "device"


def weight_bytes(config: dict[str, Any], dtype_bytes: int = 2) -> int:
    """Bytes a decode step reads: every layer's projections and the LM head (norms and the embedding row are
    negligible)."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    layer = hidden * (heads + 2 * kv) * head_dim + heads * head_dim * hidden + 3 * hidden * inter
    return dtype_bytes * (config["num_hidden_layers"] * layer + config["vocab_size"] * hidden)


def one_row_gemms(kernels: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """A decoder layer's four one-row GEMMs as profile-gpu timed them, cuBLAS's (`F.linear`) and compiled as the
    engine's batch-1 graphs hold them, in microseconds, beside their weights' read time at the copy bandwidth;
    None where the compiled ones were not measured."""
    import pandas as pd

    from tgi_toolkit.costs.engine_forward import compiled_layers
    from tgi_toolkit.costs.kernel_timing import COMPILED_PROJECTIONS, Shard

    path, bandwidth = kernels / "compiled_gemm_perf.parquet", copy_bandwidth(kernels)
    if not path.exists() or not bandwidth:
        return None
    shapes = [Shard.of(config).gemms[name] for name in COMPILED_PROJECTIONS]
    # gemm_perf has compiled_gemm_perf's columns: the cost model's reader sums either table's layer at one row
    compiled, linear = (compiled_layers(pd.read_parquet(table), "bfloat16", shapes, [1]).get(1)
                        for table in (path, kernels / "gemm_perf.parquet"))
    if compiled is None or linear is None:
        return None
    read_us = 1e6 * 2 * sum(n * k for n, k in shapes) / bandwidth
    return {"linear_us": round(linear * 1e6, 2), "compiled_us": round(compiled * 1e6, 2),
            "weight_read_us": round(read_us, 2)}


def copy_bandwidth(kernels: Path) -> float | None:
    """Bytes a second the largest measured copy moved, counting bytes read and written (mem_perf.parquet)."""
    import pandas as pd

    path = kernels / "mem_perf.parquet"
    if not path.exists():
        return None
    table = pd.read_parquet(path)
    biggest = table.loc[table["bytes"].idxmax()]
    return 2 * float(biggest["bytes"]) / (float(biggest["latency"]) / 1e3)


# -- the steps ----------------------------------------------------------------------------------------------
def carry_source(folder: str | None, card: str | None, root: Path = ROOT / "data" / "measured" / "gpu"
                 ) -> Path | None:
    """The probe folder whose kernel times the `carried` prediction reads: `folder` when given, else the newest
    under `root` (by its summary's date) of a card with a datasheet other than `card`; None when there is none."""
    from tgi_toolkit.costs.kernel_carry import table_card
    from tgi_toolkit.costs.kernel_tables import KernelTables
    from tgi_toolkit.planner.gpus import resolve_gpu

    if folder:
        return Path(folder)
    try:
        here = resolve_gpu(card).name if card else None
    except ValueError:
        return None
    found = []
    for candidate in sorted(root.glob("*/summary.json")):
        with contextlib.suppress(ValueError, OSError, KeyError):
            other = table_card(KernelTables.from_dir(candidate.parent / "kernels"))
            if other and other != here:
                found.append((json.loads(candidate.read_text())["provenance"]["date"], candidate.parent))
    return max(found)[1] if here and found else None


def prepare_model(out: Path, config: dict[str, Any], tokenizer: Path | None) -> Path:
    """out/model/: config.json and the tokenizer files the engine reads beside it."""
    folder = out / "model"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if tokenizer is None:
        from tgi_toolkit.models.files import DEFAULT_MODEL_ID, converted_model_dir, resolve_model

        tokenizer = converted_model_dir(resolve_model(DEFAULT_MODEL_ID))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        if (tokenizer / name).is_file():
            shutil.copy(tokenizer / name, folder / name)
    if not (folder / "tokenizer.json").is_file():
        raise SystemExit(f"error: --tokenizer {tokenizer}: no tokenizer.json there")
    return folder


class CappedKV:
    """A cost model whose server holds at most `tokens` tokens of KV: the toy model on a card's datasheet would
    otherwise get hundreds of millions of one-token blocks, which the simulated allocator lists one by one."""

    def __init__(self, cost: Any, tokens: int) -> None:
        self.cost, self.tokens = cost, tokens

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cost, name)

    def server_defaults(self) -> dict[str, Any]:
        server = dict(self.cost.server_defaults())
        for key in ("max_batch_total_tokens", "max_total_tokens"):
            server[key] = min(int(server[key]), self.tokens)
        server["max_input_tokens"] = min(int(server["max_input_tokens"]), self.tokens - 1)
        return server


def predict(kind: str, card: str, model_dir: Path, kernels: Path, plan: dict[str, Any], flags: list[str],
            out: Path, compile_sizes: list[int] | None = None, host_calls: EngineCalls | None = None
            ) -> dict[str, Any]:
    """The simulator's batch table and users for `kind` (KINDS: roofline, the datasheet; measured, the kernel times,
    the decode steps at the engine's `compile_sizes` rows from the compiled GEMMs profile-gpu timed, and the TGI 3
    profile's host terms; measured-host, the same kernels with the engine's own host: its calls counted from its
    code at the host's seconds a call (profile-gpu's host_perf), and its host around them, ENGINE_LOOP; the
    count is `host_calls` where the caller made it, else made here)."""
    from tgi_toolkit.costs.measured import gpu_cost_model

    config = str(model_dir / "config.json")
    if kind == "roofline":
        cost = gpu_cost_model(card, config, cost_model="roofline", server=SERVER_PROFILE)
    else:
        # the engine's own forward (costs.measured's `engine`): its prompt chunks attend one SDPA call each and its
        # elementwise ops run unfused, unlike the fused kernels a TGI the profile stands for would run
        host: dict[str, Any] = {}
        if kind == "measured-host":
            if not (kernels / "host_perf.parquet").exists():
                raise ValueError(f"{kind}: {kernels} has no host_perf.parquet (a profile-gpu of before 2026-11-29 "
                                 "timed no host)")
            from tgi_toolkit.costs.engine_forward import ENGINE_LOOP
            from tgi_toolkit.engine.host_calls import count_calls

            host = {"host_calls": host_calls or count_calls(json.loads(Path(config).read_text())), **ENGINE_LOOP}
        cost = gpu_cost_model(card, config, cost_model="measured", kernel_times=str(kernels), server=SERVER_PROFILE,
                              engine=True, compile_sizes=compile_sizes or (), **host)
    return simulated(cost, plan, flags, out)


def simulated(cost: Any, plan: dict[str, Any], flags: list[str], out: Path) -> dict[str, Any]:
    """The plan's batch table and users simulated with `cost` under the engine's `flags`, as `predict` makes them."""
    from tgi_toolkit import simulate

    if plan.get("kv_tokens"):
        cost = CappedKV(cost, plan["kv_tokens"])
    batch = simulate.run_batch(cost, batch_sizes=plan["batch_sizes"], sequence_length=plan["sequence_length"],
                               decode_length=plan["decode_length"], runs=plan["runs"], config=flags,
                               output=str(out / "batch"))
    users = [simulate.run_concurrency(cost, users=[n], prompt_tokens=plan["prompt_tokens"],
                                      max_new_tokens=plan["max_new_tokens"], requests=requests_for(n), config=flags,
                                      output=str(out / "concurrency")) for n in plan["users"]]
    return {"batch": batch_rows(batch), "concurrency": [r for res in users for r in user_rows(res)]}


def batch_rows(results: Any) -> list[dict[str, Any]]:
    """Per batch size, the medians over runs: prefill latency and decode token latency (bench's batch table)."""
    table = results.batch
    table = table[~table["warmup"]] if "warmup" in table else table
    rows = []
    for size, group in table.groupby("batch_size"):
        rows.append({"batch_size": int(size), "prefill_latency_s": float(group["prefill_latency_s"].median()),
                     "decode_token_latency_s": float(group["decode_token_latency_s"].median()),
                     "decode_throughput_tok_s": float(group["decode_throughput_tok_s"].median())})
    return rows


def user_rows(results: Any) -> list[dict[str, Any]]:
    from tgi_toolkit import schema as S

    rows = []
    for _, point in results.points.iterrows():
        rows.append({"users": int(point[S.USERS]), "ttft_p50_s": float(point[S.stat_column("ttft", "p50")]),
                     "itl_p50_s": float(point[S.stat_column("itl", "p50")]),
                     "output_throughput_tok_s": float(point[S.OUTPUT_THROUGHPUT])})
    return rows


def measure(model_dir: Path, device: str, plan: dict[str, Any], flags: list[str], out: Path,
            health_timeout: float, compile_sizes: str | None = None) -> dict[str, Any]:
    """Serve the random-weight model with the engine (a child process the probe outlives never) and bench it;
    `compile_sizes` is the engine's --compile-sizes (None: its default)."""
    from tgi_toolkit import bench
    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.config.embedded import STALL_MS_ENV
    from tgi_toolkit.server import Server

    config = LauncherConfig.from_cli(["--model-id", str(model_dir), *flags])
    # the forward trace: every forward's shape and seconds (the batch table's two prompt forwards a run apart, and
    # the first of them while the front end takes in the others), which /metrics only sums every 0.25 s
    trace = out / "forwards.jsonl"
    env = {"TGI_TOOLKIT_DEVICE": device, "TGI_TOOLKIT_RANDOM_WEIGHTS": "1", "TGI_TOOLKIT_KV_CACHE_GIB": "0.25",
           "TGI_TOOLKIT_FORWARD_TRACE": str(trace), STALL_MS_ENV: str(STALL_MS),
           **({} if compile_sizes is None else
                                                        {"TGI_TOOLKIT_COMPILE_SIZES": compile_sizes})}
    started = time.perf_counter()
    with Server(config, log_path=out / "engine.log", env=env, health_timeout=health_timeout,
                startup_progress=False) as server:
        ready_s = time.perf_counter() - started
        info = server.info()
        first_byte = trace.stat().st_size if trace.exists() else 0
        batch = bench.run_batch(server.url, batch_sizes=plan["batch_sizes"], sequence_length=plan["sequence_length"],
                                decode_length=plan["decode_length"], runs=plan["runs"], ignore_eos=True,
                                progress=False, output=str(out / "batch"))
        batch_bytes = [first_byte, trace.stat().st_size if trace.exists() else 0]
        users, users_bytes, start = [], {}, batch_bytes[1]
        for n in plan["users"]:
            users.append(bench.run_concurrency(server.url, users=[n], prompt_tokens=plan["prompt_tokens"],
                                               max_new_tokens=plan["max_new_tokens"], requests=requests_for(n),
                                               ignore_eos=True, progress=False, output=str(out / "concurrency")))
            end = trace.stat().st_size if trace.exists() else 0
            users_bytes[str(n)], start = [start, end], end
    # its graphs, the sizes whose layers compiled, and any left eager (why); read so that nothing in it can cost
    # the measurements above (a failure here would send the probe to measure again without the compile)
    log_text = (out / "engine.log").read_text(errors="replace") if (out / "engine.log").is_file() else ""
    built = [line.split(": ", 1)[-1].strip() for line in log_text.splitlines() if "Decode step" in line]
    return {"seconds_to_ready": round(ready_s, 1), "decode_step": built, "info": info, "batch": batch_rows(batch),
            "concurrency": [r for res in users for r in user_rows(res)],
            "trace": {"path": str(trace), "batch_bytes": batch_bytes, "users_bytes": users_bytes},
            "stalls": stall_lines(log_text)}


def stall_lines(log_text: str, most: int = 200) -> list[dict[str, Any]]:
    """The engine log's stall-watch lines (a forward past STALL_MS, where its thread was), the first `most`."""
    found = [m.groupdict() for m in map(STALL_LINE.match, log_text.splitlines()) if m]
    return [{**line, "ran_ms": int(line["ran_ms"])} for line in found[:most]]


def trace_lines(trace: Path, byte_range: list[int]) -> list[dict[str, Any]]:
    """The engine's trace lines (one a forward) written within `byte_range`."""
    with open(trace, "rb") as f:
        f.seek(byte_range[0])
        data = f.read(byte_range[1] - byte_range[0])
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def traced_users(trace: Path, users_bytes: dict[str, list[int]]) -> list[dict[str, Any]]:
    """Per closed-loop point (users), the engine's forwards in the trace its run added: how many, the share of
    their span the engine spent in them (`busy_share`), the slowest forward and the longest gap between two (ms,
    with the forward's or the next one's rpc, rows and tokens), the garbage collector's seconds over the point and at
    most beside one forward (`gc_ms`, `gc_longest_ms`), the graphs torch.compile compiled meanwhile (`compiles`:
    warm-up compiles every shape the engine runs, so any is a miss), and the slowest forward's seconds apart: the
    runner's, the token choice's and the host's around them (`slowest_model_ms`, `slowest_sample_ms`,
    `slowest_host_ms`). On the H200 of 2026-11-28 ramped users' requests waited up to 1.1 s for a first token where
    the batch table's prefill took 0.1-0.4 s, and nothing said whether the engine was in a forward, idle, or the
    client late: a slowest forward of that size is the engine's (its parts and `compiles` say where); a gap of that
    size is the engine's loop, or an empty queue (the client), and its `gc_s` says how much the collector held."""
    def what(line: dict[str, Any]) -> str:
        return f"{line['rpc']} of {line['rows']} rows, {line['tokens']} tokens"

    rows = []
    for users, byte_range in users_bytes.items():
        lines = trace_lines(trace, byte_range)
        row: dict[str, Any] = {"users": int(users), "forwards": len(lines)}
        if len(lines) > 1:
            starts = [line["t"] - line["seconds"] for line in lines]
            slow = max(lines, key=lambda line: line["seconds"])
            gap, after = max((starts[i] - lines[i - 1]["t"], i) for i in range(1, len(lines)))
            row.update(busy_share=round(sum(line["seconds"] for line in lines) / (lines[-1]["t"] - starts[0]), 3),
                       slowest_ms=round(slow["seconds"] * 1e3, 3), slowest=what(slow),
                       longest_gap_ms=round(gap * 1e3, 3), gap_before=what(lines[after]))
            if all("gc_s" in line for line in lines):  # the collector's passes, each stopping the engine
                row.update(gc_ms=round(sum(line["gc_s"] for line in lines) * 1e3, 3),
                           gc_longest_ms=round(max(line["gc_s"] for line in lines) * 1e3, 3))
            if all("compiles" in line for line in lines):
                row.update(compiles=sum(line["compiles"] for line in lines))
            if "model_s" in slow:  # its seconds apart: the runner's, the token choice's, and the host's around them
                model, sample = slow["model_s"], slow.get("sample_s", 0.0)
                row.update(slowest_model_ms=round(model * 1e3, 3), slowest_sample_ms=round(sample * 1e3, 3),
                           slowest_host_ms=round((slow["seconds"] - model - sample) * 1e3, 3))
            for key, name in (("cpu_s", "slowest_cpu_ms"), ("frontend_cpu_s", "slowest_frontend_ms")):
                if slow.get(key) is not None:  # the compute thread's CPU in it, the front end's beside it
                    row[name] = round(slow[key] * 1e3, 3)
        rows.append(row)
    return rows


def traced_batch(trace: Path, batch_bytes: list[int], batch_sizes: list[int], runs: int) -> list[dict[str, Any]]:
    """The batch table's forwards in the engine's trace (the bytes bench's batch runs added), per batch size B:
    the first prompt's forward (a prompt forward of one row, none decoding), the other B - 1 prompts' (the next
    forward: a prompt forward of B rows, one of them decoding) and the decode steps of B rows after it, and the
    engine's time between two forwards before each of those decode steps (`decode_gap_ms`: the line's time less
    the one before it less its seconds: the loop's scheduling, token delivery and input preparation), and the host's
    Python inside each of those steps (`decode_host_ms`: its seconds less the runner's and the token choice's, which
    on a card hold the graph's launch and the wait for it; engine.backend's `split`), each the median over the runs
    where the engine ran them so (TGI 3's rule B8 when the other B - 1 requests were all in by the end of the first
    forward); B = 1 is the one-row prompt forward followed by one-row decode steps. Beside each prompt forward, the
    CPU seconds the compute thread ran in it (`*_cpu_ms`; its wall time less these is the thread off its core: waiting
    for the GIL, or for the card where a sync sleeps) and those the front end's thread ran meanwhile (`*_frontend_ms`:
    the other requests' intake, which holds up a forward whose host issues its kernels from Python; engine.backend).
    Milliseconds; each row's "runs" counts the runs matched (the warm-up run among them). The argument `runs` is the
    table's measured runs a batch size (each after one warm-up run), which bounds how many batch-1 runs there are."""
    import statistics

    lines = trace_lines(trace, batch_bytes)
    parts = ("first", "rest", "decode", "gap", "host", "first_cpu", "first_frontend", "rest_cpu", "rest_frontend")
    found: dict[int, dict[str, list[float]]] = {b: {part: [] for part in parts} for b in batch_sizes}

    def cpu(into: dict[str, list[float]], part: str, line: dict[str, Any]) -> None:
        for key, name in (("cpu_s", "cpu"), ("frontend_cpu_s", "frontend")):
            if line.get(key) is not None:  # None: no front end bound yet; absent: a trace from before 2026-11-30
                into[f"{part}_{name}"].append(line[key])
    # the table runs its smallest batch first: B = 1's runs are the first runs + 1 prompts the trace shows decoding
    # alone (bench's length check before them decodes nothing). A later one is a larger batch's first request whose
    # others came late (a busy machine)
    alone = 0
    for i, line in enumerate(lines[:-1]):
        if not (line["rpc"] == "prefill" and line["rows"] == 1 and not line["decode_rows"]):
            continue
        after = lines[i + 1]
        size = after["rows"] if after["rpc"] == "prefill" and after["decode_rows"] == 1 else \
            1 if after["rpc"] == "decode" and after["rows"] == 1 else None
        alone += size == 1
        if size not in found or (size == 1 and alone > runs + 1):
            continue
        j = i + 2 if size > 1 else i + 1
        decodes, gaps, hosts = [], [], []
        while j < len(lines) and lines[j]["rpc"] == "decode" and lines[j]["rows"] == size:
            decodes.append(lines[j]["seconds"])
            gaps.append(lines[j]["t"] - lines[j - 1]["t"] - lines[j]["seconds"])
            if "model_s" in lines[j]:
                hosts.append(lines[j]["seconds"] - lines[j]["model_s"] - lines[j]["sample_s"])
            j += 1
        # one row decoding until others join is a larger batch whose requests came late (a busy machine), not B = 1
        if size == 1 and j < len(lines) and lines[j]["decode_rows"]:
            continue
        found[size]["first"].append(line["seconds"])
        cpu(found[size], "first", line)
        if size > 1:
            found[size]["rest"].append(after["seconds"])
            cpu(found[size], "rest", after)
        found[size]["decode"].extend(decodes)
        found[size]["gap"].extend(gaps)
        found[size]["host"].extend(hosts)

    def ms(values: list[float]) -> float | None:
        return round(statistics.median(values) * 1e3, 3) if values else None

    return [{"batch_size": b, "runs": len(v["first"]), "first_prompt_ms": ms(v["first"]),
             "other_prompts_ms": ms(v["rest"]), "decode_step_ms": ms(v["decode"]), "decode_gap_ms": ms(v["gap"]),
             "decode_host_ms": ms(v["host"]), "first_prompt_cpu_ms": ms(v["first_cpu"]),
             "first_prompt_frontend_ms": ms(v["first_frontend"]), "other_prompts_cpu_ms": ms(v["rest_cpu"]),
             "other_prompts_frontend_ms": ms(v["rest_frontend"])}
            for b, v in found.items()]


def forward_shapes(plan: dict[str, Any], card: bool = False) -> list[tuple[str, int, bool, bool, bool]]:
    """The forwards `engine_forwards` times: (label, prompts, with a decode row, after cached tokens, cuDNN
    allowed). A batch point of B prompts sent at once is two prompt forwards (the first arrival alone, then the
    other B - 1 beside its first decode row: TGI 3's rule B8, which the engine and the simulator follow); and the
    one-row decode step, eager. Served, the prefix cache found a token or two of most prompts of the largest batch
    (the H200's trace: 63 prompts of 128 tokens, 8,020 computed), which makes them chunks of several lengths after
    cached positions: that forward once more, each prompt after `cached_tokens(i)` cached (the engine pads them into
    one call). On a `card`, the mixed and the cached forwards once more with cuDNN's SDPA allowed where the engine
    leaves it out (attention.NEW_SHAPE_BACKENDS): alone, at a shape timed again and again, a planned cuDNN call is
    at its best (the third probe's mixed forward of 8 rows ran 28.6 ms with cuDNN, 43.9 without)."""
    largest = max(plan["batch_sizes"])
    mixed = [(f"prompt x{b - 1} + decode row", b - 1, True, False) for b in sorted({min(8, largest), largest})
             if b > 1]
    cached = [(f"prompt x{largest - 1} after cached tokens + decode row", largest - 1, True, True)] \
        if largest > 2 else []
    shapes = [(label, *rest, False) for label, *rest in [("prompt x1", 1, False, False), *mixed, *cached]]
    if card:
        shapes += [(f"{label}, cuDNN allowed", *rest, True) for label, *rest in [*mixed[:1], *cached]]
    return [*shapes, ("decode row", 0, True, False, False)]


def cached_tokens(i: int) -> int:
    """Tokens of the i-th prompt cached before its forward in `forward_shapes`' cached shape: 1, 2 or 3."""
    return 1 + i % 3


def engine_forwards(model_dir: Path, device: str, plan: dict[str, Any], cost: Any | None,
                    repeats: int = 3, compiled: bool = True, calls_rule: EngineCalls | None = None
                    ) -> list[dict[str, Any]]:
    """The engine's forwards (`forward_shapes`) on its runner alone, built here on `device` from the random model:
    each one's median wall time (the card synchronised), the card's busy time per operator (torch.profiler), the
    torch calls made from Python (a TorchFunctionMode count: the host's share of an eager forward), and the cost
    model's price for it (`cost`, or none), and the calls `calls_rule` counts for its shape (the measured-host
    prediction's rule, beside the count on this device). The prompt rows store their keys in the prefix pool, as the
    server's do.
    Then the decode steps as the server builds them (`graph_steps`; the one-row step's compiled form only where
    `compiled`), in a cache of the served steps' span bucket, each priced at its own rows."""
    import statistics

    import torch
    from torch.nn.attention import SDPBackend

    from tgi_toolkit.costs.features import Shape, row_pairs
    from tgi_toolkit.engine import attention
    from tgi_toolkit.engine.host_calls import TorchCalls
    from tgi_toolkit.engine.model import load_random
    from tgi_toolkit.engine.runner import LlamaRunner

    s = plan["sequence_length"]
    loaded = load_random(str(model_dir), device=device)
    rows = max(plan["batch_sizes"])
    # the served decode steps' span: their positions (s .. s + decode_length) within a power of two, as the served
    # cache's buckets hold them (engine/graphs.py)
    span = 1 << (s + plan.get("decode_length", 1)).bit_length()
    runner = LlamaRunner(loaded.model, max_rows=rows, max_positions=span)
    runner.enable_pool(rows * s)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    vocab = loaded.config.vocab_size

    def once(prompts: int, decode: bool, cached: bool, cudnn: bool, mode: Any = None) -> float:
        """One forward of this shape from empty rows (`cached`: each prompt's first `cached_tokens` computed before
        it, untimed; `cudnn`: cuDNN's SDPA allowed where the engine leaves it out); its wall seconds."""
        seqs, inputs, store, before = [], [], [], []
        if decode:  # a sequence with the prompt in its cache, decoding its next token
            seq = runner.new_seq()
            runner.forward([(seq, [(7 * j) % vocab for j in range(s)])])
            seqs.append(seq)
            inputs.append((seq, [1]))
            store.append(None)
        for i in range(prompts):
            seq = runner.new_seq()
            seqs.append(seq)
            ids, c = [(i * s + j) % vocab for j in range(s)], cached_tokens(i) if cached else 0
            if c:
                before.append((seq, ids[:c]))
            inputs.append((seq, ids[c:]))
            store.append(list(range(i * s + c, (i + 1) * s)))
        if before:
            runner.forward(before)
        sync()
        kept = attention.NEW_SHAPE_BACKENDS
        if cudnn:
            attention.NEW_SHAPE_BACKENDS = [SDPBackend.CUDNN_ATTENTION, *kept]
        began = time.perf_counter()
        try:
            with mode if mode is not None else contextlib.nullcontext():
                runner.forward(inputs, None, store if prompts else None, [True] * len(inputs))
                sync()
        finally:
            attention.NEW_SHAPE_BACKENDS = kept
        seconds = time.perf_counter() - began
        for seq in reversed(seqs):
            runner.release(seq)
        return seconds

    results = []
    with torch.inference_mode():
        for label, prompts, decode, cached, cudnn in forward_shapes(plan, device == "cuda"):
            once(prompts, decode, cached, cudnn)  # warm: cuBLAS' and SDPA's first call at a shape
            wall = statistics.median(once(prompts, decode, cached, cudnn) for _ in range(repeats))
            calls = TorchCalls()
            once(prompts, decode, cached, cudnn, calls)
            hits = [cached_tokens(i) if cached else 0 for i in range(prompts)]
            tokens = prompts * s - sum(hits) + int(decode)
            shape = Shape(prompts + int(decode), tokens, prompts * s + (s + 1) * int(decode),
                          sum(row_pairs(c, s - c) for c in hits) + (s + 1) * int(decode), prompts > 0, int(decode),
                          (s + 1) * int(decode))
            row: dict[str, Any] = {"forward": label, "prompts": prompts, "decode_rows": int(decode),
                                   "tokens": tokens, "wall_ms": round(wall * 1e3, 3), "torch_calls": calls.n}
            if calls_rule is not None:
                row["rule_calls"] = calls_rule.calls(shape, loaded.config.num_hidden_layers)
            if cost is not None:
                row["priced_ms"] = round(cost.seconds(shape) * 1e3, 3)
                row["priced_kernels_ms"] = round(cost.kernel_seconds(shape) * 1e3, 3)
            row.update(_profiled(lambda p=prompts, d=decode, c=cached, n=cudnn: once(p, d, c, n), device))
            results.append(row)
        position = s + plan.get("decode_length", 1) // 2  # the served steps' middle
        for row in graph_steps(runner, position, device, compiled, largest=rows):
            n = row["decode_rows"]
            if cost is not None:
                shape = Shape(n, n, n * (position + 1), n * (position + 1), False, n, n * (position + 1))
                row["priced_ms"] = round(cost.seconds(shape) * 1e3, 3)
                row["priced_kernels_ms"] = round(cost.kernel_seconds(shape) * 1e3, 3)
            results.append(row)
        # the one-prompt forward beside a thread taking the GIL as the front end's loop does: the premise of the
        # simulator's front-end stall, on this host (benchmarks/gil_contention.py)
        import gil_contention

        for row in gil_contention.beside(lambda: once(1, False, False, False), repeats=10):
            results.append({"forward": f"prompt x1, beside {row.pop('beside')}", "prompts": 1, "decode_rows": 0,
                            "tokens": s, **row})
    runner = loaded = None  # the card's memory back before the summary is written
    if device == "cuda":
        torch.cuda.empty_cache()
    return results


def graph_steps(runner: Any, position: int, device: str, compiled: bool = True, repeats: int = 50,
                largest: int = 1) -> list[dict[str, Any]]:
    """The one-row decode step as the server runs it, built as the server builds it (`--cuda-graphs 1`), with the
    eager layers and with the layers compiled by inductor (`--compile-sizes 1`), then the `largest` rows' step (eager
    layers, as the server runs every size but 1): each build's seconds, the step's median wall time over `repeats`
    (every row's token at `position`, the card synchronised around each), and a size left to the eager layers with
    why. On a CPU the same steps without a capture (what the CPU tests check)."""
    import statistics

    import torch

    from tgi_toolkit.engine.graphs import GraphDecode

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rows = []
    builds = [("decode row, graph", [], 1)] + ([("decode row, graph, compiled", [1], 1)] if compiled else []) + \
        ([(f"decode x{largest}, graph", [], largest)] if largest > 1 else [])
    for label, compile_sizes, n in builds:
        began = time.perf_counter()
        graphs = GraphDecode(runner, [n], capture=device == "cuda", compile_sizes=compile_sizes)
        built = time.perf_counter() - began

        def step(graphs: GraphDecode = graphs, n: int = n) -> float:
            sync()
            began = time.perf_counter()
            graphs.step([1] * n, [position] * n)
            sync()
            return time.perf_counter() - began

        with torch.inference_mode():
            step()
            wall = statistics.median(step() for _ in range(repeats))
            row = {"forward": label, "prompts": 0, "decode_rows": n, "tokens": n, "wall_ms": round(wall * 1e3, 3),
                   "build_s": round(built, 1), "compiled": sorted(graphs.compiled_sizes), **(
                       {"not_compiled": graphs.not_compiled[n]} if n in graphs.not_compiled else {})}
            row.update(_profiled(step, device))
        rows.append(row)
        graphs = None  # its pool back before the next build
    return rows


def _profiled(run: Any, device: str) -> dict[str, Any]:
    """One run under torch.profiler: the card's busy time (the operators' own device time summed), the host's
    (their own CPU time) and the ten operators the card spent longest in; {} with the reason where it fails."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    try:
        with profile(activities=activities) as prof:
            run()
        ops = prof.key_averages()
        device_us = [(getattr(o, "self_device_time_total", 0.0) or 0.0) for o in ops]
        top = sorted(zip(ops, device_us, strict=True), key=lambda pair: pair[1], reverse=True)[:10]
        return {"device_busy_ms": round(sum(device_us) / 1e3, 3),
                "host_ops_ms": round(sum(o.self_cpu_time_total for o in ops) / 1e3, 3),
                "top_device_ops": [{"op": o.key, "calls": int(o.count), "device_ms": round(us / 1e3, 3)}
                                   for o, us in top if us > 0]}
    except Exception as exc:  # a profiler the machine lacks (CUPTI) must not cost the lease the timings
        if device == "cuda":
            torch.cuda.synchronize()
        return {"profiler_error": f"{type(exc).__name__}: {exc}"[:300]}


def ratios(predicted: dict[str, Any], measured: dict[str, Any]) -> dict[str, Any]:
    """predicted / measured, point by point (1.0: exact)."""
    def by(rows: list[dict[str, Any]], key: str) -> dict[int, dict[str, Any]]:
        return {row[key]: row for row in rows}

    out: dict[str, Any] = {"batch": [], "concurrency": []}
    for table, key in (("batch", "batch_size"), ("concurrency", "users")):
        mine, theirs = by(predicted.get(table, []), key), by(measured.get(table, []), key)
        for point in sorted(set(mine) & set(theirs)):
            out[table].append({key: point, **{metric: _ratio(mine[point][metric], theirs[point][metric])
                                              for metric in theirs[point] if metric != key}})
    return out


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b and math.isfinite(a) and math.isfinite(b) else None


def markdown_table(title: str, columns: tuple[str, ...], rows: list[dict[str, Any]]) -> list[str]:
    """A summary section: `rows`' `columns` as a markdown table under `title` ("-" where a row lacks one); none
    without rows."""
    if not rows:
        return []
    return [f"## {title}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
            *["| " + " | ".join(str(row.get(c, "-")) for c in columns) + " |" for row in rows], ""]


def write_summary(out: Path, summary: dict[str, Any]) -> None:
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    lines = [f"# GPU probe: {summary['provenance']['device']} ({summary['provenance']['date']})", "",
             f"torch {summary['provenance']['torch']}, CUDA {summary['provenance']['cuda']}, driver "
             f"{summary['provenance']['driver']}; model {summary['model']} with random weights; "
             f"{summary['seconds']} s in all.", ""]
    step = summary.get("weight_read")
    if step:
        lines += [f"Decode step at batch 1: {step['decode_token_latency_s'] * 1e3:.2f} ms against "
                  f"{step['weight_read_s'] * 1e3:.2f} ms to read {step['weight_bytes'] / 1e9:.2f} GB at the "
                  f"measured copy bandwidth ({step['copy_bandwidth_bytes_s'] / 1e9:.3g} GB/s): "
                  f"{step['ratio']:.2f}x.", ""]
        for row in summary.get("engine_forwards") or []:
            if row["forward"].startswith("decode row, graph"):
                why = f" (left eager: {row['not_compiled']})" if row.get("not_compiled") else ""
                lines += [f"- alone, {row['forward']}: {row['wall_ms']:.2f} ms, "
                          f"{row['wall_ms'] / 1e3 / step['weight_read_s']:.2f}x{why}"]
        lines.append("")
    served = {row["batch_size"]: row.get("decode_step_ms") for row in summary.get("traced_batch") or []}
    for row in summary.get("engine_forwards") or []:
        if row["forward"].startswith("decode x") and served.get(row["decode_rows"]):
            n, alone = row["decode_rows"], row["wall_ms"]
            busy = f", the card busy {row['device_busy_ms']:.2f} ms of it" if row.get("device_busy_ms") else ""
            lines += [f"Decode step at batch {n}: {served[n]:.2f} ms served (the trace's median), {alone:.2f} ms alone "
                      f"(its graph replayed{busy}): {served[n] - alone:.2f} ms of the served step is the engine's "
                      f"host around the graph; priced {row.get('priced_ms', '-')} ms.", ""]
    gemms = summary.get("one_row_gemms")
    if gemms:
        lines += [f"A layer's four one-row GEMMs (profile-gpu): {gemms['linear_us']:.1f} us by cuBLAS, "
                  f"{gemms['compiled_us']:.1f} us compiled, against {gemms['weight_read_us']:.1f} us to read their "
                  "weights at the copy bandwidth.", ""]
    retimed = summary.get("gemms_retimed")
    if retimed:
        from tgi_toolkit.costs.kernel_timing import RETIME_RATIO

        lines += [f"GEMMs timed again, slower than {RETIME_RATIO}x the next larger row count's (first and second ms; "
                  "the lower stands): " + "; ".join(f"{row} {a:.4g}, {b:.4g}" for row, (a, b) in retimed.items()), ""]
    measured = summary.get("measured") or {}
    for table, key in (("batch", "batch_size"), ("concurrency", "users")):
        rows = measured.get(table) or []
        if not rows:
            continue
        metrics = [m for m in rows[0] if m != key]
        labels = {"roofline": "datasheet", "measured": "kernel times", "measured-host": "kernel times, engine host"}
        if "carried" in summary.get("ratios", {}):
            labels["carried"] = f"{summary['carried_from']['card']}'s kernel times carried"
        lines += [f"## {table}: measured, and predicted / measured", "",
                  "| " + " | ".join([key, *metrics, *[f"{labels[k]}: {m}" for k in labels for m in metrics]]) + " |",
                  "|" + "---|" * (1 + (1 + len(labels)) * len(metrics))]
        for row in rows:
            cells = [str(row[key]), *[f"{row[m]:.4g}" for m in metrics]]
            for kind in labels:
                ratio = next((r for r in summary.get("ratios", {}).get(kind, {}).get(table, []) if r[key] == row[key]),
                             {})
                cells += [str(ratio.get(m, "-")) for m in metrics]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += markdown_table("the batch table's forwards in the engine's trace (medians)",
                            ("batch_size", "runs", "first_prompt_ms", "other_prompts_ms", "decode_step_ms",
                             "decode_gap_ms", "decode_host_ms", "first_prompt_cpu_ms", "first_prompt_frontend_ms",
                             "other_prompts_cpu_ms", "other_prompts_frontend_ms"), summary.get("traced_batch") or [])
    lines += markdown_table("the users' forwards in the engine's trace",
                            ("users", "forwards", "busy_share", "slowest_ms", "slowest", "longest_gap_ms",
                             "gap_before", "gc_ms", "gc_longest_ms", "compiles", "slowest_model_ms",
                             "slowest_sample_ms", "slowest_host_ms", "slowest_cpu_ms", "slowest_frontend_ms"),
                            summary.get("traced_users") or [])
    stalls = sorted((summary.get("measured") or {}).get("stalls") or [], key=lambda line: -line["ran_ms"])
    lines += markdown_table(f"forwards served past {STALL_MS} ms, where the engine's thread was (the longest 10 of "
                            f"{len(stalls)}; measured/engine.log has every line)", ("at", "forward", "ran_ms", "where"),
                            stalls[:10])
    forwards = summary.get("engine_forwards") or []
    lines += markdown_table("the engine's forwards alone (no HTTP)",
                            ("forward", "tokens", "wall_ms", "device_busy_ms", "torch_calls", "rule_calls",
                             "priced_ms", "priced_kernels_ms", "build_s"),
                            [row for row in forwards if "stretch_ms" not in row])
    lines += markdown_table("the one-prompt forward beside a thread taking the GIL (its CPU and slices during the "
                            "forward; unhindered: the slices it would have run)",
                            ("forward", "wall_ms", "alone_ms", "stretch_ms", "other_cpu_ms", "slices",
                             "unhindered_slices"), [row for row in forwards if "stretch_ms" in row])
    for kind, reason in (summary.get("skipped") or {}).items():
        lines.append(f"- {kind}: {reason}")
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None, metavar="{cuda,cpu}", help="default: cuda where torch sees one")
    parser.add_argument("--tiny", action="store_true", help="a toy random model and short grids (CI, a CPU)")
    parser.add_argument("--out", default=None, help="folder (default data/measured/gpu/<card>-<date>/)")
    parser.add_argument("--tokenizer", default=None,
                        help="folder with tokenizer.json for the random model (default: the bundled model's)")
    parser.add_argument("--card", default=None,
                        help="the datasheet card the predictions use (default: this GPU's; none on a CPU)")
    parser.add_argument("--health-timeout", type=float, default=200.0,
                        help="seconds for the engine to start (31 s on an H100 before its layers were compiled; a "
                             "retry without the compile takes 120 s at most)")
    parser.add_argument("--carry-from", metavar="DIR", default=None,
                        help="another card's probe folder: predict this card's points from its kernel times carried "
                             "by the datasheets too (default: the newest other card's in data/measured/gpu/)")
    parser.add_argument("--predict-again", metavar="DIR", default=None,
                        help="a probe's folder brought back: predict its points again here from its kernels/ and "
                             "its card's datasheet (this checkout's simulator), and rewrite its summary")
    args = parser.parse_args(argv)
    if args.predict_again:
        return predict_again(Path(args.predict_again), args.card, args.carry_from)

    from tgi_toolkit.config.embedded import COMPILE_SIZES_DEFAULT
    from tgi_toolkit.costs.profile import profile, provenance
    from tgi_toolkit.engine.device import resolve_device

    started = time.perf_counter()
    try:
        device = resolve_device(args.device)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    plan = PLANS["tiny" if args.tiny else "full"]
    facts = provenance(device)
    out = Path(args.out) if args.out else \
        ROOT / "data" / "measured" / "gpu" / f"{slug(facts['device'])}-{dt.date.today().isoformat()}"
    out.mkdir(parents=True, exist_ok=True)
    config = TINY if args.tiny else _llama_8b()
    model_dir = prepare_model(out, config, Path(args.tokenizer) if args.tokenizer else None)
    flags = launcher_flags(plan, device)
    # the engine's default --compile-sizes on a card (docs/engine.md), which profile-gpu times and the prediction prices
    compile_sizes = list(COMPILE_SIZES_DEFAULT) if device == "cuda" else []
    summary: dict[str, Any] = {"provenance": facts, "model": "tiny random Llama" if args.tiny else MODEL,
                               "plan": plan, "launcher_flags": flags, "engine_compile_sizes": compile_sizes,
                               "predicted": {}, "ratios": {}, "skipped": {}}
    print(f"gpu_probe: {facts['device']} ({device}), torch {facts['torch']}, CUDA {facts['cuda']}, "
          f"driver {facts['driver']} -> {out}", flush=True)

    # 1. kernel times (the tiny plan's grid is profile-gpu's --tiny grid over the toy model's own shapes)
    kernels = out / "kernels"
    kernel_meta = profile(config, kernels, device=device, tiny=args.tiny, budget_s=plan["profile_budget_s"],
                          compile_sizes=compile_sizes, log=lambda line: print(line, flush=True))
    summary["gemms_retimed"] = kernel_meta["retimed"]
    summary["one_row_gemms"] = one_row_gemms(kernels, config)

    # 2. predictions, before the engine serves anything (the engine's calls counted once, for them and for step 4)
    from tgi_toolkit.engine.host_calls import count_calls

    try:
        calls_rule: EngineCalls | None = count_calls(config)
        summary["engine_calls"] = calls_rule.to_dict()
    except Exception as exc:  # a count that cannot run here must not cost the lease its measurements
        calls_rule = None
        summary["skipped"]["engine_calls"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    card = args.card or (facts["device"] if device == "cuda" else None)
    for kind in KINDS:
        if card is None:
            summary["skipped"][kind] = "a CPU has no datasheet: pass --card to predict for a card's"
            continue
        try:
            summary["predicted"][kind] = predict(kind, card, model_dir, kernels, plan, flags, out / "predicted" / kind,
                                                 compile_sizes, calls_rule)
            print(f"gpu_probe: predicted ({kind}, {card}) {summary['predicted'][kind]['batch'][:1]}", flush=True)
        except Exception as exc:  # a prediction that cannot run here must not cost the lease its measurements
            summary["skipped"][kind] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
    summary["card_for_predictions"] = card
    predict_carried(summary, carry_source(args.carry_from, card), model_dir, out / "predicted", calls_rule)

    # 3. the engine, served and measured; where it fails with its layers compiled in its CUDA graphs (never run on a
    # card before this probe; the graphs alone ran on an H100 and an H200), once more without the compile, so that
    # the lease still measures the engine, and the failure is in the summary
    try:
        summary["measured"] = measure(model_dir, device, plan, flags, out / "measured", args.health_timeout)
    except Exception as exc:
        if device != "cuda":
            raise
        summary["skipped"]["compiled_step"] = f"the engine failed with its layers compiled ({type(exc).__name__}: " \
                                              f"{exc}); measured again with --compile-sizes 0 (measured/engine.log: " \
                                              "the first try)"
        traceback.print_exc()
        summary["compile_sizes"] = "0"
        summary["measured"] = measure(model_dir, device, plan, flags, out / "measured-uncompiled", 120.0, "0")
    for kind, predicted in summary["predicted"].items():
        summary["ratios"][kind] = ratios(predicted, summary["measured"])
    try:
        trace = summary["measured"]["trace"]
        summary["traced_batch"] = traced_batch(Path(trace["path"]), trace["batch_bytes"], plan["batch_sizes"],
                                               plan["runs"])
        summary["traced_users"] = traced_users(Path(trace["path"]), trace["users_bytes"])
    except Exception as exc:  # a reading of what was measured; never worth the lease
        summary["skipped"]["traced_batch"] = f"{type(exc).__name__}: {exc}"

    # 5. the decode step at batch 1 against the weights' read time, and the summary so far: written before step 4,
    # so that a lease cut short there still brings it back
    bandwidth = copy_bandwidth(kernels)
    one = next((row for row in summary["measured"]["batch"] if row["batch_size"] == 1), None)
    if bandwidth and one:
        read = weight_bytes(config) / bandwidth
        summary["weight_read"] = {"weight_bytes": weight_bytes(config), "copy_bandwidth_bytes_s": bandwidth,
                                  "weight_read_s": read, "decode_token_latency_s": one["decode_token_latency_s"],
                                  "ratio": one["decode_token_latency_s"] / read}
    summary["seconds"] = round(time.perf_counter() - started, 1)
    write_summary(out, summary)

    # 4. the engine's forwards alone, once the server (and its KV cache) has left the card; within the time the lease
    # call leaves (docs/gpu-probe.md: 400 s), and its compiled step only where the server's compiled and time is left
    elapsed = time.perf_counter() - started
    if elapsed > FORWARDS_UNTIL_S:
        summary["skipped"]["engine_forwards"] = f"{elapsed:.0f} s had gone by; step 4 starts before " \
                                                f"{FORWARDS_UNTIL_S:.0f} s"
    else:
        try:
            cost = None
            if "measured" in summary["predicted"]:
                from tgi_toolkit.costs.measured import gpu_cost_model

                cost = gpu_cost_model(card, str(model_dir / "config.json"), cost_model="measured",
                                      kernel_times=str(kernels), server=SERVER_PROFILE, engine=True)
            compiled = summary.get("compile_sizes") != "0" and elapsed < COMPILED_UNTIL_S
            summary["engine_forwards"] = engine_forwards(model_dir, device, plan, cost, compiled=compiled,
                                                         calls_rule=calls_rule)
            (out / "engine_forwards.json").write_text(json.dumps(summary["engine_forwards"], indent=2) + "\n")
            print(f"gpu_probe: the engine's forwards alone {summary['engine_forwards']}", flush=True)
        except Exception as exc:  # the served measurements are in; this step must not cost them
            summary["skipped"]["engine_forwards"] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
    summary["seconds"] = round(time.perf_counter() - started, 1)
    write_summary(out, summary)
    print((out / "summary.md").read_text(), flush=True)
    return 0


def predict_carried(summary: dict[str, Any], source: Path | None, model_dir: Path, out: Path,
                    calls_rule: EngineCalls | None = None) -> None:
    """The `measured` prediction from `source`'s kernel times carried to the summary's card (GPU to GPU), into the
    summary as the kind "carried"; a source that cannot price this card is recorded in `skipped`."""
    card = summary.get("card_for_predictions")
    if source is None or card is None:
        return
    try:
        summary["carried_from"] = {"folder": source.name, "card": summary_card(source)}
        summary["predicted"]["carried"] = predict("measured", card, model_dir, source / "kernels", summary["plan"],
                                                  summary["launcher_flags"], out / "carried",
                                                  summary.get("engine_compile_sizes"), calls_rule)
        print(f"gpu_probe: predicted (carried from {source.name}) {summary['predicted']['carried']['batch'][:1]}",
              flush=True)
    except Exception as exc:  # never worth the lease's measurements
        summary["skipped"]["carried"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()


def summary_card(folder: Path) -> str:
    return str(json.loads((folder / "summary.json").read_text())["provenance"]["device"])


def predict_again(out: Path, card: str | None, carry_from: str | None = None) -> int:
    """The predictions of a probe's folder made again from what it brought back (its kernel times, model, plan and
    flags): where the lent machine could not run them, or the simulator has changed since."""
    summary = json.loads((out / "summary.json").read_text())
    card = card or summary.get("card_for_predictions") or summary["provenance"]["device"]
    summary["skipped"] = {k: v for k, v in summary.get("skipped", {}).items() if k not in KINDS}
    # the compile sizes the measured engine ran with: none where it was served again without them
    compile_sizes = [] if summary.get("compile_sizes") == "0" else summary.get("engine_compile_sizes") or []
    for kind in KINDS:
        try:
            summary["predicted"][kind] = predict(kind, card, out / "model", out / "kernels", summary["plan"],
                                                 summary["launcher_flags"], out / "predicted-again" / kind,
                                                 compile_sizes)
        except ValueError as exc:  # what the folder lacks for this kind (an older probe's)
            summary["skipped"][kind] = str(exc)
            continue
        summary["ratios"][kind] = ratios(summary["predicted"][kind], summary["measured"])
    summary["card_for_predictions"] = card
    summary["skipped"].pop("carried", None)
    source = None
    if carry_from:
        source = Path(carry_from)
    elif summary.get("carried_from"):
        source = ROOT / "data" / "measured" / "gpu" / summary["carried_from"]["folder"]
    if source is not None:
        predict_carried(summary, source, out / "model", out / "predicted-again")
        if "carried" in summary["predicted"]:
            summary["ratios"]["carried"] = ratios(summary["predicted"]["carried"], summary["measured"])
    summary["predicted_again"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    write_summary(out, summary)
    print((out / "summary.md").read_text(), flush=True)
    return 0


def _llama_8b() -> dict[str, Any]:
    """Llama-3.1-8B's shape: the shipped one (data/models/), its RoPE fields (which it leaves out) from the copy
    above."""
    from tgi_toolkit.models.shipped import shipped_config

    shipped = shipped_config(MODEL) or {}
    return {**LLAMA_31_8B, **{k: v for k, v in shipped.items() if not k.startswith("_") and v is not None}}


if __name__ == "__main__":
    sys.exit(main())
