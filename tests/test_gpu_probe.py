"""benchmarks/gpu_probe.py --device cpu --tiny (issue 41, 4): every step the GPU run takes, on a toy random model,
in one process tree: kernel times, predictions from a card's datasheet and from those times, the random-weight
engine served over HTTP and benched, and the summary with its provenance."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_probe_runs_every_step_on_a_cpu(tmp_path):
    out = tmp_path / "probe"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_probe.py"), "--device", "cpu", "--tiny",
                           "--card", "H100", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["provenance"]["device_type"] == "cpu" and summary["provenance"]["framework"] == "tgi_toolkit"
    assert {"torch", "cuda", "driver", "date", "device"} <= set(summary["provenance"])
    for table in ("gemm_perf", "context_attention_perf", "generation_attention_perf", "mem_perf"):
        assert (out / "kernels" / f"{table}.parquet").is_file()
    # the engine served the random weights on the CPU, and bench measured the tiny plan's every point
    info = summary["measured"]["info"]
    assert info["random_weights"] is True and info["model_device_type"] == "cpu"
    assert [row["batch_size"] for row in summary["measured"]["batch"]] == [1, 4, 16]
    assert [row["users"] for row in summary["measured"]["concurrency"]] == [1, 8]
    assert all(row["decode_token_latency_s"] > 0 for row in summary["measured"]["batch"])
    # both predictions ran before it, for the same points, and each point has its ratio
    assert summary["skipped"] == {} and summary["card_for_predictions"] == "H100"
    for kind in ("roofline", "measured"):
        assert [row["batch_size"] for row in summary["predicted"][kind]["batch"]] == [1, 4, 16]
        assert [row["users"] for row in summary["ratios"][kind]["concurrency"]] == [1, 8]
    assert summary["weight_read"]["weight_bytes"] > 0 and "Decode step at batch 1" in (out / "summary.md").read_text()
    assert "Traceback" not in (out / "measured" / "engine.log").read_text()
    # a folder brought back is predicted again here, from its own kernel times, plan and flags
    again = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_probe.py"), "--predict-again", str(out)],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    redone = json.loads((out / "summary.json").read_text())
    assert "predicted_again" in redone and redone["measured"] == summary["measured"]
    assert [row["batch_size"] for row in redone["ratios"]["measured"]["batch"]] == [1, 4, 16]
