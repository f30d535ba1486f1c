"""Progress where nothing can be redrawn (CI logs, `make quickstart > log`): one line per finished step, no
carriage returns or escape codes; a terminal keeps tqdm's bars."""

from __future__ import annotations

import io
import subprocess
import sys

from tests.test_bench_harness import mock_server
from tgi_toolkit.progress import StepLines, progress_bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_file_gets_one_line_per_finished_step_and_nothing_for_transient_bars() -> None:
    out = io.StringIO()
    bar = progress_bar(3, "sweep configurations", unit="config", initial=1, stream=out)
    assert isinstance(bar, StepLines)
    bar.set_postfix_str("max_batch_size=1: complete", refresh=False)
    bar.update(1)
    bar.set_postfix_str("max_batch_size=8: failed")
    bar.update(1)
    bar.close()
    assert out.getvalue().splitlines() == ["sweep configurations: 2/3 (max_batch_size=1: complete)",
                                           "sweep configurations: 3/3 (max_batch_size=8: failed)"]
    assert progress_bar(8, "batch size 4", unit="req", transient=True, stream=out) is None


def test_a_terminal_gets_tqdm() -> None:
    from tqdm import tqdm

    terminal = Terminal()
    bar = progress_bar(2, "points", stream=terminal)
    assert isinstance(bar, tqdm)
    bar.update(2)
    bar.close()
    assert "\r" in terminal.getvalue()


def test_the_bench_cli_writing_to_a_log_prints_each_point_once(tmp_path) -> None:
    with mock_server() as url:
        done = subprocess.run(
            [sys.executable, "-m", "tgi_toolkit.cli", "bench", "concurrency", "--url", url, "--api", "chat",
             "-u", "1", "-u", "2", "--prompt-tokens", "8", "--max-new-tokens", "3", "--requests", "2",
             "--output", str(tmp_path / "results")],
            capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    log = done.stdout + done.stderr
    assert "\r" not in log and "\x1b[" not in log
    assert [line for line in log.splitlines() if line.startswith("concurrency points:")] == [
        "concurrency points: 1/2", "concurrency points: 2/2"]
