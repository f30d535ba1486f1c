"""The model card's figures: which plotly figures a result set can draw, in card order, and writing them
as PNG (kaleido + Chromium) or as interactive HTML files; `tgi_toolkit.report` writes the card around them."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tgi_toolkit import schema as S
from tgi_toolkit.bench.main_metrics import split_by_config
from tgi_toolkit.bench.results import as_results

FIGURE_WIDTH, FIGURE_HEIGHT = 1000, 550


# -- figures ----------------------------------------------------------------------------------------------
@dataclass
class CardFigure:
    """A figure of the card: its name (file stem), section, caption and plotly figure."""

    name: str
    section: str
    caption: str
    figure: Any = field(repr=False)


def card_figures(results: Any) -> list[CardFigure]:
    """The figures the results can draw, in card order: total throughput and per-request speed with
    TTFT against parallel users (one per prompt/output pair, as the seeds), prompt ingestion,
    text-generation-benchmark's latency against throughput, ITL distributions, the server's queue and
    batch over time, KV usage, and the Pareto frontier when there are several configurations."""
    from tgi_toolkit import plots
    from tgi_toolkit.plots.labels import short_labels

    results = as_results(results)
    figures = []
    concurrency = results.points[results.points[S.SCENARIO] == "concurrency"]
    if len(concurrency):
        figures.append(CardFigure("total_speed_generation_graph", "Total generation speed",
                              "Total output throughput against the number of parallel requests, one line per "
                              "prompt/output length.", plots.throughput_vs_users(concurrency)))
        pairs = concurrency[[S.PROMPT_TOKENS, S.MAX_NEW_TOKENS]].drop_duplicates().sort_values(
            [S.PROMPT_TOKENS, S.MAX_NEW_TOKENS], ascending=False)
        for prompt, output in pairs.itertuples(index=False):
            part = concurrency[(concurrency[S.PROMPT_TOKENS] == prompt) & (concurrency[S.MAX_NEW_TOKENS] == output)]
            figures.append(CardFigure(
                f"speed_generation/speed_generation_graph_input_{prompt}_output_{output}",
                "Generation speed and latency",
                f"Prompt of {prompt} tokens and {output} tokens generated: the lines show the median, the bars "
                f"the 25th and 75th percentiles.",
                plots.speed_and_ttft_vs_users(part, title=f"Per-request speed and TTFT, prompt {prompt} / "
                                                          f"output {output} tokens")))
    # One ingestion fit per configuration, as the main metrics table has: a fit over every
    # configuration's requests at once would give a figure that the table contradicts.
    parts = split_by_config(results)
    short = short_labels(parts)  # the settings that differ between configurations; the parameters table has all
    for i, (config, part) in enumerate(parts.items()):
        ingestion = part.requests[part.requests[S.SCENARIO] == "ingestion"]
        if not len(ingestion):
            continue
        name, title = "prompt_ingestion", None
        if len(parts) > 1:
            name = f"prompt_ingestion_{i}"
            fit = plots.fit_ingestion(ingestion)
            # the number first, so that nothing pushes it out of the title; why it is unreliable in the subtitle
            speed = f": {fit['speed_tok_s']:,.0f} tokens/s" if np.isfinite(fit["speed_tok_s"]) else ""
            title = f"Prompt ingestion{speed}, {short[config]}"
        figures.append(CardFigure(name, "Prompt ingestion",
                              "TTFT against prompt length, one request at a time; the slope of the fitted line is "
                              "the time per prompt token, its inverse the ingestion speed.",
                              plots.ingestion_plot(ingestion, title=title)))
    if len(results.batch):
        figures.append(CardFigure("batch_latency_throughput", "Batch benchmark (text-generation-benchmark)",
                              "Prefill and decode latency against throughput, one colour per batch size, one "
                              "marker per run: up and to the right is more throughput bought with more latency.",
                              plots.batch_latency_throughput(results.batch)))
    conc_requests = results.requests[results.requests[S.SCENARIO] == "concurrency"]
    if len(conc_requests):
        figures.append(CardFigure("itl_distribution", "Inter-token latency",
                              "Gaps between consecutive tokens of every request, per point: a wide or bimodal "
                              "violin shows decode steps held up by other requests' prefills.",
                              plots.itl_distribution(conc_requests)))
    if len(results.server) and len(conc_requests):
        run_id = conc_requests[S.RUN_ID].iloc[-1]
        figures.append(CardFigure("server_timeline", "Server", "Queue and running batch size during the last "
                              "concurrency run, with each request's TTFT at the moment it was sent.",
                              plots.server_timeline(results.server, requests=conc_requests, run_id=run_id)))
        figures.append(CardFigure("kv_usage", "Server", "Share of the KV-cache budget in use during the same run.",
                              plots.kv_usage_timeline(results.server, run_id=run_id)))
    if results.points[S.CONFIG_ID].nunique() > 1 and len(concurrency):
        figures.append(CardFigure("pareto", "Configurations", "Every point of every configuration: output throughput "
                              "against median TTFT; the joined points are the ones no other configuration beats "
                              "on both.", plots.pareto_plot(concurrency)))
    return figures


def png_renderer_available() -> bool:
    """True where plotly can write PNG offline: kaleido >= 1 and a Chromium-based browser already
    installed (kaleido never downloads one here: that would need a network at run time)."""
    try:
        import kaleido  # noqa: F401
        from choreographer.browsers.chromium import Chromium
    except ImportError:
        return False
    try:
        return Chromium.find_browser(skip_local=False) is not None
    except Exception:  # a broken install: say no rather than fail the report
        return False


def write_pngs(figures: Sequence[CardFigure], folder: Path) -> bool:
    """All figures as PNG in one browser session; False (nothing kept) if the renderer fails."""
    import plotly.io as pio

    paths = [folder / f"{f.name}.png" for f in figures]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        pio.write_images([f.figure for f in figures], paths, width=FIGURE_WIDTH, height=FIGURE_HEIGHT)
    except Exception:  # no usable browser after all: the caller falls back to HTML figures
        for path in paths:
            with contextlib.suppress(OSError):
                path.unlink()
        return False
    return all(p.exists() for p in paths)


def write_htmls(figures: Sequence[CardFigure], folder: Path) -> None:
    # plotly.js once in the figures folder, each figure pointing at it: offline, 4 MB once, not per figure
    from plotly.offline import get_plotlyjs

    (folder / "plotly.min.js").write_text(get_plotlyjs())
    for f in figures:
        path = folder / f"{f.name}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        script = Path(os.path.relpath(folder / "plotly.min.js", path.parent)).as_posix()
        f.figure.write_html(path, include_plotlyjs=script, full_html=True)
