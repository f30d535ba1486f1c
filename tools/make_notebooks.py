"""Writes the cookbook's notebooks from the cells below: `python tools/make_notebooks.py`.

Edit here, then rerun it: it writes each notebook's cells without outputs. `make notebooks`
(tools/run_notebooks.py) then executes them with their defaults and writes them back with their
outputs, which is how they are committed. `--check` compares the committed cells (sources, ids,
tags) with what this script writes, outputs aside; `tests/test_notebooks.py` runs it.
Each notebook has exactly one cell tagged `parameters` (papermill's): its defaults run on a
2-core CPU in a minute or two; tests and CI pass smaller or redirected values.
Code cells whose output holds timings are tagged `nbval-ignore-output` (`timed(...)` below), and so are
timing claims checked with `busy=` (on a busy machine they print "not checked" instead of failing); nbval
compares every other cell's output as committed (tools/nbval_sanitize.cfg masks paths and dates).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

NB_DIR = Path(__file__).resolve().parents[1] / "notebooks"
KERNEL = {"display_name": "Python 3", "language": "python", "name": "python3"}

# The first code cell after the parameters: what every notebook needs, and the plotly renderer.
SETUP = """\
import plotly.io as pio

if plotly_renderer:
    pio.renderers.default = plotly_renderer"""

PLOTLY_PARAM = """\
plotly_renderer = None  # None: plotly's choice for your front-end; "plotly_mimetype" keeps saved notebooks small"""


def md(text: str) -> tuple[str, str]:
    return ("md", text.strip("\n"))


def code(text: str) -> tuple[str, str]:
    return ("code", text.strip("\n"))


def params(text: str) -> tuple[str, str]:
    return ("params", text.strip("\n") + "\n" + PLOTLY_PARAM)


def timed(text: str) -> tuple[str, str]:
    """A code cell whose output holds timings or progress bars: run by nbval, its output not compared."""
    return ("timed", text.strip("\n"))


TAGS = {"params": "parameters", "timed": "nbval-ignore-output"}


# ------------------------------------------------------------------------------------------------------
NB01 = [
    md("""
# 1. Configure and launch a text-generation server

A server's launcher settings decide how many requests it batches, how long a prompt may be, and
how much memory the KV cache gets; most latency and throughput trade-offs of the later notebooks
come from these few knobs. This notebook builds a `LauncherConfig` (every `text-generation-launcher`
option, checked the way TGI checks it), shows the exact command for TGI, TGI in Docker and vLLM,
launches a server with it, reads back what the server decided at start-up, and asks it a question.

By default the server is this package's **embedded engine**: a TGI-compatible HTTP server running
SmolLM2-135M-Instruct on the CPU, with TGI's flags and batching rules. Set `backend` to `"tgi"`,
`"tgi-docker"` or `"vllm"` where those are installed: the same cells run unchanged.
"""),
    params("""
backend = "embedded"  # embedded | tgi | tgi-docker | vllm
model_id = None  # None: the default model (SmolLM2-135M-Instruct for the embedded engine)
max_input_tokens = 1024  # longest prompt accepted
max_total_tokens = 1536  # prompt + generated tokens of one request
max_batch_prefill_tokens = None  # None: the launcher's FLOPs formula (4096 where the card is unknown, as here)
cuda_memory_fraction = 1.0  # share of the KV memory (embedded engine: of TGI_TOOLKIT_KV_CACHE_GIB, default 2 GiB)
max_batch_size = 8  # None: no limit beyond the token budgets
max_concurrent_requests = 128
waiting_served_ratio = 0.3
max_waiting_tokens = 20
quantize = None  # e.g. "bitsandbytes", "eetq" (the embedded engine: int8/nf4/fp4 on the CPU)
dtype = None  # None: bfloat16 where the CPU computes in it, else float32 (GPU: float16/bfloat16)
question = "What is the capital of France?"
max_new_tokens = 48
show_form = True  # the ipywidgets form (needs a front-end to be useful; harmless headless)"""),
    code(SETUP + """

from tgi_toolkit.config import LauncherConfig, to_vllm_args
from tgi_toolkit.server import Server"""),
    md("""
## The knobs, and what each one does

| knob | why it matters | TGI flag (env) | vLLM counterpart |
|---|---|---|---|
| `max_input_tokens` | longest prompt; without prefill chunking a prompt must also fit `max_batch_prefill_tokens` whole | `--max-input-tokens` (`MAX_INPUT_TOKENS`) | none: prompt + output must fit `--max-model-len` |
| `max_total_tokens` | a request's memory budget (prompt + output): larger values mean fewer requests fit in the KV cache | `--max-total-tokens` | `--max-model-len` |
| `max_batch_prefill_tokens` | prompt tokens one forward may compute: bounds the prefill's memory and how long running requests wait for it; with chunking (TGI 3's default) a longer prompt is cut in chunks. Default: the launcher's FLOPs formula (4096 where the card is unknown), capped by the context | `--max-batch-prefill-tokens` | `--max-num-batched-tokens` (counts decode tokens too) |
| `max_batch_total_tokens` | the KV-cache capacity in tokens: how many tokens all running requests may hold together, hence how many requests run at once on either path. TGI 3 infers it from the KV memory (on a GPU what warm-up leaves of `--cuda-memory-fraction` of it; on the embedded engine `TGI_TOOLKIT_KV_CACHE_GIB`, default 2, GiB x `--cuda-memory-fraction`, in whole blocks); a given value is ignored with TGI's "deprecated" warning | `--max-batch-total-tokens` (ignored); set the memory with `--cuda-memory-fraction` | derived from `--gpu-memory-utilization` |
| `max_batch_size` | on the older path (`PREFILL_CHUNKING=0`), most requests in one batch; on TGI 3's default path it caps only the group admitted when the server is idle, and a running batch grows past it (`03_sweep` shows both) | `--max-batch-size` | `--max-num-seqs` |
| `waiting_served_ratio`, `max_waiting_tokens` | on the older path only (TGI 3 ignores them with chunking): when waiting requests may interrupt the running batch with a prefill; low values favour TTFT, high values the running requests' ITL | same names | no equivalent (vLLM's scheduler always mixes) |
| `quantize`, `dtype` | weight format: less memory for weights leaves more for the KV cache, but is not always faster | `--quantize`, `--dtype` | `--quantization`, `--dtype` |
| `max_concurrent_requests` | requests accepted at once; beyond it the server answers 429 instead of queueing | `--max-concurrent-requests` | none (vLLM queues everything) |

Settings left at `None` take TGI's defaults, which depend on the model (see the resolved values
after launch below).
"""),
    code("""
settings = dict(model_id=model_id, max_input_tokens=max_input_tokens, max_total_tokens=max_total_tokens,
                max_batch_prefill_tokens=max_batch_prefill_tokens, cuda_memory_fraction=cuda_memory_fraction,
                max_batch_size=max_batch_size, max_concurrent_requests=max_concurrent_requests,
                waiting_served_ratio=waiting_served_ratio, max_waiting_tokens=max_waiting_tokens,
                quantize=quantize, dtype=dtype)
config = LauncherConfig(**{k: v for k, v in settings.items() if v is not None})
config.to_dict(non_default_only=True)"""),
    md("""
## The same settings as a command

TGI's launcher, TGI's Docker image and vLLM take these settings under different names. The vLLM
mapping also lists what has no counterpart, and why: check it before comparing the two servers.
"""),
    code("""
vllm = to_vllm_args(config)
print("text-generation-launcher " + " ".join(config.to_cli()))
print()
print(" ".join(config.docker_command()))
print()
print(" ".join(vllm.argv))
for field, why in {**vllm.unmapped, **vllm.notes}.items():
    print(f"  {field}: {why}")"""),
    md("""
## The launcher form

The form below holds every launcher option in groups, checks each value as you type (the same
rules as TGI: for example `max_input_tokens` must be below `max_total_tokens`) and shows the command
it would run. `form.config` is the `LauncherConfig` it holds; pass it to `Server` as below.
"""),
    timed("""
if show_form:
    from tgi_toolkit.config.widgets import launcher_form

    form = launcher_form(config, target=backend if backend in ("embedded", "tgi", "tgi-docker", "vllm") else "embedded")
    display(form)"""),
    md("""
## Launch

`Server` starts the process, waits until `/health` answers, and keeps its log. It stops the server
when you call `stop()` (or at the end of a `with Server(...)` block, or when Python exits).
"""),
    timed("""
server = Server(config, backend=backend).start()
info = server.info()
{k: info.get(k) for k in ("model_id", "model_dtype", "max_input_tokens", "max_total_tokens",
                          "max_batch_prefill_tokens", "max_batch_total_tokens", "max_batch_size")}"""),
    md("""
## What the server decided at start-up

`max_batch_total_tokens` is the server's KV-cache capacity: TGI 3 infers it during warm-up (what is
left of `--cuda-memory-fraction` of the GPU memory after the weights and a prefill of
`max_batch_prefill_tokens`) and ignores a value given on the command line, vLLM logs it as its
KV-cache size, and the embedded engine divides its KV memory, `TGI_TOOLKIT_KV_CACHE_GIB` (default 2)
GiB x `--cuda-memory-fraction`, by the bytes one block of tokens' keys and values takes. The
capacity planner predicts it before launching; its `explain()` shows each step. Capacity /
`max_total_tokens` is how many worst-case requests fit at once.
"""),
    code("""
from tgi_toolkit.planner import compare, parse_reported_capacity

reported = parse_reported_capacity("\\n".join(server.logs(None)))
print("reported by the server:", reported.get("max_batch_total_tokens"), "tokens")
if backend == "embedded":
    from tgi_toolkit.config.model_files import converted_model_dir, resolve_model
    from tgi_toolkit.planner import plan_embedded

    source = resolve_model(config.model_id)
    model_dir = converted_model_dir(source) if source.gguf_file else source.path
    plan = plan_embedded(model_dir, dtype=info.get("model_dtype"), max_input_tokens=info["max_input_tokens"],
                         max_total_tokens=info["max_total_tokens"], memory_fraction=config.cuda_memory_fraction)
    print(f"planned: {plan.max_batch_total_tokens} tokens (error {compare(plan, reported):+.1%})")
    print(plan.explain())"""),
    md("""
## Ask a question

A streaming chat request on the OpenAI route; the time to first token (TTFT) includes the prompt's
prefill, the rest of the time is decoding one token after another.
"""),
    timed("""
from tgi_toolkit.quickstart import ask

answer = ask(server.url, question, max_tokens=max_new_tokens)
print(f"Q: {question}\\nA: {answer.text}")
print(f"TTFT {answer.ttft_s * 1000:.0f} ms, {answer.tokens} chunks in {answer.total_s:.2f} s")"""),
    timed("""
print("\\n".join(server.logs(8)))
server.stop()"""),
    md("""
Next: `02_benchmark` measures this server under load, the way `text-generation-benchmark` and
happy_vllm's benchmark do.
"""),
]

