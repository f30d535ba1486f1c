"""The compiled decode step: the same tokens as the eager step (float32), and no compile after warm-up."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from tgi_toolkit.engine.model import load_model
from tgi_toolkit.engine.runner import LlamaRunner
from tgi_toolkit.models.files import DEFAULT_MODEL_ID, resolve_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def loaded():
    return load_model(resolve_model(DEFAULT_MODEL_ID), dtype="float32")


def continuous_batch(runner: LlamaRunner, tokenizer, steps: int) -> list[list[int]]:
    """Greedy tokens of four prompts of different lengths: two start together, a third joins after 3 steps,
    a fourth after 5, the first leaves after 8 (its row is taken by the last): batches of 2, 3, 4 and 3 rows."""
    prompts = [tokenizer(text)["input_ids"] for text in (
        "The capital of France is", "def fibonacci(n):", "Once upon a time, in a land far away,",
        "Water boils at a temperature of")]
    out: list[list[int]] = [[] for _ in prompts]
    running: dict[int, object] = {}

    def join(i: int) -> None:
        seqs, logits = runner.prefill([prompts[i]])
        running[i] = seqs[0]
        out[i].append(int(logits[0][-1].argmax()))

    join(0)
    join(1)
    for step in range(steps):
        if step == 3:
            join(2)
        if step == 5:
            join(3)
        if step == 8:
            runner.release(running.pop(0))
        order = sorted(running, key=lambda i: running[i].row)
        logits = runner.decode([out[i][-1] for i in order])
        for row, i in enumerate(order):
            out[i].append(int(logits[row].argmax()))
    for seq in running.values():
        runner.release(seq)
    return out


def test_compiled_decode_gives_the_eager_tokens_and_compiles_nothing_after_warm_up(loaded):
    eager = LlamaRunner(loaded.model, max_rows=8, max_positions=128)
    compiled = LlamaRunner(loaded.model, max_rows=8, max_positions=128)
    compiled.compile_decode([1, 2, 3])
    assert compiled.compiled is not None
    graphs = counters["stats"]["unique_graphs"]
    assert graphs > 0  # the warm-up compiled
    expected = continuous_batch(eager, loaded.tokenizer, 14)
    got = continuous_batch(compiled, loaded.tokenizer, 14)
    assert got == expected
    assert all(len(tokens) > 5 for tokens in got)
    # Batches of 1 (warm-up's own), 2, 3 and 4 rows ran: none compiled a new graph.
    assert counters["stats"]["unique_graphs"] == graphs


def test_quantized_layers_without_a_tensor_form_keep_the_eager_step(loaded):
    runner = LlamaRunner(loaded.model, max_rows=2, max_positions=64)
    runner.layers[0].o = torch.nn.Sequential(runner.layers[0].o)  # a layer only its own forward runs
    assert runner.compile_decode([1]) == 0.0 and runner.compiled is None


def test_a_size_named_alone_still_warms_the_one_row_and_the_many_row_graphs(loaded, caplog):
    # `--cuda-graphs 4` on a CPU: the compiled step also runs steps of 1, 2 and 3 rows, and dynamic shapes compile
    # one graph for one row and one for more; warmed at 4 alone, the first 1-row step compiled while serving.
    torch._dynamo.reset()  # dynamo keeps graphs on the functions' code: the test above compiled both already
    runner = LlamaRunner(loaded.model, max_rows=8, max_positions=64)
    with caplog.at_level("INFO", logger="tgi_toolkit.engine"):
        runner.compile_decode([4])
    assert "warmed for 1, 2, 4 rows" in caplog.text
    graphs = counters["stats"]["unique_graphs"]
    for rows in (1, 3, 2, 5):
        seqs, logits = runner.prefill([[1, 2, 3]] * rows)
        runner.decode([int(t[-1].argmax()) for t in logits])
        for seq in seqs:
            runner.release(seq)
    assert counters["stats"]["unique_graphs"] == graphs


def test_a_one_row_cache_warms_one_row_only(loaded, caplog):
    runner = LlamaRunner(loaded.model, max_rows=1, max_positions=64)
    with caplog.at_level("INFO", logger="tgi_toolkit.engine"):
        runner.compile_decode([1])
    assert "warmed for 1 rows" in caplog.text
