"""The app's logic without a browser (settings, benchmark settings and updates, tables, explorer, zips)
and `create_app()` itself: built without launching, one component per launcher option, safe launch
defaults, and `close()` stops the engine. The browser tests are tests/test_app_browser.py."""

from __future__ import annotations

import threading
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest

from tests.conftest import free_port
from tgi_toolkit.app import explorer, runner, settings, views
from tgi_toolkit.bench import load_results
from tgi_toolkit.config.errors import ConfigError, Problem
from tgi_toolkit.cookbook import example_results_dir

gradio = pytest.importorskip("gradio", reason="gradio is not installed (the app extra)")


# -- launcher settings ------------------------------------------------------------------------------------
def test_every_launcher_option_is_a_field_once_main_groups_first() -> None:
    from tgi_toolkit.config.launcher import OPTIONS

    names = settings.field_names()
    assert sorted(names) == sorted(OPTIONS) and len(set(names)) == len(names)
    assert list(settings.grouped_fields())[:5] == list(settings.MAIN_GROUPS)
    assert set(settings.grouped_fields()) <= set(settings.GROUP_TITLES)


def test_a_bad_value_names_its_flag_and_field() -> None:
    values = settings.default_values()
    values["max_input_tokens"] = "abc"
    check = settings.check_settings(values)
    assert check.config is None and not check.runnable
    text = check.markdown()
    assert "--max-input-tokens expects an integer, got 'abc'" in text and "`max_input_tokens`" in text
    assert settings.field_messages(check) == {"max_input_tokens": "--max-input-tokens expects an integer, got 'abc'"}
    assert check.command_text().startswith("#")


def test_a_rule_between_fields_names_both() -> None:
    values = {**settings.default_values(), "max_input_tokens": "600", "max_total_tokens": "512"}
    check = settings.check_settings(values)
    assert set(settings.field_messages(check)) == {"max_input_tokens", "max_total_tokens"}
    assert "1 problem in the launcher settings" in check.markdown()


def test_valid_values_give_the_command_of_each_target_and_the_engine_refusals() -> None:
    values = {**settings.default_values(), "max_total_tokens": "512", "max_input_tokens": "256"}
    check = settings.check_settings(values, "tgi")
    assert check.runnable and check.command_text().startswith("text-generation-launcher")
    assert "--max-total-tokens 512" in check.command_text()
    assert settings.check_settings(values, "vllm").command_text().startswith("vllm serve")
    refused = settings.check_settings({**values, "speculate": "2"})
    assert refused.config is not None and not refused.runnable
    assert "--speculate" in refused.markdown() and "would refuse" in refused.markdown()
    with pytest.raises(ValueError, match="target"):
        settings.check_settings(values, "nope")


def test_values_come_positionally_in_field_order_and_messages_are_escaped() -> None:
    raw = settings.default_values()
    assert settings.values_from_inputs([raw[n] for n in settings.field_names()]) == raw
    with pytest.raises(ValueError, match="launcher values"):
        settings.values_from_inputs([1, 2])
    values = {**raw, "max_input_tokens": "*x*"}
    assert r"\*x\*" in settings.check_settings(values).markdown()  # user input is not read as Markdown


# -- benchmark settings -------------------------------------------------------------------------------------
def test_bench_settings_parse_lists_and_round_trip() -> None:
    parsed = runner.BenchSettings.parse({"scenario": "concurrency", "users": "1, 2;4", "prompt_tokens": " 16 ",
                                         "max_new_tokens": "4", "requests": "2"})
    assert parsed.users == (1, 2, 4) and parsed.prompt_tokens == 16 and parsed.point_count() == 3
    assert "1, 2, 4 parallel users" in parsed.describe()
    for settings_ in (runner.BenchSettings(), runner.BenchSettings(scenario="batch"),
                      runner.BenchSettings(scenario="ingestion")):
        assert runner.BenchSettings.parse(settings_.raw()) == settings_


def test_bench_settings_name_every_bad_field_of_the_chosen_scenario_only() -> None:
    with pytest.raises(runner.SettingsError) as caught:
        runner.BenchSettings.parse({"scenario": "concurrency", "users": "1, x", "prompt_tokens": "0",
                                    "max_new_tokens": "1, 2", "requests": "", "batch_sizes": "junk"})
    assert caught.value.problems == {"users": "'x' is not a whole number",
                                     "prompt_tokens": "0 is out of range (1 to 4096)",
                                     "max_new_tokens": "takes one number, got 2", "requests": "needs a value"}
    assert "Parallel users: 'x' is not a whole number" in str(caught.value)
    with pytest.raises(runner.SettingsError, match="Scenario"):
        runner.BenchSettings.parse({"scenario": "rate"})