# ------------------------------------------------------------------------------------------------------
NB02 = [
    md("""
# 2. Benchmark a server over its HTTP API

Three measurements, each a function of `tgi_toolkit.bench` that returns a `Results` (tables as
DataFrames) and writes them to `output_dir` as it goes:

1. **Batch** (`run_batch`): `text-generation-benchmark`'s experiment (seeds 000 and 004): B prompts
   at once, prefill and decode latency and throughput per batch size. Over HTTP instead of
   gRPC, so it runs against any server.
2. **Concurrency** (`run_concurrency`): N users, each sending its next request when the last ends
   (happy_vllm's benchmark): TTFT, time per output token, inter-token latency, throughput.
3. **Prompt ingestion** (`measure_ingestion`): one request at a time with prompts of growing length
   and one output token; the slope of TTFT against length is the prefill cost per token.

Defaults are small enough for a 2-core CPU; on a GPU, raise the batch sizes, users and lengths to
your workload's.
"""),
    params("""
backend = "embedded"  # launch this backend; ignored when url is set
url = None  # benchmark a server already running there instead
launcher = {"max_batch_size": 8, "max_input_tokens": 1024, "max_total_tokens": 1536}  # LauncherConfig fields
output_dir = None  # None: out/02_benchmark/results in the checkout
batch_sizes = [1, 2, 4]
sequence_length = 64
decode_length = 16
runs = 2
warmups = 1
users = [1, 2, 4]
prompt_tokens = 128
max_new_tokens = 32
requests = 8  # measured requests per concurrency point
ramp_up = "auto"  # seconds over which the users start (user i at i/N); "auto": one request's duration; 0: at once
ingestion_prompt_tokens = [32, 128, 256, 384, 512]  # 5 lengths x 2: enough for a fit that may be quoted
ingestion_repeats = 2
progress = True"""),
    timed(SETUP + """

import contextlib

from tgi_toolkit import plots
from tgi_toolkit.bench import measure_ingestion, run_batch, run_concurrency
from tgi_toolkit.config import LauncherConfig
from tgi_toolkit.cookbook import out_dir
from tgi_toolkit.server import Server

output_dir = output_dir or str(out_dir("02_benchmark", "results"))
stack = contextlib.ExitStack()
server = url or stack.enter_context(Server(LauncherConfig(**launcher), backend=backend))
print("results go to", output_dir)"""),
    md("""
## Batch: prefill and decode, as text-generation-benchmark measures them

- `batch_sizes`: how many requests of the same lengths arrive together (text-generation-benchmark's
  `--batch-size`, which it also calls virtual users). Prefill cost grows with B x S; decode cost
  per step barely grows until the hardware is saturated, which is why batching pays.
- `sequence_length` / `decode_length`: prompt and output tokens (`--sequence-length`,
  `--decode-length`). Prompts are built to the exact token count; output length is forced with
  `ignore_eos` where the server honours it.
- `runs`, `warmups`: repeats per batch size; one run is noise, look at the spread.
"""),
    timed("""
batch = run_batch(server, batch_sizes=batch_sizes, sequence_length=sequence_length, decode_length=decode_length,
                  runs=runs, warmups=warmups, output=output_dir, progress=progress)
print(batch.tables())"""),
    md("""
**How to read it**: each marker is one run; colour is the batch size. In the prefill panel, moving
right (more tokens/s) costs moving up (more latency): a larger batch fills the hardware better but
every request waits for the whole prefill. In the decode panel, a flat line across colours means
decode is memory-bound and batching is nearly free; when latency rises with B the compute is full.
"""),
    timed("""
plots.batch_latency_throughput(batch.batch)"""),
    md("""
## Concurrency: what users see

- `users`: parallel users, each with one request in flight (happy_vllm's x axis). Beyond the
  server's batch limits, requests queue and TTFT climbs while throughput levels off.
- `prompt_tokens`, `max_new_tokens`: the request shape; long prompts make prefills that pause the
  running batch (see the ITL tail), long outputs hold KV cache longer.
- `requests`: measured requests per point (more: tighter percentiles, longer run).
- `ramp_up`: users who all start at once with equal requests stay in step: every wave of prompts
  queues behind itself (high TTFT), then decodes undisturbed (low ITL). User i starts at i/N of the
  ramp instead, and requests sent during it are not measured; `"auto"` times one request alone first
  and uses its duration. `ramp_up_s` is the ramp a point had; `lockstep` flags a point whose users
  still sent in step (docs/measurement.md, "Ramp-up and phase").
"""),
    timed("""
load = run_concurrency(server, users=users, prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens,
                       requests=requests, ramp_up=ramp_up, output=output_dir, progress=progress)
load.points[["point_id", "requests", "errors", "ttft_p50_s", "tpot_p50_s", "output_throughput_tok_s",
             "server_batch_size_max", "client_bound", "ramp_up_s", "lockstep"]]"""),
    md("""
**Total throughput**: output tokens per second across all users. It rises while the server can batch
more requests per step and flattens where a limit binds (the KV budget, or compute; `max_batch_size` only
on the older path, `PREFILL_CHUNKING=0`: under TGI 3's default a running batch grows past it, see
`03_sweep`). The users count where it flattens is the most this configuration can usefully serve.
"""),
    timed("""
plots.throughput_vs_users(load.points)"""),
    timed("""
from tgi_toolkit.cookbook import check

by_users = load.points.set_index("users")
check("total throughput rises with the users", by_users["output_throughput_tok_s"].idxmax() != min(users),
      by_users["output_throughput_tok_s"].to_dict(), busy=by_users["machine_busy"].fillna(False).any())"""),
    md("""
**Per-request speed and TTFT** (happy_vllm's speed_generation graph): lines are medians, bars the
25th to 75th percentiles. Where the speed line stays nearly flat, one decode step of several requests
costs about what one request's does (decode is memory-bound: batching is almost free, as on this CPU
with a 135M model); where it falls, the hardware is saturated and users share it. TTFT grows once
requests wait in the queue or behind other prefills.
"""),
    timed("""
plots.speed_and_ttft_vs_users(load.points)"""),
    md("""
**Inter-token latency**: every gap between two tokens, per point. A long upper tail is a running
request paused by someone else's prefill (TGI's `waiting_served_ratio`/`max_waiting_tokens` decide
how often that happens).
"""),
    timed("""
plots.itl_distribution(load.requests)"""),
    md("""
**The server's view**: queue size and running batch size from its `/metrics`, on the same clock as
each request's TTFT. Requests that wait in the queue show up as TTFT spikes.
"""),
    timed("""
plots.server_timeline(load.server, requests=load.requests, run_id=load.run_ids[-1])"""),
    md("""
## Prompt ingestion speed

- `ingestion_prompt_tokens`: prompt lengths to fit (at least 3, spread up to `max_input_tokens`).
  `ingestion_repeats`: requests per length; outliers are dropped from the fit (drawn in grey;
  `fit["kept"]` says which requests were fitted). With fewer than 5 requests kept, 3 lengths or an r² of
  0.9 the speed is printed with the reason it is not to be quoted.
"""),
    timed("""
ingestion = measure_ingestion(server, prompt_tokens=ingestion_prompt_tokens, repeats=ingestion_repeats,
                              output=output_dir, progress=progress)
fit = ingestion.ingestion()
print(f"prompt ingestion speed: {fit['speed_tok_s']:.0f} tokens/s (r2 {fit['r2_all']:.2f} over all "
      f"{fit['measured']:.0f} requests, {fit['measured'] - fit['n']:.0f} trimmed as outliers)"
      + (f"; {fit['unreliable']}" if fit["unreliable"] else ""))
plots.ingestion_plot(ingestion.requests)"""),
    md("""
## The main metrics of a model card

`Results.main_metrics()` reads the three numbers of a happy_vllm card, as the model card does;
`basis` says how each was obtained (here the generation speed comes from the nearest point measured,
not from 10 users with 1024-token prompts: `05_model_card` explains). They come from this notebook's
three runs only (`Results.select`): a folder reused with other parameters also holds earlier runs'
points, and a summary over all of them would report one of those as this run's.
"""),
    timed("""
from tgi_toolkit.bench import load_results

stack.close()  # stops the server this notebook launched
folder = load_results(output_dir)
mine = [run_id for part in (batch, load, ingestion) for run_id in part.run_ids]
others = [run_id for run_id in folder.run_ids if run_id not in mine]
print(f"main metrics of this notebook's {len(mine)} runs"
      + (f"; {len(others)} other run(s) in {output_dir} (other parameters) left out" if others else ""))
folder.select(mine).main_metrics()[["label", "text", "basis"]]"""),
]

