"""What the bench and the sweep refuse before any server starts (issue 43): every scenario's bad values,
a sweep's `--dry-run` as its real run would, and an `--output` already holding a run of the same command
(a rerun is explicit: `--resume` finishes an interrupted run, `--overwrite` measures again)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tgi_toolkit import schema as S
from tgi_toolkit.bench import load_results
from tgi_toolkit.bench.cli import add_parser, command_line, run_options, scenario_params
from tgi_toolkit.cli import main as cli_main

from .conftest import ROOT


@pytest.fixture
def no_launch(monkeypatch: pytest.MonkeyPatch) -> list:
    """Server.start made to fail the test: the configurations it was called with (none, if all is well)."""
    from tgi_toolkit.server import Server

    started: list = []

    def refuse(self):  # Server.start
        started.append(self.config)
        raise AssertionError("a server was started")

    monkeypatch.setattr(Server, "start", refuse)
    return started


def parsed(argv: list[str]) -> argparse.Namespace:
    """`tgi-toolkit bench ...` parsed by the bench's own parser."""
    root = argparse.ArgumentParser(prog="tgi-toolkit")
    add_parser(root.add_subparsers(dest="command"))
    return root.parse_args(["bench", *argv])


@pytest.mark.parametrize("flags,message", [
    (["-u", "-4"], "users: -4 is not allowed (allowed: integers >= 1)"),
    (["--max-new-tokens", "-5"], "max_new_tokens: -5 is not allowed (allowed: integers >= 1)"),
])
def test_a_bad_value_on_the_command_line_fails_before_the_server_starts(flags, message):
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tgi_toolkit.cli", "bench", "concurrency", "--backend", "embedded",
                           *flags], capture_output=True, text=True, timeout=120, cwd=ROOT)
    took = time.monotonic() - began
    assert done.returncode == 2 and done.stderr.strip() == f"error: {message}", done.stderr[-2000:]
    # no server: starting one prints its address and takes a minute here (loading the model); the check
    # itself is the command's import time, about 1 s of CPU (loosely bounded: the machine may be busy)
    assert "Traceback" not in done.stderr and "starting embedded server" not in done.stdout + done.stderr
    assert took < 30, took


