"""happy_vllm's "Main metrics" (seeds 001 and 003), computed once for everything that shows them:
the model card (`tgi_toolkit.report`), `Results.main_metrics()`, the app, the notebooks, and the
published cards in the same shape (`tgi_toolkit.reference.Reference.card_metrics`).

    from tgi_toolkit.bench.main_metrics import main_metrics, main_metrics_table
    metrics = main_metrics(load_results("results/"))   # one row per (configuration, metric)
    main_metrics_table(metrics)                        # as the card prints it: a column per configuration

The three numbers: prompt ingestion speed, mean per-request generation speed for 10 parallel
requests with a 1024-token prompt and 128 generated tokens, and the KV-cache capacity. Each says
how it was obtained (`basis`): a small CPU run rarely holds the exact 10 x 1024/128 point, and a
model with a short context cannot take it at all, so the nearest measured point is used and named
instead of being passed off as the asked-for one. The computation is in
`tgi_toolkit.bench.card_metrics` (below `bench.results`, which uses it); this module adds reading a
results folder.
"""

from __future__ import annotations

import os

import pandas as pd

from tgi_toolkit.bench.card_metrics import (
    CARD_MAX_NEW_TOKENS,
    CARD_PROMPT_TOKENS,
    CARD_USERS,
    COLUMNS,
    CONFIG_LABEL,
    GENERATION,
    INGESTION,
    INGESTION_LABEL,
    KV_CAPACITY,
    KV_CAPACITY_LABEL,
    METRICS,
    MainMetric,
    ResultTables,
    approx,
    card_point,
    generation_label,
    generation_speed,
    ingestion_speed,
    kv_cache_capacity,
    kv_text,
    main_metrics_of,
    main_metrics_table,
    point_text,
    run_info,
    split_by_config,
)
from tgi_toolkit.bench.results import Results, as_results

__all__ = [
    "CARD_MAX_NEW_TOKENS", "CARD_PROMPT_TOKENS", "CARD_USERS", "COLUMNS", "CONFIG_LABEL", "GENERATION", "INGESTION",
    "INGESTION_LABEL", "KV_CAPACITY", "KV_CAPACITY_LABEL", "METRICS", "MainMetric", "ResultTables", "approx",
    "card_point", "generation_label", "generation_speed", "ingestion_speed", "kv_cache_capacity", "kv_text",
    "main_metrics", "main_metrics_of", "main_metrics_table", "point_text", "run_info", "split_by_config",
]


def main_metrics(results: Results | str | os.PathLike[str], users: int = CARD_USERS,
                 prompt_tokens: int = CARD_PROMPT_TOKENS, max_new_tokens: int = CARD_MAX_NEW_TOKENS) -> pd.DataFrame:
    """The card's three main metrics for each configuration in `results` (a Results or a folder).

    Columns (COLUMNS): config_label, metric (INGESTION, GENERATION, KV_CAPACITY), label, value, unit,
    text, basis, point (the generation speed's users and prompt/output tokens; "" for the others)."""
    return main_metrics_of(as_results(results), users, prompt_tokens, max_new_tokens)
