"""Configuration labels that fit a legend: what differs between the configurations a figure compares.

A configuration's label (S.CONFIG_LABEL, `bench.provenance.config_label`) lists every setting it made,
"cuda_memory_fraction=0.006867,max_batch_prefill_tokens=256,max_batch_size=1,max_input_tokens=192,..."
(~90 characters): as a legend entry it takes half of a 1,280-pixel figure. Every figure that splits by
configuration names each one by the settings that differ between those it shows ("cuda_memory_fraction=1.0,
max_batch_size=4"), and puts the full label in its hover text; the report's parameters table has them all.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable

import pandas as pd

from tgi_toolkit import schema as S

# A label's parts: "key=value" separated by commas (bench) or spaces (a simulated vLLM's "vLLM V1 max_num_seqs=8
# ..."), a value may hold commas of its own ("[1, 2]"); a first part that is not "key=value" is a prefix.
_SPLIT = re.compile(r"(?:,\s*|\s+)(?=[A-Za-z_][\w.-]*=)")
_KEY = re.compile(r"^[A-Za-z_][\w.-]*=")
_SUFFIX = re.compile(r"\s*(\[[^\]]*\])$")  # " [simulated: a100-80gb]" of a simulated configuration
_EMPTY = ("default", "base", "")  # a configuration that set nothing
HOVER_WIDTH = 70  # characters per line of the full settings in a hover box
_LEGEND_BREAKS = re.compile(r"(?<=,) |(?<= /) |(?<= ·) ")  # after a setting's comma, a series' " /", " ·"
LEGEND_WIDTH = 32  # characters per line of a wrapped legend entry: a legend beside the plot stays near 200 px
LEGEND_WRAP_OVER = 40  # entries longer than this are wrapped (a 42-character configuration pair, 2 settings)


def _settings(label: str) -> tuple[dict[str, str], str] | None:
    """(settings, suffix) of a "k=v,k=v [suffix]" label; None for a label of another kind (a set's name)."""
    match = _SUFFIX.search(label)
    suffix, body = (match.group(1), label[:match.start()]) if match else ("", label)
    body = body.strip()
    if body in _EMPTY:
        return {}, suffix
    parts = _SPLIT.split(body)
    prefix = {} if _KEY.match(parts[0]) else {"": parts.pop(0)}
    if not parts or not all(_KEY.match(p) for p in parts):
        return None
    return {**prefix, **dict(p.split("=", 1) for p in parts)}, suffix


def short_labels(labels: Iterable[object]) -> dict[str, str]:
    """Each distinct label -> the settings in which it differs from the others, e.g.
    {"a=1,b=2,c=3": "a=1, b=2", "a=4,b=5,c=3": "a=4, b=5"}. A setting one label has and another lacks
    differs (shown "key=default" where absent). Labels that are not settings (a result set's name) stay as
    they are, as does a lone label; two labels that would read the same keep their full text."""
    distinct = list(dict.fromkeys(str(v) for v in labels if v is not None and not pd.isna(v)))
    parsed = {label: _settings(label) for label in distinct}
    settings = {label: p for label, p in parsed.items() if p is not None}
    if len(settings) < 2:
        return {label: label for label in distinct}
    keys = list(dict.fromkeys(k for s, _ in settings.values() for k in s))
    differ = [k for k in keys if len({s.get(k) for s, _ in settings.values()}) > 1]
    suffixes = len({suffix for _, suffix in settings.values()}) > 1
    out = {}
    for label in distinct:
        if label not in settings:
            out[label] = label
            continue
        values, suffix = settings[label]
        parts = [values.get(k, "") if k == "" else f"{k}={values.get(k, 'default')}" for k in differ]
        parts = [p for p in parts if p] + ([suffix] if suffixes and suffix else [])
        out[label] = ", ".join(parts) or label
    seen: dict[str, int] = {}
    for short in out.values():
        seen[short] = seen.get(short, 0) + 1
    return {label: short if seen[short] == 1 else label for label, short in out.items()}


def shorten_config_labels(df: pd.DataFrame, column: str = S.CONFIG_LABEL) -> tuple[pd.DataFrame, dict[str, str]]:
    """`df` with its configuration labels shortened (`short_labels`), and short -> full label for the hover
    text (`settings_hover`). A table without the column, or with one configuration, comes back as it is."""
    if column not in df.columns or df[column].nunique() < 2:
        return df, {}
    short = short_labels(df[column])
    full = {s: label for label, s in short.items() if s != label}
    return df.assign(**{column: df[column].map(lambda v: short.get(str(v), v) if pd.notna(v) else v)}), full


def settings_hover(full: str | None) -> list[str]:
    """The hover lines of a configuration's full label, wrapped at HOVER_WIDTH characters ([] for none)."""
    if not full:
        return []
    parsed = _settings(full)
    parts = ([v if k == "" else f"{k}={v}" for k, v in parsed[0].items()] + ([parsed[1]] if parsed[1] else [])
             if parsed else [full])
    return textwrap.wrap("settings: " + ", ".join(parts), HOVER_WIDTH, break_long_words=False,
                         break_on_hyphens=False)


def legend_name(name: str) -> str:
    """A legend entry over LEGEND_WRAP_OVER characters wrapped at LEGEND_WIDTH (plotly's `<br>`), so that a
    long one grows the legend downwards instead of squeezing the plot sideways; a shorter one as it is."""
    if len(name) <= LEGEND_WRAP_OVER or "<br>" in name:
        return name
    lines: list[str] = []
    for piece in _LEGEND_BREAKS.split(name):  # whole settings and series parts, never "prompt" apart from its 192
        if lines and len(lines[-1]) + 1 + len(piece) <= LEGEND_WIDTH:
            lines[-1] += " " + piece
        else:
            lines.append(piece)
    return "<br>".join(lines)
