"""LauncherConfig as a form, for any UI: fields per group, raw values in, config and problems out.

Nothing here imports a UI library. `tgi_toolkit.config.widgets` builds the notebook's ipywidgets form on
it, and a Gradio app can build its own from the same three steps:

1. `form_fields()`: per UI group, one `FormField` per launcher option with the widget kind to use
   (bool, choice, int, float, text, list), its choices, default, placeholder and help.
2. `config_from_values({field: raw widget value})`: the LauncherConfig those values describe (or
   None) and every problem, type errors and launcher rules together, each naming its fields.
3. `render_command(config, target)`: the command line that target would run, for display.

Raw values are what a text box, dropdown or checkbox holds: strings ("" meaning "not set":
None for an optional option, the default otherwise) and booleans for bare flags.
"""

from __future__ import annotations

import shlex
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tgi_toolkit.config.errors import ConfigError, Problem
from tgi_toolkit.config.launcher import OPTIONS, LauncherConfig
from tgi_toolkit.config.launcher_fields import GROUPS
from tgi_toolkit.config.options import COMMA_LISTS

Kind = Literal["bool", "choice", "int", "float", "text", "list"]
# The groups a person setting up a server looks at first (the five), then the rest.
MAIN_GROUPS: tuple[str, ...] = ("model", "limits", "batching", "quantization", "network")
TARGETS: tuple[str, ...] = ("embedded", "tgi", "tgi-docker", "vllm")
SECRET_FIELDS = frozenset({"api_key", "ngrok_authtoken"})
REDACTED = "***"


@dataclass(frozen=True)
class FormField:
    """One launcher option as a form field."""

    name: str  # LauncherConfig field, e.g. "max_total_tokens"
    label: str  # its flag, e.g. "--max-total-tokens"
    group: str
    kind: Kind
    choices: tuple[str, ...]  # for kind "choice" (without the empty "not set" entry)
    optional: bool  # "" (not set) is a value of its own: the server works it out
    default: Any  # LauncherConfig's default
    help: str
    env: str | None
    secret: bool  # show as a password box; redacted in rendered commands

    @property
    def placeholder(self) -> str:
        """What an empty box means."""
        if self.optional:
            return "auto" if self.kind != "text" else "not set"
        return to_raw(self, self.default) if self.kind != "bool" else ""

    @property
    def tooltip(self) -> str:
        return self.help + (f" (env: {self.env})" if self.env else "")


def _kind(name: str) -> Kind:
    spec = OPTIONS[name]
    if spec.kind == "flag":
        return "bool"
    if spec.kind == "list":
        return "list"
    if spec.choices:
        return "choice"
    annotation = LauncherConfig.model_fields[name].annotation
    inner = next((a for a in typing.get_args(annotation) if a is not type(None)), annotation)
    if inner is bool:  # an optional boolean (`--sharded`): true, false, or not set
        return "choice"
    return {int: "int", float: "float"}.get(inner, "text")  # type: ignore[return-value]


def _choices(name: str, kind: Kind) -> tuple[str, ...]:
    if kind != "choice":
        return ()
    return OPTIONS[name].choices or ("true", "false")


def form_fields(groups: Sequence[str] | None = None) -> dict[str, list[FormField]]:
    """group -> its fields, in the launcher's order; groups in MAIN_GROUPS order, then the others.

    `groups` picks (and orders) the groups to return; every option belongs to exactly one group.
    """
    order = list(groups) if groups is not None else [*MAIN_GROUPS, *(g for g in GROUPS if g not in MAIN_GROUPS)]
    unknown = [g for g in order if g not in GROUPS]
    if unknown:
        raise ValueError(f"unknown group(s) {unknown}: choose from {', '.join(GROUPS)}")
    out: dict[str, list[FormField]] = {group: [] for group in order}
    for name, spec in OPTIONS.items():
        if spec.group not in out:
            continue
        kind = _kind(name)
        out[spec.group].append(FormField(
            name=name, label=spec.flag, group=spec.group, kind=kind, choices=_choices(name, kind),
            optional=spec.optional, default=spec.default, help=spec.help, env=spec.env,
            secret=name in SECRET_FIELDS))
    return out


def field_table() -> dict[str, FormField]:
    """field name -> FormField, every option."""
    return {f.name: f for fields in form_fields().values() for f in fields}


