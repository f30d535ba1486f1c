"""Reading a server's Prometheus `/metrics` text into (name, labels, value) series, with prometheus_client's
parser; used by the telemetry's scrapes and by the one-off reads of bench.api and bench.play."""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

# Series kept from /metrics: the servers' own (histogram buckets and *_created stamps are dropped).
METRIC_PREFIXES = ("tgi_", "vllm:", "sglang:")
_COUNTER_TYPE = re.compile(r"^#\s*TYPE\s+(\S+)\s+counter\s*$", re.MULTILINE)


def parse_prometheus(text: str, prefixes: tuple[str, ...] = METRIC_PREFIXES) -> list[tuple[str, str, float]]:
    """(name, "k=v,k=v", value) for each series whose name starts with one of `prefixes`, named as the
    server wrote it. A scrape cut short (a server stopping mid-answer) keeps its complete lines, and a last
    line without its newline counts when it parses alone; text that does not parse keeps the series before
    the bad line."""
    cut = text.rfind("\n") + 1
    if cut < len(text):
        return _parse(text[:cut], prefixes) + _parse(text[cut:] + "\n", prefixes)
    return _parse(text, prefixes)


def _parse(text: str, prefixes: tuple[str, ...]) -> list[tuple[str, str, float]]:
    # The parser renames a counter typed without `_total` (TGI's own `tgi_request_count`) to `..._total`;
    # such a family keeps its typed name, which is how its samples get their written name back.
    bare_counters = set(_COUNTER_TYPE.findall(text))
    out = []
    try:
        for family in text_string_to_metric_families(text):
            renamed = family.type == "counter" and family.name in bare_counters
            for sample in family.samples:
                name = sample.name.removesuffix("_total") if renamed else sample.name
                if not name.startswith(prefixes) or name.endswith(("_bucket", "_created")):
                    continue
                rendered = ",".join(f"{k}={v}" for k, v in sample.labels.items())
                out.append((name, rendered, float(sample.value)))
    except ValueError:
        pass
    return out
