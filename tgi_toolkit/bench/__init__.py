"""Benchmark any text-generation server over its HTTP API: text-generation-benchmark's batch
tables, happy_vllm's user-facing metrics, concurrency and rate sweeps, with results as DataFrames.

    from tgi_toolkit.bench import run_batch, run_concurrency, run_rate, measure_ingestion, load_results
    results = run_concurrency("http://127.0.0.1:3000", users=[1, 4, 16], output="results/")
    results.points            # one row per point (tgi_toolkit.schema.POINT_COLUMNS)
    load_results("results/")  # the same tables back

Names load lazily: importing one submodule does not load the harness.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tgi_toolkit._lazy import lazy_getattr

_LAZY = {
    "run_batch": ".api", "run_concurrency": ".api", "run_rate": ".api", "measure_ingestion": ".api",
    "run_batch_async": ".api", "run_concurrency_async": ".api", "run_rate_async": ".api",
    "measure_ingestion_async": ".api", "run_scenario": ".api", "kv_capacity_tokens": ".api",
    "run_shared_prefix": ".api", "run_multi_turn": ".api", "run_decode_stall": ".api",
    "run_shared_prefix_async": ".api", "run_multi_turn_async": ".api", "run_decode_stall_async": ".api",
    "play_scenario": ".api", "play_scenario_async": ".api",
    "SharedPrefix": "tgi_toolkit.scenarios.plans", "MultiTurn": "tgi_toolkit.scenarios.plans",
    "DecodeStallScenario": "tgi_toolkit.scenarios.plans",
    "Results": ".results", "load_results": ".results",
    "BenchError": ".errors", "ServerDiedError": ".errors",
    "PromptFactory": ".prompts",
}

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.bench.api import (
        kv_capacity_tokens,
        measure_ingestion,
        measure_ingestion_async,
        play_scenario,
        play_scenario_async,
        run_batch,
        run_batch_async,
        run_concurrency,
        run_concurrency_async,
        run_decode_stall,
        run_decode_stall_async,
        run_multi_turn,
        run_multi_turn_async,
        run_rate,
        run_rate_async,
        run_scenario,
        run_shared_prefix,
        run_shared_prefix_async,
    )
    from tgi_toolkit.bench.errors import BenchError, ServerDiedError
    from tgi_toolkit.bench.prompts import PromptFactory
    from tgi_toolkit.bench.results import Results, load_results


__getattr__ = lazy_getattr(__name__, _LAZY)


__all__ = [
    "BenchError", "PromptFactory", "Results", "ServerDiedError", "kv_capacity_tokens", "load_results",
    "measure_ingestion", "measure_ingestion_async", "run_batch", "run_batch_async", "run_concurrency",
    "run_concurrency_async", "run_rate", "run_rate_async", "run_scenario", "run_shared_prefix",
    "run_shared_prefix_async", "run_multi_turn", "run_multi_turn_async", "run_decode_stall", "run_decode_stall_async",
    "SharedPrefix", "MultiTurn", "DecodeStallScenario", "play_scenario", "play_scenario_async"
]