# ------------------------------------------------------------------------------------------------------
NB03 = [
    md("""
# 3. Sweep launcher settings

One configuration's numbers do not say which setting to choose. A sweep launches the server once per
configuration (a grid of `LauncherConfig` fields, every combination), runs the same workloads against
each, and keeps everything in one results folder, each row tagged with its configuration. A
configuration that breaks one of TGI's rules is recorded with the rule and never launched; one whose
server fails to start is recorded with its log; an interrupted sweep resumes where it stopped when
run again with the same folder.

Which knobs matter depends on the scheduling path the server runs. This notebook sweeps twice:

1. on **TGI 3's default path** (chunked prefill), the KV memory (`cuda_memory_fraction`) crossed with
   `max_batch_size`: the memory decides how many requests run at once, `max_batch_size` hardly anything;
2. on **the older path** (`PREFILL_CHUNKING=0`), `max_batch_size` alone: there it caps every batch.

The same sweeps run from the command line as a YAML file (`tgi-toolkit sweep spec.yaml`, printed
below), and on a Ray cluster with `executor="ray"`.
"""),
    params("""
backend = "embedded"  # embedded | tgi | tgi-docker | vllm: relaunched for each configuration
base = {"max_input_tokens": 192, "max_total_tokens": 256, "max_batch_prefill_tokens": 256}  # shared settings
kv_tokens = [256, None]  # KV memory holding this many tokens (256: one request at a time), None: all of it
grid = {"max_batch_size": [1, 4]}  # crossed with the KV memory; add e.g. "max_batch_prefill_tokens": [64, 256]
older_grid = {"max_batch_size": [1, 4]}  # swept again with PREFILL_CHUNKING=0 (None: skip the older path)
extra_configs = [{"max_input_tokens": 512}]  # not crossed; breaks a TGI rule on purpose (input < total)
users = [1, 4]
prompt_tokens = 192  # with 16 new tokens a request reserves 207 KV tokens: 256 hold one
max_new_tokens = 16
requests = 4  # measured requests per point (at least the most users)
ramp_up = "auto"  # seconds over which the users start (user i at i/N); "auto": one request's duration; 0: at once
output_dir = None  # None: out/03_sweep/results in the checkout (the older path's in results_older/)
report_path = None  # the model card of the sweep; None: out/03_sweep/report/model_card.html
resume = True  # False: measure every configuration again as new runs
executor = "local"  # local | ray
progress = True"""),
    code(SETUP + """

import pandas as pd

from tgi_toolkit import plots
from tgi_toolkit.cookbook import check, memory_fraction_for, out_dir
from tgi_toolkit.sweep import Sweep, Workload, sweep_status

output_dir = output_dir or str(out_dir("03_sweep", "results"))
older_dir = output_dir.rstrip("/") + "_older"
# KV memory as a share of the server's: the fraction whose capacity holds `tokens` on this machine
fractions = [memory_fraction_for(tokens, base, backend) if tokens else 1.0 for tokens in kv_tokens]
workloads = [Workload("concurrency", users=users, prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens,
                      requests=requests, ramp_up=ramp_up)]
sweep = Sweep(base=base, grid={"cuda_memory_fraction": fractions, **grid}, configs=extra_configs, backend=backend,
              executor=executor, workloads=workloads)
print(sweep.to_yaml())"""),
    md("""
## Which knobs to sweep, on which path

On **TGI 3's default path** (chunked prefill, TGI >= 3.0 on recent GPUs, the embedded engine's default):

- `cuda_memory_fraction`: the KV memory, hence the KV budget (`max_batch_total_tokens`, which TGI 3
  infers from it and ignores when given; on the embedded engine a share of `TGI_TOOLKIT_KV_CACHE_GIB`).
  A request reserves its prompt plus `max_new_tokens` when admitted; what does not fit waits. Less memory
  caps concurrency the way a smaller GPU does.
- `max_batch_prefill_tokens` (vLLM `--max-num-batched-tokens`): the tokens one forward may compute. A long
  prompt is cut in chunks of it: smaller values lengthen its TTFT but shorten the stalls it causes to the
  running requests (`08_chunked_prefill_and_prefix_cache` measures it).
- `max_batch_size` (vLLM `--max-num-seqs`) only caps the group admitted when the server is idle: requests
  joining a running batch are not counted against it, so the batch grows past it.
- `waiting_served_ratio`, `max_waiting_tokens`: ignored (TGI logs so at start-up).

On **the older path** (`PREFILL_CHUNKING=0`; also `ATTENTION=paged`, speculation, and some models):
`max_batch_size` caps every batch, and `waiting_served_ratio` / `max_waiting_tokens` decide when waiting
requests interrupt decoding for a prefill of their own. There, `max_batch_prefill_tokens` must be at least
`max_input_tokens` (a prompt is prefilled whole).

`quantize`, `dtype` matter on both: weight formats; on a GPU they change the KV budget too.

Each configuration is checked before anything starts:
"""),
    code("""
pd.DataFrame([{"label": c.label, "valid": c.valid, "why not": "; ".join(p["rule"] for p in c.problems) or ""}
              for c in sweep.configs()])"""),
    md("""
## Run it

Each configuration: launch, wait until healthy, run the workloads, stop. Rerunning this cell with the
same folder skips what is finished (`resume`).
"""),
    timed("""
results = sweep.run(output_dir, resume=resume, progress=progress)
status = sweep_status(output_dir)
status[["label", *sweep.knobs(), "status", "problems", "error"]]"""),
    md("""
## Throughput and latency per configuration

One line per configuration. Where the lines part is where a knob matters, and on this path the KV memory
decides it: with memory for one request, the server runs the users' requests one after another, so more
users only queue (TTFT grows); with all of it, they share each forward, which on an idle machine turns
users into throughput (on a busy one, points flagged `machine_busy`, the lines mostly show the other
processes). `max_batch_size` changes little here: with `max_batch_size=1` the first request is admitted
alone, and the next ones join the running batch.
"""),
    timed("""
points = results.points[results.points["scenario"] == "concurrency"].merge(
    status[["config_id", *sweep.knobs()]], on="config_id")
plots.throughput_vs_users(points)"""),
    timed("""
plots.speed_and_ttft_vs_users(points)"""),
    md("""
The server's own count of requests in its batch (`server_batch_size_max`, from its `/metrics`) says why,
and the next cell checks the sentences above on this run's numbers:
"""),
    timed("""
busiest = points[points["users"] == max(users)]
print(busiest[["config_label", "server_batch_size_max", "output_throughput_tok_s", "ttft_p50_s"]].to_string(index=False))"""),
    code("""
small, whole = busiest["cuda_memory_fraction"] == min(fractions), busiest["cuda_memory_fraction"] == max(fractions)
check("with KV memory for one request the server runs one request at a time",
      (busiest.loc[small, "server_batch_size_max"] == 1).all(), busiest.loc[small, "server_batch_size_max"].tolist())
check("with all of it, the users' requests share each forward",
      (busiest.loc[whole, "server_batch_size_max"] > 1).all(),
      busiest.loc[whole, ["config_label", "server_batch_size_max"]].to_dict("records"))
check("with max_batch_size=1 the running batch still grows past it on this path",
      (busiest.loc[whole & (busiest["max_batch_size"] == 1), "server_batch_size_max"] > 1).all(),
      busiest.loc[whole, ["max_batch_size", "server_batch_size_max"]].to_dict("records"))"""),
    md("""
## The Pareto frontier

Every point of every configuration: output throughput against median TTFT. The joined points are
those no other point beats on both; the configurations on it are the ones worth choosing between,
depending on whether you are after throughput or latency. A configuration never on the frontier is
dominated whatever the load.
"""),
    timed("""
plots.pareto_plot(points)"""),
    md("""
## A metric over a knob and the load

The swept values come from `sweep_status`: a heatmap of throughput over the KV memory and users (the
first swept field; change `knob` to see another).
"""),
    timed("""
knob = sweep.knobs()[0]
swept = points.assign(**{knob: points[knob].astype(str)})
plots.batch_heatmap(swept, z="output_throughput_tok_s", x="users", y=knob, facet_by=None)"""),
    md("""
## The older path: where `max_batch_size` acts

The same workload with `PREFILL_CHUNKING=0` in the servers' environment (`server={"env": ...}`), all the
KV memory, `max_batch_size` swept. Here the batcher admits at most `max_batch_size` minus the running
requests, so `max_batch_size=1` decodes one request at a time whatever the memory, and a larger value lets
the users' requests share each forward (more throughput on an idle machine); on the default path above the
same setting changed little.
"""),
    timed("""
if older_grid:
    older = Sweep(base=base, grid=older_grid, backend=backend, executor=executor, workloads=workloads,
                  server={"env": {"PREFILL_CHUNKING": "0"}})
    older_results = older.run(older_dir, resume=resume, progress=progress)
    older_points = older_results.points[older_results.points["scenario"] == "concurrency"].merge(
        sweep_status(older_dir)[["config_id", *older.knobs()]], on="config_id")
    older_busiest = older_points[older_points["users"] == max(users)]
    print(older_busiest[["config_label", "server_batch_size_max", "output_throughput_tok_s"]].to_string(index=False))"""),
    code("""
if older_grid:
    one, more = older_busiest["max_batch_size"] == 1, older_busiest["max_batch_size"] > 1
    check("with PREFILL_CHUNKING=0, max_batch_size=1 decodes one request at a time",
          (older_busiest.loc[one, "server_batch_size_max"] == 1).all(),
          older_busiest.loc[one, "server_batch_size_max"].tolist())
    check("and a larger max_batch_size lets the users' requests share each forward",
          (older_busiest.loc[more, "server_batch_size_max"] > 1).all(),
          older_busiest[["config_label", "server_batch_size_max"]].to_dict("records"))"""),
    timed("""
if older_grid:
    display(plots.throughput_vs_users(older_points))"""),
    md("""
## The main metrics of each configuration

`report.main_metrics` gives the model card's numbers per configuration, and `write_report` a card
with one row per configuration (see `05_model_card`).
"""),
    timed("""
from tgi_toolkit.report import main_metrics, main_metrics_table, write_report

display(main_metrics_table(main_metrics(results)))
card = write_report(results, report_path or out_dir("03_sweep", "report") / "model_card.html", figure_format="html")
print("HTML report:", card)"""),
]

