# %% [markdown]
# # 4. Compare results, and put them beside published ones
#
# Numbers mean little alone. This notebook puts a result set beside another (two configurations,
# two machines) and beside the results the seeds published: `text-generation-benchmark`'s tables for
# mt0-xxl on 4 GPUs (seed 000) and happy_vllm's model cards for CodeLlama-7b on an A100 and
# Phi-3-vision titled H100 (seeds 001, 003; seed 003 is a debug-mode run on an A100-80g, by its authors'
# later relabel and rerun, both in `data/reference` too). The published numbers are read into the same tables as
# our runs (`tgi_toolkit.reference`), so every figure takes them as it takes a run.
#
# It needs no server: by default it reads the example result set in `data/examples/` (a real run of
# the embedded engine on 2 CPU cores); point `results_dir` at your own (`02_benchmark`'s output).

# %% tags=["parameters"]
results_dir = None  # None: data/examples/smollm2-135m-cpu
other_results_dir = None  # a second result set to compare with (e.g. out/02_benchmark/results); None: skip
references = ["tgi-benchmark-mt0-xxl", "happy-vllm-codellama-7b-a100", "happy-vllm-phi-3-vision-h100"]
plotly_renderer = None  # None: plotly's choice for your front-end; "plotly_mimetype" keeps saved notebooks small

# %%
import plotly.io as pio

if plotly_renderer:
    pio.renderers.default = plotly_renderer

import pandas as pd

from tgi_toolkit import plots
from tgi_toolkit.bench import load_results
from tgi_toolkit.cookbook import example_results_dir
from tgi_toolkit.bench.main_metrics import main_metrics, main_metrics_table
from tgi_toolkit.reference import list_references, load_reference

ours = load_results(results_dir or example_results_dir())
refs = {name: load_reference(name) for name in references}
print(ours)
print("available references:", ", ".join(list_references()))

# %% [markdown]
# ## The published tables
#
# text-generation-benchmark prints one latency table and one throughput table per experiment. Its
# prefill throughput counts one token per request (B / latency); ours counts prompt tokens
# (B x S / latency), so the loader converts: compare `prefill_throughput_tok_s` columns, not the
# printed numbers.

# %%
tgi_ref = next((r for r in refs.values() if not r.tables.empty), None)
tgi_ref.tables if tgi_ref is not None else "no text-generation-benchmark reference selected"

# %%
cards = {name: r for name, r in refs.items() if not r.main_metrics.empty}
published = [r.card_metrics() for r in cards.values()]
main_metrics_table(pd.concat(published)) if published else "no happy_vllm card selected"

# %% [markdown]
# ## Our main metrics beside the cards'
#
# The same three numbers from our results (`main_metrics`, what the model card and
# `Results.main_metrics()` give), with how each was obtained. A 135M-parameter model on two CPU cores
# is of course far from a 7B model on an A100: the point is that the numbers are measured the same
# way, so your own GPU runs land in the same table. A row measured at different points for different
# sets names each cell's point.

# %%
mine = main_metrics(ours)
mine["config_label"] = "ours: " + mine["config_label"]  # one column per configuration of ours
main_metrics_table(pd.concat([mine, *published]))

# %%
mine[["label", "basis"]]

# %% [markdown]
# ## Batch results beside the published ones
#
# Grouped bars per batch size, one colour per set; whiskers span the lowest to the highest run. The
# reference ran a 13B model with 500-token prompts on 4 GPUs; ours a 135M model on a CPU: read the
# shape (how each metric moves with the batch size), not the level.

# %% tags=["nbval-ignore-output"]
sets = {"ours": ours.batch}
if tgi_ref is not None:
    sets[tgi_ref.label] = tgi_ref.batch
if other_results_dir:
    sets["other"] = load_results(other_results_dir).batch
plots.compare_batch(sets)

# %% [markdown]
# **Latency against throughput**, text-generation-benchmark's own picture, with the reference's
# averages as a second marker symbol. Log axes, because the two sets are orders of magnitude apart.

# %% tags=["nbval-ignore-output"]
frames = [ours.batch] + ([tgi_ref.batch] if tgi_ref is not None else [])
plots.batch_latency_throughput(pd.concat(frames, ignore_index=True), log_axes=True)

# %% [markdown]
# ## Load curves beside the cards' point
#
# happy_vllm's cards publish the mean per-request speed at 10 users with 1024-token prompts; our
# concurrency points are drawn with their mean too (`center="mean"`) so that the two agree in kind.

# %% tags=["nbval-ignore-output"]
point_sets = {"ours": ours.points[ours.points["scenario"] == "concurrency"]}
point_sets.update({r.label: r.points for r in cards.values()})
if other_results_dir:
    other = load_results(other_results_dir).points
    point_sets["other"] = other[other["scenario"] == "concurrency"]
plots.compare_points(point_sets, metrics=("speed",), center="mean")

# %% [markdown]
# ## A heatmap of a metric over two knobs
#
# Decode throughput over batch size and sequence length (one cell per pair measured). With a single
# sequence length the map is one column; a sweep (`03_sweep`) over lengths fills it in.

# %% tags=["nbval-ignore-output"]
plots.batch_heatmap(ours.batch)

# %% [markdown]
# ## The Pareto frontier
#
# Each point is one load level of one configuration: throughput (right is better) against median TTFT
# (down is better). The joined points are those no other point beats on both; a configuration that
# never reaches the frontier is dominated. With one configuration it is simply its load curve.

# %% tags=["nbval-ignore-output"]
plots.pareto_plot(ours.points[ours.points["scenario"] == "concurrency"])
