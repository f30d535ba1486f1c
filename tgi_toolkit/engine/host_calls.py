"""The torch functions the engine's forward calls from Python, counted: `TorchCalls` counts them while on, and
`count_calls` runs a model's forward at a few shapes on narrow 2- and 3-layer copies of it and solves for the rule
the measured cost model prices an eager forward's host time with (costs.engine_forward.EngineCalls).

A forward's calls depend on its code path, not on its widths: the copies keep the model's type, head grouping,
RoPE and norms and shrink the rest. Eager forwards run the card's code path: on the meta device (shapes only, off
the CPU as a card is) in the card's half precision, where the projections take `F.linear` (decode_step.project) and
each RMSNorm makes four calls where float32 makes one (decode_step.rms): the CPU in float32 undercounted an 8B
Llama's 128-token prompt by 195 calls of 1,939 (the H200 probe of 2026-11-29). The decode step is counted as the
CPU runs it (TorchScript: one call for all its layers); on a card its CUDA graph replay takes about as few.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch.overrides import TorchFunctionMode

from tgi_toolkit.costs.engine_forward import EngineCalls

PROMPT = 8  # tokens a counted prompt holds (a second prompt of another length holds one more)
CARD = ("meta", "bfloat16")  # a card's code path: off the CPU, in the engine's default dtype there (engine.device)
CPU = ("cpu", "float32")  # where a decode step is one TorchScript call, as a card's is one graph replay


class TorchCalls(TorchFunctionMode):
    """While on (`with TorchCalls() as calls:`), counts the torch functions called from Python (`calls.n`): the
    host's share of an eager forward, one call at a time. A tensor's attribute reads (`.shape`, `.dtype`,
    `.device`: `__get__`) are not counted: they cost the host a fraction of a call, and which are read depends on
    the device and dtype (engine.linear's checks) where the calls that run kernels do not."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        if getattr(func, "__name__", "") != "__get__":
            self.n += 1
        return func(*args, **(kwargs or {}))


def narrow(config: Mapping[str, Any], layers: int) -> dict[str, Any]:
    """`config` with `layers` layers and 16-wide heads, an MLP twice the hidden width and a 512-token vocabulary."""
    heads = int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or heads)
    out = {k: v for k, v in config.items() if not str(k).startswith("_")}
    out.update(num_hidden_layers=layers, hidden_size=16 * heads, intermediate_size=32 * heads, num_key_value_heads=kv,
               vocab_size=512)
    if out.get("head_dim"):
        out["head_dim"] = 16
    for token in ("bos_token_id", "eos_token_id", "pad_token_id"):  # ids past the narrow vocabulary
        out.pop(token, None)
    return out


def count_forward(config: Mapping[str, Any], prompts: list[int], decodes: int, device: str = CARD[0],
                  dtype: str = CARD[1]) -> int:
    """Torch calls of one forward of `config`'s engine on `device` in `dtype`: prompts of `prompts` tokens (new,
    their keys stored in the prefix pool as the server stores them) beside `decodes` decode rows; none but decode
    rows: a decode step (counted on the CPU in float32 by `count_calls`, where it is one TorchScript call)."""
    import torch

    from tgi_toolkit.engine.model import random_model
    from tgi_toolkit.engine.runner import LlamaRunner

    rows = len(prompts) + decodes
    runner = LlamaRunner(random_model(config, getattr(torch, dtype), device), max_rows=rows,
                         max_positions=4 * PROMPT)
    runner.enable_pool(rows * 4 * PROMPT)
    with torch.inference_mode():
        inputs, store = [], []
        for _ in range(decodes):
            seq = runner.new_seq()
            runner.forward([(seq, list(range(PROMPT)))])
            inputs.append((seq, [1]))
            store.append(None)
        for i, n in enumerate(prompts):
            inputs.append((runner.new_seq(), [(i + j) % 512 for j in range(n)]))
            store.append(list(range(i * 4 * PROMPT, i * 4 * PROMPT + n)))
        with TorchCalls() as calls:
            runner.forward(inputs, None, store if prompts else None, [True] * len(inputs))
    return calls.n


def count_calls(config: Mapping[str, Any], dtype: str = CARD[1]) -> EngineCalls:
    """The rule `EngineCalls` for `config`'s model served on a card in `dtype`, solved from its engine's forwards at
    2 and 3 layers: one prompt; two of one length; two of two lengths (padded into one call); one beside a decode
    row (on the meta device); a decode step (on the CPU)."""
    counts, card = {}, (CARD[0], dtype)
    for layers in (2, 3):
        c = narrow(config, layers)
        counts[layers] = {"one": count_forward(c, [PROMPT], 0, *card),
                          "two": count_forward(c, [PROMPT, PROMPT], 0, *card),
                          "apart": count_forward(c, [PROMPT, PROMPT + 1], 0, *card),
                          "beside": count_forward(c, [PROMPT], 1, *card),
                          "step": count_forward(c, [], 1, *CPU)}
    two, three = counts[2], counts[3]
    per_layer = three["one"] - two["one"]
    per_row = two["two"] - two["one"]
    padded_layer = (three["apart"] - three["two"]) - (two["apart"] - two["two"])
    beside_layer = (three["beside"] - three["one"]) - (two["beside"] - two["one"])
    return EngineCalls(base=two["one"] - 2 * per_layer, per_layer=per_layer, per_row=per_row,
                       padded=two["apart"] - two["two"] - 2 * padded_layer, padded_layer=padded_layer,
                       beside_decode=two["beside"] - two["one"] - per_row - 2 * beside_layer,
                       beside_decode_layer=beside_layer, decode_step=two["step"])
