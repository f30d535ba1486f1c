"""The Gradio app: components and events only. What they do lives in `settings`, `runner`, `views` and
`explorer`, which tests call without a browser.

Offline by construction: analytics (and with them gradio's version check) are off before gradio is
imported, the theme uses system fonts (no font CDN), plotly.js comes with gradio's own bundle,
`share` is off (no frpc tunnel is fetched) and SSR is off (no Node server). The app binds 127.0.0.1
unless GRADIO_SERVER_NAME says otherwise (a Hugging Face Space sets it to 0.0.0.0).
"""

from __future__ import annotations

import os

# Before gradio is imported: it reads this at import and on launch (telemetry, version check).
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import logging  # noqa: E402
import signal  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gradio as gr  # noqa: E402

from tgi_toolkit.app import explorer, settings, views  # noqa: E402
from tgi_toolkit.app.advise_tab import advise_tab  # noqa: E402
from tgi_toolkit.app.runner import (  # noqa: E402
    LABELS,
    SCENARIO_FIELDS,
    SCENARIO_HELP,
    SCENARIOS,
    BenchLimits,
    BenchSettings,
    EngineSession,
    SettingsError,
    run_benchmark,
)
from tgi_toolkit.config.launcher import LauncherConfig  # noqa: E402

log = logging.getLogger(__name__)

TITLE = "tgi_toolkit: configure, launch and benchmark a text-generation server"
# What the form starts with: the cookbook's benchmark notebook's settings, small enough for a CPU Space.
APP_LAUNCHER_DEFAULTS: dict[str, Any] = {"max_batch_size": 8, "max_input_tokens": 1024, "max_total_tokens": 1536}
DEFAULT_EXPLORER_SETS = ("example: smollm2-135m-cpu",)
CSS = """
#bench-status, #settings-check { min-height: 2.5em; }
.tgi-intro p { margin: 0.2em 0; }
"""


def _theme() -> gr.themes.Base:
    # System fonts: the default theme's web fonts would be fetched by the browser from a CDN.
    return gr.themes.Default(font=["ui-sans-serif", "system-ui", "sans-serif"],
                             font_mono=["ui-monospace", "SFMono-Regular", "monospace"])


class ToolkitApp(gr.Blocks):
    """The app's Blocks with safe launch defaults; `close()` also stops the app's engine."""

    engine: EngineSession
    catalog: explorer.Catalog
    work_dir: Path

    def launch(self, **kwargs: Any) -> Any:
        """gr.Blocks.launch with the app's defaults (loopback, no share link, no SSR, its theme and CSS,
        its work folder allowed for downloads); any argument given wins. A blocking launch stops the
        engine when it returns, also after SIGTERM (what a Space or `docker stop` sends)."""
        kwargs.setdefault("server_name", os.environ.get("GRADIO_SERVER_NAME") or "127.0.0.1")
        kwargs.setdefault("share", False)
        kwargs.setdefault("ssr_mode", False)
        kwargs.setdefault("theme", _theme())
        kwargs.setdefault("css", CSS)
        kwargs.setdefault("max_file_size", "200mb")
        kwargs.setdefault("footer_links", ["gradio", "settings"])
        kwargs["allowed_paths"] = [*(kwargs.get("allowed_paths") or []), str(self.work_dir)]
        blocking = not kwargs.get("prevent_thread_lock", False)
        if blocking and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _interrupt)
        try:
            return super().launch(**kwargs)
        finally:
            if blocking:
                self.close()

    def close(self, verbose: bool = True) -> None:
        try:
            self.engine.stop()
        finally:
            super().close(verbose)


def _interrupt(signum: int, frame: Any) -> None:
    # gradio's blocking loop ends cleanly on KeyboardInterrupt; SIGTERM would otherwise kill the
    # process before the engine (its own process group) is stopped.
    raise KeyboardInterrupt


