"""What a server's start-up log says about its KV capacity: one set of patterns read line by line by the backends
as a server starts (`Backend.parse_line`, into `Server.facts`) and over a whole log by the planner's comparison
(`parse_reported_capacity`, `tgi_toolkit.planner.compare`).

TGI's router logs "Setting max batch total tokens to N" (and its shards "KV-cache blocks: B, size: S");
the embedded engine logs the same line. vLLM (V1) logs "GPU KV cache size: N tokens" and
"Maximum concurrency for T tokens per request: Xx"; vLLM V0 logged "# GPU blocks: B" (later
"# cuda blocks: B"), and its CPU backend "# CPU blocks: B".
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NUM = r"(\d[\d,_]*)"
# fact name -> pattern; group 1 is the value (a count written with or without separators, or a decimal)
CAPACITY_PATTERNS: dict[str, re.Pattern[str]] = {
    "max_batch_total_tokens": re.compile(r"Setting max batch total tokens to " + _NUM),
    "tgi_blocks": re.compile(r"KV-cache blocks: " + _NUM + r", size: " + _NUM),  # group 2: the block size
    "max_batch_prefill_tokens": re.compile(r"Default `?max_batch_prefill_tokens`? to " + _NUM),
    "kv_capacity_tokens": re.compile(r"KV cache size: " + _NUM + r" tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for [\d,_]+ tokens per request: ([\d.]+)x"),
    "max_concurrency_tokens": re.compile(r"Maximum concurrency for " + _NUM + r" tokens per request"),
    "kv_cache_gib": re.compile(r"Available KV cache memory: ([\d.]+) GiB"),
    "device_blocks": re.compile(r"# (?:GPU|gpu|cuda|CUDA|xpu|hpu|tpu|neuron) blocks: " + _NUM),
    "cpu_blocks": re.compile(r"# CPU blocks: " + _NUM),
    "vllm_weights_gib": re.compile(r"Model (?:loading|weights) took ([\d.]+) ?GiB"),
    "engine_weights_mib": re.compile(r"Weights: ([\d.]+) MiB"),
}


def log_number(text: str) -> int | float | str:
    """A value as a log writes it: "1,234,560" and "1_024" are ints, "241.12" a float, anything else the text."""
    digits = text.replace(",", "").replace("_", "")
    if digits.isdigit():
        return int(digits)
    try:
        return float(text)
    except ValueError:
        return text


def _int(text: str) -> int:
    return int(text.replace(",", "").replace("_", ""))


@dataclass(frozen=True)
class ReportedCapacity:
    """What a server's start-up log said about its KV capacity; each field None where the log did not say it."""

    server: str | None = None  # "tgi" (TGI and the embedded engine) or "vllm"
    kv_capacity_tokens: int | None = None  # whichever server logged it
    max_batch_total_tokens: int | None = None  # TGI's name for the same number, as its router logs it
    num_blocks: int | None = None
    block_size: int | None = None
    max_batch_prefill_tokens: int | None = None
    max_concurrency: float | None = None  # vLLM: requests of max_concurrency_tokens the cache holds
    max_concurrency_tokens: int | None = None
    kv_cache_bytes: int | None = None
    weight_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The facts the log stated, by name."""
        return {k: v for k, v in asdict(self).items() if v is not None}


def parse_reported_capacity(log_text: str, *, block_size: int | None = None) -> ReportedCapacity:
    """The capacity facts found in a server's start-up log; the last occurrence of each wins.

    `kv_capacity_tokens` is the KV capacity in tokens whichever server logged it: TGI and the embedded engine as
    "max batch total tokens" (also kept as `max_batch_total_tokens`), vLLM as "GPU KV cache size", or "# GPU
    blocks" x `block_size` (default 16) when only blocks are logged.
    """
    text = ANSI.sub("", log_text)
    found: dict[str, Any] = {}
    last: dict[str, re.Match[str]] = {}
    for key, pattern in CAPACITY_PATTERNS.items():
        for match in pattern.finditer(text):
            last[key] = match
    if "max_batch_total_tokens" in last:
        found["max_batch_total_tokens"] = _int(last["max_batch_total_tokens"].group(1))
    if "tgi_blocks" in last:
        found["num_blocks"] = _int(last["tgi_blocks"].group(1))
        found["block_size"] = _int(last["tgi_blocks"].group(2))
    if "max_batch_prefill_tokens" in last:
        found["max_batch_prefill_tokens"] = _int(last["max_batch_prefill_tokens"].group(1))
    if "kv_capacity_tokens" in last:
        found["kv_capacity_tokens"] = _int(last["kv_capacity_tokens"].group(1))
    if "max_concurrency" in last:
        found["max_concurrency_tokens"] = _int(last["max_concurrency_tokens"].group(1))
        found["max_concurrency"] = float(last["max_concurrency"].group(1))
    if "kv_cache_gib" in last:
        found["kv_cache_bytes"] = int(float(last["kv_cache_gib"].group(1)) * 2**30)
    blocks = last.get("device_blocks") or last.get("cpu_blocks")
    if blocks is not None and "num_blocks" not in found:
        found["num_blocks"] = _int(blocks.group(1))
        found["block_size"] = block_size or 16
        found.setdefault("kv_capacity_tokens", found["num_blocks"] * found["block_size"])
    if "vllm_weights_gib" in last:
        found["weight_bytes"] = int(float(last["vllm_weights_gib"].group(1)) * 2**30)
    elif "engine_weights_mib" in last:
        found["weight_bytes"] = int(float(last["engine_weights_mib"].group(1)) * 2**20)
    if "max_batch_total_tokens" in found:
        found["server"], found["kv_capacity_tokens"] = "tgi", found["max_batch_total_tokens"]
    elif "kv_capacity_tokens" in found:
        found["server"] = "vllm"
    return ReportedCapacity(**found)
