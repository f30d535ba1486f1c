"""Weights packed once in oneDNN's layout (engine.packed) give the plain weights' products bit for bit."""

from __future__ import annotations

import pytest
import torch

from tgi_toolkit.engine.model import load_model
from tgi_toolkit.engine.packed import pack, packed_linear
from tgi_toolkit.engine.runner import LlamaRunner
from tgi_toolkit.models.files import DEFAULT_MODEL_ID, resolve_model

PACKS = pack(torch.ones(8, 8, dtype=torch.bfloat16)) is not None
needs_packing = pytest.mark.skipif(not PACKS, reason="this CPU's oneDNN has no bfloat16 linear")


@needs_packing
@pytest.mark.parametrize("rows", [1, 3, 16, 40])
def test_a_packed_product_equals_the_plain_one(rows):
    torch.manual_seed(rows)
    weight = torch.randn(96, 64).to(torch.bfloat16)
    x = torch.randn(rows, 64).to(torch.bfloat16)
    assert torch.equal(packed_linear(x, pack(weight)), torch.mm(weight, x.T).T)
    # a strided view (a slice of a wider activation) is read as its values
    wide = torch.randn(rows, 128).to(torch.bfloat16)
    assert torch.equal(packed_linear(wide[:, 32:96], pack(weight)), torch.mm(weight, wide[:, 32:96].T).T)


def test_float32_is_not_packed():
    assert pack(torch.ones(8, 8)) is None  # MKL's float32 path needs no packing


def _unpacked(runner: LlamaRunner) -> None:
    runner.head.packed = None
    for layer in runner.layers:
        for module in layer.linears().values():
            module.packed = None


@needs_packing
def test_a_bfloat16_runner_steps_alike_with_and_without_packed_weights():
    loaded = load_model(resolve_model(DEFAULT_MODEL_ID), dtype="bfloat16")
    prompts = [[1, 504, 3458, 314, 4649, 29], [1, 19, 2372, 1695]]
    logits = []
    for packed in (True, False):
        runner = LlamaRunner(loaded.model, 4, 64)
        assert (runner.head.packed is not None) and all(
            m.packed is not None for layer in runner.layers for m in layer.linears().values())
        if not packed:
            _unpacked(runner)
        seqs, first = runner.prefill(prompts)
        with torch.profiler.profile() as prof:
            steps = [runner.decode([int(f[0].argmax()) for f in first])]
        packed_calls = sum(e.count for e in prof.key_averages() if "_linear_pointwise" in e.key)
        # every linear layer and the LM head run packed, or none does
        assert packed_calls == (4 * len(runner.layers) + 1 if packed else 0)
        steps.append(runner.decode([int(row.argmax()) for row in steps[-1]]))
        chunk = runner.forward([(seqs[0], [7]), (seqs[1], [9])])  # the mixed path, decode rows only
        logits.append([*first, *steps, *chunk])
    assert all(torch.equal(a, b) for a, b in zip(*logits, strict=True))