def create_app(*, work_dir: str | Path | None = None, data_dir: str | Path | None = None,
               launcher_defaults: dict[str, Any] | None = None, bench_defaults: BenchSettings | None = None,
               limits: BenchLimits | None = None, backend: str = "embedded") -> ToolkitApp:
    """Build the app (nothing starts until `.launch()`; the engine starts on the first benchmark).

    work_dir: where runs, uploads and zips go (default: a new temporary folder); data_dir: the
    `data/` folder the explorer offers (default: the package's, or TGI_TOOLKIT_DATA);
    launcher_defaults: LauncherConfig fields the form starts with; bench_defaults: the benchmark
    form's starting values; limits: caps on one benchmark; backend: what the benchmark starts.
    """
    work = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="tgi-toolkit-app-"))
    work.mkdir(parents=True, exist_ok=True)
    limits = limits or BenchLimits()
    bench_defaults = bench_defaults or BenchSettings()
    engine = EngineSession(backend=backend, log_dir=work / "logs")
    catalog = explorer.Catalog(data_dir)
    defaults = LauncherConfig(**(APP_LAUNCHER_DEFAULTS if launcher_defaults is None else launcher_defaults))
    raw = settings.default_values(defaults)
    stop_event = threading.Event()

    with ToolkitApp(title="tgi_toolkit", analytics_enabled=False) as app:
        app.engine, app.catalog, app.work_dir = engine, catalog, work
        gr.Markdown(f"# {TITLE}\n" + _INTRO, elem_classes=["tgi-intro"])
        with gr.Tabs():
            # -- 1. launcher settings ---------------------------------------------------------------
            with gr.Tab("1. Launcher settings", id="settings", elem_id="tab-settings"):
                gr.Markdown(_SETTINGS_HELP)
                check_md = gr.Markdown(elem_id="settings-check")
                with gr.Row():
                    target = gr.Radio(list(settings.TARGETS), value="embedded", label="Show the command line for",
                                      elem_id="settings-target", scale=3)
                    check_button = gr.Button("Check settings", elem_id="settings-check-button", scale=1)
                command = gr.Code(language="shell", label="Command line", interactive=False, max_lines=12,
                                  elem_id="settings-command")
                fields: dict[str, gr.components.Component] = {}
                for group, group_fields in settings.grouped_fields().items():
                    with gr.Accordion(settings.GROUP_TITLES.get(group, group), open=group in settings.OPEN_GROUPS):
                        for start in range(0, len(group_fields), 3):
                            with gr.Row(equal_height=False):
                                for form_field in group_fields[start:start + 3]:
                                    fields[form_field.name] = _field_component(form_field, raw[form_field.name])
                field_inputs = [fields[name] for name in settings.field_names()]

            # -- 2. benchmark ---------------------------------------------------------------------------
            with gr.Tab("2. Run a benchmark", id="bench", elem_id="tab-bench"):
                gr.Markdown(_BENCH_HELP)
                scenario = gr.Radio(list(SCENARIOS), value=bench_defaults.scenario, label=LABELS["scenario"],
                                    info=SCENARIO_HELP[bench_defaults.scenario], elem_id="bench-scenario")
                bench_raw = bench_defaults.raw()
                bench_fields: dict[str, gr.Textbox] = {"scenario": scenario}  # type: ignore[dict-item]
                rows = {}
                for name, names in SCENARIO_FIELDS.items():
                    with gr.Row(visible=name == bench_defaults.scenario) as rows[name]:
                        for field_name in names:
                            bench_fields[field_name] = gr.Textbox(value=bench_raw[field_name], label=LABELS[field_name],
                                                                  max_lines=1, elem_id=f"bench-{field_name}")
                bench_inputs = [bench_fields[name] for name in BenchSettings.field_names()]
                with gr.Row():
                    run_button = gr.Button("Run benchmark", variant="primary", elem_id="bench-run", scale=3)
                    stop_button = gr.Button("Stop", variant="stop", elem_id="bench-stop", scale=1)
                status = gr.Markdown("No run yet.", elem_id="bench-status")
                download = gr.DownloadButton("Download the results folder (zip)", visible=False,
                                             elem_id="bench-download")
                figures_state = gr.State({})
                figure_choice = gr.Dropdown(choices=[], label="Figure", interactive=True, elem_id="bench-figure")
                plot = gr.Plot(label="Figure", elem_id="bench-plot")
                points_df = gr.Dataframe(label="Summary per point", interactive=False, elem_id="bench-points")
                metrics_df = gr.Dataframe(label="Model card main metrics (happy_vllm's)", interactive=False,
                                          wrap=True, column_widths=["35%", "20%", "45%"], elem_id="bench-metrics")
                batch_md = gr.Markdown(elem_id="bench-batch-tables")

            # -- 3. explorer ----------------------------------------------------------------------------
            with gr.Tab("3. Explore and compare results", id="explore", elem_id="tab-explore"):
                gr.Markdown(_EXPLORE_HELP)
                with gr.Row():
                    upload = gr.File(label="Upload a results folder (zip)", file_types=[".zip"], type="filepath",
                                     elem_id="explore-upload", scale=1)
                    upload_md = gr.Markdown(elem_id="explore-upload-status")
                chosen = [name for name in DEFAULT_EXPLORER_SETS if name in catalog.names()]
                sets = gr.CheckboxGroup(choices=catalog.names(), value=chosen, label="Result sets to compare",
                                        elem_id="explore-sets")
                compare_state = gr.State({})
                compare_choice = gr.Dropdown(choices=[], label="Figure", interactive=True, elem_id="explore-figure")
                compare_plot = gr.Plot(label="Comparison", elem_id="explore-plot")
                compare_md = gr.Markdown(elem_id="explore-status")
                metrics_table = gr.Dataframe(label="Model card main metrics, side by side", interactive=False,
                                             wrap=True, elem_id="explore-metrics")

            advise_tab()  # -- 4. which GPUs (tgi_toolkit.app.advise_tab) --

            with gr.Tab("About", id="about"):
                gr.Markdown(_ABOUT)

        # -- events: settings ----------------------------------------------------------------------------
        def check(*values: Any) -> tuple[str, str]:
            result = settings.check_settings(settings.values_from_inputs(values[:-1]), values[-1])
            return result.markdown(), result.command_text()

        def validate_fields(*values: Any) -> list[Any]:
            result = settings.check_settings(settings.values_from_inputs(values[:-1]), values[-1])
            messages = settings.field_messages(result)
            return [gr.validate(name not in messages, messages.get(name, "")) for name in settings.field_names()] \
                + [gr.validate(True, "")]

        gr.on([c.change for c in field_inputs] + [target.change], check, [*field_inputs, target], [check_md, command],
              trigger_mode="always_last", show_progress="hidden", api_visibility="private")
        check_button.click(check, [*field_inputs, target], [check_md, command], validator=validate_fields,
                           api_visibility="private")
        app.load(check, [*field_inputs, target], [check_md, command], show_progress="hidden",
                 api_visibility="private")

        # -- events: benchmark ---------------------------------------------------------------------------
        def switch_scenario(name: str) -> list[Any]:
            return [gr.update(info=SCENARIO_HELP[name])] + [gr.update(visible=key == name) for key in SCENARIO_FIELDS]

        scenario.change(switch_scenario, scenario, [scenario, *rows.values()], show_progress="hidden",
                        api_visibility="private")

        def validate_bench(*values: Any) -> list[Any]:
            bench = dict(zip(BenchSettings.field_names(), values[len(field_inputs):], strict=True))
            try:
                BenchSettings.parse(bench, limits)
                bad: dict[str, str] = {}
            except SettingsError as exc:
                bad = exc.problems
            # Launcher fields live on the other tab: the run's status names their problems instead.
            return [gr.validate(True, "")] * len(field_inputs) + [
                gr.validate(name not in bad, f"{LABELS[name]}: {bad[name]}" if name in bad else "")
                for name in BenchSettings.field_names()]

        def run(*values: Any, progress: gr.Progress = gr.Progress()) -> Iterator[dict[Any, Any]]:
            launcher = settings.check_settings(settings.values_from_inputs(values[:len(field_inputs)]))
            if not launcher.runnable:
                yield {status: "The benchmark did not start: fix the launcher settings first "
                               "(tab 1).\n\n" + launcher.markdown()}
                return
            bench_values = dict(zip(BenchSettings.field_names(), values[len(field_inputs):], strict=True))
            try:
                bench = BenchSettings.parse(bench_values, limits)
            except SettingsError as exc:
                yield {status: "**The benchmark settings are not valid:**\n"
                               + "\n".join(f"- {LABELS[k]}: {v}" for k, v in exc.problems.items())}
                return
            folder = work / "runs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{bench.scenario}"
            stop_event.clear()
            yield {status: f"Preparing: {bench.describe()} ...", download: gr.update(visible=False),
                   figure_choice: gr.update(choices=[], value=None), plot: None, batch_md: ""}
            for update in run_benchmark(engine, launcher.config, bench, folder, stop_event):
                progress(update.fraction, desc=f"{update.done}/{update.total} points")
                out: dict[Any, Any] = {status: update.message}
                results = _load(update.folder) if update.folder is not None and (update.kind == "point"
                                                                                   or update.final) else None
                if results is not None and not results.points.empty:
                    out[points_df] = views.points_table(results)
                    if not update.final:
                        out[plot] = views.live_figure(results, bench.scenario)
                if update.final and results is not None and not results.points.empty:
                    out.update(_finished(results, folder, update.message))
                yield out

        def _finished(results: Any, folder: Path, message: str) -> dict[Any, Any]:
            drawn = views.figures(results)
            first = next(iter(drawn), None)
            archive = explorer.zip_results(folder, work / "downloads" / f"tgi-toolkit-{folder.name}.zip")
            name = catalog.add_folder(f"run: {folder.name}", folder, "run")
            headline = views.headline(results)
            return {
                status: message + (f"\n\n{headline}" if headline else "")
                + f"\n\nIn the explorer as **{name}**.",
                figures_state: drawn, figure_choice: gr.update(choices=list(drawn), value=first),
                plot: drawn.get(first) if first else None,
                metrics_df: views.main_metrics_table(results), batch_md: views.batch_markdown(results),
                download: gr.update(value=str(archive), visible=True),
                sets: gr.update(choices=catalog.names()),
            }

        run_button.click(run, [*field_inputs, *bench_inputs],
                         [status, plot, figure_choice, figures_state, points_df, metrics_df, batch_md, download, sets],
                         validator=validate_bench, concurrency_limit=1, concurrency_id="benchmark",
                         show_progress="minimal", show_progress_on=[status], api_visibility="private")

        def stop() -> str:
            stop_event.set()
            return "Stopping after the point in progress ..."

        stop_button.click(stop, None, status, queue=False, show_progress="hidden", api_visibility="private")
        figure_choice.input(_pick, [figure_choice, figures_state], plot, show_progress="hidden",
                            api_visibility="private")

        # -- events: explorer ----------------------------------------------------------------------------
        def receive(path: str | None, selected: list[str]) -> tuple[str, Any]:
            if not path:
                return "", gr.update()
            stem = Path(path).stem
            dest = work / "uploads" / f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}"
            try:
                folder = explorer.extract_results(path, dest)
                name = catalog.add_folder(f"upload: {stem}", folder, "upload")
                explorer.folder_set(name, folder, "upload")  # read it now: a broken folder is reported here
            except (explorer.ResultsFileError, OSError, ValueError) as exc:
                return f"**Not loaded:** {exc}", gr.update()
            return f"Loaded **{name}**.", gr.update(choices=catalog.names(), value=[*selected, name])

        upload.upload(receive, [upload, sets], [upload_md, sets], api_visibility="private")

        def compare(selected: list[str]) -> tuple[Any, Any, Any, str, Any]:
            if not selected:
                return {}, gr.update(choices=[], value=None), None, "Choose one or more result sets.", None
            try:
                chosen_sets = [catalog.load(name) for name in selected]
            except (KeyError, OSError, ValueError) as exc:
                return {}, gr.update(choices=[], value=None), None, f"**Could not read a set:** {exc}", None
            drawn = explorer.compare(chosen_sets)
            first = next(iter(drawn), None)
            note = "" if drawn else "These sets hold no load points and no batch rows to draw."
            return (drawn, gr.update(choices=list(drawn), value=first), drawn.get(first) if first else None, note,
                    explorer.metrics_table(chosen_sets))

        sets.change(compare, sets, [compare_state, compare_choice, compare_plot, compare_md, metrics_table],
                    trigger_mode="always_last", api_visibility="private")
        app.load(compare, sets, [compare_state, compare_choice, compare_plot, compare_md, metrics_table],
                 api_visibility="private")
        compare_choice.input(_pick, [compare_choice, compare_state], compare_plot, show_progress="hidden",
                             api_visibility="private")
    return app


