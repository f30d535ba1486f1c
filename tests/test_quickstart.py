"""`tgi-toolkit quickstart`: the question, then a sweep written as a model card whose path is printed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tgi_toolkit import quickstart
from tgi_toolkit.cli import main as cli_main


def test_the_quickstart_sweep_is_small_and_valid() -> None:
    sweep = quickstart.quickstart_sweep()
    configs = sweep.configs()
    assert [c.valid for c in configs] == [True, True]
    assert sorted(w.scenario for w in sweep.workloads) == ["batch", "concurrency", "ingestion"]


@pytest.mark.slow
def test_quickstart_prints_the_answer_and_the_report(tmp_path, monkeypatch, capsys) -> None:
    from tgi_toolkit.sweep import Sweep, Workload

    # the real sweep takes minutes; the same steps with one configuration and a tiny workload
    def tiny(backend: str = "embedded") -> Sweep:
        return Sweep(base={"max_input_tokens": 64, "max_total_tokens": 96}, grid={"max_batch_size": [2]},
                     backend=backend, workloads=[Workload("ingestion", prompt_tokens=[8, 32], repeats=1),
                                                 Workload("concurrency", users=[1, 2], prompt_tokens=16,
                                                          max_new_tokens=4, requests=2)])

    monkeypatch.setattr(quickstart, "quickstart_sweep", tiny)
    assert cli_main(["quickstart", "--output", str(tmp_path), "--figures", "html", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^A: \S", out, re.M) and re.search(r"time to first token: \d+ ms", out)
    assert "Prompt ingestion speed" in out and "max_batch_size=2" in out
    html = Path(re.search(r"HTML report, open it in a browser: (\S+)", out).group(1))
    assert html == tmp_path / "report" / "model_card.html" and html.is_file()
    assert html.with_suffix(".md").is_file() and (tmp_path / "results" / "points.parquet").is_file()
