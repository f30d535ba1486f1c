"""benchmarks/vllm_replay.py's diagnostic by kind of step: vLLM's seconds between scrapes matched with the steps the
simulator took to generate as many tokens (no server: states and steps written by hand)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_benchmark():
    spec = importlib.util.spec_from_file_location("vllm_replay", ROOT / "benchmarks" / "vllm_replay.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["vllm_replay"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_each_stretch_of_progress_goes_to_the_kind_of_the_steps_that_made_it():
    replay = load_benchmark()
    State, Step = replay.State, replay.Step
    # vLLM: no token by 0.1 s, 1 by 0.5 s, still 1 at 0.7 s, 3 by 1.0 s, 4 by 1.6 s
    real = [State(t, g, 0, 0, 0, 0) for t, g in ((0.1, 0), (0.5, 1), (0.7, 1), (1.0, 3), (1.6, 4))]
    steps = [Step(0, 1, 64, 0.2),   # a first chunk of a prompt: no token yet
             Step(1, 1, 32, 0.15),  # its last chunk: the first token
             Step(3, 2, 0, 0.1),    # two rows decoding: tokens 2 and 3
             Step(4, 1, 0, 0.05)]   # one row decoding: token 4
    kinds = replay.by_step_kind(real, steps)
    # 0 -> 1 token: 0.5 s of vLLM against the two chunks' 0.2 + 0.15 s; the scrape at 0.7 s (no progress) splits
    # nothing; 1 -> 3: 1.0 - 0.5 s against 0.1 s; 3 -> 4: 1.6 - 1.0 s against 0.05 s
    assert kinds.keys() == {"with prompt tokens", "decodes of 2-4 rows", "decodes of 1 row"}
    for kind, (real_s, model_s, n) in {"with prompt tokens": (0.5, 0.35, 2), "decodes of 2-4 rows": (0.5, 0.1, 1),
                                       "decodes of 1 row": (0.6, 0.05, 1)}.items():
        assert kinds[kind][0] == pytest.approx(real_s)
        assert kinds[kind][1] == pytest.approx(model_s)
        assert kinds[kind][2] == n
