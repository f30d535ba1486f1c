"""Reading a server's Prometheus `/metrics` text into (name, labels, value) series: a parser of its own,
used by the telemetry's scrapes and by the one-off reads of bench.api and bench.play."""

from __future__ import annotations

import re

# Series kept from /metrics: the servers' own (histogram buckets and *_created stamps are dropped).
METRIC_PREFIXES = ("tgi_", "vllm:", "sglang:")
_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str, prefixes: tuple[str, ...] = METRIC_PREFIXES) -> list[tuple[str, str, float]]:
    """(name, "k=v,k=v", value) for each series whose name starts with one of `prefixes`."""
    out = []
    for line in text.splitlines():
        if not line or line[0] == "#" or not line.startswith(prefixes):
            continue
        match = _LINE.match(line)
        if match is None:
            continue
        name, labels, value = match.groups()
        if name.endswith(("_bucket", "_created")):
            continue
        try:
            number = float(value)
        except ValueError:
            continue
        rendered = ",".join(f"{k}={v}" for k, v in _LABEL.findall(labels or ""))
        out.append((name, rendered, number))
    return out
