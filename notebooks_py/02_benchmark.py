# %% [markdown]
# # 2. Benchmark a server over its HTTP API
#
# Three measurements, each a function of `tgi_toolkit.bench` that returns a `Results` (tables as
# DataFrames) and writes them to `output_dir` as it goes:
#
# 1. **Batch** (`run_batch`): `text-generation-benchmark`'s experiment (seeds 000 and 004): B prompts
#    at once, prefill and decode latency and throughput per batch size. Over HTTP instead of
#    gRPC, so it runs against any server.
# 2. **Concurrency** (`run_concurrency`): N users, each sending its next request when the last ends
#    (happy_vllm's benchmark): TTFT, time per output token, inter-token latency, throughput.
# 3. **Prompt ingestion** (`measure_ingestion`): one request at a time with prompts of growing length
#    and one output token; the slope of TTFT against length is the prefill cost per token.
#
# Defaults are small enough for a 2-core CPU; on a GPU, raise the batch sizes, users and lengths to
# your workload's.

# %% tags=["parameters"]
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
ramp_up = "auto"  # seconds over which the users start (user i at i/N); "auto": one cycle at the load; 0: at once
ingestion_prompt_tokens = [32, 128, 256, 384, 512]  # 5 lengths x 2: enough for a fit that may be quoted
ingestion_repeats = 2
progress = True
plotly_renderer = None  # None: plotly's choice for your front-end; "plotly_mimetype" keeps saved notebooks small

# %% tags=["nbval-ignore-output"]
import plotly.io as pio

if plotly_renderer:
    pio.renderers.default = plotly_renderer

import contextlib

from tgi_toolkit import plots
from tgi_toolkit.bench import measure_ingestion, run_batch, run_concurrency
from tgi_toolkit.config import LauncherConfig
from tgi_toolkit.cookbook import out_dir
from tgi_toolkit.server import Server

output_dir = output_dir or str(out_dir("02_benchmark", "results"))
stack = contextlib.ExitStack()
server = url or stack.enter_context(Server(LauncherConfig(**launcher), backend=backend))
print("results go to", output_dir)

# %% [markdown]
# ## Batch: prefill and decode, as text-generation-benchmark measures them
#
# - `batch_sizes`: how many requests of the same lengths arrive together (text-generation-benchmark's
#   `--batch-size`, which it also calls virtual users). Prefill cost grows with B x S; decode cost
#   per step barely grows until the hardware is saturated, which is why batching pays.
# - `sequence_length` / `decode_length`: prompt and output tokens (`--sequence-length`,
#   `--decode-length`). Prompts are built to the exact token count; output length is forced with
#   `ignore_eos` where the server honours it.
# - `runs`, `warmups`: repeats per batch size; one run is noise, look at the spread.

# %% tags=["nbval-ignore-output"]
batch = run_batch(server, batch_sizes=batch_sizes, sequence_length=sequence_length, decode_length=decode_length,
                  runs=runs, warmups=warmups, output=output_dir, progress=progress)
print(batch.tables())

# %% [markdown]
# **How to read it**: each marker is one run; colour is the batch size. In the prefill panel, moving
# right (more tokens/s) costs moving up (more latency): a larger batch fills the hardware better but
# every request waits for the whole prefill. In the decode panel, a flat line across colours means
# decode is memory-bound and batching is nearly free; when latency rises with B the compute is full.

# %% tags=["nbval-ignore-output"]
plots.batch_latency_throughput(batch.batch)

# %% [markdown]
# ## Concurrency: what users see
#
# - `users`: parallel users, each with one request in flight (happy_vllm's x axis). Beyond the
#   server's batch limits, requests queue and TTFT climbs while throughput levels off.
# - `prompt_tokens`, `max_new_tokens`: the request shape; long prompts make prefills that pause the
#   running batch (see the ITL tail), long outputs hold KV cache longer.
# - `requests`: measured requests per point (more: tighter percentiles, longer run).
# - `ramp_up`: users who all start at once with equal requests stay in step: every wave of prompts
#   queues behind itself (high TTFT), then decodes undisturbed (low ITL). User i starts at i/N of the
#   ramp instead, and requests sent during it are not measured; `"auto"` sends one request a user
#   together first and uses their mean duration, one cycle at the point's load. `ramp_up_s` is the
#   ramp a point had; `lockstep` flags a point whose users still sent in step (docs/measurement.md,
#   "Ramp-up and phase").

