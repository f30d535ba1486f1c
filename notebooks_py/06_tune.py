# %% [markdown]
# # 6. Tune the launcher for your latency objectives
#
# Which settings should you launch with? Seed 002 calls `max_batch_total_tokens` "the most important
# value to set", yet no benchmark tool says what to set it to, and TGI 3 no longer takes it: it infers
# the KV capacity from the memory left after warm-up and ignores a given value with a "deprecated"
# warning. What moves the capacity is the KV memory, `cuda_memory_fraction` (on the embedded engine a
# share of `TGI_TOOLKIT_KV_CACHE_GIB`, default 2 GiB), so the tuner keeps the question "how many KV
# tokens" and turns a ladder of capacities into the fractions that give them. `tgi_toolkit.tune`
# answers for a workload and latency objectives:
#
# 1. The **capacity planner** predicts the KV-cache capacity and bounds each knob to what the workload
#    can use (no point allowing 64 requests in a batch when 4 users send at most 4).
# 2. A **coarse grid** of candidates (spread around the planner's recommendation), then **bisection**
#    around the best, each launched and measured by the sweep runner into one results folder.
# 3. **Selection**: a configuration *meets* the objectives when TTFT and TPOT at the chosen
#    percentile are within the limits with no errors; the best is the one with the most **goodput**
#    (requests per second that met them) at its best load. The best is measured again with other
#    prompts (`confirm`) before it is trusted.
#
# Defaults are sized for a 2-core CPU (three candidates); on a GPU raise `max_configs`, the users and
# the lengths to your traffic's.

# %% tags=["parameters"]
backend = "embedded"  # embedded | tgi | tgi-docker | vllm
base = {}  # settings every candidate shares (model_id, dtype, quantize, ...)
users = [4]  # the load to tune for (parallel users)
prompt_tokens = 64
max_new_tokens = 16
requests = 8
ramp_up = "auto"  # seconds over which the users start (user i at i/N); "auto": one cycle at the load; 0: at once
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
progress = True
plotly_renderer = None  # None: plotly's choice for your front-end; "plotly_mimetype" keeps saved notebooks small

# %%
import plotly.io as pio

if plotly_renderer:
    pio.renderers.default = plotly_renderer

from tgi_toolkit import plots
from tgi_toolkit.config import to_vllm_args
from tgi_toolkit.cookbook import out_dir
from tgi_toolkit.sweep import Workload
from tgi_toolkit.tune import Objectives, tune

output_dir = output_dir or str(out_dir("06_tune", "results"))
workload = Workload("concurrency", users=users, prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens,
                    requests=requests, ramp_up=ramp_up)
objectives = Objectives(ttft_s=ttft_s, tpot_s=tpot_s, percentile=percentile)
objectives.describe()

# %% [markdown]
# ## The objectives, and why goodput
#
# - `ttft_s`: how long a user may wait for the first token (interactive chat: about a second).
# - `tpot_s`: the time between tokens once streaming (reading speed: 0.1-0.2 s is comfortable).
# - `percentile`: p90 means nine requests in ten must meet them; p99 is stricter and needs more requests.
#
# Raw throughput rewards configurations that queue requests until latency is unacceptable; goodput
# counts only the requests that met the objectives, so the best configuration is the one that serves
# the most users *well*.
#
# ## Search

# %% tags=["nbval-ignore-output"]
result = tune(base, workload, objectives, output=output_dir, backend=backend, knobs=knobs, max_configs=max_configs,
              levels=levels, rounds=rounds, confirm=confirm, resume=resume, progress=progress)
print(result.message)

# %% [markdown]
# ## Where the candidates came from
#
# For each knob: the values tried and the reason for their bounds (the planner's capacity, the
# workload's requests in flight and lengths). For `cuda_memory_fraction` the source also gives the KV
# capacity in tokens each fraction yields.

# %%
{knob: knob_space for knob, knob_space in result.searched.space.items()}

# %% [markdown]
# ## Every configuration, ranked
#
# Configurations meeting the objectives first, by goodput; then the others by how far they were from
# meeting them (the worst ratio of measured to allowed), then those that measured nothing (invalid or
# failed to start).

# %% tags=["nbval-ignore-output"]
result.choice.table

# %% [markdown]
# ## The trade-off
#
# Every measured point of the configurations in the table above (the confirmation's second
# measurement included): output throughput against TTFT at the objective's percentile, one colour per
# configuration, the frontier joined. The dashed line is the TTFT objective (`ttft_s`), drawn in the
# axis's unit (ms or s, whichever the figure chose: `plots.axis_scale` says which). Points above it are
# out, whatever their throughput; the best configuration is usually the frontier point furthest right
# below it.

# %% tags=["nbval-ignore-output"]
from tgi_toolkit.bench import load_results

points = load_results(output_dir).points
# the folder may hold configurations of an earlier tuning (resume=True): draw this one's
points = points[(points["scenario"] == "concurrency") & points["config_id"].isin(result.choice.table["config_id"])]
ttft = f"ttft_{percentile}_s"
plots.pareto_plot(points, y=ttft, objectives={ttft: ttft_s})

# %% [markdown]
# ## Launch with it
#
# The chosen configuration (or, when none met the objectives, the closest) as a `LauncherConfig`, and
# the commands that run it on TGI and vLLM. A `cuda_memory_fraction` tuned on the embedded engine is a
# share of its `TGI_TOOLKIT_KV_CACHE_GIB`, not of a GPU's memory: carry over the KV capacity in tokens
# it stands for, not the fraction, or tune again with `backend="tgi"` on the GPU. `tune.json` in the
# results folder keeps all of this (`tgi_toolkit.tune.load_tune(folder)`).

# %% tags=["nbval-ignore-output"]
chosen = result.to_launcher_config(closest=not result.met)
print("text-generation-launcher " + " ".join(chosen.to_cli()))
print(" ".join(to_vllm_args(chosen).argv))
