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
and the app share. The figures are drawn in `tgi_toolkit.report_figures`, the sections and tables put
together in `tgi_toolkit.report_sections`; this module renders them and writes the files.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
from tgi_toolkit.report_figures import FIGURE_HEIGHT, card_figures, png_renderer_available, write_htmls, write_pngs
from tgi_toolkit.report_sections import CardSection, card_sections, card_title, parameters

FIGURE_FORMATS = ("auto", "png", "html")
FIGURES_DIR = "figures"
_FILE_SUFFIXES = (".md", ".html", ".htm")  # an output ending otherwise is a folder (e.g. "results.v2")


# -- the card ---------------------------------------------------------------------------------------------------
def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    # happy_vllm's centred tables; a pipe inside a cell would end it early
    def row(cells: Sequence[str]) -> str:
        return "|" + "|".join(str(c).replace("|", "\\|") for c in cells) + "|"
    return "\n".join([row(headers), "|" + "|".join(" :---: " for _ in headers) + "|", *map(row, rows)])


# Where a long value may wrap: after , / - and a dotted name's dot, and after _ in an identifier of 25
# characters or more ("cuda_memory_fraction=0.006867,"); never inside a word of prose.
_BREAKS = re.compile(r"([,/-]|\.(?=[A-Za-z]))")
_LONG = re.compile(r"\S{25,}")


def _cell_html(value: object) -> str:
    # words never break (the CSS: "ingest ion" was read as two); long values wrap at their separators, so
    # that 4 configurations fit a 1,280-pixel window
    text = _LONG.sub(lambda m: m.group(0).replace("_", "_\0"), html.escape(str(value), quote=False))
    return _BREAKS.sub(r"\1<wbr>", text).replace("\0", "<wbr>")


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{_cell_html(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_cell_html(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _markdown(title: str, sections: Sequence[CardSection], figure_links: dict[str, str], fmt: str) -> str:
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
td,th{border:1px solid #ccc;padding:.3em .6em;text-align:center;word-break:normal;overflow-wrap:normal;hyphens:none}
th{background:#f3f3f3}pre{background:#f8f8f8;padding:1em;overflow-x:auto}.caption{color:#555}"""


def _html(title: str, sections: Sequence[CardSection]) -> str:
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
                                           default_width="100%", default_height=f"{FIGURE_HEIGHT}px"))
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
        ok = png_renderer_available() and write_pngs(figures, fig_dir)
        if not ok and fmt == "png":
            raise ValueError("PNG figures need kaleido>=1 and an installed Chromium (e.g. Debian's `chromium`); "
                             "use figure_format='html'")
        fmt = "png" if ok else "html"
    if fmt == "html":
        write_htmls(figures, fig_dir)
    rel = os.path.relpath(fig_dir, md_path.parent)
    links = {f.name: f"./{rel}/{f.name}.{fmt}" for f in figures}
    title = card_title(results)
    sections = card_sections(results, metrics, params, figures)
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
                             "(default: RESULTS_DIR/report/; out/report/NAME/ for a result set shipped in data/)")
    parser.add_argument("--figures", choices=FIGURE_FORMATS, default="auto",
                        help="png (kaleido + Chromium), html, or auto: png where it works (default)")
    parser.add_argument("--users", type=int, default=CARD_USERS, help="parallel requests of the speed metric (10)")
    parser.add_argument("--prompt-tokens", type=int, default=CARD_PROMPT_TOKENS, help="its prompt length (1024)")
    parser.add_argument("--max-new-tokens", type=int, default=CARD_MAX_NEW_TOKENS, help="its output length (128)")
    parser.set_defaults(func=_main)


def default_output(results_dir: str | os.PathLike[str]) -> Path:
    """Where `tgi-toolkit report RESULTS_DIR` writes without --output: RESULTS_DIR/report/, except for a result
    set shipped with the toolkit (data/examples/, in the checkout or the installed package): out/report/NAME/
    (`cookbook.out_dir`: the checkout's gitignored out/, else the working directory's), never the source tree."""
    from tgi_toolkit.cookbook import checkout_root, out_dir
    from tgi_toolkit.data_folder import data_dirs

    folder = Path(results_dir).resolve()
    root = checkout_root()
    shipped = [*data_dirs(), Path(__file__).resolve().parent, *([root / "data"] if root else [])]
    if any(folder.is_relative_to(place.resolve()) for place in shipped):
        return out_dir("report", folder.name)
    return Path(results_dir) / "report"


def _main(args: argparse.Namespace) -> int:
    output = args.output or default_output(args.results_dir)
    try:
        write_report(args.results_dir, output, figure_format=args.figures, users=args.users,
                     prompt_tokens=args.prompt_tokens, max_new_tokens=args.max_new_tokens)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    md_path, html_path, _ = report_paths(output)
    print(f"model card: {md_path}\nHTML report: {html_path}")
    return 0