def _pick(title: str | None, drawn: dict[str, Any]) -> Any:
    return drawn.get(title) if title else None


def _load(folder: Path) -> Any:
    from tgi_toolkit.bench import load_results

    return load_results(folder) if (folder / "points.parquet").is_file() else None


def _field_component(form_field: Any, value: Any) -> gr.components.Component:
    """The component for one launcher option (from its FormField: kind, choices, placeholder, help)."""
    common: dict[str, Any] = {"label": form_field.label, "info": form_field.tooltip,
                              "elem_id": f"field-{form_field.name}"}
    if form_field.kind == "bool":
        return gr.Checkbox(value=bool(value), **common)
    if form_field.kind == "choice":
        return gr.Dropdown(choices=settings.choice_options(form_field), value=value, **common)
    # Numbers are text boxes too: "12x" must reach the check, which names the field, rather than
    # being refused by the browser without a word.
    return gr.Textbox(value=value, placeholder=form_field.placeholder, max_lines=1,
                      type="password" if form_field.secret else "text", **common)


_INTRO = (
    "Choose `text-generation-launcher` settings, start the toolkit's embedded TGI-compatible engine "
    "(SmolLM2-135M-Instruct on the CPU) with them, benchmark it over its HTTP API, and compare the results "
    "with published ones. The same settings and code drive TGI and vLLM on a GPU: see **About**."
)
_SETTINGS_HELP = (
    "Every `text-generation-launcher` option, with TGI's defaults; an empty box means *not set* (the server "
    "works it out). The settings are checked as you type with TGI's own rules; **Check settings** also marks "
    "the fields involved. The benchmark tab starts the embedded engine with them."
)
_BENCH_HELP = (
    "Starts the embedded engine with the launcher settings (once; again when they change) and benchmarks it. "
    "Figures and tables update as points finish. Keep runs small on a shared CPU: a few points of a few "
    "requests take under a minute."
)
_EXPLORE_HELP = (
    "Published results from the seeds (`data/reference/`), the project's example run (`data/examples/`), "
    "this session's runs, and results folders you upload (a zip of a folder written by `tgi-toolkit bench`, a "
    "notebook, or this app's download)."
)
_ABOUT = """
**What runs here.** On a CPU Space the benchmark starts the toolkit's embedded engine: a TGI-compatible
HTTP server (TGI's routes, validation, metrics and continuous-batching rules) running SmolLM2-135M-Instruct
on the CPU. The numbers are a CPU's, but the knobs behave as they do on TGI, so the trade-offs carry over.

**On a GPU.** The toolkit's Docker Space variant (`space/docker/` in the repository) runs JupyterLab with the
cookbook's notebooks on top of TGI's image: the same settings launch the real `text-generation-launcher`.

**Locally.** `pip install -e ".[app]"` in a checkout, then `tgi-toolkit app` (or `python space/app.py`),
and open http://127.0.0.1:7860.
"""


__all__ = ["APP_LAUNCHER_DEFAULTS", "ToolkitApp", "create_app"]