# ------------------------------------------------------------------------------------------------------
NB04 = [
    md("""
# 4. Compare results, and put them beside published ones

Numbers mean little alone. This notebook puts a result set beside another (two configurations,
two machines) and beside the results the seeds published: `text-generation-benchmark`'s tables for
mt0-xxl on 4 GPUs (seed 000) and happy_vllm's model cards for CodeLlama-7b on an A100 and
Phi-3-vision titled H100 (seeds 001, 003; seed 003 is a debug-mode run on an A100-80g, by its authors'
later relabel and rerun, both in `data/reference` too). The published numbers are read into the same tables as
our runs (`tgi_toolkit.reference`), so every figure takes them as it takes a run.

It needs no server: by default it reads the example result set in `data/examples/` (a real run of
the embedded engine on 2 CPU cores); point `results_dir` at your own (`02_benchmark`'s output).
"""),
    params("""
results_dir = None  # None: data/examples/smollm2-135m-cpu
other_results_dir = None  # a second result set to compare with (e.g. out/02_benchmark/results); None: skip
references = ["tgi-benchmark-mt0-xxl", "happy-vllm-codellama-7b-a100", "happy-vllm-phi-3-vision-h100"]"""),
    code(SETUP + """

import pandas as pd

from tgi_toolkit import plots
from tgi_toolkit.bench import load_results
from tgi_toolkit.cookbook import example_results_dir
from tgi_toolkit.bench.main_metrics import main_metrics, main_metrics_table
from tgi_toolkit.reference import list_references, load_reference

ours = load_results(results_dir or example_results_dir())
refs = {name: load_reference(name) for name in references}
print(ours)
print("available references:", ", ".join(list_references()))"""),
    md("""
## The published tables

text-generation-benchmark prints one latency table and one throughput table per experiment. Its
prefill throughput counts one token per request (B / latency); ours counts prompt tokens
(B x S / latency), so the loader converts: compare `prefill_throughput_tok_s` columns, not the
printed numbers.
"""),
    code("""
tgi_ref = next((r for r in refs.values() if not r.tables.empty), None)
tgi_ref.tables if tgi_ref is not None else "no text-generation-benchmark reference selected\""""),
    code("""
cards = {name: r for name, r in refs.items() if not r.main_metrics.empty}
published = [r.card_metrics() for r in cards.values()]
main_metrics_table(pd.concat(published)) if published else "no happy_vllm card selected\""""),
    md("""
## Our main metrics beside the cards'

The same three numbers from our results (`main_metrics`, what the model card and
`Results.main_metrics()` give), with how each was obtained. A 135M-parameter model on two CPU cores
is of course far from a 7B model on an A100: the point is that the numbers are measured the same
way, so your own GPU runs land in the same table. A row measured at different points for different
sets names each cell's point.
"""),
    code("""
mine = main_metrics(ours)
mine["config_label"] = "ours: " + mine["config_label"]  # one column per configuration of ours
main_metrics_table(pd.concat([mine, *published]))"""),
    code("""
mine[["label", "basis"]]"""),
    md("""
## Batch results beside the published ones

Grouped bars per batch size, one colour per set; whiskers span the lowest to the highest run. The
reference ran a 13B model with 500-token prompts on 4 GPUs; ours a 135M model on a CPU: read the
shape (how each metric moves with the batch size), not the level.
"""),
    timed("""
sets = {"ours": ours.batch}
if tgi_ref is not None:
    sets[tgi_ref.label] = tgi_ref.batch
if other_results_dir:
    sets["other"] = load_results(other_results_dir).batch
plots.compare_batch(sets)"""),
    md("""
**Latency against throughput**, text-generation-benchmark's own picture, with the reference's
averages as a second marker symbol. Log axes, because the two sets are orders of magnitude apart.
"""),
    timed("""
frames = [ours.batch] + ([tgi_ref.batch] if tgi_ref is not None else [])
plots.batch_latency_throughput(pd.concat(frames, ignore_index=True), log_axes=True)"""),
    md("""
## Load curves beside the cards' point

happy_vllm's cards publish the mean per-request speed at 10 users with 1024-token prompts; our
concurrency points are drawn with their mean too (`center="mean"`) so that the two agree in kind.
"""),
    timed("""
point_sets = {"ours": ours.points[ours.points["scenario"] == "concurrency"]}
point_sets.update({r.label: r.points for r in cards.values()})
if other_results_dir:
    other = load_results(other_results_dir).points
    point_sets["other"] = other[other["scenario"] == "concurrency"]
plots.compare_points(point_sets, metrics=("speed",), center="mean")"""),
    md("""
## A heatmap of a metric over two knobs

Decode throughput over batch size and sequence length (one cell per pair measured). With a single
sequence length the map is one column; a sweep (`03_sweep`) over lengths fills it in.
"""),
    timed("""
plots.batch_heatmap(ours.batch)"""),
    md("""
## The Pareto frontier

Each point is one load level of one configuration: throughput (right is better) against median TTFT
(down is better). The joined points are those no other point beats on both; a configuration that
never reaches the frontier is dominated. With one configuration it is simply its load curve.
"""),
    timed("""
plots.pareto_plot(ours.points[ours.points["scenario"] == "concurrency"])"""),
]

