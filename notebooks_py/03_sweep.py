# %% [markdown]
# # 3. Sweep launcher settings
#
# One configuration's numbers do not say which setting to choose. A sweep launches the server once per
# configuration (a grid of `LauncherConfig` fields, every combination), runs the same workloads against
# each, and keeps everything in one results folder, each row tagged with its configuration. A
# configuration that breaks one of TGI's rules is recorded with the rule and never launched; one whose
# server fails to start is recorded with its log; an interrupted sweep resumes where it stopped when
# run again with the same folder.
#
# Which knobs matter depends on the scheduling path the server runs. This notebook sweeps twice:
#
# 1. on **TGI 3's default path** (chunked prefill), the KV memory (`cuda_memory_fraction`) crossed with
#    `max_batch_size`: the memory decides how many requests run at once, `max_batch_size` hardly anything;
# 2. on **the older path** (`PREFILL_CHUNKING=0`), `max_batch_size` alone: there it caps every batch.
#
# The same sweeps run from the command line as a YAML file (`tgi-toolkit sweep spec.yaml`, printed
# below), and on a Ray cluster with `executor="ray"`.

# %% tags=["parameters"]
backend = "embedded"  # embedded | tgi | tgi-docker | vllm: relaunched for each configuration
base = {"max_input_tokens": 192, "max_total_tokens": 256, "max_batch_prefill_tokens": 256}  # shared settings
kv_capacity_tokens = [256, None]  # KV memory holding this many tokens (256: one request at a time), None: all of it
grid = {"max_batch_size": [1, 4]}  # crossed with the KV memory; add e.g. "max_batch_prefill_tokens": [64, 256]
older_grid = {"max_batch_size": [1, 4]}  # swept again with PREFILL_CHUNKING=0 (None: skip the older path)
extra_configs = [{"max_input_tokens": 512}]  # not crossed; breaks a TGI rule on purpose (input < total)
users = [1, 4]
prompt_tokens = 192  # with 16 new tokens a request reserves 207 KV tokens: 256 hold one
max_new_tokens = 16
requests = 4  # measured requests per point (at least the most users)
ramp_up = "auto"  # seconds over which the users start (user i at i/N); "auto": one cycle at the load; 0: at once
output_dir = None  # None: out/03_sweep/results in the checkout (the older path's in results_older/)
report_path = None  # the model card of the sweep; None: out/03_sweep/report/model_card.html
resume = True  # False: measure every configuration again as new runs
executor = "local"  # local | ray
progress = True
plotly_renderer = None  # None: plotly's choice for your front-end; "plotly_mimetype" keeps saved notebooks small

# %%
import plotly.io as pio

if plotly_renderer:
    pio.renderers.default = plotly_renderer

import pandas as pd

from tgi_toolkit import plots
from tgi_toolkit.cookbook import check, memory_fraction_for, out_dir
from tgi_toolkit.sweep import Sweep, Workload, sweep_status

output_dir = output_dir or str(out_dir("03_sweep", "results"))
older_dir = output_dir.rstrip("/") + "_older"
# KV memory as a share of the server's: the fraction whose capacity holds `tokens` on this machine
fractions = [memory_fraction_for(tokens, base, backend) if tokens else 1.0 for tokens in kv_capacity_tokens]
workloads = [Workload("concurrency", users=users, prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens,
                      requests=requests, ramp_up=ramp_up)]
sweep = Sweep(base=base, grid={"cuda_memory_fraction": fractions, **grid}, configs=extra_configs, backend=backend,
              executor=executor, workloads=workloads)
print(sweep.to_yaml())

# %% [markdown]
# ## Which knobs to sweep, on which path
#
# On **TGI 3's default path** (chunked prefill, TGI >= 3.0 on recent GPUs, the embedded engine's default):
#
# - `cuda_memory_fraction`: the KV memory, hence the KV budget (`max_batch_total_tokens`, which TGI 3
#   infers from it and ignores when given; on the embedded engine a share of `TGI_TOOLKIT_KV_CACHE_GIB`).
#   A request reserves its prompt plus `max_new_tokens` when admitted; what does not fit waits. Less memory
#   caps concurrency the way a smaller GPU does.
# - `max_batch_prefill_tokens` (vLLM `--max-num-batched-tokens`): the tokens one forward may compute. A long
#   prompt is cut in chunks of it: smaller values lengthen its TTFT but shorten the stalls it causes to the
#   running requests (`08_chunked_prefill_and_prefix_cache` measures it).
# - `max_batch_size` (vLLM `--max-num-seqs`) only caps the group admitted when the server is idle: requests
#   joining a running batch are not counted against it, so the batch grows past it.
# - `waiting_served_ratio`, `max_waiting_tokens`: ignored (TGI logs so at start-up).
#
# On **the older path** (`PREFILL_CHUNKING=0`; also `ATTENTION=paged`, speculation, and some models):
# `max_batch_size` caps every batch, and `waiting_served_ratio` / `max_waiting_tokens` decide when waiting
# requests interrupt decoding for a prefill of their own. There, `max_batch_prefill_tokens` must be at least
# `max_input_tokens` (a prompt is prefilled whole).
#
# `quantize`, `dtype` matter on both: weight formats; on a GPU they change the KV budget too.
#
# Each configuration is checked before anything starts:

# %%
pd.DataFrame([{"label": c.label, "valid": c.valid, "why not": "; ".join(p["rule"] for p in c.problems) or ""}
              for c in sweep.configs()])

# %% [markdown]
# ## Run it
#
# Each configuration: launch, wait until healthy, run the workloads, stop. Rerunning this cell with the
# same folder skips what is finished (`resume`).