def test_bench_settings_limits_keep_a_shared_space_usable() -> None:
    limits = runner.BenchLimits(max_points=2, max_users=4)
    with pytest.raises(runner.SettingsError) as caught:
        runner.BenchSettings.parse({**runner.BenchSettings().raw(), "users": "1, 2, 3"}, limits)
    assert "3 points in one run" in caught.value.problems["users"]
    with pytest.raises(runner.SettingsError, match="out of range"):
        runner.BenchSettings.parse({**runner.BenchSettings().raw(), "users": "8"}, limits)
    with pytest.raises(runner.SettingsError, match="two different lengths"):
        runner.BenchSettings.parse({**runner.BenchSettings(scenario="ingestion").raw(), "ingestion_lengths": "32, 32"})


# -- a run as updates (no engine: a stand-in session and harness) -----------------------------------------
class FakeServer:
    url, pid, running, backend = "http://127.0.0.1:1", 1, True, "embedded"


class FakeSession(runner.EngineSession):
    def __init__(self, error: BaseException | None = None) -> None:
        super().__init__()
        self.error = error

    def server_for(self, config: Any) -> Any:
        if self.error is not None:
            raise self.error
        self.server = FakeServer()
        return self.server


def fake_run(points: int, fail: BaseException | None = None, started: threading.Event | None = None):
    def run(self: runner.BenchSettings, server: Any, **options: Any) -> None:
        for i in range(points):
            options["on_point"]({"point_id": f"users={i + 1}"})
        if fail is not None:
            raise fail
    return run


