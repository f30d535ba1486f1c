# %% [markdown]
# # 5. The model card
#
# A model card in the layout of happy_vllm's (seeds 001, 003): the main metrics, the figures, and every
# launcher parameter the results were measured with, taken from the runs' provenance. It is written
# as Markdown (with PNG images where kaleido finds a Chromium, else interactive HTML figures) and as
# one HTML page you can open offline. The same is `tgi-toolkit report RESULTS_DIR`.
#
# The three main metrics:
#
# - **Prompt ingestion speed**: 1 / slope of TTFT against prompt length (one request at a time).
# - **Mean generation speed for 10 parallel requests with a 1024-token prompt and 128 generated
#   tokens**: per-request decode speed at that concurrency point. When the results do not hold that
#   point, or the server cannot take it (its `max_total_tokens` is smaller), the nearest measured point
#   is used and named, and the table says so.
# - **KV-cache capacity**: the token budget the server states (`max_batch_total_tokens`), or
#   happy_vllm's estimate from cache usage under load where it states none (vLLM).

# %% tags=["parameters"]
results_dir = None  # None: data/examples/smollm2-135m-cpu
output = None  # a .md or .html file, or a folder; None: out/05_model_card/model_card.md
figure_format = "auto"  # png (kaleido + Chromium), html, or auto
users = 10
prompt_tokens = 1024
max_new_tokens = 128
plotly_renderer = None  # None: plotly's choice for your front-end; "plotly_mimetype" keeps saved notebooks small

# %%
import plotly.io as pio

if plotly_renderer:
    pio.renderers.default = plotly_renderer

from IPython.display import Markdown

from tgi_toolkit.bench import load_results
from tgi_toolkit.cookbook import example_results_dir, out_dir
from tgi_toolkit.report import main_metrics, report_paths, write_report
from tgi_toolkit.report_figures import card_figures
from tgi_toolkit.report_sections import parameters

results = load_results(results_dir or example_results_dir())
output = output or str(out_dir("05_model_card") / "model_card.md")
results

# %% [markdown]
# ## Main metrics, and how each was obtained
#
# `users`, `prompt_tokens` and `max_new_tokens` choose the generation-speed point; keep happy_vllm's
# 10 / 1024 / 128 to compare with published cards.

# %%
metrics = main_metrics(results, users=users, prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens)
metrics[["config_label", "label", "text", "basis"]]

# %% [markdown]
# ## Parameters
#
# Every launcher setting as the runs recorded it (defaults included, secrets redacted), with where it
# ran (backend, versions, hardware) and the budgets the server resolved at start-up.

# %%
parameters(results)

# %% [markdown]
# ## Write the card

# %% tags=["nbval-ignore-output"]
path = write_report(results, output, figure_format=figure_format, users=users, prompt_tokens=prompt_tokens,
                    max_new_tokens=max_new_tokens)
md_path, html_path, figures_dir = report_paths(output)
print(f"model card: {md_path}\nHTML report (open in a browser): {html_path}")
print("figures:", ", ".join(sorted(p.name for p in figures_dir.rglob("*") if p.suffix in (".png", ".html"))))

# %% tags=["nbval-ignore-output"]
Markdown(md_path.read_text().split("# Total generation speed")[0])

# %% [markdown]
# ## The card's figures
#
# The same figures the card holds, interactive here. How to read each: see `02_benchmark`.

# %% tags=["nbval-ignore-output"]
figures = card_figures(results)
for figure in figures:
    figure.figure.show()
