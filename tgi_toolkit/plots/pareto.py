"""The Pareto frontier of latency against throughput across configurations: which settings are worth
running at all (none other is both faster and higher-throughput)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tgi_toolkit import schema as S
from tgi_toolkit.pareto import pareto_front
from tgi_toolkit.plots._common import (
    AxisScale,
    axis_scale,
    axis_title,
    color_map,
    column_name,
    hover,
    integer_text,
    layout,
    measured,
    note,
    number_format,
    require_columns,
    scaled,
)
from tgi_toolkit.plots.labels import settings_hover, shorten_config_labels

UNLABELLED = "(no configuration label)"
HOVER_COLUMNS = (S.POINT_ID, S.USERS, S.BATCH_SIZE, S.RATE_RPS, S.PROMPT_TOKENS, S.MAX_NEW_TOKENS, S.RUN_ID)


def pareto_plot(points: pd.DataFrame, *, x: str = S.OUTPUT_THROUGHPUT, y: str = S.stat_column("ttft", "p50"),
                label: str = S.CONFIG_LABEL, maximize_x: bool = True, minimize_y: bool = True,
                hover_columns: Sequence[str] = HOVER_COLUMNS, title: str | None = None,
                objectives: Mapping[str, float] | None = None) -> go.Figure:
    """Every point coloured by its configuration, the frontier points enlarged and joined.

    Defaults: throughput (more is better) against median TTFT (less is better). The hover names the
    configuration (`label`, e.g. its launcher settings) and whichever of `hover_columns` the table has.
    Needs x, y and `label`.

    objectives: a limit per axis column, in the column's own unit (seconds for times, as the points
    table holds them), e.g. `{"ttft_p90_s": 5.0}`: drawn as a dashed line in the figure's unit
    (`axis_scale`), labelled with the side that meets it.
    """
    df = measured(require_columns(points, [x, y, label], "pareto_plot")).reset_index(drop=True)
    df, full_labels = shorten_config_labels(df, label)  # legends name what differs; hover has every setting
    front = pareto_front(df, x, y, maximize_x=maximize_x, minimize_y=minimize_y)
    x_scale, y_scale = axis_scale(df, x), axis_scale(df, y)
    xs, x_unit = scaled(df, x)
    ys, y_unit = scaled(df, y)
    extra = [c for c in hover_columns if c in df.columns and c != label]
    # a run against a bare URL has no configuration label: name it rather than draw an unnamed trace
    labels = df[label].fillna("").astype(str).replace("", UNLABELLED)
    colors = color_map(labels)
    lines = [f"{column_name(x)}: %{{x:{number_format(x_unit)}}} {x_unit}",
             f"{column_name(y)}: %{{y:{number_format(y_unit)}}} {y_unit}",
             *(f"{column_name(c)}: %{{customdata[{i + 1}]}}" for i, c in enumerate(extra))]
    custom = np.column_stack([front.map({True: "on the Pareto frontier", False: "dominated"}).to_numpy(),
                              *(df[c].map(integer_text).to_numpy() for c in extra)])
    plotted = xs.notna() & ys.notna()
    fig = go.Figure()
    for name, color in colors.items():
        mask = (labels == name) & plotted
        if not mask.any():
            continue
        on = front[mask].to_numpy()
        fig.add_trace(go.Scatter(
            x=xs[mask], y=ys[mask], mode="markers", name=name,
            marker={"color": color, "size": np.where(on, 13, 8), "opacity": np.where(on, 1.0, 0.45),
                    "line": {"width": np.where(on, 1.5, 0.0), "color": "black"}},
            customdata=custom[mask.to_numpy()],
            hovertemplate=hover(f"<b>{name}</b>", *lines, "%{customdata[0]}", *settings_hover(full_labels.get(name)))))
    frontier = df[front].assign(_x=xs[front], _y=ys[front]).sort_values("_x")
    if not frontier.empty:
        fig.add_trace(go.Scatter(
            x=frontier["_x"], y=frontier["_y"], mode="lines", name="Pareto frontier",
            line={"color": "black", "dash": "dot", "width": 1.5}, customdata=frontier[[label]].to_numpy(),
            hovertemplate=hover("<b>Pareto frontier</b>", "%{customdata[0]}", *lines[:2])))
    else:
        note(fig, "no point has both values")
    for column, limit in (objectives or {}).items():
        _objective_line(fig, column, limit, {x: (x_scale, maximize_x, "x"), y: (y_scale, not minimize_y, "y")})
    fig.update_xaxes(title_text=axis_title(x, x_unit))
    fig.update_yaxes(title_text=axis_title(y, y_unit))
    return layout(fig, title or f"{column_name(y)} against {column_name(x).lower()}: the Pareto frontier")


def _objective_line(fig: go.Figure, column: str, limit: float,
                    axes: Mapping[str, tuple[AxisScale, bool, str]]) -> None:
    """A dashed line at `limit` (in the column's own unit) on the axis showing `column`."""
    if column not in axes:
        raise ValueError(f"objectives: {column!r} is on neither axis (x is {list(axes)[0]!r}, y is {list(axes)[-1]!r})")
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not math.isfinite(limit):
        raise ValueError(f"objectives: {column} needs a finite number, in the column's own unit; got {limit!r}")
    scale, more_is_better, axis = axes[column]
    at = scale(float(limit))
    text = f"objective: {column_name(column)} {'≥' if more_is_better else '≤'} {at:,.4g} {scale.unit}".rstrip()
    line = {"color": "firebrick", "dash": "dash", "width": 1.5}
    if axis == "x":
        fig.add_vline(x=at, line=line, annotation_text=text, annotation_position="top right")
    else:
        fig.add_hline(y=at, line=line, annotation_text=text, annotation_position="top left")
