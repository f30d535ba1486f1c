"""Figures of benchmark results, as plotly figures returned (never shown): notebooks and the app
display them, the report saves them.

Every function takes the result tables of `tgi_toolkit.schema` (requests, points, batch,
server) as pandas DataFrames, whether fresh from a run, read from a results folder, or published
(`tgi_toolkit.reference.load_reference`). A missing column raises ValueError naming it; missing
values (NaN, one point, no server samples) draw what there is and say on the figure what is absent.

| figure                                   | function                                   | table    |
|------------------------------------------|--------------------------------------------|----------|
| latency vs throughput per batch size     | batch_latency_throughput                   | batch    |
| metric over batch size x sequence length | batch_heatmap                              | batch, points |
| throughput / TTFT / speed vs users       | metrics_vs_users, throughput_vs_users, speed_and_ttft_vs_users | points |
| ITL (or TTFT, ...) distributions         | itl_distribution, distribution             | requests |
| prompt ingestion fit                     | ingestion_plot, fit_ingestion              | requests |
| Pareto frontier                          | pareto_plot (the selection: tgi_toolkit.pareto.pareto_front) | points |
| queue and batch size over time           | server_timeline, kv_usage_timeline         | server (+ requests) |
| result sets side by side                 | compare_batch, compare_points, label_sets  | batch, points |
| TTFT by turn; first vs later of a group  | ttft_by_turn, shared_prefix_ttft, ttft_table | requests |
| streams' gaps as a long prompt joins     | decode_stall, stall_gaps_table; decode_stall_summary | requests; points |
| cost against latency of deployments      | cost_latency                               | advise's table |

Configurations are named in legends, panel titles and tables by the settings that differ between those
shown (`short_labels`: "cuda_memory_fraction=1.0" rather than the ~90-character CONFIG_LABEL); the hover text
of each trace lists every setting, and the model card's parameters table has them all.

Times are drawn in ms or s, chosen per axis from the data; `axis_scale(table, column)` says which (and
the factor), so anything added to a figure lands in its units, e.g. `pareto_plot(points,
objectives={"ttft_p90_s": 5.0})` draws that limit in whichever unit the TTFT axis uses.
"""

from __future__ import annotations

from tgi_toolkit.plots._common import AxisScale, axis_scale
from tgi_toolkit.plots.advise import cost_latency
from tgi_toolkit.plots.batch import BATCH_STEPS, batch_heatmap, batch_latency_throughput
from tgi_toolkit.plots.compare import compare_batch, compare_points, label_sets
from tgi_toolkit.plots.distributions import distribution, fit_ingestion, ingestion_plot, itl_distribution
from tgi_toolkit.plots.labels import short_labels
from tgi_toolkit.plots.load import metrics_vs_users, speed_and_ttft_vs_users, throughput_vs_users
from tgi_toolkit.plots.pareto import pareto_plot
from tgi_toolkit.plots.prefix import (
    decode_stall,
    decode_stall_summary,
    shared_prefix_ttft,
    stall_gaps_table,
    ttft_by_turn,
    ttft_table,
)
from tgi_toolkit.plots.server import kv_usage_timeline, server_timeline

__all__ = [
    "AxisScale", "BATCH_STEPS", "axis_scale", "batch_heatmap",
    "batch_latency_throughput", "compare_batch", "cost_latency", "compare_points", "distribution", "fit_ingestion",
    "ingestion_plot", "itl_distribution", "kv_usage_timeline", "label_sets", "metrics_vs_users",
    "pareto_plot", "server_timeline", "short_labels", "speed_and_ttft_vs_users", "throughput_vs_users",
    "decode_stall", "decode_stall_summary", "shared_prefix_ttft", "stall_gaps_table", "ttft_by_turn", "ttft_table",
]
