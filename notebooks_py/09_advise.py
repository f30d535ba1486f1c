# %% [markdown]
# # 9. Which GPUs to run it on
#
# You have a model, a traffic estimate and latency objectives; you need hardware: which card, how many per
# replica (tensor parallel), which quantization, how many replicas, at what cost. `tgi_toolkit.advise` answers
# from datasheets, in seconds, on this CPU:
#
# 1. every candidate (GPU kind x GPUs per replica x quantization) goes through the **capacity planner**; those
#    that cannot hold the model are listed with the reason;
# 2. each one left runs **TGI's own scheduler on a virtual clock**, each forward priced by the roofline model of
#    its datasheet, with TGI 3's default launcher settings; the prefill budget and the KV memory are **tuned in
#    simulation** as `tune --simulate` tunes them;
# 3. a bisection on the request rate finds the most **one replica sustains** while meeting the objectives at the
#    percentile; the traffic then needs so many replicas, which cost so much per hour and per million output
#    tokens, at the prices of a **dated public table** (or yours);
# 4. every prediction carries the **cross-validated error of its regime** (how far the roofline was from
#    published figures it was not fitted to); candidates whose cost the error bars cannot order are **tied**.

# %% tags=["parameters"]
model = "codellama/CodeLlama-7b-Instruct-hf"  # a config.json path, a model directory, or a name in costs.roofline.PUBLISHED_MODELS
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
progress = True
plotly_renderer = None  # None: plotly's choice for your front-end; "plotly_mimetype" keeps saved notebooks small

# %%
import plotly.io as pio

if plotly_renderer:
    pio.renderers.default = plotly_renderer

import pandas as pd

from tgi_toolkit.advise import advise
from tgi_toolkit.bench import load_results
from tgi_toolkit.cookbook import out_dir

output_dir = output_dir or str(out_dir("09_advise", "results"))
advice = advise(model, rate=rate, users=users, prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens,
                ttft=ttft_s, tpot=tpot_s, percentile=percentile, gpus=gpus, shards=shards, quantize=quantize,
                prices=prices, output=output_dir, progress=progress)
print(advice.prices.describe())

# %% [markdown]
# ## 1. What does not fit
#
# The planner's memory check, before any simulation: the weights per GPU, one request's KV cache, the
# launcher's limits. Each refused candidate says why.

# %%
refused = advice.refused_table()
assert refused["reason"].str.len().gt(0).all()  # every refusal names its reason
refused

# %% [markdown]
# ## 2. The ranking
#
# Cheapest first: cost per million output tokens at your traffic, the replicas and GPUs it takes, what one
# replica sustains, and the TTFT and TPOT predicted at the percentile when the traffic is spread over those
# replicas, each with its error. Every row meets the objectives there: a candidate that cannot at any load is
# listed below the table instead.

# %%
p = advice.objectives.percentile
table = advice.table
if not table.empty:
    assert table["cost_per_million_tokens"].is_monotonic_increasing  # cheapest first
    assert (table[f"ttft_{p}_s"] <= ttft_s).all() and (table[f"tpot_{p}_s"] <= tpot_s).all()
print(advice.summary())
table[["rank", "candidate", "cost_per_million_tokens", "cost_low", "cost_high", "replicas", "gpus",
       "sustained_per_replica", f"ttft_{p}_s", "ttft_error", f"tpot_{p}_s", "tpot_error", "settings",
       "tied_with_first"]]

# %% [markdown]
# **How to read it**: `cost_low`-`cost_high` is the cost if the predictions were off by their regime's error
# (the server faster or slower than predicted); a candidate whose range reaches the winner's is marked
# `tied_with_first`: the error bars cannot say which is cheaper. Until the roofline's cross-validated errors are
# written (`benchmarks/gpu_accuracy.py`), the errors are unknown, the ranges collapse to a point and only equal
# costs tie. `settings` are the knobs the simulated tuning changed from TGI 3's defaults.
#
# ## 3. Cost against latency
#
# Each marker a candidate; the dotted line joins the **Pareto set**, the candidates no other is both cheaper
# and faster than. The cheapest is always in it.

# %%
if not table.empty:
    from tgi_toolkit.pareto import pareto_front

    front = pareto_front(table, f"ttft_{p}_s", "cost_per_million_tokens", maximize_x=False)
    assert bool(front.iloc[0])  # the cheapest is in the Pareto set
advice.figure()

# %% [markdown]
# ## 4. The winner's launch command
#
# One replica's `text-generation-launcher` command (TGI 3's defaults, plus whatever the tuning changed);
# run as many replicas as the table says behind a load balancer.

# %%
print(advice.command)

# %% [markdown]
# ## 5. The results folder
#
# One simulated configuration per candidate, at the load each replica would carry, in the toolkit's results
# format: the notebooks' figures, `compare_points`, and the model card (`tgi-toolkit report`) read it like a
# measured run (`config_label` ends in `[simulated: ...]`). `advise.json` beside it keeps the table.

# %%
results = load_results(output_dir).select(advice.run_ids)  # this advice's runs, not an earlier one's
assert results.points["config_id"].nunique() >= len(table)  # one simulated configuration per candidate
# each run named by its candidate (config_label lists every setting and the cost model: ~150 characters)
candidate = {e.run_id: e.candidate.name for e in advice.evaluations if e.run_id}
shown = results.points.assign(candidate=results.points["run_id"].map(candidate))
shown[["candidate", "rate_rps", "users", f"ttft_{p}_s", f"tpot_{p}_s", "output_throughput_tok_s"]]
