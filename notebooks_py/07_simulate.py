# %% [markdown]
# # 7. Simulate before you buy
#
# The engine's scheduler is TGI's rules in one module; driven by a **virtual clock** and a **cost model**
# that prices each forward, the same module predicts what TGI would do with a workload, in seconds, for
# hardware that is not here (`tgi_toolkit.simulate`). This notebook:
#
# 1. **profiles** the embedded engine: bench's own ingestion and batch scenarios over a small grid, and a
#    readable linear model of a forward's time fitted to them;
# 2. **simulates** a workload with it and **measures** the same workload on the real server: predicted
#    beside measured, as two configurations of one results table;
# 3. runs the same workloads **"on an H100" and "on an A100"** with the roofline model (what the GPU reaches in
#    published microbenchmarks, the model's shape, efficiency factors fitted once to the published cards), and sets the roofline's
#    predictions for those cards' models beside the published cards in data/reference.
#
# The scheduling path is the scheduler's own: TGI 3's chunked prefill with the prefix cache by default, the
# older path with `PREFILL_CHUNKING=0` (set it in the environment, or pass `chunking=False`).
# The defaults run in a minute or two on 2 CPU cores; timings on a busy machine are noisy, and the profile
# only knows the machine as it was while it ran.

# %% tags=["parameters"]
backend = "embedded"  # the server to profile and measure: embedded | tgi | tgi-docker | vllm
launcher = {"max_input_tokens": 512, "max_total_tokens": 600}  # its launcher settings
cost_model = None  # a cost.json from `tgi-toolkit simulate profile` to skip profiling
profile_grid = {"prompt_tokens": [16, 128, 384], "batch_sizes": [1, 4], "contexts": [32], "decode_length": 8,
                "repeats": 1}  # the calibration grid (simulate.calibrate.FULL is the fuller one)
users = [1, 4]  # the workload simulated and measured
prompt_tokens = 64
max_new_tokens = 16
requests = 8
ramp_up = "auto"  # seconds over which the users start (user i at i/N); "auto": one cycle at the load; 0: at once
gpus = ["H100", "A100-80GB"]  # simulated with the roofline model
model_config = None  # config.json for the GPU runs (None: the served model's)
output_dir = None  # None: out/07_simulate/results in the checkout
plotly_renderer = None  # None: plotly's choice for your front-end; "plotly_mimetype" keeps saved notebooks small

# %% tags=["nbval-ignore-output"]
import plotly.io as pio

if plotly_renderer:
    pio.renderers.default = plotly_renderer

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
                ramp_up=ramp_up)

# %% [markdown]
# ## 1. Profile the server
#
# Each TTFT of the ingestion scenario is the request's overhead (HTTP, validation, tokenization) plus the
# forward that computed its prompt; each decode token latency of the batch scenario is one forward of B
# decoding rows. The fit keeps every coefficient >= 0 and minimises relative error; `points` shows how
# far the model is from each measurement.

# %% tags=["nbval-ignore-output"]
if cost_model:
    cost = simulate.load_cost_model(cost_model)
else:
    cost = simulate.profile(server, **profile_grid, output=out_dir("07_simulate") / "cost.json")
print(cost.formula(), f"+ request overhead {cost.request_overhead_s * 1e3:.3g} ms")
pd.DataFrame(cost.points)

# %% [markdown]
# ## 2. Simulate, then measure the same workload
#
# Both write the same tables into one folder: the simulated run's `config_label` ends in
# `[simulated: ...]`, so every figure and comparison takes it as one more configuration.

# %% tags=["nbval-ignore-output"]
predicted = simulate.run_concurrency(cost, **workload, output=output_dir)
measured = bench.run_concurrency(server, **workload, output=output_dir)
server.stop()

columns = ["ttft_p50_s", "tpot_p50_s", "output_throughput_tok_s"]
both = pd.concat({"predicted": predicted.points.set_index("users")[columns],
                  "measured": measured.points.set_index("users")[columns]}, axis=1)
for column in columns:
    both[("ratio", column)] = both[("predicted", column)] / both[("measured", column)]
both