# ------------------------------------------------------------------------------------------------------
NB05 = [
    md("""
# 5. The model card

A model card in the layout of happy_vllm's (seeds 001, 003): the main metrics, the figures, and every
launcher parameter the results were measured with, taken from the runs' provenance. It is written
as Markdown (with PNG images where kaleido finds a Chromium, else interactive HTML figures) and as
one HTML page you can open offline. The same is `tgi-toolkit report RESULTS_DIR`.

The three main metrics:

- **Prompt ingestion speed**: 1 / slope of TTFT against prompt length (one request at a time).
- **Mean generation speed for 10 parallel requests with a 1024-token prompt and 128 generated
  tokens**: per-request decode speed at that concurrency point. When the results do not hold that
  point, or the server cannot take it (its `max_total_tokens` is smaller), the nearest measured point
  is used and named, and the table says so.
- **KV-cache capacity**: the token budget the server states (`max_batch_total_tokens`), or
  happy_vllm's estimate from cache usage under load where it states none (vLLM).
"""),
    params("""
results_dir = None  # None: data/examples/smollm2-135m-cpu
output = None  # a .md or .html file, or a folder; None: out/05_model_card/model_card.md
figure_format = "auto"  # png (kaleido + Chromium), html, or auto
users = 10
prompt_tokens = 1024
max_new_tokens = 128"""),
    code(SETUP + """

from IPython.display import Markdown

from tgi_toolkit.bench import load_results
from tgi_toolkit.cookbook import example_results_dir, out_dir
from tgi_toolkit.report import main_metrics, report_paths, write_report
from tgi_toolkit.report_figures import card_figures
from tgi_toolkit.report_sections import parameters

results = load_results(results_dir or example_results_dir())
output = output or str(out_dir("05_model_card") / "model_card.md")
results"""),
    md("""
## Main metrics, and how each was obtained

`users`, `prompt_tokens` and `max_new_tokens` choose the generation-speed point; keep happy_vllm's
10 / 1024 / 128 to compare with published cards.
"""),
    code("""
metrics = main_metrics(results, users=users, prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens)
metrics[["config_label", "label", "text", "basis"]]"""),
    md("""
## Parameters

Every launcher setting as the runs recorded it (defaults included, secrets redacted), with where it
ran (backend, versions, hardware) and the budgets the server resolved at start-up.
"""),
    code("""
parameters(results)"""),
    md("""
## Write the card
"""),
    timed("""
path = write_report(results, output, figure_format=figure_format, users=users, prompt_tokens=prompt_tokens,
                    max_new_tokens=max_new_tokens)
md_path, html_path, figures_dir = report_paths(output)
print(f"model card: {md_path}\\nHTML report (open in a browser): {html_path}")
print("figures:", ", ".join(sorted(p.name for p in figures_dir.rglob("*") if p.suffix in (".png", ".html"))))"""),
    timed("""
Markdown(md_path.read_text().split("# Total generation speed")[0])"""),
    md("""
## The card's figures

The same figures the card holds, interactive here. How to read each: see `02_benchmark`.
"""),
    timed("""
figures = card_figures(results)
for figure in figures:
    figure.figure.show()"""),
]

# ------------------------------------------------------------------------------------------------------
NB06 = [
    md("""
# 6. Tune the launcher for your latency objectives

Which settings should you launch with? Seed 002 calls `max_batch_total_tokens` "the most important
value to set", yet no benchmark tool says what to set it to, and TGI 3 no longer takes it: it infers
the KV capacity from the memory left after warm-up and ignores a given value with a "deprecated"
warning. What moves the capacity is the KV memory, `cuda_memory_fraction` (on the embedded engine a
share of `TGI_TOOLKIT_KV_CACHE_GIB`, default 2 GiB), so the tuner keeps the question "how many KV
tokens" and turns a ladder of capacities into the fractions that give them. `tgi_toolkit.tune`
answers for a workload and latency objectives:

1. The **capacity planner** predicts the KV-cache capacity and bounds each knob to what the workload
   can use (no point allowing 64 requests in a batch when 4 users send at most 4).
2. A **coarse grid** of candidates (spread around the planner's recommendation), then **bisection**
   around the best, each launched and measured by the sweep runner into one results folder.
3. **Selection**: a configuration *meets* the objectives when TTFT and TPOT at the chosen
   percentile are within the limits with no errors; the best is the one with the most **goodput**
   (requests per second that met them) at its best load. The best is measured again with other
   prompts (`confirm`) before it is trusted.

Defaults are sized for a 2-core CPU (three candidates); on a GPU raise `max_configs`, the users and
the lengths to your traffic's.
"""),
    params("""
backend = "embedded"  # embedded | tgi | tgi-docker | vllm
base = {}  # settings every candidate shares (model_id, dtype, quantize, ...)
users = [4]  # the load to tune for (parallel users)
prompt_tokens = 64
max_new_tokens = 16
requests = 8
ramp_up = "auto"  # seconds over which the users start (user i at i/N); "auto": one request's duration; 0: at once
ttft_s = 5.0  # objective: TTFT at `percentile` (seconds)
tpot_s = 1.0  # objective: time per output token at `percentile` (seconds)
percentile = "p90"
knobs = ["max_batch_size", "cuda_memory_fraction"]  # also "max_batch_prefill_tokens"; with PREFILL_CHUNKING=0
# "waiting_served_ratio", "max_waiting_tokens" (TGI 3 ignores them with chunking). Not "max_batch_total_tokens":
# TGI 3 ignores a given value, so the tuner refuses it
max_configs = 3  # configurations measured in all
levels = 2  # values per knob in the coarse round
rounds = 2  # coarse round + refinements
confirm = 1  # how many of the best to measure again until one still meets the objectives
output_dir = None  # None: out/06_tune/results in the checkout
resume = True
progress = True"""),
    code(SETUP + """

from tgi_toolkit import plots
from tgi_toolkit.config import to_vllm_args
from tgi_toolkit.cookbook import out_dir
from tgi_toolkit.sweep import Workload
from tgi_toolkit.tune import Objectives, tune

output_dir = output_dir or str(out_dir("06_tune", "results"))
workload = Workload("concurrency", users=users, prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens,
                    requests=requests, ramp_up=ramp_up)
objectives = Objectives(ttft_s=ttft_s, tpot_s=tpot_s, percentile=percentile)
objectives.describe()"""),
    md("""
## The objectives, and why goodput

- `ttft_s`: how long a user may wait for the first token (interactive chat: about a second).
- `tpot_s`: the time between tokens once streaming (reading speed: 0.1-0.2 s is comfortable).
- `percentile`: p90 means nine requests in ten must meet them; p99 is stricter and needs more requests.

Raw throughput rewards configurations that queue requests until latency is unacceptable; goodput
counts only the requests that met the objectives, so the best configuration is the one that serves
the most users *well*.

## Search
"""),
    timed("""
result = tune(base, workload, objectives, output=output_dir, backend=backend, knobs=knobs, max_configs=max_configs,
              levels=levels, rounds=rounds, confirm=confirm, resume=resume, progress=progress)
print(result.message)"""),
    md("""
## Where the candidates came from

For each knob: the values tried and the reason for their bounds (the planner's capacity, the
workload's requests in flight and lengths). For `cuda_memory_fraction` the source also gives the KV
capacity in tokens each fraction yields.
"""),
    code("""
{knob: knob_space for knob, knob_space in result.space.items()}"""),
    md("""
## Every configuration, ranked

Configurations meeting the objectives first, by goodput; then the others by how far they were from
meeting them (the worst ratio of measured to allowed), then those that measured nothing (invalid or
failed to start).
"""),
    timed("""
result.table"""),
    md("""
## The trade-off

Every measured point of the configurations in the table above (the confirmation's second
measurement included): output throughput against TTFT at the objective's percentile, one colour per
configuration, the frontier joined. The dashed line is the TTFT objective (`ttft_s`), drawn in the
axis's unit (ms or s, whichever the figure chose: `plots.axis_scale` says which). Points above it are
out, whatever their throughput; the best configuration is usually the frontier point furthest right
below it.
"""),
    timed("""
from tgi_toolkit.bench import load_results

points = load_results(output_dir).points
# the folder may hold configurations of an earlier tuning (resume=True): draw this one's
points = points[(points["scenario"] == "concurrency") & points["config_id"].isin(result.table["config_id"])]
ttft = f"ttft_{percentile}_s"
plots.pareto_plot(points, y=ttft, objectives={ttft: ttft_s})"""),
    md("""
## Launch with it

The chosen configuration (or, when none met the objectives, the closest) as a `LauncherConfig`, and
the commands that run it on TGI and vLLM. A `cuda_memory_fraction` tuned on the embedded engine is a
share of its `TGI_TOOLKIT_KV_CACHE_GIB`, not of a GPU's memory: carry over the KV capacity in tokens
it stands for, not the fraction, or tune again with `backend="tgi"` on the GPU. `tune.json` in the
results folder keeps all of this (`tgi_toolkit.tune.load_tune(folder)`).
"""),
    timed("""
chosen = result.to_launcher_config(closest=not result.met)
print("text-generation-launcher " + " ".join(chosen.to_cli()))
print(" ".join(to_vllm_args(chosen).argv))"""),
]


