"""Which GPUs to run it on: the cheapest deployment that meets your latency objectives at your traffic.

    from tgi_toolkit.advise import advise
    advice = advise("config.json", rate=20, prompt_tokens=512, max_new_tokens=128, ttft=1.0, tpot=0.05)
    print(advice.summary())

Modules: traffic (the load and objectives), prices (the dated price table), candidates (GPU x shards x
quantization, the planner's refusals), workload (one simulated load), capacity (the sustained load and its band),
evaluate (one candidate: tuned knobs, replicas, predicted latency), ranking (cost and ties), advice (the answer),
api (`advise`), cli (`tgi-toolkit advise`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tgi_toolkit._lazy import lazy_getattr
from tgi_toolkit.advise.cli import add_parser

_LAZY = {
    "advise": ".api", "Advice": ".advice", "load_advice": ".advice", "Candidate": ".candidates",
    "Traffic": ".traffic", "Prices": ".prices", "load_prices": ".prices", "replicas": ".evaluate",
    "cost_per_hour": ".ranking", "cost_per_million": ".ranking",
}

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.advise.advice import Advice, load_advice
    from tgi_toolkit.advise.api import advise
    from tgi_toolkit.advise.candidates import Candidate
    from tgi_toolkit.advise.evaluate import replicas
    from tgi_toolkit.advise.prices import Prices, load_prices
    from tgi_toolkit.advise.ranking import cost_per_hour, cost_per_million
    from tgi_toolkit.advise.traffic import Traffic

__getattr__ = lazy_getattr(__name__, _LAZY)

# The package is not callable: its verb is `advise.api.advise`, exported here as `tgi_toolkit.advise.advise`
# (as `tgi_toolkit.tune.tune`), so the package and the function are never the same object.

__all__ = ["Advice", "Candidate", "Prices", "Traffic", "add_parser", "advise", "cost_per_hour", "cost_per_million",
           "load_advice", "load_prices", "replicas"]
