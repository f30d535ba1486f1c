"""Sweeps: the grid and its checks, the YAML format, the manifest, and runs that crash, resume and go on.

Crashes and start-ups are simulated cheaply with the stand-in launcher (tests/standins/); the one
slow test relaunches the real embedded engine and counts launches across an interrupted sweep.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

from tests.standins.fixtures import no_leftover_processes, standins  # noqa: F401
from tgi_toolkit import schema as S
from tgi_toolkit.bench.results import ResultsFolder, frame, load_results
from tgi_toolkit.config import LauncherConfig
from tgi_toolkit.sweep import Manifest, Sweep, SweepError, Workload, load_manifest, resources_for, sweep_status

ROOT = Path(__file__).resolve().parents[1]
TINY = Workload("concurrency", users=[1], prompt_tokens=8, max_new_tokens=2, requests=1)


def standin_sweep(**kwargs) -> Sweep:
    kwargs.setdefault("grid", {"max_batch_size": [1, 2]})
    kwargs.setdefault("configs", [{"max_batch_prefill_tokens": 16}])  # < max_input_tokens: invalid unchunked
    # PREFILL_CHUNKING=0: TGI 3 refuses a prompt limit above the prefill budget only without chunking
    # (docs/tgi-rules.md L4), and these tests need one configuration the rules refuse.
    return Sweep(base={"model_id": "org/standin-model", "max_input_tokens": 32, "max_total_tokens": 64},
                 workloads=[TINY], backend="tgi", server={"health_timeout": 20, "env": {"PREFILL_CHUNKING": "0"}},
                 **kwargs)


# -- the grid ---------------------------------------------------------------------------------------
def test_grid_is_crossed_extra_configs_appended_and_duplicates_dropped():
    sweep = Sweep(base=LauncherConfig(max_input_tokens=256, max_total_tokens=512),
                  grid={"--max-batch-size": [1, 4], "max-batch-prefill-tokens": [512, 1024]},
                  configs=[{"waiting_served_ratio": 1.2}, {"max_batch_size": 1, "max_batch_prefill_tokens": 512}],
                  workloads=[TINY])
    configs = sweep.configs()
    assert [c.label for c in configs] == [
        "max_batch_size=1,max_batch_prefill_tokens=512", "max_batch_size=1,max_batch_prefill_tokens=1024",
        "max_batch_size=4,max_batch_prefill_tokens=512", "max_batch_size=4,max_batch_prefill_tokens=1024",
        "waiting_served_ratio=1.2"]  # the last extra config repeats the first combination
    assert all(c.valid for c in configs)
    assert len({c.config_id for c in configs}) == 5
    first = configs[0].config
    # the base's settings carry over; the bench labels points with every non-default setting
    assert (first.max_input_tokens, first.max_total_tokens, first.max_batch_size) == (256, 512, 1)
    assert configs[0].config_label == ("max_batch_prefill_tokens=512,max_batch_size=1,max_input_tokens=256,"
                                       "max_total_tokens=512")
    assert sweep.knobs() == ["max_batch_size", "max_batch_prefill_tokens", "waiting_served_ratio"]


def test_the_base_is_measured_only_when_nothing_else_is_listed():
    base = {"max_input_tokens": 256, "max_total_tokens": 512}
    only = Sweep(base=base, configs=[{"max_batch_size": 1}, {"max_batch_size": 4}], workloads=[TINY])
    assert [c.label for c in only.configs()] == ["max_batch_size=1", "max_batch_size=4"]  # no unlisted "base"
    assert [c.label for c in Sweep(base=base, workloads=[TINY]).configs()] == ["base"]
    assert [c.label for c in Sweep(base=base, grid={"max_batch_size": [2]}, workloads=[TINY]).configs()] == [
        "max_batch_size=2"]


def test_configs_breaking_a_launcher_rule_carry_the_rule_and_its_fields():
    sweep = Sweep(base={"max_input_tokens": 256, "max_total_tokens": 512},
                  grid={"max_batch_prefill_tokens": [128, 512], "max_batch_size": [0, 2]},
                  configs=[{"max_batch_size": -1}, {"quantize": "gptq", "dtype": "float16"}], workloads=[TINY],
                  server={"env": {"PREFILL_CHUNKING": "0"}})  # the budget rule holds only unchunked (L4)
    by_label = {c.label: c for c in sweep.configs()}
    both = by_label["max_batch_prefill_tokens=128,max_batch_size=0"]
    assert not both.valid and len(both.problems) == 2
    assert {"fields": ["max_batch_prefill_tokens", "max_input_tokens"],
            "rule": "--max-batch-prefill-tokens (128) must be >= --max-input-tokens (256) (a whole prompt must fit "
                    "one prefill without prefill chunking: PREFILL_CHUNKING=0, ATTENTION=paged or --speculate)"
            } in both.problems
    # With TGI 3's default chunking the same budget is valid: the prompt is prefilled in chunks.
    chunked = Sweep(base={"max_input_tokens": 256, "max_total_tokens": 512}, grid={"max_batch_prefill_tokens": [128]},
                    workloads=[TINY], server={"env": {"PREFILL_CHUNKING": "1"}})
    assert chunked.configs()[0].valid
    assert by_label["max_batch_prefill_tokens=512,max_batch_size=0"].problems == [
        {"fields": ["max_batch_size"], "rule": "--max-batch-size (0) must be > 0"}]
    assert by_label["max_batch_prefill_tokens=512,max_batch_size=2"].valid
    refused = by_label["max_batch_size=-1"]  # refused by the field itself: no config could be built
    assert refused.config is None and refused.problems[0]["fields"] == ["max_batch_size"]
    assert refused.config_id.startswith("x")
    mixed = by_label["quantize=gptq,dtype=float16"]
    assert mixed.problems[0]["fields"] == ["dtype", "quantize"] and "--dtype" in mixed.problems[0]["rule"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"grid": {"max_batch_sise": [1]}}, "did you mean max_batch_size"),
    ({"grid": {"max_batch_size": []}}, "has no values"),
    ({"workloads": [{"scenario": "sweep"}]}, "scenario 'sweep' is not known"),
    ({"workloads": [{"scenario": "concurrency", "user": [1]}]}, "did you mean users"),
    ({"workloads": [{"scenario": "batch", "output": "x"}]}, "belong to the sweep"),
    ({"workloads": []}, "at least one workload"),
    ({"options": {"slo_ttft": 1}}, "did you mean slo_ttft_s"),
    ({"server": {"port": 3000}}, "not a Server option"),
    ({"backend": "url"}, "cannot be relaunched"),
    ({"executor": "dask"}, "not known"),
    ({"ray": {"adress": "auto"}}, "not a RayExecutor option"),
])
def test_specifications_that_cannot_run_are_refused_up_front(kwargs, message):
    spec = {"workloads": [{"scenario": "concurrency", "users": [1]}], **kwargs}
    with pytest.raises(SweepError, match=message):
        Sweep.from_dict(spec)


def test_unknown_yaml_key_is_refused(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("grids: {max_batch_size: [1]}\nworkloads: [{scenario: batch}]\n")
    with pytest.raises(SweepError, match="'grids' is not a sweep key; did you mean grid"):
        Sweep.from_yaml(path)


def test_example_yaml_reads_and_round_trips():
    sweep = Sweep.from_yaml(ROOT / "examples" / "sweep.yaml")
    configs = sweep.configs()
    assert [c.valid for c in configs] == [True, True, False]
    assert sweep.output == (ROOT / "results" / "sweep-example").resolve()  # relative to the YAML file
    (workload,) = sweep.resolved_workloads()
    assert workload.params["slo_ttft_s"] == 1.0 and workload.params["users"] == [1, 4]
    again = Sweep.from_dict(sweep.to_dict())
    assert [c.config_id for c in again.configs()] == [c.config_id for c in configs]
    assert [w.key for w in again.resolved_workloads()] == [workload.key]


def test_workload_identity_ignores_spelling_and_options_fill_only_gaps():
    assert Workload("rate", rates=(1.0, 2.0)).key == Workload("rate", rates=[1.0, 2.0]).key
    assert Workload("rate", rates=[1.0]).key != Workload("rate", rates=[2.0]).key
    merged = Workload("concurrency", users=[1], seed=3).with_options({"seed": 0, "slo_ttft_s": 1.0})
    assert merged.params == {"seed": 3, "slo_ttft_s": 1.0, "users": [1]}


def test_resources_reserve_a_gpu_per_shard_except_on_the_cpu_engine():
    assert resources_for(LauncherConfig(), "embedded") == {"num_cpus": 1.0, "num_gpus": 0.0}
    assert resources_for(LauncherConfig(), "tgi")["num_gpus"] == 1.0
    assert resources_for(LauncherConfig(num_shard=4), "vllm", num_cpus=2) == {"num_cpus": 2.0, "num_gpus": 4.0}
    assert resources_for(LauncherConfig(num_shard=2), "tgi-docker")["num_gpus"] == 2.0


def test_manifest_keeps_finished_work_on_resume_and_flags_configs_gone_from_the_spec(tmp_path):
    manifest = Manifest(tmp_path)
    sweep = standin_sweep()
    configs = sweep.configs()
    data = manifest.start(sweep, configs, resume=True)
    assert [e["status"] for e in data["configs"]] == ["pending", "pending", "invalid"]
    entry = data["configs"][0]
    entry.update(status="complete", launches=1)
    manifest.put(entry)
    smaller = standin_sweep(grid={"max_batch_size": [1]}, configs=[])
    data = manifest.start(smaller, smaller.configs(), resume=True)
    assert data["sessions"] == 2
    assert [(e["label"], e["status"], e["in_spec"]) for e in data["configs"]] == [
        ("max_batch_size=1", "complete", True), ("max_batch_size=2", "pending", False),
        ("max_batch_prefill_tokens=16", "invalid", False)]
    data = manifest.start(smaller, smaller.configs(), resume=False)
    assert data["configs"][0]["status"] == "pending" and data["configs"][0]["launches"] == 0


# -- runs with the stand-in launcher ---------------------------------------------------------------------
@pytest.mark.usefixtures("standins")
def test_servers_that_crash_are_recorded_with_their_log_and_the_sweep_goes_on(tmp_path, monkeypatch, launches,
                                                                             capsys):
    monkeypatch.setenv("TGI_TOOLKIT_STANDIN", "crash")
    results = standin_sweep().run(tmp_path, progress=False)
    assert results.points.empty
    assert [c.max_batch_size for c in launches] == [1, 2]  # the first crash did not stop the sweep
    status = sweep_status(tmp_path)
    assert list(status["status"]) == ["failed", "failed", "invalid"]
    assert list(status["max_batch_size"].fillna(0)) == [1, 2, 0]
    assert "must be >= --max-input-tokens" in status["problems"][2]
    entries = load_manifest(tmp_path)["configs"]
    for entry in entries[:2]:
        assert entry["error"] == "tgi server exited during start-up" and entry["exit_code"] == 1
        assert entry["log_tail"][-1] == "Error: ShardCannotStart"
        assert "CUDA out of memory" in (tmp_path / entry["log_path"]).read_text()
        assert entry["launches"] == 1
    assert entries[2]["launches"] == 0  # an invalid configuration is never launched

    # nothing measured: the card's "no results" names each configuration and why
    from tgi_toolkit.report import write_report

    with pytest.raises(ValueError) as refused:
        write_report(tmp_path, tmp_path / "card")
    message = str(refused.value)
    assert "max_batch_size=1: failed (tgi server exited during start-up)" in message
    assert "max_batch_size=2: failed (tgi server exited during start-up)" in message
    assert "max_batch_prefill_tokens=16: invalid" in message and "--retry-failed" in message

    # No configuration ever started (a cause they share, e.g. a missing model, fixed since): a plain
    # rerun relaunches them all.
    launches.clear()
    monkeypatch.setenv("TGI_TOOLKIT_STANDIN", "ok")
    standin_sweep().run(tmp_path, progress=False)
    assert [c.max_batch_size for c in launches] == [1, 2]
    entries = load_manifest(tmp_path)["configs"]
    assert [e["launches"] for e in entries] == [2, 2, 0]
    # they started this time, and failed in their workload (the stand-in cannot tokenize): that is
    # a result, kept on the next rerun, and one line says so and how to relaunch them
    assert [e["status"] for e in entries[:2]] == ["failed", "failed"]
    launches.clear()
    standin_sweep().run(tmp_path, progress=False)
    assert launches == []
    err = capsys.readouterr().err
    assert "not relaunched: 2 configuration(s) recorded as failed (max_batch_size=1: " in err
    assert "retry_failed=True (--retry-failed)" in err
    standin_sweep().run(tmp_path, progress=False, retry_failed=True)
    assert [c.max_batch_size for c in launches] == [1, 2]
    assert [e["launches"] for e in load_manifest(tmp_path)["configs"]] == [3, 3, 0]


@pytest.mark.usefixtures("standins")
def test_a_workload_that_fails_on_a_started_server_is_recorded_and_the_next_config_runs(tmp_path, launches):
    # The stand-in serves /health and /info but cannot tokenize: the bench gives up on the prompt.
    standin_sweep(configs=[]).run(tmp_path, progress=False)
    assert len(launches) == 2
    for entry in load_manifest(tmp_path)["configs"]:
        assert entry["status"] == "failed" and entry["exit_code"] == 0  # stopped by us, cleanly
        (record,) = entry["workloads"].values()
        assert record["status"] == "failed" and "no usable /tokenize" in record["error"]
        assert entry["error"].startswith(record["label"])
        assert entry["server_facts"]["max_batch_total_tokens"] == 16000


# -- the results folder from several processes -------------------------------------------------------------
def _append_points(folder: str, writer: int, count: int) -> None:
    target = ResultsFolder(folder)
    for i in range(count):
        row = {S.RUN_ID: f"w{writer}", S.CONFIG_ID: f"c{writer}", S.POINT_ID: f"p{i}", S.SCENARIO: "concurrency",
               S.REQUESTS: 1, S.ERRORS: 0, S.SHORT_OUTPUTS: 0, S.TOTAL_INPUT_TOKENS: 1, S.TOTAL_OUTPUT_TOKENS: 1}
        target.append({"points": frame([row], "points")})


def test_results_folder_loses_no_rows_when_processes_append_at_once(tmp_path):
    # What parallel sweep tasks on one machine (or on shared storage) rely on: bench/results.py
    # rewrites a table whole under an flock on the folder, and each process keeps its own cache.
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_append_points, args=(str(tmp_path), w, 12)) for w in range(4)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(60)
    assert [p.exitcode for p in workers] == [0, 0, 0, 0]
    points = load_results(tmp_path).points
    assert len(points) == 48
    assert points.groupby(S.RUN_ID)[S.POINT_ID].nunique().to_dict() == {f"w{w}": 12 for w in range(4)}


# -- the real engine ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_interrupted_sweep_resumes_skipping_finished_configs_and_points(tmp_path, launches):
    sweep = Sweep(base={"max_input_tokens": 32, "max_total_tokens": 48, "max_batch_prefill_tokens": 64},
                  grid={"max_batch_size": [1, 2]},
                  configs=[{"model_id": "no-such-org/no-such-model"}],  # the engine cannot start it
                  workloads=[Workload("concurrency", users=[1, 2], prompt_tokens=16, max_new_tokens=4, requests=2)],
                  server={"health_timeout": 120})

    def stop_after_first_point(row):
        raise KeyboardInterrupt  # what Ctrl-C does in a notebook

    with pytest.raises(KeyboardInterrupt):
        sweep.run(tmp_path, progress=False, on_point=stop_after_first_point)
    assert [c.max_batch_size for c in launches] == [1]
    first = load_manifest(tmp_path)["configs"][0]
    assert first["status"] == "interrupted" and first["launches"] == 1
    assert len(load_results(tmp_path).points) == 1  # the point that finished is kept

    launches.clear()
    results = sweep.run(tmp_path, progress=False)
    # the interrupted configuration is relaunched, the others launched once; nothing else
    assert [c.max_batch_size for c in launches] == [1, 2, None]
    assert [c.model_id for c in launches][-1] == "no-such-org/no-such-model"
    entries = load_manifest(tmp_path)["configs"]
    assert [e["status"] for e in entries] == ["complete", "complete", "failed"]
    assert [e["launches"] for e in entries] == [2, 1, 1]
    assert entries[2]["error"] == "embedded server exited during start-up" and entries[2]["exit_code"] != 0
    assert any("no-such-org/no-such-model" in line for line in entries[2]["log_tail"])
    points = results.points
    assert len(points) == 4 and points.groupby(S.CONFIG_ID)[S.USERS].apply(sorted).tolist() == [[1, 2], [1, 2]]
    # the first configuration's two sessions are one bench run: its first point was not measured again
    assert points[points[S.CONFIG_ID] == entries[0]["config_id"]][S.RUN_ID].nunique() == 1
    (record,) = entries[0]["workloads"].values()
    assert record["run_id"] in set(points[S.RUN_ID]) and record["status"] == "complete"
    run = json.loads((tmp_path / "runs" / f"{record['run_id']}.json").read_text())
    assert run["launcher_config"]["max_batch_size"] == 1 and run["sessions"] == 2

    launches.clear()
    sweep.run(tmp_path, progress=False)
    assert launches == []


# -- CPU configurations on one machine get cores of their own ----------------------------------------------
def _hold_cores(folder: str, out: multiprocessing.Queue) -> None:
    import time

    from tgi_toolkit.sweep.executors import own_cores

    with own_cores(1, poll=0.05, folder=folder) as cores:
        out.put((cores, time.monotonic(), None))
        time.sleep(0.6)
    out.put(("released", time.monotonic(), None))


def test_cpu_configurations_claim_distinct_cores_and_wait_when_none_is_free(tmp_path):
    # What each Ray task of a CPU configuration does on its node (executors._ray_task): with as many
    # claimants as cores plus one, each of the first gets a core nobody else holds, the last waits.
    usable = sorted(os.sched_getaffinity(0))
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    workers = [ctx.Process(target=_hold_cores, args=(str(tmp_path), out)) for _ in range(len(usable) + 1)]
    for p in workers:
        p.start()
    events = [out.get(timeout=60) for _ in range(2 * len(workers))]
    for p in workers:
        p.join(30)
    claims = [(cores, t) for cores, t, _ in events if cores != "released"]
    releases = sorted(t for cores, t, _ in events if cores == "released")
    first = sorted(claims, key=lambda c: c[1])[: len(usable)]
    assert sorted(c for cores, _ in first for c in cores) == usable  # distinct: every core once
    last = max(t for _, t in claims)
    assert last >= releases[0]  # the extra claimant waited for a core to be given back