# ------------------------------------------------------------------------------------------------------
NB08 = [
    md("""
# 8. Chunked prefill and the prefix cache (TGI 3 scheduling)

TGI 3 schedules a batch differently from the TGI 2 most tuning advice was written for. Two behaviours
change what users see, and this notebook measures both on the embedded engine, which follows TGI
3.1.1 to 3.3.7's rules (the v3 router's queue, radix cache and block allocator, and the shard's chunk sizing):

- **Chunked prefill** (TGI >= 2.4, PR #2600; the default in 3.x with `flashinfer` or `flashdecoding`
  attention, i.e. CUDA GPUs of compute capability 8.0 and up). A new prompt joins the running batch
  in chunks: each forward computes at most `max_batch_prefill_tokens` tokens, one token for every
  running request and the rest from the prompt, so the running streams keep getting tokens while a
  long prompt is read. Prompts longer than `max_batch_prefill_tokens` are accepted (cut into chunks),
  and `waiting_served_ratio` and `max_waiting_tokens` are ignored.
- **Prefix caching** (the v3 router's radix cache, TGI >= 2.3, PRs #2392/#2402; on by default in 3.x
  with `flashinfer` (block size 1: any prefix length) or `flashdecoding` (256-token blocks); off with
  `paged` attention). The KV of a finished request's prompt stays in a cache; a later prompt that
  starts with it (a system prompt, a document, the history of a conversation) computes only the rest.
  Only finished requests fill it, and only their prompts (never generated tokens).
- **The older, non-chunking path** is what TGI runs with `PREFILL_CHUNKING=0`, with `ATTENTION=paged`
  (no CUDA, GPUs below sm 8.0, TGI's AMD image), with any speculation (Medusa, MLP, n-gram), and for
  Gemma3, Qwen2-VL, Qwen2.5-VL and Mllama: new requests are prefilled alone while the running batch
  waits, `waiting_served_ratio`/`max_waiting_tokens` decide when, and a prompt must fit
  `max_batch_prefill_tokens` whole (TGI refuses to start if `max_input_tokens` is larger).

How to switch, on TGI and on the embedded engine alike (environment variables, as TGI reads them):

| variable | values | what it does |
|---|---|---|
| `ATTENTION` | `flashinfer` (default, sm >= 8), `flashdecoding`, `paged` | KV block size 1 / 256 / 16; `paged` turns off both features |
| `PREFIX_CACHING` | `1` (default), `0` | the radix prefix cache |
| `PREFILL_CHUNKING` | `1` (default), `0` | chunked prefill (off: the older path) |

`docker run -e PREFILL_CHUNKING=0 ...`, or exported before `text-generation-launcher` (it passes its
environment to the shards); here `Server(config, env={"PREFILL_CHUNKING": "0"})`.
"""),
    params("""
streams = 4  # requests decoding when the long prompt arrives
long_prompt = 512  # tokens of the prompt that joins them
stream_tokens = 48  # tokens each stream generates: they must outlast the long prompt's prefill
chunk_tokens = 64  # max_batch_prefill_tokens of the chunked server: prompt tokens one forward computes at most
repeats = 1  # measured rounds per server (after one warm-up round)
system_tokens = 384  # the system prompt every request repeats
requests_per_group = 3  # requests sharing it: the first computes it, the later ones find it cached
question_tokens = 16  # tokens each request (and each conversation turn) adds
max_new_tokens = 8
turns = 3  # turns of each conversation (each resends the history)
output_dir = None  # None: out/08_chunked_prefill_and_prefix_cache/results in the checkout
progress = True"""),
    timed(SETUP + """

import contextlib

import pandas as pd

from tgi_toolkit import plots
from tgi_toolkit.bench import run_decode_stall, run_multi_turn, run_shared_prefix
from tgi_toolkit.config import LauncherConfig
from tgi_toolkit.cookbook import out_dir
from tgi_toolkit.server import Server

output_dir = output_dir or str(out_dir("08_chunked_prefill_and_prefix_cache", "results"))
longest = max(long_prompt, system_tokens + question_tokens + (turns - 1) * (max_new_tokens + question_tokens))
limits = {"max_input_tokens": longest, "max_total_tokens": longest + max(stream_tokens, max_new_tokens, 4)}
# TGI 3's default: the chunk budget may be far below the longest prompt.
chunked = LauncherConfig(**limits, max_batch_prefill_tokens=chunk_tokens)
# The older path prefills a prompt whole: its budget must hold the longest one (TGI's start-up check).
unchunked = LauncherConfig(**limits, max_batch_prefill_tokens=longest)
CHUNKED = f"chunked, {chunk_tokens}-token budget"
UNCHUNKED = "PREFILL_CHUNKING=0"


def mode_lines(server):
    # what the engine logged about its scheduling mode at start-up
    return [line.split(": ", 1)[-1] for line in server.logs(None)
            if "chunking" in line.lower() or "prefix" in line.lower()]


stack = contextlib.ExitStack()
server = stack.enter_context(Server(chunked, startup_progress=progress))
print("\\n".join(mode_lines(server)))
print("results go to", output_dir)"""),
    md("""
## Chunked prefill: the running streams keep flowing

`run_decode_stall` starts `streams` requests; when each has a few tokens, one prompt of
`long_prompt` tokens arrives. Every gap between two tokens of a running stream, from that moment to
the long prompt's first token, is a stall the stream's user saw. Each server gets one warm-up round,
then `repeats` measured rounds with fresh prompts (so no cache hides the prefill).
"""),
    timed("""
stall = {CHUNKED: run_decode_stall(server, streams=streams, long_prompt=long_prompt, stream_tokens=stream_tokens,
                                   repeats=repeats, output=output_dir, progress=progress)}
with Server(unchunked, env={"PREFILL_CHUNKING": "0"}, startup_progress=progress) as older:
    print("\\n".join(mode_lines(older)))
    stall[UNCHUNKED] = run_decode_stall(older, streams=streams, long_prompt=long_prompt, stream_tokens=stream_tokens,
                                        repeats=repeats, output=output_dir, progress=progress)
summary = plots.label_sets({name: r.points for name, r in stall.items()})
summary[["config_label", "stall_max_gap_s", "stall_p99_gap_s", "stall_baseline_gap_s", "long_prompt_ttft_s"]]"""),
    md("""
**How to read it**: each marker is one gap between two tokens of a running stream, placed at the
later token's arrival; 0 is when the long prompt was sent, and the dashed line of each colour its
first token. Without chunking, the streams wait out the whole prefill of the long prompt: one tall gap
per stream (and, since TGI waits for `max_waiting_tokens` decode steps before prefilling a lone new
request, the long prompt's first token comes late too). With chunking, every forward carries one
chunk of at most `chunk_tokens` tokens beside the streams' tokens: more, shorter gaps, the largest
about one chunk's forward.
"""),
    timed("""
plots.decode_stall(plots.label_sets({name: r.requests for name, r in stall.items()}))"""),
    timed("""
plots.decode_stall_summary(summary)"""),
    timed("""
from tgi_toolkit.cookbook import check

largest = summary.set_index("config_label")["stall_max_gap_s"]
check("with chunking, the largest gap a running stream saw is shorter than without",
      largest[CHUNKED] < largest[UNCHUNKED], largest.to_dict(), busy=summary["machine_busy"].fillna(False).any())"""),
    md("""
## The prefix cache: a repeated system prompt

`run_shared_prefix` sends `requests_per_group` requests that all start with the same system prompt of
`system_tokens` tokens and add `question_tokens` of their own. The first is sent alone; the others
after it ended, because TGI fills its cache only when a request finishes (two requests in flight at
once share nothing). `prefix_cache_hit_rate` is the share of prompt tokens the cache served, from the
engine's own counters (`tgi_toolkit_prefix_cache_*` in `/metrics`; TGI has no such counters, so it is
NaN there and the cache shows only in TTFT).
"""),
    timed("""
shared = run_shared_prefix(server, groups=1, requests_per_group=requests_per_group, prefix_tokens=system_tokens,
                           suffix_tokens=question_tokens, max_new_tokens=max_new_tokens, users=1,
                           output=output_dir, progress=progress)
rate = shared.points["prefix_cache_hit_rate"].iloc[0]
print(f"prefix-cache hit rate: {rate:.2f} (at best {(requests_per_group - 1) * system_tokens} of "
      f"{requests_per_group * (system_tokens + question_tokens)} prompt tokens)")
plots.shared_prefix_ttft(shared.requests)"""),
    timed("""
measured = shared.requests[~shared.requests["warmup"] & shared.requests["error"].isna()]
ttft_by_turn = measured.groupby("turn")["ttft_s"].median()  # turn 0: the group's first request
first = ttft_by_turn.index.min()
check("the later requests, which find the system prompt cached, have a shorter TTFT than the first",
      rate > 0 and (ttft_by_turn.drop(first) < ttft_by_turn[first]).all(), ttft_by_turn.to_dict(),
      busy=rate > 0 and shared.points["machine_busy"].fillna(False).any())"""),
    md("""
**How to read it**: the first request computes all `system_tokens + question_tokens` tokens; the later
ones only their `question_tokens`, so their TTFT is a fraction of it. On a GPU the same holds, with
far larger prompts: a cached 1,000-token system prompt is the difference between one prefill forward
and a few tokens.

## Conversations: each turn resends the history

A chat client sends the whole conversation every turn. With the cache, turn t finds turn t-1's prompt
and computes only the last answer and the new message, so TTFT stays flat while the prompt grows.
"""),
    timed("""
chat = run_multi_turn(server, conversations=2, turns=turns, user_tokens=question_tokens,
                      max_new_tokens=max_new_tokens, system_tokens=system_tokens, output=output_dir,
                      progress=progress)
print(f"prefix-cache hit rate: {chat.points['prefix_cache_hit_rate'].iloc[0]:.2f}")
print(chat.requests.groupby("turn")[["prompt_tokens", "ttft_s"]].median())
plots.ttft_by_turn(chat.requests)"""),
    code("""
stack.close()  # stops the server this notebook launched"""),
]


