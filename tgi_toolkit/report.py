"""The model card: happy_vllm's layout (seeds 001 and 003) written from a results folder.

    tgi-toolkit report RESULTS_DIR [--output FILE]

    from tgi_toolkit.report import write_report, main_metrics
    write_report("results/", "card/model_card.md")   # -> the path; model_card.html beside it
    main_metrics(load_results("results/"))           # the three numbers, and how each was obtained

A card holds the main metrics (prompt ingestion speed, per-request generation speed for 10 parallel
requests with a 1024-token prompt and 128 generated tokens, KV-cache capacity), the figures of
`tgi_toolkit.plots` that the results can draw, and the launcher parameters from the runs'
provenance. It is written twice from the same content: Markdown with images (PNG through kaleido
where a Chromium is installed, else one HTML file per figure) and one self-contained HTML page
with interactive figures that a person can open without a network.

The main metrics say how each was obtained (`basis`): a card made from a small CPU run rarely
holds the exact 10 x 1024/128 point, and a model with a short context cannot take it at all; the
nearest measured point is used and named instead of being passed off as the asked-for one. They
are computed in `tgi_toolkit.bench.main_metrics` (re-exported here), which `Results.main_metrics()`
and the app share.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tgi_toolkit.bench import schema as S

# The main metrics live in bench (Results.main_metrics, the app and the notebooks use them too); the
# card's names stay importable from here.
from tgi_toolkit.bench.main_metrics import (  # noqa: F401
    CARD_MAX_NEW_TOKENS,
    CARD_PROMPT_TOKENS,
    CARD_USERS,
    GENERATION,
    INGESTION,
    KV_CAPACITY,
    METRICS,
    MainMetric,
    card_point,
    generation_speed,
    ingestion_speed,
    kv_cache_capacity,
    main_metrics,
    main_metrics_table,
    run_info,
    split_by_config,
)
from tgi_toolkit.bench.results import as_results

FIGURE_FORMATS = ("auto", "png", "html")
FIGURES_DIR = "figures"
_FILE_SUFFIXES = (".md", ".html", ".htm")  # an output ending otherwise is a folder (e.g. "results.v2")
_FIGURE_WIDTH, _FIGURE_HEIGHT = 1000, 550
# The main metrics' column headers when configurations are rows; the legend above the table gives each
# happy_vllm's full row name.
_SHORT_HEADERS = {INGESTION: "Prompt ingestion", GENERATION: "Generation speed", KV_CAPACITY: "KV-cache capacity"}


# -- parameters ---------------------------------------------------------------------------------------------
def parameters(results: Any) -> pd.DataFrame:
    """The card's parameters table: for each configuration, where and how the server ran (model,
    backend, engine, versions, hardware, first run's start) then every launcher setting as recorded
    in the runs' provenance, and the budgets the server resolved at start-up. One column per
    configuration, one row per parameter, values as text."""
    results = as_results(results)
    columns: dict[str, dict[str, str]] = {}
    for config, part in split_by_config(results).items():
        runs = part.runs
        first = runs[0] if runs else {}
        info = run_info(part)
        versions = first.get("versions") or {}
        hardware = first.get("hardware") or {}
        gpus = ", ".join(g.get("name", "?") for g in hardware.get("gpus") or [])
        col: dict[str, str] = {
            "model": info.get("model_id") or (part.points[S.MODEL_ID].dropna().iloc[0]
                                              if part.points[S.MODEL_ID].notna().any() else "?"),
            "backend": first.get("backend", "?"),
            "server": " ".join(str(v) for v in (info.get("engine") or info.get("router"), info.get("version")) if v),
            "model_dtype": info.get("model_dtype"),
            "suite_started_at": first.get("started_at"),
            "runs": ", ".join(f"{r.get('scenario')} ({r.get('status')})" for r in runs),
            "tgi_toolkit_version": versions.get("tgi_toolkit"),
            "torch_version": versions.get("torch"),
            "transformers_version": versions.get("transformers"),
            "hardware": gpus or f"{hardware.get('cpu', '?')} ({hardware.get('cores_logical', '?')} cores, CPU)",
            "git_revision": ((first.get("git") or {}).get("revision") or "")[:12] or None,
        }
        launcher = next((r["launcher_config"] for r in runs if r.get("launcher_config")), None) or {}
        col.update({key: launcher[key] for key in launcher})
        for key in ("max_batch_total_tokens", "max_batch_prefill_tokens", "max_input_tokens", "max_total_tokens"):
            if info.get(key) is not None and launcher.get(key) != info[key]:
                col[f"{key} (resolved by the server)"] = info[key]
        columns[config] = {k: _cell(v) for k, v in col.items()}
    keys: list[str] = []
    for col in columns.values():
        keys += [k for k in col if k not in keys]
    return pd.DataFrame({name: [col.get(k, "") for k in keys] for name, col in columns.items()},
                        index=pd.Index(keys, name="parameter"))


def _cell(value: Any) -> str:
    # happy_vllm's table prints Python's repr of lists and None
    return "None" if value is None else str(value)


# -- figures ----------------------------------------------------------------------------------------------
@dataclass
class Figure:
    """A figure of the card: its name (file stem), section, caption and plotly figure."""

    name: str
    section: str
    caption: str
    figure: Any = field(repr=False)


def card_figures(results: Any) -> list[Figure]:
    """The figures the results can draw, in card order: total throughput and per-request speed with
    TTFT against parallel users (one per prompt/output pair, as the seeds), prompt ingestion,
    text-generation-benchmark's latency against throughput, ITL distributions, the server's queue and
    batch over time, KV usage, and the Pareto frontier when there are several configurations."""
    from tgi_toolkit import plots

    results = as_results(results)
    figures = []
    concurrency = results.points[results.points[S.SCENARIO] == "concurrency"]
    if len(concurrency):
        figures.append(Figure("total_speed_generation_graph", "Total generation speed",
                              "Total output throughput against the number of parallel requests, one line per "
                              "prompt/output length.", plots.throughput_vs_users(concurrency)))
        pairs = concurrency[[S.PROMPT_TOKENS, S.MAX_NEW_TOKENS]].drop_duplicates().sort_values(
            [S.PROMPT_TOKENS, S.MAX_NEW_TOKENS], ascending=False)
        for prompt, output in pairs.itertuples(index=False):
            part = concurrency[(concurrency[S.PROMPT_TOKENS] == prompt) & (concurrency[S.MAX_NEW_TOKENS] == output)]
            figures.append(Figure(
                f"speed_generation/speed_generation_graph_input_{prompt}_output_{output}",
                "Generation speed and latency",
                f"Prompt of {prompt} tokens and {output} tokens generated: the lines show the median, the bars "
                f"the 25th and 75th percentiles.",
                plots.speed_and_ttft_vs_users(part, title=f"Per-request speed and TTFT, prompt {prompt} / "
                                                          f"output {output} tokens")))
    # One ingestion fit per configuration, as the main metrics table has: a fit over every
    # configuration's requests at once would give a figure that the table contradicts.
    parts = split_by_config(results)
    for i, (config, part) in enumerate(parts.items()):
        ingestion = part.requests[part.requests[S.SCENARIO] == "ingestion"]
        if not len(ingestion):
            continue
        name, title = "prompt_ingestion", None
        if len(parts) > 1:
            name = f"prompt_ingestion_{i}"
            fit = plots.fit_ingestion(ingestion)
            speed = f": {fit['speed_tok_s']:,.0f} tokens/s" if np.isfinite(fit["speed_tok_s"]) else ""
            if speed and fit.get("unreliable"):
                speed += f", {fit['unreliable']}"
            title = f"Prompt ingestion, {config}{speed}"
        figures.append(Figure(name, "Prompt ingestion",
                              "TTFT against prompt length, one request at a time; the slope of the fitted line is "
                              "the time per prompt token, its inverse the ingestion speed.",
                              plots.ingestion_plot(ingestion, title=title)))
    if len(results.batch):
        figures.append(Figure("batch_latency_throughput", "Batch benchmark (text-generation-benchmark)",
                              "Prefill and decode latency against throughput, one colour per batch size, one "
                              "marker per run: up and to the right is more throughput bought with more latency.",
                              plots.batch_latency_throughput(results.batch)))
    conc_requests = results.requests[results.requests[S.SCENARIO] == "concurrency"]
    if len(conc_requests):
        figures.append(Figure("itl_distribution", "Inter-token latency",
                              "Gaps between consecutive tokens of every request, per point: a wide or bimodal "
                              "violin shows decode steps held up by other requests' prefills.",
                              plots.itl_distribution(conc_requests)))
    if len(results.server) and len(conc_requests):
        run_id = conc_requests[S.RUN_ID].iloc[-1]
        figures.append(Figure("server_timeline", "Server", "Queue and running batch size during the last "
                              "concurrency run, with each request's TTFT at the moment it was sent.",
                              plots.server_timeline(results.server, requests=conc_requests, run_id=run_id)))
        figures.append(Figure("kv_usage", "Server", "Share of the KV-cache budget in use during the same run.",
                              plots.kv_usage_timeline(results.server, run_id=run_id)))
    if results.points[S.CONFIG_ID].nunique() > 1 and len(concurrency):
        figures.append(Figure("pareto", "Configurations", "Every point of every configuration: output throughput "
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


def _write_pngs(figures: Sequence[Figure], folder: Path) -> bool:
    """All figures as PNG in one browser session; False (nothing kept) if the renderer fails."""
    import plotly.io as pio

    paths = [folder / f"{f.name}.png" for f in figures]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        pio.write_images([f.figure for f in figures], paths, width=_FIGURE_WIDTH, height=_FIGURE_HEIGHT)
    except Exception:  # no usable browser after all: the caller falls back to HTML figures
        for path in paths:
            with contextlib.suppress(OSError):
                path.unlink()
        return False
    return all(p.exists() for p in paths)


def _write_htmls(figures: Sequence[Figure], folder: Path) -> None:
    # plotly.js once in the figures folder, each figure pointing at it: offline, 4 MB once, not per figure
    from plotly.offline import get_plotlyjs

    (folder / "plotly.min.js").write_text(get_plotlyjs())
    for f in figures:
        path = folder / f"{f.name}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        script = Path(os.path.relpath(folder / "plotly.min.js", path.parent)).as_posix()
        f.figure.write_html(path, include_plotlyjs=script, full_html=True)


# -- the card ---------------------------------------------------------------------------------------------------
def _title(results: Any) -> str:
    info = run_info(results)
    model = (info.get("model_id") or "an unknown model").split("/")[-1]
    first = results.runs[0] if results.runs else {}
    hardware = first.get("hardware") or {}
    gpus = [g.get("name", "GPU") for g in hardware.get("gpus") or []]
    where = (f"{len(gpus)}x {gpus[0]}" if len(gpus) > 1 else gpus[0]) if gpus else \
        f"{hardware.get('cores_logical', '?')}-core CPU"
    return f"Model card for {model} on {where}"


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    # happy_vllm's centred tables; a pipe inside a cell would end it early
    def row(cells: Sequence[str]) -> str:
        return "|" + "|".join(str(c).replace("|", "\\|") for c in cells) + "|"
    return "\n".join([row(headers), "|" + "|".join(" :---: " for _ in headers) + "|", *map(row, rows)])


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


@dataclass
class _Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[tuple[list[str], list[list[str]]]] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    preformatted: str = ""


def _sections(results: Any, metrics: pd.DataFrame, params: pd.DataFrame, figures: Sequence[Figure]) -> list[_Section]:
    configs = list(dict.fromkeys(metrics["config_label"]))
    table = main_metrics_table(metrics)
    if len(configs) == 1:
        main = _Section("Main metrics", ["The main metrics are summarized in the following table :"])
        main.tables.append((["Metric", "Value"], [[label, *cells] for label, cells in
                                                  zip(table.index, table.values.tolist(), strict=True)]))
    else:  # one row per configuration under short headers, so that 4 configurations fit a 1,280-pixel window
        short = [_SHORT_HEADERS.get(key, key) for key in METRICS]
        legend = "; ".join(f"{name}: {label}" for name, label in zip(short, table.index, strict=True))
        main = _Section("Main metrics", [f"The main metrics are summarized in the following table, one row per "
                                         f"configuration ({legend}) :"])
        main.tables.append((["Configuration", *short], [[config, *table[config].tolist()] for config in configs]))
    main.paragraphs.append("How each value was obtained:")
    main.tables.append((["Configuration", "Metric", "Basis"] if len(configs) > 1 else ["Metric", "Basis"],
                        [[*([r.config_label] if len(configs) > 1 else []), r.label, r.basis]
                         for r in metrics.itertuples()]))
    sections = [main]
    conditions = _conditions(results)
    if conditions is not None:
        sections.append(conditions)
    by_section: dict[str, _Section] = {}
    intros = {
        "Total generation speed": "The following graph shows the total throughput with respect to the number of "
                                  "parallel queries for different scenarii :",
        "Generation speed and latency": "The following graphs show the throughput for each request with respect to "
                                        "the number of parallel queries, and the time to first token. The lines "
                                        "show the median whereas the bars show the 25th and 75th percentile.",
    }
    for fig in figures:
        if fig.section not in by_section:
            by_section[fig.section] = _Section(fig.section, [intros[fig.section]] if fig.section in intros else [])
            sections.append(by_section[fig.section])
        by_section[fig.section].figures.append(fig)
    if len(results.batch) and "Batch benchmark (text-generation-benchmark)" in by_section:
        with contextlib.suppress(Exception):  # the tables are extra: a partial batch run still gets its figure
            by_section["Batch benchmark (text-generation-benchmark)"].preformatted = results.tables()
    launched = _Section("Parameters", ["The server was launched using the following arguments :"])
    launched.tables.append((["Parameter", *params.columns] if len(params.columns) > 1 else ["Parameter", "Value"],
                            [[k, *row] for k, row in zip(params.index, params.values.tolist(), strict=True)]))
    sections.append(launched)
    return sections


def _conditions(results: Any) -> _Section | None:
    """The points whose numbers the machine stretched: measured while other processes took CPU
    (machine_busy), while the benchmark client itself was the bottleneck (client_bound), or with the users
    in step (lockstep)."""
    points = results.points
    flags = {S.MACHINE_BUSY: "machine busy (other processes took CPU)",
             S.CLIENT_BOUND: "client-bound (the benchmark client's own CPU limited the point)",
             S.LOCKSTEP: "lockstep (the users sent in step: TTFT and ITL show that phase; run with a ramp-up)"}
    marked = pd.Series(False, index=points.index)
    for column in flags:
        if column in points:
            marked |= points[column].fillna(False).astype(bool)
    if not marked.any():
        return None
    rows = []
    for _, point in points[marked].iterrows():
        said = [text for column, text in flags.items() if column in points and pd.notna(point[column])
                and bool(point[column])]
        other = point.get(S.OTHER_CPU_CORES)
        load = f"{other:.1f}" if isinstance(other, float) and np.isfinite(other) else "-"
        rows.append([str(point[S.CONFIG_LABEL] or point[S.CONFIG_ID] or ""), str(point[S.SCENARIO]),
                     str(point[S.POINT_ID]), "; ".join(said), load])
    section = _Section("Measurement conditions", [
        f"{int(marked.sum())} of {len(points)} points were measured under conditions other than the server's "
        f"own (Flag): the machine or the client limited them (latencies stretched, throughputs understated), or "
        f"their users sent in step (TTFT and ITL show that phase). Measure again on an idle machine, with a "
        f"ramp-up, before comparing them."])
    section.tables.append((["Configuration", "Scenario", "Point", "Flag", "Other processes (cores)"], rows))
    return section


def _markdown(title: str, sections: Sequence[_Section], figure_links: dict[str, str], fmt: str) -> str:
    out = [title, "=" * len(title), ""]
    for sec in sections:
        out += [f"# {sec.title}", ""]
        for p in sec.paragraphs[:1]:
            out += [p, ""]
        for i, (headers, rows) in enumerate(sec.tables):
            if i == 1 and len(sec.paragraphs) > 1:
                out += [sec.paragraphs[1], ""]
            out += [_md_table(headers, rows), ""]
        if sec.preformatted:
            out += [sec.preformatted, ""]
        for fig in sec.figures:
            out += [fig.caption, ""]
            link = figure_links[fig.name]
            out += [f'<img src="{link}" width="800"/>' if fmt == "png"
                    else f"[{fig.figure.layout.title.text or fig.name} (interactive figure)]({link})", ""]
    return "\n".join(out).rstrip() + "\n"


_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;max-width:100%}
td,th{border:1px solid #ccc;padding:.3em .6em;text-align:center;overflow-wrap:anywhere}
th{background:#f3f3f3}pre{background:#f8f8f8;padding:1em;overflow-x:auto}.caption{color:#555}"""