# %% tags=["nbval-ignore-output"]
results = sweep.run(output_dir, resume=resume, progress=progress)
status = sweep_status(output_dir)
status[["label", *sweep.knobs(), "status", "problems", "error"]]

# %% [markdown]
# ## Throughput and latency per configuration
#
# One line per configuration. Where the lines part is where a knob matters, and on this path the KV memory
# decides it: with memory for one request, the server runs the users' requests one after another, so more
# users only queue (TTFT grows); with all of it, they share each forward, which on an idle machine turns
# users into throughput (on a busy one, points flagged `machine_busy`, the lines mostly show the other
# processes). `max_batch_size` changes little here: with `max_batch_size=1` the first request is admitted
# alone, and the next ones join the running batch.

# %% tags=["nbval-ignore-output"]
points = results.points[results.points["scenario"] == "concurrency"].merge(
    status[["config_id", *sweep.knobs()]], on="config_id")
plots.throughput_vs_users(points)

# %% tags=["nbval-ignore-output"]
plots.speed_and_ttft_vs_users(points)

# %% [markdown]
# The server's own count of requests in its batch (`server_batch_size_max`, from its `/metrics`) says why,
# and the next cell checks the sentences above on this run's numbers:

# %% tags=["nbval-ignore-output"]
busiest = points[points["users"] == max(users)]
knobs = sweep.knobs()  # the swept settings name each configuration (config_label lists every setting)
print(busiest[[*knobs, "server_batch_size_max", "output_throughput_tok_s", "ttft_p50_s"]].to_string(index=False))

# %%
small, whole = busiest["cuda_memory_fraction"] == min(fractions), busiest["cuda_memory_fraction"] == max(fractions)
check("with KV memory for one request the server runs one request at a time",
      (busiest.loc[small, "server_batch_size_max"] == 1).all(), busiest.loc[small, "server_batch_size_max"].tolist())
check("with all of it, the users' requests share each forward",
      (busiest.loc[whole, "server_batch_size_max"] > 1).all(),
      busiest.loc[whole, [*knobs, "server_batch_size_max"]].to_dict("records"))
check("with max_batch_size=1 the running batch still grows past it on this path",
      (busiest.loc[whole & (busiest["max_batch_size"] == 1), "server_batch_size_max"] > 1).all(),
      busiest.loc[whole, ["max_batch_size", "server_batch_size_max"]].to_dict("records"))

# %% [markdown]
# ## The Pareto frontier
#
# Every point of every configuration: output throughput against median TTFT. The joined points are
# those no other point beats on both; the configurations on it are the ones worth choosing between,
# depending on whether you are after throughput or latency. A configuration never on the frontier is
# dominated whatever the load.

# %% tags=["nbval-ignore-output"]
plots.pareto_plot(points)

# %% [markdown]
# ## A metric over a knob and the load
#
# The swept values come from `sweep_status`: a heatmap of throughput over the KV memory and users (the
# first swept field; change `knob` to see another).

# %% tags=["nbval-ignore-output"]
knob = sweep.knobs()[0]
swept = points.assign(**{knob: points[knob].astype(str)})
plots.batch_heatmap(swept, z="output_throughput_tok_s", x="users", y=knob, facet_by=None)

# %% [markdown]
# ## The older path: where `max_batch_size` acts
#
# The same workload with `PREFILL_CHUNKING=0` in the servers' environment (`server={"env": ...}`), all the
# KV memory, `max_batch_size` swept. Here the batcher admits at most `max_batch_size` minus the running
# requests, so `max_batch_size=1` decodes one request at a time whatever the memory, and a larger value lets
# the users' requests share each forward (more throughput on an idle machine); on the default path above the
# same setting changed little.

# %% tags=["nbval-ignore-output"]
if older_grid:
    older = Sweep(base=base, grid=older_grid, backend=backend, executor=executor, workloads=workloads,
                  server={"env": {"PREFILL_CHUNKING": "0"}})
    older_results = older.run(older_dir, resume=resume, progress=progress)
    older_points = older_results.points[older_results.points["scenario"] == "concurrency"].merge(
        sweep_status(older_dir)[["config_id", *older.knobs()]], on="config_id")
    older_busiest = older_points[older_points["users"] == max(users)]
    print(older_busiest[[*older.knobs(), "server_batch_size_max", "output_throughput_tok_s"]].to_string(index=False))

# %%
if older_grid:
    one, more = older_busiest["max_batch_size"] == 1, older_busiest["max_batch_size"] > 1
    check("with PREFILL_CHUNKING=0, max_batch_size=1 decodes one request at a time",
          (older_busiest.loc[one, "server_batch_size_max"] == 1).all(),
          older_busiest.loc[one, "server_batch_size_max"].tolist())
    check("and a larger max_batch_size lets the users' requests share each forward",
          (older_busiest.loc[more, "server_batch_size_max"] > 1).all(),
          older_busiest[[*older.knobs(), "server_batch_size_max"]].to_dict("records"))

# %% tags=["nbval-ignore-output"]
if older_grid:
    display(plots.throughput_vs_users(older_points))

# %% [markdown]
# ## The main metrics of each configuration
#
# `report.main_metrics` gives the model card's numbers per configuration, and `write_report` a card
# with one row per configuration (see `05_model_card`). The columns are named by what differs between the
# configurations (`plots.short_labels`); the card's parameters table lists every setting of each.

# %% tags=["nbval-ignore-output"]
from tgi_toolkit.report import main_metrics, main_metrics_table, write_report

table = main_metrics_table(main_metrics(results))
display(table.rename(columns=plots.short_labels(table.columns)))
card = write_report(results, report_path or out_dir("03_sweep", "report") / "model_card.html", figure_format="html")
print("HTML report:", card)