NB07 = [
    md("""
# 7. Simulate before you buy

The engine's scheduler is TGI's rules in one module; driven by a **virtual clock** and a **cost model**
that prices each forward, the same module predicts what TGI would do with a workload, in seconds, for
hardware that is not here (`tgi_toolkit.simulate`). This notebook:

1. **profiles** the embedded engine: bench's own ingestion and batch scenarios over a small grid, and a
   readable linear model of a forward's time fitted to them;
2. **simulates** a workload with it and **measures** the same workload on the real server: predicted
   beside measured, as two configurations of one results table;
3. runs the same workloads **"on an H100" and "on an A100"** with the roofline model (what the GPU reaches in
   published microbenchmarks, the model's shape, efficiency factors fitted once to the published cards), and sets the roofline's
   predictions for those cards' models beside the published cards in data/reference.

The scheduling path is the scheduler's own: TGI 3's chunked prefill with the prefix cache by default, the
older path with `PREFILL_CHUNKING=0` (set it in the environment, or pass `chunking=False`).
The defaults run in a minute or two on 2 CPU cores; timings on a busy machine are noisy, and the profile
only knows the machine as it was while it ran.
"""),
    params("""
backend = "embedded"  # the server to profile and measure: embedded | tgi | tgi-docker | vllm
launcher = {"max_input_tokens": 512, "max_total_tokens": 600}  # its launcher settings
cost_model = None  # a cost.json from `tgi-toolkit simulate profile` to skip profiling
profile_grid = {"prompt_tokens": [16, 128, 384], "batch_sizes": [1, 4], "contexts": [32], "decode_length": 8,
                "repeats": 1}  # the calibration grid (simulate.calibrate.FULL is the fuller one)
users = [1, 4]  # the workload simulated and measured
prompt_tokens = 64
max_new_tokens = 16
requests = 8
ramp_up = "auto"  # seconds over which the users start (user i at i/N); "auto": one request's duration; 0: at once
gpus = ["H100", "A100-80GB"]  # simulated with the roofline model
model_config = None  # config.json for the GPU runs (None: the served model's)
output_dir = None  # None: out/07_simulate/results in the checkout"""),
    timed(SETUP + """

import pandas as pd
import plotly.graph_objects as go

from tgi_toolkit import bench, simulate
from tgi_toolkit.bench import load_results
from tgi_toolkit.config import LauncherConfig
from tgi_toolkit.cookbook import out_dir
from tgi_toolkit.server import Server

output_dir = output_dir or str(out_dir("07_simulate", "results"))
server = Server(LauncherConfig(**launcher), backend=backend).start()
workload = dict(users=users, prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens, requests=requests,
                ramp_up=ramp_up)"""),
    md("""
## 1. Profile the server

Each TTFT of the ingestion scenario is the request's overhead (HTTP, validation, tokenization) plus the
forward that computed its prompt; each decode token latency of the batch scenario is one forward of B
decoding rows. The fit keeps every coefficient >= 0 and minimises relative error; `points` shows how
far the model is from each measurement.
"""),
    timed("""
if cost_model:
    cost = simulate.load_cost_model(cost_model)
else:
    cost = simulate.profile(server, **profile_grid, output=out_dir("07_simulate") / "cost.json")
print(cost.formula(), f"+ request overhead {cost.request_overhead_s * 1e3:.3g} ms")
pd.DataFrame(cost.points)"""),
    md("""
## 2. Simulate, then measure the same workload

Both write the same tables into one folder: the simulated run's `config_label` ends in
`[simulated: ...]`, so every figure and comparison takes it as one more configuration.
"""),
    timed("""
predicted = simulate.run_concurrency(cost, **workload, output=output_dir)
measured = bench.run_concurrency(server, **workload, output=output_dir)
server.stop()

columns = ["ttft_p50_s", "tpot_p50_s", "output_throughput_tok_s"]
both = pd.concat({"predicted": predicted.points.set_index("users")[columns],
                  "measured": measured.points.set_index("users")[columns]}, axis=1)
for column in columns:
    both[("ratio", column)] = both[("predicted", column)] / both[("measured", column)]
both"""),
    timed("""
fig = go.Figure()
for name, res, dash in (("measured", measured, "solid"), ("predicted", predicted, "dash")):
    pts = res.points.sort_values("users")
    fig.add_scatter(x=pts["users"], y=pts["output_throughput_tok_s"], name=f"throughput, {name}",
                    line={"dash": dash})
    fig.add_scatter(x=pts["users"], y=pts["ttft_p50_s"], name=f"TTFT p50, {name}", yaxis="y2", line={"dash": dash})
fig.update_layout(title="Predicted against measured", xaxis_title="parallel users",
                  yaxis_title="output tokens/s", yaxis2={"title": "TTFT p50 (s)", "overlaying": "y", "side": "right"})
fig"""),
    md("""
## 3. The same workload on GPUs you do not have

The roofline model prices a forward from what the card reaches (dense 16-bit FLOP/s and memory bandwidth as a
published microbenchmark measured them: an H100's matmuls reach 80 % of its datasheet, an MI300X's 51 %; the
link between GPUs from the datasheet) and the model's shape (config.json), with efficiency factors every card shares, plus the
host time of the server it stands for (`server`: TGI 3 by default; TGI 2 and 1, vLLM V1 and V0, TensorRT-LLM,
SGLang, LMDeploy). Both were fitted to published GPU figures (`data/reference/gpu_figures.csv`,
`docs/gpu-corpus.md`). The KV capacity and the prefill budget are those TGI 3 would find on that card (the
capacity planner, the launcher's FLOPs rule). Each prediction carries how far such predictions fell from
published figures they were not fitted to (section 4).
"""),
    timed("""
from tgi_toolkit.tune.sizing import model_config_path

config_json = model_config or model_config_path(LauncherConfig(**launcher))
rows = []
for gpu in gpus:
    res = simulate.run_concurrency(simulate.roofline(gpu, config_json), **workload)
    rows.append(res.points.assign(gpu=gpu)[["gpu", "users", *columns, "tpot_prediction_error"]])
pd.concat([measured.points.assign(gpu="this machine (measured)")[["gpu", "users", *columns]], *rows])"""),
    md("""
## 4. How far to trust a GPU prediction

`benchmarks/gpu_accuracy.py` holds every figure of one publication out at a time, fits the roofline to the
others and predicts the held-out figures with this simulator ("leave one source out"); then it predicts a
test set gathered after the model's design was frozen, from sources the corpus does not use. Only those
predictions count as accuracy: agreement with figures a fit saw is a fit check. A prediction states the worse
of its regime's two 80th-percentile errors (`tpot_prediction_error` above), and says when it lies outside
what the corpus measured (for the default TGI 3: no published TGI 3 figure backs its host time yet).
"""),
    code("""
from tgi_toolkit.simulate.uncertainty import accuracy_table

accuracy = accuracy_table()
accuracy"""),
    code("""
overall = accuracy.set_index(["check", "regime"])
loso, test = overall.loc[("leave one source out", "all")], overall.loc[("test set", "all")]
print(f"Leave one source out: {loso['within ±30 %']:.0%} of {loso['figures']:.0f} published figures within ±30 %, "
      f"median |error| {loso['median |error|']:.0%}; the test set: {test['within ±30 %']:.0%} of {test['figures']:.0f}, "
      f"median {test['median |error|']:.0%}.")"""),
]