def _html(title: str, sections: Sequence[_Section]) -> str:
    body, plotlyjs = [f"<h1>{html.escape(title)}</h1>"], True
    for sec in sections:
        body.append(f"<h2>{html.escape(sec.title)}</h2>")
        for p in sec.paragraphs[:1]:
            body.append(f"<p>{html.escape(p)}</p>")
        for i, (headers, rows) in enumerate(sec.tables):
            if i == 1 and len(sec.paragraphs) > 1:
                body.append(f"<p>{html.escape(sec.paragraphs[1])}</p>")
            body.append(_html_table(headers, rows))
        if sec.preformatted:
            body.append(f"<pre>{html.escape(sec.preformatted)}</pre>")
        for fig in sec.figures:
            body.append(f'<p class="caption">{html.escape(fig.caption)}</p>')
            # plotly.js inline once, in the first figure: the page works offline and stays one file
            body.append(fig.figure.to_html(full_html=False, include_plotlyjs=plotlyjs,
                                           default_width="100%", default_height=f"{_FIGURE_HEIGHT}px"))
            plotlyjs = False
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def report_paths(output: str | os.PathLike[str]) -> tuple[Path, Path, Path]:
    """(Markdown card, HTML report, figures folder) for `output`: a folder (model_card.md and
    model_card.html inside), or a file ending in .md or .html (the other beside it, same stem)."""
    output = Path(output)
    if output.suffix.lower() in _FILE_SUFFIXES:
        folder, stem = output.parent, output.stem
    else:
        folder, stem = output, "model_card"
    return folder / f"{stem}.md", folder / f"{stem}.html", folder / FIGURES_DIR