def to_raw(form_field: FormField, value: Any) -> Any:
    """A config value as its widget holds it: bool for flags, else a string ("" for None)."""
    if form_field.kind == "bool":
        return bool(value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(str(item) for item in value)
    return str(value)


def raw_values(config: LauncherConfig | None = None) -> dict[str, Any]:
    """Every field's raw widget value for `config` (defaults when None)."""
    config = config if config is not None else LauncherConfig()
    return {name: to_raw(f, getattr(config, name)) for name, f in field_table().items()}


@dataclass
class FormState:
    """What a form's values amount to: the config when they make a valid one, and every problem."""

    config: LauncherConfig | None
    problems: list[Problem] = field(default_factory=list)

    @property
    def fields(self) -> set[str]:
        """Fields named by some problem (to highlight them)."""
        return {name for problem in self.problems for name in problem.fields}


def _value(form_field: FormField, raw: Any) -> Any:
    """Raw widget value -> what LauncherConfig is given (pydantic converts and checks it)."""
    if form_field.kind == "bool":
        return bool(raw)
    text = "" if raw is None else str(raw).strip()
    if text == "":
        return None if form_field.optional else form_field.default
    if form_field.kind == "list" and form_field.name not in COMMA_LISTS:
        return [item.strip() for item in text.split(",") if item.strip()]
    return text


def config_from_values(values: Mapping[str, Any]) -> FormState:
    """The LauncherConfig described by raw widget values, with all its problems.

    Only values that differ from the defaults are given to LauncherConfig, so `model_fields_set`
    says what the user chose (Server picks a free port unless the port was chosen). A value of the
    wrong type (a letter in a number box) is reported with its field, and the rules between the
    other fields are still checked, so every problem shows at once.
    """
    table = field_table()
    unknown = [name for name in values if name not in table]
    if unknown:
        raise KeyError(f"not launcher options: {', '.join(unknown)}")
    given = {}
    for name, raw in values.items():
        form_field = table[name]
        value = _value(form_field, raw)
        if value is None and form_field.default is None:
            continue
        if to_raw(form_field, value) == to_raw(form_field, form_field.default):
            continue
        given[name] = value
    problems: list[Problem] = []
    while True:
        try:
            config = LauncherConfig(**given)
            break
        except ConfigError as exc:
            problems += exc.problems
            bad = {name for problem in exc.problems for name in problem.fields} & set(given)
            if not bad:  # cannot happen for known fields; never loop forever
                return FormState(None, problems)
            for name in bad:
                given.pop(name)
    problems += config.problems()
    return FormState(None if problems else config, problems)


@dataclass
class CommandLine:
    """A command a backend would run for a config: argv, extra environment, and caveats."""

    target: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what does not carry over, or would be refused

    def text(self, redact: bool = True) -> str:
        """One shell line, `VAR=value cmd args`; secrets shown as *** unless redact=False."""
        argv = list(self.argv)
        if redact:
            secret_flags = {OPTIONS[name].flag for name in SECRET_FIELDS}
            for i in range(1, len(argv)):
                if argv[i - 1] in secret_flags:
                    argv[i] = REDACTED
        env = " ".join(f"{key}={_quote(value)}" for key, value in self.env.items())
        return " ".join([*([env] if env else []), *(_quote(arg) for arg in argv)])


def _quote(arg: str) -> str:
    # docker_command's default volume is `$PWD/data`: keep it expandable when pasted into a shell.
    if arg.startswith("$PWD") and '"' not in arg and "`" not in arg:
        return f'"{arg}"' if shlex.quote(arg) != arg else arg
    return shlex.quote(arg)


def render_command(config: LauncherConfig, target: str = "embedded") -> CommandLine:
    """The command `target` would run for `config` (what `Server(config, backend=target)` starts,
    less the free port it picks when none was chosen).

    embedded: `tgi-toolkit serve ...` (notes: settings the CPU engine refuses); tgi:
    `text-generation-launcher ...`; tgi-docker: `docker run ...`; vllm: `vllm serve ...` (notes:
    settings with no vLLM equivalent, and caveats of the mapping).
    """
    if target == "embedded":
        from tgi_toolkit.config.embedded import refusals

        return CommandLine(target, ["tgi-toolkit", "serve", *config.to_cli()], notes=refusals(config))
    if target == "tgi":
        return CommandLine(target, ["text-generation-launcher", *config.to_cli()])
    if target == "tgi-docker":
        return CommandLine(target, config.docker_command())
    if target == "vllm":
        from tgi_toolkit.config.vllm_args import to_vllm_args

        rendered = to_vllm_args(config)
        notes = [f"not carried over: {reason}" for reason in rendered.unmapped.values()]
        notes += [f"note: {note}" for note in rendered.notes.values()]
        return CommandLine(target, rendered.argv, env=dict(rendered.env), notes=notes)
    raise ValueError(f"target={target!r} is not one of {', '.join(TARGETS)}")