# %% tags=["nbval-ignore-output"]
load = run_concurrency(server, users=users, prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens,
                       requests=requests, ramp_up=ramp_up, output=output_dir, progress=progress)
load.points[["point_id", "requests", "errors", "ttft_p50_s", "tpot_p50_s", "output_throughput_tok_s",
             "server_batch_size_max", "client_bound", "ramp_up_s", "lockstep"]]

# %% [markdown]
# **Total throughput**: output tokens per second across all users. It rises while the server can batch
# more requests per step and flattens where a limit binds (the KV budget, or compute; `max_batch_size` only
# on the older path, `PREFILL_CHUNKING=0`: under TGI 3's default a running batch grows past it, see
# `03_sweep`). The users count where it flattens is the most this configuration can usefully serve.

# %% tags=["nbval-ignore-output"]
plots.throughput_vs_users(load.points)

# %% tags=["nbval-ignore-output"]
from tgi_toolkit.cookbook import check

by_users = load.points.set_index("users")
check("total throughput rises with the users", by_users["output_throughput_tok_s"].idxmax() != min(users),
      by_users["output_throughput_tok_s"].to_dict(), busy=by_users["machine_busy"].fillna(False).any())

# %% [markdown]
# **Per-request speed and TTFT** (happy_vllm's speed_generation graph): lines are medians, bars the
# 25th to 75th percentiles. Where the speed line stays nearly flat, one decode step of several requests
# costs about what one request's does (decode is memory-bound: batching is almost free, as on this CPU
# with a 135M model); where it falls, the hardware is saturated and users share it. TTFT grows once
# requests wait in the queue or behind other prefills.

# %% tags=["nbval-ignore-output"]
plots.speed_and_ttft_vs_users(load.points)

# %% [markdown]
# **Inter-token latency**: every gap between two tokens, per point. A long upper tail is a running
# request paused by someone else's prefill (TGI's `waiting_served_ratio`/`max_waiting_tokens` decide
# how often that happens).

# %% tags=["nbval-ignore-output"]
plots.itl_distribution(load.requests)

# %% [markdown]
# **The server's view**: queue size and running batch size from its `/metrics`, on the same clock as
# each request's TTFT. Requests that wait in the queue show up as TTFT spikes.

# %% tags=["nbval-ignore-output"]
plots.server_timeline(load.server, requests=load.requests, run_id=load.run_ids[-1])

# %% [markdown]
# ## Prompt ingestion speed
#
# - `ingestion_prompt_tokens`: prompt lengths to fit (at least 3, spread up to `max_input_tokens`).
#   `ingestion_repeats`: requests per length; outliers are dropped from the fit (drawn in grey;
#   `fit["kept"]` says which requests were fitted). With fewer than 5 requests kept, 3 lengths or an r² of
#   0.9 the speed is printed with the reason it is not to be quoted.

# %% tags=["nbval-ignore-output"]
ingestion = measure_ingestion(server, prompt_tokens=ingestion_prompt_tokens, repeats=ingestion_repeats,
                              output=output_dir, progress=progress)
fit = ingestion.ingestion()
print(f"prompt ingestion speed: {fit['speed_tok_s']:.0f} tokens/s (r2 {fit['r2_all']:.2f} over all "
      f"{fit['measured']:.0f} requests, {fit['measured'] - fit['n']:.0f} trimmed as outliers)"
      + (f"; {fit['unreliable']}" if fit["unreliable"] else ""))
plots.ingestion_plot(ingestion.requests)

# %% [markdown]
# ## The main metrics of a model card
#
# `Results.main_metrics()` reads the three numbers of a happy_vllm card, as the model card does;
# `basis` says how each was obtained (here the generation speed comes from the nearest point measured,
# not from 10 users with 1024-token prompts: `05_model_card` explains). They come from this notebook's
# three runs only (`Results.select`): a folder reused with other parameters also holds earlier runs'
# points, and a summary over all of them would report one of those as this run's.

# %% tags=["nbval-ignore-output"]
from tgi_toolkit.bench import load_results

stack.close()  # stops the server this notebook launched
folder = load_results(output_dir)
mine = [run_id for part in (batch, load, ingestion) for run_id in part.run_ids]
others = [run_id for run_id in folder.run_ids if run_id not in mine]
print(f"main metrics of this notebook's {len(mine)} runs"
      + (f"; {len(others)} other run(s) in {output_dir} (other parameters) left out" if others else ""))
folder.select(mine).main_metrics()[["label", "text", "basis"]]