@pytest.mark.parametrize("argv,message", [
    (["batch", "-b", "0"], "batch_size: 0 is not allowed"),
    (["batch", "--runs", "0"], "runs: 0 is not allowed"),
    (["batch", "-s", "300", "--", "--max-input-tokens", "256", "--max-total-tokens", "512"],
     "sequence_length: 300 is over the server's max_input_tokens (allowed: 1 to 256)"),
    (["batch", "-b", "200"], "batch_size: 200 is over the server's max_concurrent_requests 128"),
    (["concurrency", "-u", "4", "--requests", "2"], "requests: 2 is fewer than 4 users"),
    (["concurrency", "--prompt-tokens", "500", "--", "--max-total-tokens", "512"],
     "prompt_tokens: 500 prompt + 128 new tokens is over the server's max_total_tokens 512"),
    (["concurrency", "--ramp-up", "soon"], "ramp_up: 'soon' is not allowed"),
    (["rate", "--rate", "-1"], "rate: -1.0 is not allowed"),
    (["rate", "--requests", "0"], "requests: 0 is not allowed"),
    (["ingestion", "--prompt-tokens", "16"], "prompt_tokens: a fit needs at least two different lengths"),
    (["ingestion", "--repeats", "0"], "repeats: 0 is not allowed"),
    (["shared-prefix", "--groups", "0"], "groups: 0 is not allowed"),
    (["multi-turn", "--turns", "-1"], "turns: -1 is not allowed"),
    (["multi-turn", "--turns", "4", "--user-tokens", "100", "--", "--max-input-tokens", "256"],
     "prompt_tokens: 496 is over the server's max_input_tokens (allowed: 1 to 256)"),  # 100 + 3 x (32 + 100)
    (["decode-stall", "--lead-tokens", "200"], "lead_tokens: 200 leaves the streams no tokens to decode"),
    (["decode-stall", "--long-prompt", "3000", "--", "--max-input-tokens", "2048"],
     "long_prompt: 3000 is over the server's max_input_tokens"),
    (["concurrency", "--slo-ttft", "0"], "slo_ttft_s: 0.0 is not a positive number of seconds"),
    (["concurrency", "--scrape-interval", "-1"], "scrape_interval: -1.0 is not allowed"),
])
def test_every_scenario_refuses_bad_values_before_a_server_starts(argv, message, no_launch, capsys):
    scenario, rest = argv[0], argv[1:]
    split = rest.index("--") if "--" in rest else len(rest)
    assert cli_main(["bench", scenario, "--backend", "embedded", *rest[:split], "--no-progress", *rest[split:]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1, err
    assert no_launch == []


def test_a_sweep_dry_run_refuses_what_its_run_would(tmp_path):
    tmp_path.mkdir(exist_ok=True)
    spec = tmp_path / "sweep.yaml"
    spec.write_text("base: {max_input_tokens: 64, max_total_tokens: 128}\n"
                    "workloads:\n  - {scenario: concurrency, users: [-1, 4], prompt_tokens: 16, max_new_tokens: 4}\n")
    done = subprocess.run([sys.executable, "-m", "tgi_toolkit.cli", "sweep", str(spec), "--dry-run"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "users: -1 is not allowed (allowed: integers >= 1)" in done.stderr
    # lengths over one configuration's limits: that configuration invalid (never launched), the other listed ok
    spec.write_text("base: {max_total_tokens: 512}\ngrid: {max_input_tokens: [64, 256]}\n"
                    "workloads:\n  - {scenario: concurrency, users: [1], prompt_tokens: 100, max_new_tokens: 4}\n")
    done = subprocess.run([sys.executable, "-m", "tgi_toolkit.cli", "sweep", str(spec), "--dry-run"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if "max_input_tokens=" in line]
    assert len(lines) == 2 and lines[0].endswith("prompt_tokens: 100 is over the server's max_input_tokens "
                                                 "(allowed: 1 to 64)") and lines[1].endswith(" ok"), done.stdout


# -- reruns --------------------------------------------------------------------------------------------
CONCURRENCY = ["concurrency", "-u", "1", "--prompt-tokens", "8", "--max-new-tokens", "2", "--requests", "2"]


def recorded(folder: Path, argv: list[str], status: str) -> str:
    """A run record in `folder` as the command line `argv` leaves it (its command as the CLI records it)."""
    (folder / "runs").mkdir(parents=True, exist_ok=True)
    run_id = f"concurrency-{status}"
    (folder / "runs" / f"{run_id}.json").write_text(json.dumps(
        {"run_id": run_id, "status": status, "started_at": "2026-11-28T07:00:00+00:00",
         "command": command_line(parsed(argv))}))
    return run_id


def test_a_folder_holding_this_command_s_run_is_refused_before_the_server_starts(tmp_path, no_launch, capsys):
    out = str(tmp_path / "out")
    argv = [*CONCURRENCY, "--backend", "embedded", "--output", out]
    finished = recorded(tmp_path / "out", argv, "complete")
    # the same command, only --no-progress added: the same run
    assert cli_main(["bench", *argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"--output: {out} already holds a finished run of these settings ({finished}); nothing is reused" in err
    assert "--overwrite to measure again, replacing it; or a new --output folder" in err
    assert "--resume only finishes an interrupted run" in err
    assert cli_main(["bench", *argv, "--resume"]) == 2
    assert f"--resume: {out} holds no interrupted run to finish (run {finished} is finished)" in capsys.readouterr().err

    (tmp_path / "out" / "runs" / f"{finished}.json").unlink()
    interrupted = recorded(tmp_path / "out", argv, "failed")
    assert cli_main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert f"holds an interrupted run of these settings ({interrupted})" in err and "--resume to finish it" in err
    assert no_launch == []


def test_other_settings_or_no_output_are_not_reruns(tmp_path):
    argv = [*CONCURRENCY, "--backend", "embedded", "--output", str(tmp_path)]
    recorded(tmp_path, argv, "complete")
    from tgi_toolkit.bench.cli import runs_to_replace

    assert runs_to_replace(parsed([*argv[:2], "2", *argv[3:], "--requests", "4"])) == []  # 2 users: another run
    assert runs_to_replace(parsed([*argv, "--overwrite"]))[0]["run_id"] == "concurrency-complete"
    assert runs_to_replace(parsed(CONCURRENCY)) == []  # no --output: nothing to reuse


@pytest.mark.slow
def test_overwrite_measures_again_and_resume_finishes_an_interrupted_run(engine_url, tmp_path, capsys):
    base = ["concurrency", "-u", "1", "-u", "2", "--prompt-tokens", "8", "--max-new-tokens", "2", "--requests", "2",
            "--ramp-up", "0", "--url", engine_url, "--no-progress"]
    out, cut = str(tmp_path / "out"), str(tmp_path / "cut")
    assert cli_main(["bench", *base, "--output", out]) == 0
    first = load_results(out).run_ids
    assert cli_main(["bench", *base, "--output", out]) == 2 and "--overwrite" in capsys.readouterr().err
    assert cli_main(["bench", *base, "--output", out, "--overwrite"]) == 0
    again = load_results(out)
    assert len(again.run_ids) == 1 and again.run_ids != first  # measured again, in the first run's place
    assert again.points[S.POINT_ID].tolist() == ["users=1,prompt=8,output=2", "users=2,prompt=8,output=2"]

    # an interrupted run of the same command (stopped after its first point, as by Ctrl-C) ...
    from tgi_toolkit.bench import run_scenario

    class Stop(Exception):
        pass

    def stop(point: dict) -> None:
        raise Stop

    args = parsed([*base, "--output", cut])
    with pytest.raises(Stop):
        run_scenario("concurrency", engine_url, **scenario_params(args), **{**run_options(args), "on_point": stop})
    interrupted = load_results(cut)
    assert interrupted.runs[0]["status"] == "failed" and len(interrupted.points) == 1
    # ... is refused without --resume, and finished with it: the same run, its missing point only
    assert cli_main(["bench", *base, "--output", cut]) == 2
    assert "--resume to finish it" in capsys.readouterr().err
    assert cli_main(["bench", *base, "--output", cut, "--resume"]) == 0
    done = load_results(cut)
    assert done.run_ids == interrupted.run_ids and done.runs[0]["sessions"] == 2
    assert done.runs[0]["status"] == "complete" and len(done.points) == 2


# -- a sweep's reruns ------------------------------------------------------------------------------------
def sweep_folder(tmp_path: Path, statuses: list[str]) -> tuple[Path, Path]:
    """A spec of two configurations and a folder whose sweep.json gives them these statuses."""
    from tgi_toolkit.sweep import Sweep

    tmp_path.mkdir(exist_ok=True)
    spec = tmp_path / "sweep.yaml"
    spec.write_text("base: {max_input_tokens: 64, max_total_tokens: 128}\ngrid: {max_batch_size: [1, 2]}\n"
                    "workloads:\n  - {scenario: concurrency, users: [1], prompt_tokens: 16, max_new_tokens: 4}\n")
    folder = tmp_path / "out"
    folder.mkdir()
    configs = Sweep.from_yaml(spec).configs()
    (folder / "sweep.json").write_text(json.dumps({"configs": [
        {"config_id": c.config_id, "status": status, "workloads": {"w": {"status": status, "run_id": f"r{i}"}}}
        for i, (c, status) in enumerate(zip(configs, statuses, strict=True))]}))
    return spec, folder


def test_a_sweep_folder_holding_this_sweep_is_refused_before_anything_starts(tmp_path, no_launch, capsys):
    spec, folder = sweep_folder(tmp_path, ["complete", "failed"])
    for extra in ([], ["--resume"]):
        assert cli_main(["sweep", str(spec), "--output", str(folder), "--no-progress", *extra]) == 2
        err = capsys.readouterr().err
        assert f"{folder} already holds this sweep, finished (1 complete, 1 failed); nothing is reused" in err
        assert "--overwrite to measure it again, replacing it; --retry-failed to relaunch the failed ones" in err
        assert "--resume only finishes an interrupted sweep" in err
    spec, folder = sweep_folder(tmp_path / "cut", ["complete", "interrupted"])
    assert cli_main(["sweep", str(spec), "--output", str(folder), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "holds an unfinished run of this sweep (1 of 2 configurations finished)" in err
    assert "--resume to finish it" in err
    assert no_launch == []


def test_a_sweep_overwrite_replaces_the_earlier_runs(tmp_path):
    from tgi_toolkit.sweep.cli import runs_to_replace
    from tgi_toolkit.sweep.spec import Sweep

    spec, folder = sweep_folder(tmp_path, ["complete", "complete"])
    args = argparse.Namespace(resume=False, overwrite=True, retry_failed=False)
    assert runs_to_replace(Sweep.from_yaml(spec), str(folder), args) == ["r0", "r1"]
    args = argparse.Namespace(resume=False, overwrite=False, retry_failed=False)
    assert runs_to_replace(Sweep.from_yaml(spec), str(tmp_path / "new"), args) == []  # a new folder