def nb09() -> list[tuple[str, str]]:
    """09_advise: which GPUs to run a model on, at a traffic and latency objectives, and what it costs."""
    return [
        md("""
# 9. Which GPUs to run it on

You have a model, a traffic estimate and latency objectives; you need hardware: which card, how many per
replica (tensor parallel), which quantization, how many replicas, at what cost. `tgi_toolkit.advise` answers
from datasheets, in seconds, on this CPU:

1. every candidate (GPU kind x GPUs per replica x quantization) goes through the **capacity planner**; those
   that cannot hold the model are listed with the reason;
2. each one left runs **TGI's own scheduler on a virtual clock**, each forward priced by the roofline model of
   its datasheet, with TGI 3's default launcher settings; the prefill budget and the KV memory are **tuned in
   simulation** as `tune --simulate` tunes them;
3. a bisection on the request rate finds the most **one replica sustains** while meeting the objectives at the
   percentile; the traffic then needs so many replicas, which cost so much per hour and per million output
   tokens, at the prices of a **dated public table** (or yours);
4. every prediction carries the **cross-validated error of its regime** (how far the roofline was from
   published figures it was not fitted to); candidates whose cost the error bars cannot order are **tied**.
"""),
        params("""
model = "codellama/CodeLlama-7b-Instruct-hf"  # a config.json path, a model directory, or a name in simulate.gpu.PUBLISHED_MODELS
rate = 10.0  # requests per second (Poisson); or set users instead and rate = None
users = None  # parallel users (closed loop)
prompt_tokens = 512
max_new_tokens = 128
ttft_s = 1.0  # TTFT limit at the percentile, seconds
tpot_s = 0.05  # TPOT limit at the percentile, seconds
percentile = 90
gpus = ["A10G", "L4", "A100-80GB", "H100"]  # the candidate GPU kinds
shards = [1, 2]  # GPUs per replica
quantize = ["none"]  # none, awq, fp8, ...
prices = None  # a YAML of prices per GPU-hour (None: the shipped dated table)
output_dir = None  # None: out/09_advise/results in the checkout
progress = True"""),
        code(SETUP + """

import pandas as pd

from tgi_toolkit import advise
from tgi_toolkit.bench import load_results
from tgi_toolkit.cookbook import out_dir

output_dir = output_dir or str(out_dir("09_advise", "results"))
advice = advise(model, rate=rate, users=users, prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens,
                ttft=ttft_s, tpot=tpot_s, percentile=percentile, gpus=gpus, shards=shards, quantize=quantize,
                prices=prices, output=output_dir, progress=progress)
print(advice.prices.describe())"""),
        md("""
## 1. What does not fit

The planner's memory check, before any simulation: the weights per GPU, one request's KV cache, the
launcher's limits. Each refused candidate says why.
"""),
        code("""
refused = advice.refused_table()
assert refused["reason"].str.len().gt(0).all()  # every refusal names its reason
refused"""),
        md("""
## 2. The ranking

Cheapest first: cost per million output tokens at your traffic, the replicas and GPUs it takes, what one
replica sustains, and the TTFT and TPOT predicted at the percentile when the traffic is spread over those
replicas, each with its error. Every row meets the objectives there: a candidate that cannot at any load is
listed below the table instead.
"""),
        code("""
p = advice.objectives.percentile
table = advice.table
if not table.empty:
    assert table["cost_per_million_tokens"].is_monotonic_increasing  # cheapest first
    assert (table[f"ttft_{p}_s"] <= ttft_s).all() and (table[f"tpot_{p}_s"] <= tpot_s).all()
print(advice.summary())
table[["rank", "candidate", "cost_per_million_tokens", "cost_low", "cost_high", "replicas", "gpus",
       "sustained_per_replica", f"ttft_{p}_s", "ttft_error", f"tpot_{p}_s", "tpot_error", "settings",
       "tied_with_first"]]"""),
        md("""
**How to read it**: `cost_low`-`cost_high` is the cost if the predictions were off by their regime's error
(the server faster or slower than predicted); a candidate whose range reaches the winner's is marked
`tied_with_first`: the error bars cannot say which is cheaper. Until the roofline's cross-validated errors are
written (`benchmarks/gpu_accuracy.py`), the errors are unknown, the ranges collapse to a point and only equal
costs tie. `settings` are the knobs the simulated tuning changed from TGI 3's defaults.

## 3. Cost against latency

Each marker a candidate; the dotted line joins the **Pareto set**, the candidates no other is both cheaper
and faster than. The cheapest is always in it.
"""),
        code("""
if not table.empty:
    from tgi_toolkit.plots import pareto_front

    front = pareto_front(table, f"ttft_{p}_s", "cost_per_million_tokens", maximize_x=False)
    assert bool(front.iloc[0])  # the cheapest is in the Pareto set
advice.figure()"""),
        md("""
## 4. The winner's launch command

One replica's `text-generation-launcher` command (TGI 3's defaults, plus whatever the tuning changed);
run as many replicas as the table says behind a load balancer.
"""),
        code("""
print(advice.command)"""),
        md("""
## 5. The results folder

One simulated configuration per candidate, at the load each replica would carry, in the toolkit's results
format: the notebooks' figures, `compare_points`, and the model card (`tgi-toolkit report`) read it like a
measured run (`config_label` ends in `[simulated: ...]`). `advise.json` beside it keeps the table.
"""),
        code("""
results = load_results(output_dir).select(advice.run_ids)  # this advice's runs, not an earlier one's
assert results.points["config_id"].nunique() >= len(table)  # one simulated configuration per candidate
results.points[["config_label", "rate_rps", "users", f"ttft_{p}_s", f"tpot_{p}_s", "output_throughput_tok_s"]]"""),
    ]


NOTEBOOKS: dict[str, list[tuple[str, str]]] = {
    "01_configure_and_launch": NB01,
    "02_benchmark": NB02,
    "03_sweep": NB03,
    "04_compare_and_visualize": NB04,
    "05_model_card": NB05,
    "06_tune": NB06,
    "07_simulate": NB07,
    "08_chunked_prefill_and_prefix_cache": NB08,
    "09_advise": nb09(),
}


def build(cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    nb = new_notebook(metadata={"kernelspec": KERNEL, "language_info": {"name": "python"}})
    for i, (kind, text) in enumerate(cells):
        cell_id = f"cell-{i:02d}"  # stable ids: regenerating gives the same file
        if kind == "md":
            nb.cells.append(new_markdown_cell(text, id=cell_id))
        else:
            cell = new_code_cell(text, id=cell_id)
            if kind in TAGS:
                cell.metadata["tags"] = [TAGS[kind]]
            nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def cells_of(nb: nbformat.NotebookNode) -> list[tuple[str, str, str, list[str]]]:
    """What this script decides of a notebook: each cell's type, id, source and tags (not its outputs)."""
    return [(c.cell_type, c.get("id", ""), c.source, list(c.metadata.get("tags", []))) for c in nb.cells]


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name, cells in NOTEBOOKS.items():
        path = NB_DIR / f"{name}.ipynb"
        nb = build(cells)
        current = path.exists() and cells_of(nbformat.read(path, as_version=4)) == cells_of(nb)
        if check and not current:
            stale.append(path.name)
        elif not check and not current:  # an unchanged notebook keeps the outputs it was committed with
            path.write_text(nbformat.writes(nb) + "\n")
            print(f"{path.name}: written without outputs (make notebooks NOTEBOOKS={name} runs it)")
    if stale:
        print("out of date (run python tools/make_notebooks.py, then make notebooks):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
