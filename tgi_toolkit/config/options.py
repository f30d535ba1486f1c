"""How each launcher option is spelled: flag, variable, kind; parsing of argv and the environment.

Everything here works from the table of `OptionSpec`s that `launcher.py` derives from the fields
of `LauncherConfig`, so it knows nothing of pydantic.
"""

from __future__ import annotations

import argparse
import difflib
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

from tgi_toolkit.config.errors import Problem

SHORT_FLAGS = {"port": "-p", "env": "-e", "graceful_termination_timeout": "-g"}
NO_ENV = frozenset({"env"})  # `--env` is the one flag clap gives no variable
COMMA_LISTS = frozenset({"cuda_graphs"})  # clap `value_delimiter = ','`; other lists repeat the flag


def flag_for(name: str) -> str:
    """`max_total_tokens` -> `--max-total-tokens`."""
    return "--" + name.replace("_", "-")


def env_for(name: str) -> str | None:
    """`max_total_tokens` -> `MAX_TOTAL_TOKENS` (None for `env`, which has no variable)."""
    return None if name in NO_ENV else name.upper()


@dataclass(frozen=True)
class OptionSpec:
    """How one field appears on the command line, in the environment and in the UI."""

    name: str
    flag: str
    env: str | None
    short: str | None
    kind: Literal["flag", "value", "list"]  # bare boolean flag, flag with a value, list
    optional: bool  # an Option<...> in the launcher: None means "work it out"
    choices: tuple[str, ...]
    group: str
    help: str
    default: Any
    tgi_default: Any


def build_specs(fields: Mapping[str, Any]) -> dict[str, OptionSpec]:
    """One OptionSpec per pydantic field; also writes flag and env into each field's JSON-schema extra."""
    specs = {}
    for name, info in fields.items():
        annotation = info.annotation
        args = typing.get_args(annotation)
        optional = type(None) in args
        inner = next((a for a in args if a is not type(None)), annotation) if optional else annotation
        choices = tuple(typing.get_args(inner)) if typing.get_origin(inner) is Literal else ()
        if inner is bool and not optional:
            kind: Literal["flag", "value", "list"] = "flag"
        elif typing.get_origin(inner) is list:
            kind = "list"
        else:
            kind = "value"
        extra = info.json_schema_extra
        assert isinstance(extra, dict)
        # Filled in here so the UI's JSON schema carries them next to the group.
        extra["flag"] = flag_for(name)
        extra["env"] = env_for(name)
        if name in SHORT_FLAGS:
            extra["short_flag"] = SHORT_FLAGS[name]
        default = [] if info.default_factory is not None else info.default
        specs[name] = OptionSpec(name, flag_for(name), env_for(name), SHORT_FLAGS.get(name), kind, optional,
                                 choices, str(extra["group"]), info.description or "", default,
                                 extra["tgi_default"])
    return specs


def text(value: Any) -> str:
    """A scalar as the launcher reads it (booleans as true/false)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def suggest(word: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def read_env(environ: Mapping[str, str], specs: Mapping[str, OptionSpec]) -> dict[str, str]:
    """field -> raw string for every launcher variable present in `environ`."""
    return {name: environ[spec.env] for name, spec in specs.items() if spec.env is not None and spec.env in environ}


def _is_value(token: str) -> bool:
    return not token.startswith("-") or bool(re.match(r"-\d", token))


def parse_argv(argv: list[str], specs: Mapping[str, OptionSpec]
               ) -> tuple[dict[str, Any], dict[str, str], list[Problem]]:
    """Launcher arguments -> (field -> raw value, field -> flag it came from, problems)."""
    by_flag = {spec.flag: name for name, spec in specs.items()}
    by_flag.update({spec.short: name for name, spec in specs.items() if spec.short})
    known = sorted(by_flag)
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    problems: list[Problem] = []
    if argv and not argv[0].startswith("-") and PurePosixPath(argv[0]).name == "text-generation-launcher":
        argv = argv[1:]
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("-") or token == "-":
            problems.append(Problem((), f"unexpected argument {token!r}: the launcher takes only --flags"))
            continue
        flag, eq, inline = token.partition("=")
        if not flag.startswith("--") and len(flag) > 2 and not eq:  # `-p3000`
            flag, inline, eq = flag[:2], flag[2:], "="
        if flag.startswith("--"):
            flag = flag.replace("_", "-")  # `--num_shard` appears in TGI's own docs
        name = by_flag.get(flag)
        if name is None:
            problems.append(Problem((), f"unknown flag {token.split('=')[0]}" + suggest(flag, known)))
            if not eq and i < len(argv) and _is_value(argv[i]):
                i += 1  # skip its value too
            continue
        spec = specs[name]
        if spec.kind == "flag":
            value: Any = inline if eq else True
        elif eq:
            value = inline
        elif i < len(argv) and _is_value(argv[i]):
            value = argv[i]
            i += 1
        else:
            problems.append(Problem((name,), f"{spec.flag} expects a value"))
            continue
        if spec.kind == "list":
            items = [item.strip() for item in value.split(",") if item.strip()] if name in COMMA_LISTS else [value]
            values.setdefault(name, []).extend(items)
        elif name in values:
            problems.append(Problem((name,), f"{spec.flag} given more than once"))
        else:
            values[name] = value
        origin[name] = spec.flag
    return values, origin, problems


def add_arguments(parser: argparse.ArgumentParser, specs: Mapping[str, OptionSpec],
                  groups: tuple[str, ...]) -> argparse.ArgumentParser:
    """Every option on `parser`, in one argument group per UI group (for `--help`)."""
    sections = {name: parser.add_argument_group(f"launcher options: {name}") for name in groups}
    for name, spec in specs.items():
        notes = []
        if spec.env:
            notes.append(f"env: {spec.env}")
        if spec.default not in (None, [], False):
            notes.append(f"default: {text(spec.default)}")
        if spec.tgi_default != spec.default:
            notes.append(f"TGI's default: {spec.tgi_default}")
        help_text = (spec.help + (f" [{'; '.join(notes)}]" if notes else "")).replace("%", "%%")
        flags = [spec.flag] + ([spec.short] if spec.short else [])
        kwargs: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS, "help": help_text}
        if spec.kind == "flag":
            kwargs["action"] = "store_true"
        else:
            kwargs["metavar"] = name.upper()
            if spec.choices:
                kwargs["choices"] = list(spec.choices)
            if spec.kind == "list":
                kwargs["action"] = "append"
        sections[spec.group].add_argument(*flags, **kwargs)
    return parser
