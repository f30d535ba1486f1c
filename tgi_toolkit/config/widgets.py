"""A notebook form for LauncherConfig: grouped fields, checked as you type, with the command it runs.

    from tgi_toolkit.config.widgets import launcher_form
    form = launcher_form()
    form.widget          # display it (the last expression of a cell)
    form.config          # the current valid LauncherConfig, or None while a rule is broken
    Server(form.config, backend=form.target).start()

Built on `tgi_toolkit.config.form`, which holds everything that is not ipywidgets (the field
kinds, parsing, checks and command rendering), so another UI builds the same form from it.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets

from tgi_toolkit.config.errors import Problem
from tgi_toolkit.config.form import (
    MAIN_GROUPS,
    TARGETS,
    CommandLine,
    FormField,
    FormState,
    config_from_values,
    form_fields,
    raw_values,
    render_command,
)
from tgi_toolkit.config.launcher import LauncherConfig

_PROBLEM_BORDER = "2px solid #d62728"
_DESCRIPTION_STYLE = {"description_width": "230px"}
_FIELD_LAYOUT = {"width": "560px"}


def field_widget(form_field: FormField, raw: Any) -> widgets.Widget:
    """The ipywidget for one field holding `raw` (see `tgi_toolkit.config.form.to_raw`)."""
    common: dict[str, Any] = {"description": form_field.label, "tooltip": form_field.tooltip,
                              "style": _DESCRIPTION_STYLE}
    if form_field.kind == "bool":
        return widgets.Checkbox(value=bool(raw), indent=True, **common)
    if form_field.kind == "choice":
        options = [(choice, choice) for choice in form_field.choices]
        if form_field.optional:
            options.insert(0, ("(not set)", ""))
        return widgets.Dropdown(options=options, value=raw, layout=dict(_FIELD_LAYOUT), **common)
    box = widgets.Password if form_field.secret else widgets.Text
    # continuous_update: the form re-checks on every keystroke, not only on Enter or blur
    return box(value=raw, placeholder=form_field.placeholder, continuous_update=True,
               layout=dict(_FIELD_LAYOUT), **common)


class LauncherForm:
    """The form's widgets and what they currently amount to.

    `widgets` maps each LauncherConfig field to its input widget (set `.value` to fill it from
    code); `target_widget` picks the backend whose command line is shown.
    """

    def __init__(self, config: LauncherConfig | None = None, target: str = "embedded",
                 groups: tuple[str, ...] | None = None) -> None:
        if target not in TARGETS:
            raise ValueError(f"target={target!r} is not one of {', '.join(TARGETS)}")
        raw = raw_values(config)
        self.fields = form_fields(groups)
        self.widgets: dict[str, widgets.Widget] = {}
        sections = []
        for group_fields in self.fields.values():
            boxes = []
            for form_field in group_fields:
                widget = field_widget(form_field, raw[form_field.name])
                widget.observe(self._changed, names="value")
                self.widgets[form_field.name] = widget
                boxes.append(widget)
            sections.append(widgets.VBox(boxes))
        self._accordion = widgets.Accordion(children=sections, titles=tuple(self.fields))
        self._accordion.selected_index = 0 if sections else None
        self.target_widget = widgets.ToggleButtons(options=list(TARGETS), value=target, description="backend")
        self.target_widget.observe(self._changed, names="value")
        self.problems_html = widgets.HTML()
        self.command_html = widgets.HTML()
        self.widget = widgets.VBox([self._accordion, self.target_widget, self.problems_html, self.command_html])
        # Options outside the shown groups keep their values from `config`.
        self._hidden = {name: value for name, value in raw.items() if name not in self.widgets}
        self.state = FormState(None)
        self.command: CommandLine | None = None
        self._update()

    # -- what the form says now ---------------------------------------------------------------
    @property
    def config(self) -> LauncherConfig | None:
        """The LauncherConfig the fields describe, or None while any problem remains."""
        return self.state.config

    @property
    def problems(self) -> list[Problem]:
        return self.state.problems

    @property
    def target(self) -> str:
        return self.target_widget.value

    @property
    def values(self) -> dict[str, Any]:
        """Every field's raw value (widget values, plus options of groups not shown)."""
        return {**self._hidden, **{name: widget.value for name, widget in self.widgets.items()}}

    def command_text(self) -> str:
        """The command line shown (secrets redacted); empty while the config is invalid."""
        return self.command.text() if self.command is not None else ""

    def _ipython_display_(self) -> None:  # `form` as the last expression of a cell shows the form
        from IPython.display import display

        display(self.widget)

    # -- updating ------------------------------------------------------------------------------
    def _changed(self, change: dict[str, Any]) -> None:
        self._update()

    def _update(self) -> None:
        self.state = config_from_values(self.values)
        bad = self.state.fields
        for name, widget in self.widgets.items():
            widget.layout.border = _PROBLEM_BORDER if name in bad else None
        self.command = render_command(self.state.config, self.target) if self.state.config is not None else None
        self.problems_html.value = _problems_html(self.state.problems)
        self.command_html.value = _command_html(self.command)


def _problems_html(problems: list[Problem]) -> str:
    if not problems:
        return "<span style='color:#2ca02c'>&#10004; valid launcher configuration</span>"
    items = "".join(
        f"<li>{html.escape(problem.message)}"
        + (f" <code>[{html.escape(', '.join(problem.fields))}]</code>" if problem.fields else "") + "</li>"
        for problem in problems)
    return (f"<div style='color:#d62728'><b>{len(problems)} problem{'s' if len(problems) > 1 else ''}:</b>"
            f"<ul>{items}</ul></div>")


def _command_html(command: CommandLine | None) -> str:
    if command is None:
        return "<i>fix the problems above to see the command line</i>"
    notes = "".join(f"<li>{html.escape(note)}</li>" for note in command.notes)
    return (f"<b>{html.escape(command.target)} would run:</b>"
            f"<pre style='white-space:pre-wrap'>{html.escape(command.text())}</pre>"
            + (f"<ul>{notes}</ul>" if notes else ""))


def launcher_form(config: LauncherConfig | None = None, target: str = "embedded",
                  groups: tuple[str, ...] | None = None) -> LauncherForm:
    """An ipywidgets form for `config` (defaults when None), showing `target`'s command line.

    `groups`: which option groups to show, e.g. MAIN_GROUPS (model, limits, batching,
    quantization, network); default all, those five first.
    """
    return LauncherForm(config, target=target, groups=groups)


__all__ = ["MAIN_GROUPS", "LauncherForm", "field_widget", "launcher_form"]
