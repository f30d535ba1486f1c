"""Capacity planner: predict a server's KV-cache capacity and launcher settings before launching it.

    >>> from tgi_toolkit.planner import plan
    >>> p = plan("config.json", "A100-80GB", prompt_tokens=1000, output_tokens=500)
    >>> print(p.explain())

Then confirm by measuring: `parse_reported_capacity(server_log)` reads what TGI, vLLM or the
embedded engine reported, and `compare(p, reported)` gives the relative error.
"""

from __future__ import annotations

from tgi_toolkit.planner.capacity import TGI_WIGGLE_ROOM, plan, plan_embedded
from tgi_toolkit.planner.capacity_plan import Capacity, Hardware, LauncherLimits, ModelMemory, Plan
from tgi_toolkit.planner.cli import add_parser
from tgi_toolkit.planner.dtypes import QUANT_SCHEMES, QuantScheme
from tgi_toolkit.planner.gpus import KNOWN_GPUS, Gpu, parse_size, resolve_gpu
from tgi_toolkit.planner.memory import activation_bytes_per_token, kv_bytes_per_token, kv_capacity_tokens, weight_bytes
from tgi_toolkit.planner.reported import compare
from tgi_toolkit.planner.shape import ModelShape, load_config
from tgi_toolkit.server.capacity_log import ReportedCapacity, parse_reported_capacity

__all__ = [
    "KNOWN_GPUS", "QUANT_SCHEMES", "TGI_WIGGLE_ROOM", "Capacity", "Gpu", "Hardware", "LauncherLimits",
    "ModelMemory", "ModelShape", "Plan", "QuantScheme", "ReportedCapacity",
    "activation_bytes_per_token", "add_parser", "compare", "kv_bytes_per_token", "kv_capacity_tokens",
    "load_config", "parse_reported_capacity", "parse_size", "plan", "plan_embedded", "resolve_gpu",
    "weight_bytes",
]