def _sweep_failures(folder: Path | None) -> list[str]:
    """'label: why' for each configuration of the sweep in `folder` that did not complete."""
    if folder is None:
        return []
    from tgi_toolkit.sweep.manifest import Manifest

    failures = []
    for entry in Manifest(folder).read().get("configs", []):
        if entry.get("in_spec", True) and entry.get("status") != "complete":
            why = entry.get("error") or "; ".join(p["rule"] for p in entry.get("problems") or []) or "not run"
            failures.append(f"{entry.get('label')}: {entry.get('status')} ({why})")
    return failures


def write_report(results_or_folder: Any, output: str | os.PathLike[str], *, figure_format: str = "auto",
                 users: int = CARD_USERS, prompt_tokens: int = CARD_PROMPT_TOKENS,
                 max_new_tokens: int = CARD_MAX_NEW_TOKENS) -> Path:
    """Write the model card of a Results (or a results folder) to `output`; returns the path asked for
    (for a folder, its model_card.md). Both the Markdown card and the HTML report are written (see
    `report_paths`), the card's figures in `figures/` beside them.

    figure_format: "png" (needs kaleido and a Chromium; ValueError without), "html" (one interactive
    file per figure), or "auto" (PNG where it can be rendered, else HTML)."""
    if figure_format not in FIGURE_FORMATS:
        raise ValueError(f"figure_format={figure_format!r} is not one of {', '.join(FIGURE_FORMATS)}")
    results = as_results(results_or_folder)
    if not len(results.points) and not len(results.requests) and not len(results.batch):
        where = f" in {results.path}" if results.path else ""
        failures = _sweep_failures(results.path)
        if failures:  # a sweep ran and measured nothing: say what became of each configuration
            raise ValueError(f"no results{where}: every configuration of the sweep failed: {'; '.join(failures)} "
                             f"(fix the cause, then rerun the sweep with retry_failed=True / --retry-failed)")
        raise ValueError(f"no results{where}: nothing to report (run `tgi-toolkit bench` or a sweep first)")
    md_path, html_path, fig_dir = report_paths(output)
    fig_dir.mkdir(parents=True, exist_ok=True)
    metrics = main_metrics(results, users, prompt_tokens, max_new_tokens)
    params = parameters(results)
    figures = card_figures(results)
    fmt = figure_format
    if fmt in ("auto", "png"):
        ok = png_renderer_available() and _write_pngs(figures, fig_dir)
        if not ok and fmt == "png":
            raise ValueError("PNG figures need kaleido>=1 and an installed Chromium (e.g. Debian's `chromium`); "
                             "use figure_format='html'")
        fmt = "png" if ok else "html"
    if fmt == "html":
        _write_htmls(figures, fig_dir)
    rel = os.path.relpath(fig_dir, md_path.parent)
    links = {f.name: f"./{rel}/{f.name}.{fmt}" for f in figures}
    title = _title(results)
    sections = _sections(results, metrics, params, figures)
    md_path.write_text(_markdown(title, sections, links, fmt))
    html_path.write_text(_html(title, sections))
    return Path(output) if Path(output).suffix.lower() in _FILE_SUFFIXES else md_path


