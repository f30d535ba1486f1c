"""The decode step's layers as TorchScript (`decode_step.decode_layers`): the Python step's logits bit for bit,
the sliding window as transformers applies it, and the Python step where TorchScript is missing."""

from __future__ import annotations

import logging

import pytest
import torch

from tests.test_runner_chunked import tiny_mistral
from tgi_toolkit.engine import decode_step
from tgi_toolkit.engine.model import load_model
from tgi_toolkit.engine.runner import LlamaRunner
from tgi_toolkit.models.files import DEFAULT_MODEL_ID, resolve_model

PROMPTS = [[1, 504, 3458, 314, 4649, 29], [1, 19, 2372, 1695], [1, 31, 4, 9, 1300, 77, 8, 52, 940]]


def decode_logits(runner: LlamaRunner, steps: int) -> list[torch.Tensor]:
    """Every decode step's logits for three prompts of different lengths (so each step has a mask), the third
    joining after two steps and the first leaving after four (its row taken by the last)."""
    seqs, first = runner.prefill(PROMPTS[:2])
    tokens = [int(f[0].argmax()) for f in first]
    out = []
    for step in range(steps):
        if step == 2:
            more, logits = runner.prefill(PROMPTS[2:])
            seqs += more
            tokens.append(int(logits[0][0].argmax()))
        if step == 4:
            runner.release(seqs.pop(0))
            tokens.pop(0)
            seqs.sort(key=lambda s: s.row)
        logits = runner.decode(tokens)
        out.append(logits.clone())
        tokens = logits.argmax(-1).tolist()
    for seq in seqs:
        runner.release(seq)
    return out


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_scripted_step_gives_the_python_steps_logits_bit_for_bit(dtype):
    loaded = load_model(resolve_model(DEFAULT_MODEL_ID), dtype=dtype)
    runner = LlamaRunner(loaded.model, 4, 64)
    assert runner.scripted is not None  # the default decode step
    scripted = decode_logits(runner, 7)
    runner.scripted = None
    python = decode_logits(runner, 7)
    assert [t.shape[0] for t in scripted] == [2, 2, 3, 3, 2, 2, 2]
    assert all(torch.equal(a, b) for a, b in zip(scripted, python, strict=True))


def test_the_scripted_step_keeps_mistrals_sliding_window():
    """A tiny random Mistral (window 5): decode steps well past the window, against transformers' logits."""
    model = tiny_mistral()
    ids = torch.randint(0, 300, (20,)).tolist()
    with torch.no_grad():
        expected = model(torch.tensor([ids])).logits[0]
    runner = LlamaRunner(model, 2, 64)
    assert runner.scripted is not None and runner.sliding_window == 5
    seqs, _ = runner.prefill([ids[:6]])
    got = [runner.decode([token])[0] for token in ids[6:]]  # positions 6..19: the window hides 1..14 in turn
    assert torch.allclose(torch.stack(got), expected[6:], rtol=0, atol=1e-5)


def test_without_torchscript_the_step_runs_from_python(monkeypatch, caplog):
    def no_torchscript(fn):
        raise RuntimeError("TorchScript is not available")

    monkeypatch.setattr(decode_step, "_SCRIPTED", [])
    monkeypatch.setattr(torch.jit, "script", no_torchscript)
    loaded = load_model(resolve_model(DEFAULT_MODEL_ID), dtype="bfloat16")
    with caplog.at_level(logging.WARNING, logger="tgi_toolkit.engine"):
        runner = LlamaRunner(loaded.model, 4, 64)
    assert runner.scripted is None
    assert "Decode step not scripted (TorchScript is not available)" in caplog.text
    assert len(decode_logits(runner, 5)) == 5


def test_a_step_after_quantizing_multiplies_the_quantized_weights():
    # The step keeps its weight list between steps; replacing the layers' linears must replace it too.
    from tgi_toolkit.engine.quantization import quantize_runner

    loaded = load_model(resolve_model(DEFAULT_MODEL_ID), dtype="bfloat16")
    before, fresh = LlamaRunner(loaded.model, 4, 64), LlamaRunner(loaded.model, 4, 64)
    decode_logits(before, 3)
    for runner in (before, fresh):
        quantize_runner(runner, "eetq")
    after, expected = decode_logits(before, 5), decode_logits(fresh, 5)
    assert all(torch.equal(a, b) for a, b in zip(after, expected, strict=True))