def test_a_run_streams_status_then_one_update_per_point_then_done(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(runner.BenchSettings, "run", fake_run(2))
    updates = list(runner.run_benchmark(FakeSession(), object(), runner.BenchSettings(users=(1, 2)),
                                        tmp_path / "r", poll_s=0.05))
    kinds = [u.kind for u in updates]
    assert kinds[0] == "status" and kinds[-1] == "done" and kinds.count("point") == 2
    points = [u for u in updates if u.kind == "point"]
    assert [(u.done, u.total, u.fraction) for u in points] == [(1, 2, 0.5), (2, 2, 1.0)]
    assert "`users=2`" in points[-1].message and updates[-1].final


def test_stop_ends_the_run_after_the_point_in_progress(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(runner.BenchSettings, "run", fake_run(3))
    stop = threading.Event()
    stop.set()  # pressed while the engine was starting: no point is run
    updates = list(runner.run_benchmark(FakeSession(), object(), runner.BenchSettings(), tmp_path / "r", stop,
                                        poll_s=0.05))
    assert updates[-1].kind == "stopped"


@pytest.mark.parametrize("error, words", [
    (ConfigError([Problem(("max_input_tokens", "max_total_tokens"), "--max-input-tokens (600) must be < ...")]),
     ["not valid", "max_input_tokens, max_total_tokens"]),
    (None, ["could not start", "exit code 1", "ModelNotFoundError: model 'x' not found"]),
])
def test_a_failed_start_is_a_message_not_a_traceback(error, words, tmp_path) -> None:
    from tgi_toolkit.server.base import ServerError

    error = error or ServerError("embedded server exited during start-up", exit_code=1,
                                 log_tail=["...", "ModelNotFoundError: model 'x' not found"])
    updates = list(runner.run_benchmark(FakeSession(error), object(), runner.BenchSettings(), tmp_path, poll_s=0.05))
    assert updates[-1].kind == "failed"
    assert all(w in updates[-1].message for w in words) and "Traceback" not in updates[-1].message


def test_a_harness_error_after_some_points_keeps_them(monkeypatch, tmp_path) -> None:
    from tgi_toolkit.bench.errors import BenchError

    monkeypatch.setattr(runner.BenchSettings, "run",
                        fake_run(1, BenchError("prompt_tokens", "2000 is over the server's max_input_tokens")))
    updates = list(runner.run_benchmark(FakeSession(), object(), runner.BenchSettings(), tmp_path / "r",
                                        poll_s=0.05))
    assert updates[-1].kind == "failed" and updates[-1].done == 1
    assert "refused its settings:** prompt_tokens: 2000" in updates[-1].message


def test_an_unexpected_error_is_named_and_logged(caplog) -> None:
    text = runner.describe_error(RuntimeError("boom"))
    assert text == "**The benchmark failed:** RuntimeError: boom"
    assert "benchmark failed" in caplog.text


# -- views of a results folder ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def example() -> Any:
    return load_results(example_results_dir())


def test_points_table_has_the_headline_numbers_in_ms(example) -> None:
    table = views.points_table(example)
    assert len(table) == len(example.points)
    assert {"scenario", "users", "throughput (tok/s)", "TTFT p50 (ms)"} <= set(table.columns)
    first = example.points.iloc[-1]
    assert table["TTFT p50 (ms)"].iloc[-1] == pytest.approx(first["ttft_p50_s"] * 1000, abs=0.06)
    assert list(views.points_table(type(example)()).columns)  # no points: headers only


def test_main_metrics_figures_and_batch_tables_of_the_example(example) -> None:
    metrics = views.main_metrics_table(example)
    assert list(metrics.columns) == ["metric", "value", "how it was obtained"] and len(metrics) == 3
    drawn = views.figures(example)
    assert len(drawn) >= 5 and all(hasattr(f, "to_plotly_json") for f in drawn.values())
    assert "Prefill" in views.batch_markdown(example)
    for scenario in runner.SCENARIOS:
        assert views.live_figure(example, scenario) is not None
    assert "Best output throughput" in views.headline(example)


# -- explorer ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def catalog() -> explorer.Catalog:
    return explorer.Catalog()


def test_catalog_offers_the_references_and_the_example(catalog) -> None:
    names = catalog.names()
    assert len(catalog.names("reference")) == 5 and "example: smollm2-135m-cpu" in names
    ref = catalog.load(catalog.names("reference")[0])
    assert ref.kind == "reference" and ref.metrics
    assert catalog.unique_name("example: smollm2-135m-cpu") == "example: smollm2-135m-cpu (2)"
    with pytest.raises(KeyError):
        catalog.load("nope")


def test_compare_draws_load_and_batch_figures_and_a_metrics_table(catalog) -> None:
    chosen = [catalog.load(n) for n in catalog.names()]
    drawn = explorer.compare(chosen)
    assert len(drawn) == 2
    load_fig = next(iter(drawn.values()))
    assert "means" in load_fig.layout.title.text  # a happy_vllm card among them: means, not medians
    table = explorer.metrics_table(chosen)
    assert list(table.columns) == ["main metric", *catalog.names()] and len(table) == 3
    medians = explorer.compare([catalog.load("example: smollm2-135m-cpu")])
    assert "medians" in next(iter(medians.values())).layout.title.text


def test_zip_round_trip_and_a_folder_offered_under_a_new_name(tmp_path, catalog) -> None:
    archive = explorer.zip_results(example_results_dir(), tmp_path / "out.zip")
    names = zipfile.ZipFile(archive).namelist()
    assert "smollm2-135m-cpu/points.parquet" in names and not any(n.endswith(".lock") for n in names)
    folder = explorer.extract_results(archive, tmp_path / "unzipped")
    assert folder == tmp_path / "unzipped" / "smollm2-135m-cpu"
    pd.testing.assert_frame_equal(load_results(folder).points, load_results(example_results_dir()).points)
    name = catalog.add_folder("upload: out", folder, "upload")
    assert catalog.load(name).metrics["kv_cache_capacity"].startswith("~")


def test_uploads_that_are_not_results_are_refused_with_a_reason(tmp_path) -> None:
    not_zip = tmp_path / "a.zip"
    not_zip.write_text("hello")
    with pytest.raises(explorer.ResultsFileError, match="not a zip"):
        explorer.extract_results(not_zip, tmp_path / "x")
    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("notes.txt", "no results here")
    with pytest.raises(explorer.ResultsFileError, match="no results folder"):
        explorer.extract_results(empty, tmp_path / "y")
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as archive:
        archive.writestr("../../escaped.txt", "x")
    with pytest.raises(explorer.ResultsFileError, match="outside its folder"):
        explorer.extract_results(evil, tmp_path / "z")
    assert not (tmp_path.parent / "escaped.txt").exists()
    with pytest.raises(explorer.ResultsFileError, match="not a results folder"):
        explorer.zip_results(tmp_path, tmp_path / "w.zip")


# -- create_app ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def app(tmp_path_factory) -> Any:
    from tgi_toolkit.app import create_app

    return create_app(work_dir=tmp_path_factory.mktemp("work"))


def elem_ids(app: Any) -> set[str]:
    return {block.elem_id for block in app.blocks.values() if getattr(block, "elem_id", None)}


def test_create_app_builds_without_launching(app) -> None:
    from tgi_toolkit.app.ui import ToolkitApp

    assert isinstance(app, ToolkitApp) and not app.is_running
    assert app.engine.server is None  # the engine starts on the first benchmark, not before
    ids = elem_ids(app)
    assert {f"field-{name}" for name in settings.field_names()} <= ids
    assert {"settings-check", "bench-run", "bench-status", "bench-plot", "bench-download", "explore-upload",
            "explore-sets", "explore-plot"} <= ids
    assert {f"bench-{name}" for name in runner.BenchSettings.field_names() if name != "scenario"} <= ids
    labels = {block.label for block in app.blocks.values()
              if (getattr(block, "elem_id", None) or "").startswith("field-")}
    assert "--max-total-tokens" in labels


def test_launch_binds_loopback_offline_and_close_stops_the_engine(app) -> None:
    stopped = []
    real = app.engine
    app.engine = type("Stub", (), {"stop": lambda self: stopped.append(True)})()
    try:
        port = free_port()
        app.launch(server_port=port, prevent_thread_lock=True, quiet=True)
        assert app.server_name == "127.0.0.1" and app.share is False
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=10).status_code == 200
    finally:
        app.close()
        app.engine = real
    assert stopped == [True]


def test_the_cli_registers_the_app_command() -> None:
    from tgi_toolkit.cli import build_parser

    args = build_parser("app").parse_args(["app", "--port", "7999", "--work-dir", "w"])
    assert args.port == 7999 and args.host == "127.0.0.1" and args.work_dir == Path("w")
