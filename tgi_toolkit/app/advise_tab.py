"""The app's Advise tab: which GPUs to run a model on at a traffic and latency objectives (tgi_toolkit.advise),
all in simulation, so it answers on a CPU Space in seconds.

`run_advice` holds what the tab does (tests call it without a browser); `advise_tab` builds the components and
wires them, inside the app's Tabs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gradio as gr

from tgi_toolkit.costs.roofline import GPU_SPECS, PUBLISHED_MODELS

APP_MODEL = "SmolLM2-135M-Instruct (the app's model)"
MODELS = (*PUBLISHED_MODELS, APP_MODEL)  # config.json fields the app has without a download
SHARDS = ("1", "2", "4", "8")
QUANTIZE = ("none", "awq", "fp8")
TABLE_COLUMNS = ("rank", "candidate", "cost_per_million_tokens", "cost_per_hour", "replicas", "gpus",
                 "sustained_per_replica", "ttft_p90_s", "tpot_p90_s", "settings", "tied_with_first")
HELP = (
    "Ranks deployments of a model (GPU kind x GPUs per replica x quantization) by what they cost per million "
    "output tokens while meeting your latency objectives at your traffic: the capacity planner refuses what "
    "does not fit, TGI's scheduler is simulated with each card's datasheet (the roofline cost model), the "
    "prefill budget and KV memory are tuned in simulation, and one replica's sustainable request rate is "
    "found by bisection. Prices: the shipped dated table of public on-demand prices."
)


def _model(name: str) -> Any:
    if name in PUBLISHED_MODELS:
        return name
    if name == APP_MODEL:
        from tgi_toolkit.config import LauncherConfig
        from tgi_toolkit.tune.sizing import model_config_path

        return model_config_path(LauncherConfig())
    raise ValueError(f"model: {name!r} is not one of {', '.join(MODELS)}")


def _number(label: str, text: Any, *, integer: bool = False, optional: bool = False) -> float | int | None:
    if optional and (text is None or str(text).strip() == ""):
        return None
    try:
        value = float(str(text).strip())
    except ValueError:
        raise ValueError(f"{label}: {text!r} is not a number") from None
    if not (value > 0 and math.isfinite(value)) or (integer and value != int(value)):
        raise ValueError(f"{label}: {text!r} must be a {'whole ' if integer else ''}number > 0")
    return int(value) if integer else value


def run_advice(model: str, rate: Any, prompt_tokens: Any, max_new_tokens: Any, ttft: Any, tpot: Any,
               percentile: str, gpus: Sequence[str], shards: Sequence[str], quantize: Sequence[str],
               ) -> tuple[str, Any, Any, str]:
    """(summary markdown, ranked table, cost-latency figure, refused markdown); bad input gives a sentence
    naming the field and nothing else."""
    import pandas as pd

    from tgi_toolkit.advise.api import advise

    try:
        if not gpus or not shards or not quantize:
            empty = "GPU kinds" if not gpus else "GPUs per replica" if not shards else "quantization"
            raise ValueError(f"{empty}: choose at least one")
        values = dict(rate=_number("request rate", rate), prompt_tokens=_number("prompt tokens", prompt_tokens,
                                                                                 integer=True),
                      max_new_tokens=_number("output tokens", max_new_tokens, integer=True),
                      ttft=_number("TTFT limit", ttft, optional=True), tpot=_number("TPOT limit", tpot, optional=True))
        advice = advise(_model(model), gpus=list(gpus), shards=[int(s) for s in shards], quantize=list(quantize),
                        percentile=percentile, progress=False, **values)
    except (ValueError, KeyError) as exc:
        return f"**Not run:** {str(exc).strip(chr(39))}", pd.DataFrame(), None, ""
    p = advice.objectives.percentile
    columns = [c.replace("p90", p) for c in TABLE_COLUMNS]
    table = advice.table[[c for c in columns if c in advice.table]] if not advice.table.empty else advice.table
    lines = [f"**{advice.traffic.describe()}**; objectives {advice.objectives.describe()}.",
             f"_{advice.prices.describe()}_"]
    best = advice.best
    if best is None:
        lines.append("**No candidate meets the objectives at any load.**")
    else:
        lines += [f"**Cheapest: {best['candidate']}**, {best['replicas']} replica(s), {best['gpus']} GPU(s), "
                  f"{best['cost_per_million_tokens']:.3g} {advice.prices.currency} per million output tokens.",
                  f"TTFT error: {best['ttft_error']}. TPOT error: {best['tpot_error']}.",
                  f"Launch each replica with:\n\n```\n{advice.command}\n```"]
        if advice.tied:
            lines.append(f"Tied with it (the error bars overlap): {', '.join(advice.tied)}.")
    refused = [f"- {r.candidate.name}: {r.reason}" for r in advice.refused]
    refused += [f"- {r['candidate']}: {r['reason']}" for _, r in advice.missed.iterrows()]
    return "\n\n".join(lines), table, advice.figure(), "\n".join(refused) or "None refused."


def advise_tab() -> None:
    """The tab's components and its one event; call inside the app's gr.Tabs()."""
    with gr.Tab("4. Advise: which GPUs", id="advise", elem_id="tab-advise"):
        gr.Markdown(HELP)
        with gr.Row():
            model = gr.Dropdown(list(MODELS), value=MODELS[0], label="Model", elem_id="advise-model", scale=2)
            rate = gr.Textbox("5", label="Request rate (requests/s)", max_lines=1, elem_id="advise-rate")
            prompt = gr.Textbox("512", label="Prompt tokens", max_lines=1, elem_id="advise-prompt")
            output = gr.Textbox("128", label="Output tokens", max_lines=1, elem_id="advise-output")
        with gr.Row():
            ttft = gr.Textbox("1", label="TTFT limit (s)", max_lines=1, elem_id="advise-ttft")
            tpot = gr.Textbox("0.05", label="TPOT limit (s)", max_lines=1, elem_id="advise-tpot")
            percentile = gr.Radio(["50", "90", "99"], value="90", label="Percentile", elem_id="advise-percentile")
        with gr.Row():
            gpus = gr.CheckboxGroup(list(GPU_SPECS), value=["L4", "A100-80GB"], label="GPU kinds",
                                    elem_id="advise-gpus", scale=3)
            shards = gr.CheckboxGroup(list(SHARDS), value=["1", "2"], label="GPUs per replica", elem_id="advise-shards")
            quantize = gr.CheckboxGroup(list(QUANTIZE), value=["none"], label="Quantization", elem_id="advise-quantize")
        button = gr.Button("Advise", variant="primary", elem_id="advise-run")
        summary = gr.Markdown(elem_id="advise-summary")
        plot = gr.Plot(label="Cost against latency", elem_id="advise-plot")
        table = gr.Dataframe(label="Candidates, cheapest first", interactive=False, elem_id="advise-table")
        refused = gr.Markdown(elem_id="advise-refused")
        button.click(run_advice, [model, rate, prompt, output, ttft, tpot, percentile, gpus, shards, quantize],
                     [summary, table, plot, refused], api_visibility="private")


__all__ = ["advise_tab", "run_advice"]