# %% tags=["nbval-ignore-output"]
fig = go.Figure()
for name, res, dash in (("measured", measured, "solid"), ("predicted", predicted, "dash")):
    pts = res.points.sort_values("users")
    fig.add_scatter(x=pts["users"], y=pts["output_throughput_tok_s"], name=f"throughput, {name}",
                    line={"dash": dash})
    fig.add_scatter(x=pts["users"], y=pts["ttft_p50_s"], name=f"TTFT p50, {name}", yaxis="y2", line={"dash": dash})
fig.update_layout(title="Predicted against measured", xaxis_title="parallel users",
                  yaxis_title="output tokens/s", yaxis2={"title": "TTFT p50 (s)", "overlaying": "y", "side": "right"})
fig

# %% [markdown]
# ## 3. The same workload on GPUs you do not have
#
# On a card NVIDIA's operator database measured (`aiconfigurator-core`: A100 80GB, H100, H200, L40S, B200), a
# forward is priced as the sum of its kernels' measured times: the GEMMs at its token count, context and generation
# attention, the all-reduces, the LM head (`tgi_toolkit.costs.measured`, docs/simulator.md "Measured kernel
# times"); nothing in it is fitted to published figures. Elsewhere the roofline model prices a forward from what
# the card reaches (dense 16-bit FLOP/s and memory bandwidth as a
# published microbenchmark measured them: an H100's matmuls reach 80 % of its datasheet, an MI300X's 51 %; the
# link between GPUs from the datasheet) and the model's shape (config.json), with efficiency factors every card shares, plus the
# host time of the server it stands for (`server`: TGI 3 by default; TGI 2 and 1, vLLM V1 and V0, TensorRT-LLM,
# SGLang, LMDeploy). Both were fitted to published GPU figures (`data/reference/gpu_figures.csv`,
# `docs/gpu-corpus.md`). The KV capacity and the prefill budget are those TGI 3 would find on that card (the
# capacity planner, the launcher's FLOPs rule). Each prediction carries how far such predictions fell from
# published figures they were not fitted to (section 4).

# %% tags=["nbval-ignore-output"]
from tgi_toolkit.tune.sizing import model_config_path

config_json = model_config or model_config_path(LauncherConfig(**launcher))
rows, priced = [], {}
for gpu in gpus:
    cost = simulate.gpu_cost_model(gpu, config_json)  # measured kernels where the database has the card
    priced[gpu] = cost.provenance() if hasattr(cost, "provenance") else "roofline (the card's datasheet)"
    res = simulate.run_concurrency(cost, **workload)
    rows.append(res.points.assign(gpu=gpu)[["gpu", "users", *columns, "tpot_prediction_error"]])
for gpu, source in priced.items():
    print(f"{gpu}: {source}")
pd.concat([measured.points.assign(gpu="this machine (measured)")[["gpu", "users", *columns]], *rows])

# %% [markdown]
# ## 4. How far to trust a GPU prediction
#
# `benchmarks/gpu_accuracy.py` holds every figure of one publication out at a time, fits the roofline to the
# others and predicts the held-out figures with this simulator ("leave one source out"); then it predicts a
# test set gathered after the model's design was frozen, from sources the corpus does not use. Only those
# predictions count as accuracy: agreement with figures a fit saw is a fit check. A prediction states the worse
# of its regime's two 80th-percentile errors (`tpot_prediction_error` above), and says when it lies outside
# what the corpus measured (for the default TGI 3: no published TGI 3 figure backs its host time yet). The
# measured-kernel model is fitted to nothing, so every figure on a card it covers is held out; its record is in
# the same table (`model`).

# %%
from tgi_toolkit.costs.uncertainty import accuracy_table

accuracy = accuracy_table()
accuracy

# %%
overall = accuracy[accuracy["model"] == "roofline"].set_index(["check", "regime"])
loso, test = overall.loc[("leave one source out", "all")], overall.loc[("test set", "all")]
print(f"Leave one source out: {loso['within ±30 %']:.0%} of {loso['figures']:.0f} published figures within ±30 %, "
      f"median |error| {loso['median |error|']:.0%}; the test set: {test['within ±30 %']:.0%} of {test['figures']:.0f}, "
      f"median {test['median |error|']:.0%}.")
