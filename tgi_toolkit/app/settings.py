"""The launcher-settings tab without Gradio: the form's fields, and what a set of values amounts to.

The fields come from `tgi_toolkit.config.form` (the metadata the notebook's ipywidgets form uses
too): one per LauncherConfig option, grouped model, limits, batching, quantization, network, then
the rest. Gradio hands an event's input values over positionally, so `FIELD_NAMES` fixes one order
for every function here and for the components the UI builds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

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

# What each group is for, shown as the accordion's title in the app.
GROUP_TITLES = {
    "model": "Model", "limits": "Request limits", "batching": "Batching (continuous batching budgets)",
    "quantization": "Quantization and dtype", "network": "Network", "hardware": "Hardware (GPUs, shards)",
    "telemetry": "Telemetry", "other": "Other",
}
OPEN_GROUPS = ("model", "limits", "batching")  # open at first: what a first benchmark changes


@cache
def grouped_fields() -> dict[str, list[FormField]]:
    """group -> its fields, MAIN_GROUPS first (the same grouping as the notebook's form)."""
    return form_fields()


@cache
def field_names() -> tuple[str, ...]:
    """Every LauncherConfig field, in the order the app's components are created and passed."""
    return tuple(f.name for fields in grouped_fields().values() for f in fields)


def default_values(config: LauncherConfig | None = None) -> dict[str, Any]:
    """Each field's raw widget value (str, or bool for flags) for `config` (defaults when None)."""
    return raw_values(config)


def values_from_inputs(inputs: Sequence[Any]) -> dict[str, Any]:
    """Positional component values (in `field_names()` order) as {field: raw value}."""
    names = field_names()
    if len(inputs) != len(names):
        raise ValueError(f"expected {len(names)} launcher values, got {len(inputs)}")
    return dict(zip(names, inputs, strict=True))


def choice_options(form_field: FormField) -> list[tuple[str, str]]:
    """A dropdown's (label, value) pairs; an optional field starts with '(not set)' = ''."""
    options = [(choice, choice) for choice in form_field.choices]
    return [("(not set)", ""), *options] if form_field.optional else options


@dataclass
class SettingsCheck(FormState):
    """What the form's values amount to: FormState's config (None while a rule is broken) and problems,
    plus what the embedded engine would refuse and the command line the chosen target would run."""

    refusals: list[str] = field(default_factory=list)
    command: CommandLine | None = None

    @property
    def runnable(self) -> bool:
        """The embedded engine can start with these settings."""
        return self.config is not None and not self.refusals

    def markdown(self) -> str:
        """Problems (each naming its flags and fields), or a tick; then the command line's caveats."""
        if self.problems:
            lines = [f"**{len(self.problems)} problem{'s' if len(self.problems) > 1 else ''} in the launcher "
                     f"settings:**"]
            lines += [f"- {_escape(p.message)}" + (f" (field{'s' if len(p.fields) > 1 else ''}: "
                                                     f"{', '.join(f'`{name}`' for name in p.fields)})"
                                                     if p.fields else "") for p in self.problems]
            return "\n".join(lines)
        lines = ["**Valid launcher configuration.**"]
        if self.refusals:
            lines.append("The embedded engine (what the benchmark tab starts) would refuse:")
            lines += [f"- {_escape(note)}" for note in self.refusals]
        return "\n".join(lines)

    def command_text(self) -> str:
        """The command line (secrets redacted) with its notes as shell comments; a comment while invalid."""
        if self.command is None:
            return "# fix the problems above to see the command line"
        notes = [f"# {note}" for note in self.command.notes]
        return "\n".join([self.command.text(), *notes])


def check_settings(values: Mapping[str, Any], target: str = "embedded") -> SettingsCheck:
    """Check raw form values: every problem at once, the embedded engine's refusals, `target`'s command."""
    if target not in TARGETS:
        raise ValueError(f"target={target!r} is not one of {', '.join(TARGETS)}")
    state = config_from_values(values)
    if state.config is None:
        return SettingsCheck(None, state.problems)
    from tgi_toolkit.config.embedded import refusals

    return SettingsCheck(state.config, state.problems, refusals(state.config), render_command(state.config, target))


def field_messages(check: SettingsCheck) -> dict[str, str]:
    """field -> the problems naming it, joined (for marking the fields themselves)."""
    out: dict[str, list[str]] = {}
    for problem in check.problems:
        for name in problem.fields:
            out.setdefault(name, []).append(problem.message)
    return {name: "; ".join(messages) for name, messages in out.items()}


def _escape(text: str) -> str:
    # Messages quote user input: keep Markdown from reading it as emphasis, links or HTML.
    for char in "\\`*_[]<>|#":
        text = text.replace(char, "\\" + char)
    return text


__all__ = ["GROUP_TITLES", "MAIN_GROUPS", "OPEN_GROUPS", "TARGETS", "SettingsCheck", "check_settings",
           "choice_options", "default_values", "field_messages", "field_names", "grouped_fields",
           "values_from_inputs"]
