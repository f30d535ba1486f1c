"""text-generation-benchmark's tables (seed 000), rendered from the result tables. happy_vllm's main
metrics (seeds 001, 003) are `tgi_toolkit.bench.main_metrics`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tgi_toolkit import schema as S
from tgi_toolkit.bench.stats import describe

# text-generation-benchmark's parameter rows: (label, workload key or sampling key)
_PARAMETERS = (("Sequence Length", "sequence_length"), ("Decode Length", "decode_length"), ("N Runs", "runs"),
               ("Warmups", "warmups"), ("Temperature", "temperature"), ("Top K", "top_k"), ("Top P", "top_p"),
               ("Typical P", "typical_p"), ("Repetition Penalty", "repetition_penalty"), ("Watermark", "watermark"),
               ("Do Sample", "do_sample"))


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table padded as text-generation-benchmark prints it."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def _value(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.2f} ms"


def _tok_s(rate: float) -> str:
    return "-" if math.isnan(rate) else f"{rate:.2f} tokens/secs"


# text-generation-benchmark's "Prefill ... tokens/secs" is batch size / prefill latency: the first
# tokens of the B sequences per second (benchmark/src/generation.rs), not prompt tokens per second.
# The tables print its figure so they compare like for like with published ones (seed 000); the
# prompt-token rate B * S / latency is the schema's PREFILL_THROUGHPUT.
PREFILL_NOTE = ("Prefill throughput as text-generation-benchmark computes it: batch size / prefill latency. "
                "Prompt tokens per second (batch size x sequence length / latency) are in "
                f"`{S.PREFILL_THROUGHPUT}`.")


def batch_tables(results: Any) -> str:
    """For each batch run: the parameter table, the latency table and the throughput table."""
    out = []
    for run in results.runs:
        if run.get("scenario") != "batch":
            continue
        rows = results.batch[(results.batch[S.RUN_ID] == run["run_id"]) & ~results.batch[S.WARMUP]]
        workload = run.get("workload") or {}
        sampling = workload.get("sampling") or {}
        params = [("Model", (run.get("info") or {}).get("model_id"))]
        params += [(label, workload.get(key, sampling.get(key, False if key in ("watermark", "do_sample") else None)))
                   for label, key in _PARAMETERS]
        parts = [markdown_table(["Parameter", "Value"], [(k, _value(v)) for k, v in params])]
        latency, throughput = [], []
        stats = list(S.BATCH_STATS)
        for size, group in rows.groupby(S.BATCH_SIZE, sort=True):
            for label, column in (("Prefill", S.PREFILL_LATENCY_S), ("Decode (token)", S.DECODE_TOKEN_LATENCY_S),
                                  ("Decode (total)", S.DECODE_TOTAL_LATENCY_S)):
                d = describe(group[column], stats)
                latency.append([label, str(size) if label == "Prefill" else "", *(_ms(d[s]) for s in stats)])
            first_tokens = size / group[S.PREFILL_LATENCY_S]
            for label, values in (("Prefill", first_tokens), ("Decode", group[S.DECODE_THROUGHPUT])):
                d = describe(values, stats[:3])
                throughput.append([label, str(size) if label == "Prefill" else "", *(_tok_s(d[s]) for s in stats[:3])])
        names = list(S.BATCH_STATS.values())
        parts.append(markdown_table(["Step", "Batch Size", *names], latency))
        parts.append("\n" + markdown_table(["Step", "Batch Size", *names[:3]], throughput) + "\n\n" + PREFILL_NOTE)
        out.append("\n\n".join(parts))
    return "\n\n\n".join(out)