# -- command line ---------------------------------------------------------------------------------------------
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report", help="write a model card (Markdown + HTML) from a results folder",
        description="Write happy_vllm's model card (seeds 001/003) from a results folder: main metrics, figures "
                    "and launch parameters, as Markdown with images and as one HTML page.")
    parser.add_argument("results_dir", metavar="RESULTS_DIR",
                        help="a results folder (tgi-toolkit bench/sweep --output)")
    parser.add_argument("--output", "-o", metavar="FILE",
                        help="the card: a .md or .html file (the other is written beside it) or a folder "
                             "(default: RESULTS_DIR/report/)")
    parser.add_argument("--figures", choices=FIGURE_FORMATS, default="auto",
                        help="png (kaleido + Chromium), html, or auto: png where it works (default)")
    parser.add_argument("--users", type=int, default=CARD_USERS, help="parallel requests of the speed metric (10)")
    parser.add_argument("--prompt-tokens", type=int, default=CARD_PROMPT_TOKENS, help="its prompt length (1024)")
    parser.add_argument("--max-new-tokens", type=int, default=CARD_MAX_NEW_TOKENS, help="its output length (128)")
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    output = args.output or Path(args.results_dir) / "report"
    try:
        write_report(args.results_dir, output, figure_format=args.figures, users=args.users,
                     prompt_tokens=args.prompt_tokens, max_new_tokens=args.max_new_tokens)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    md_path, html_path, _ = report_paths(output)
    print(f"model card: {md_path}\nHTML report: {html_path}")
    return 0
