"""Which SDPA backend the engine's masked one-token attention takes on a card, and what a new span costs it.

The H200's first probe of 2026-11-29 (data/measured/gpu/h200-2026-11-29-cudnn) caught forwards of one prompt beside
7 decode rows running ~1 s, the stall watch finding the thread in `one_token_attention`'s SDPA call (a boolean mask,
since the rows sit at different positions). This times that call's shapes (Llama-3.1-8B: 8 KV heads of 4 query
heads, head_dim 128) over a few new spans, each twice, with the default backend choice and with each backend
forced, host and card apart. Run on a card: `python3 benchmarks/gpu_sdpa_mask.py OUT.json` (the H200's:
benchmarks/results/gpu_sdpa_mask_h200.json)."""

from __future__ import annotations

import contextlib
import json
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROWS, KV_HEADS, GROUP, HEAD_DIM, MAX_LEN = 8, 8, 4, 128, 4096


def one_call(q, kc, vc, mask, span):
    cuda = q.is_cuda
    if cuda:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    began = time.perf_counter()
    F.scaled_dot_product_attention(q, kc[:, :, :span], vc[:, :, :span], attn_mask=mask)
    host = time.perf_counter() - began
    if cuda:
        end.record()
        end.synchronize()
    return {"host_ms": round(host * 1e3, 3), "wall_ms": round((time.perf_counter() - began) * 1e3, 3),
            "device_ms": round(start.elapsed_time(end), 3) if cuda else None}


def main() -> None:
    dev, dt = ("cuda" if torch.cuda.is_available() else "cpu"), torch.bfloat16
    kc = torch.randn(ROWS, KV_HEADS, MAX_LEN, HEAD_DIM, device=dev, dtype=dt)
    vc = torch.randn_like(kc)
    q = torch.randn(ROWS, KV_HEADS, GROUP, HEAD_DIM, device=dev, dtype=dt)
    name = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    out = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "device": name,
           "cudnn_sdp_enabled": torch.backends.cuda.cudnn_sdp_enabled(), "runs": []}
    choices = {"default": None, "cudnn": [SDPBackend.CUDNN_ATTENTION], "efficient": [SDPBackend.EFFICIENT_ATTENTION],
               "math": [SDPBackend.MATH], "no_cudnn": [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                                                      SDPBackend.MATH]}
    span0 = 300
    for name, backends in choices.items():
        for masked in (True, False):
            for i in range(4):
                span = span0 + i
                pos = torch.tensor([span - 1 - r for r in range(ROWS)], device=dev)
                mask = (torch.arange(span, device=dev)[None, :] <= pos[:, None])[:, None, None, :] if masked else None
                try:
                    if masked and i == 0:
                        out.setdefault("fused_choice", {})[name] = int(torch._fused_sdp_choice(
                            q, kc[:, :, :span], vc[:, :, :span], mask)) if backends is None else None
                    ctx = sdpa_kernel(backends) if backends else contextlib.nullcontext()
                    with ctx:
                        first = one_call(q, kc, vc, mask, span)
                        again = one_call(q, kc, vc, mask, span)
                    out["runs"].append({"backends": name, "masked": masked, "span": span, "first": first,
                                        "again": again})
                except Exception as exc:  # a backend that refuses the shape says so
                    out["runs"].append({"backends": name, "masked": masked, "span": span,
                                        "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            span0 += 4
    for run in out["runs"]:
        print(json.dumps(run))
    print(json.dumps({k: v for k, v in out.items() if k != "runs"}))
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
