"""The forward trace an embedded engine writes (TGI_TOOLKIT_FORWARD_TRACE): reading its forwards back, and
timing the front end from one burst's forwards; the profile (calibrate.py) fits and measures with them."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

from tgi_toolkit.costs.features import Shape


def read_trace_lines(path: str, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The lines (one JSON object per forward: its end `t` on the wall clock, `seconds`, and its Shape's
    fields) an embedded engine started with TGI_TOOLKIT_FORWARD_TRACE=path wrote after byte `offset`, and
    the offset to read on from."""
    import json

    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1  # a line the engine is still writing waits for the next read
    return [json.loads(line) for line in data[:end].splitlines()], offset + end


def read_trace(path: str, offset: int = 0) -> tuple[list[tuple[Shape, float]], int]:
    """The traced forwards after byte `offset` as (features, measured seconds), as `costs.fit_linear` takes
    them; and the offset to read on from."""
    rows, offset = read_trace_lines(path, offset)
    names = [field.name for field in dataclasses.fields(Shape)]
    return [(Shape(**{n: row[n] for n in names if n in row}), float(row["seconds"])) for row in rows], offset


def trace_end(path: str) -> int:
    """The trace's size: the offset from which `read_trace` returns what the server writes next."""
    return os.path.getsize(path) if os.path.exists(path) else 0


def frontend_seconds(forwards: Sequence[Mapping[str, Any]], requests: int) -> tuple[float | None, str]:
    """The front end's seconds per request, one request at a time, from the traced forwards (`read_trace_lines`)
    of one burst: `requests` one-token requests sent at once to an idle server, none of them capped by the
    batch's size or token budget. Returns (seconds or None, how it was found).

    Each forward then holds exactly the requests that reached the queue between the scheduler's two polls,
    its own start and the previous forward's: the idle scheduler takes what is there (the first, or a few when
    its thread wakes late), and each forward after what came in meanwhile. While more are still to come the
    front end was busy all along, so those windows' seconds over the requests they let in is the front end's
    time per request; the last window, in which the burst ran out, only bounds it. When the whole burst was in
    after the first forward, that bound is all there is (None)."""
    # the burst's own forwards: those at the end whose rows add up to it (bench checks a prompt length with a
    # request of its own first)
    rows = [int(f["rows"]) for f in forwards]
    tail = next((k for k in range(len(rows) - 1, -1, -1) if sum(rows[k:]) >= requests), None)
    if tail is None or sum(rows[tail:]) != requests:
        return None, f"the burst's {requests} requests ran as forwards of {rows} rows: not this burst's alone"
    rows, starts = rows[tail:], [float(f["t"]) - float(f["seconds"]) for f in forwards[tail:]]
    if len(rows) == 1:
        return None, f"all {requests} requests were in before the first forward"
    if len(rows) == 2:
        return None, (f"all {requests} requests were in after the first forward: at most "
                      f"{(starts[1] - starts[0]) / rows[1] * 1e3:.3g} ms a request")
    seconds = starts[-2] - starts[0]  # the windows before the last, when more were still to come
    admitted = sum(rows[1:-1])
    return seconds / admitted, (f"{admitted} of a burst of {requests} requests reached the queue in "
                                f"{seconds * 1e3:.4g} ms while more were still to come")
