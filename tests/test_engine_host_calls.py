"""The engine's calls from Python as a rule of a forward's shape (tgi_toolkit.engine.host_calls, costs.engine_forward
.EngineCalls): solved from a few forwards at 2 and 3 layers, the rule gives the engine's own count at 4 layers and at
shapes it was not solved from."""

from __future__ import annotations

import pytest

from tgi_toolkit.costs.features import Shape, row_pairs
from tgi_toolkit.engine.host_calls import CPU, PROMPT, count_calls, count_forward, narrow

LLAMA = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
         "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 128256, "rms_norm_eps": 1e-5,
         "rope_theta": 500000.0, "bos_token_id": 128000, "eos_token_id": 128001,
         "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 8192}}


def test_a_narrow_copy_keeps_the_code_path_and_shrinks_the_widths():
    """32 heads of 16 (hidden 512), 8 KV heads as before, MLP 1,024, vocabulary 512, 4 layers; RoPE's scaling kept,
    the token ids past the small vocabulary dropped."""
    c = narrow(LLAMA, 4)
    assert (c["num_hidden_layers"], c["hidden_size"], c["intermediate_size"], c["vocab_size"]) == (4, 512, 1024, 512)
    assert (c["num_attention_heads"], c["num_key_value_heads"]) == (32, 8)
    assert c["rope_scaling"] == LLAMA["rope_scaling"] and "bos_token_id" not in c and "eos_token_id" not in c


def shape(prompts: list[int], decodes: int) -> Shape:
    """The forward `count_forward` runs: new prompts of `prompts` tokens beside `decodes` rows one token past a
    PROMPT-token prompt."""
    tokens = sum(prompts) + decodes
    context = sum(prompts) + decodes * (PROMPT + 1)
    pairs = sum(row_pairs(0, n) for n in prompts) + decodes * row_pairs(PROMPT, 1)
    return Shape(len(prompts) + decodes, tokens, context, pairs, bool(prompts), decodes, decodes * (PROMPT + 1))


@pytest.mark.parametrize(("prompts", "decodes"), [
    ([PROMPT], 0), ([PROMPT] * 3, 0), ([PROMPT, PROMPT + 1, PROMPT + 2], 0), ([PROMPT], 2),
    ([PROMPT, PROMPT + 1], 1), ([PROMPT] * 4, 3), ([], 3)])
def test_the_rule_counts_what_the_engine_calls_at_shapes_it_was_not_solved_from(prompts, decodes):
    rule = rules()
    where = () if prompts else CPU  # a decode step is counted as the CPU runs it: one TorchScript call
    assert rule.calls(shape(prompts, decodes), 4) == count_forward(narrow(LLAMA, 4), prompts, decodes, *where)


@pytest.mark.parametrize("layers", [2, 4])
def test_a_cards_half_precision_norms_make_three_calls_more_than_float32s(layers):
    """decode_step.rms: float32 makes one call (torch.rms_norm); half precision four (x.float(), torch.rms_norm,
    .to(dtype), weight *). Two norms a layer and the final one: 6 x layers + 3 more calls off the CPU in bfloat16;
    the projections take F.linear in both (decode_step.project)."""
    c = narrow(LLAMA, layers)
    assert count_forward(c, [PROMPT], 0) - count_forward(c, [PROMPT], 0, *CPU) == 6 * layers + 3


def test_the_rule_gives_the_calls_the_h200_counted_in_the_engines_forwards():
    """The H200 probe of 2026-11-29 counted the torch calls of the 8B engine's eager forwards alone (step 4 of
    benchmarks/gpu_probe.py: prompts of 128 tokens, beside one decode row or none); the rule solved on narrow
    copies gives each count."""
    import json
    from pathlib import Path

    probe = Path(__file__).parent.parent / "data" / "measured" / "gpu" / "h200-2026-11-29"
    config = json.loads((probe / "model" / "config.json").read_text())
    rule = count_calls(config)
    forwards = [f for f in json.loads((probe / "engine_forwards.json").read_text()) if f["prompts"]]
    assert len(forwards) == 3
    for f in forwards:
        n, d = f["prompts"], f["decode_rows"]
        s = Shape(n + d, n * 128 + d, n * 128 + 129 * d, n * row_pairs(0, 128) + 129 * d, True, d, 129 * d)
        assert rule.calls(s, config["num_hidden_layers"]) == f["torch_calls"], f["forward"]


_RULES = []


def rules():
    if not _RULES:
        _RULES.append(count_calls(LLAMA))
    return _RULES[0]


def test_prompts_of_other_lengths_cost_one_padded_call_and_a_decode_step_none():
    """What the rule's terms say of the engine: prompts of other lengths are padded into one call, which adds calls
    in every layer once, whatever their number (each further prompt adds only its row's); a decode step's layers
    are one TorchScript call, so its count does not grow with the layers."""
    rule = rules()
    assert rule.per_layer > rule.padded_layer > 0 and rule.per_row >= 1
    c = narrow(LLAMA, 4)
    # 5 prompts of 24-28 tokens padded to 28: 3,920 pairs against their own calls' 3,390, within PAD_LIMIT (1.25)
    assert count_forward(c, [24, 25, 26, 27, 28], 0) - count_forward(c, [24, 25], 0) == 3 * rule.per_row
    assert count_forward(narrow(LLAMA, 2), [], 1, *CPU) == count_forward(narrow(LLAMA, 5), [], 1, *CPU) == \
        rule.decode_step
