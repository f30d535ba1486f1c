"""What every scenario is: one frozen dataclass whose fields are its parameters (default, command-line flag and
help in the field's metadata), checked when built (`__post_init__`, bench.checks' rules) and against a server's
limits by `check`. The harness (bench.api, bench.scenarios), the simulator (simulate.api, simulate.workloads),
the sweep's grid and the command line (bench.cli) all read the same class, so a parameter is declared once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from tgi_toolkit.bench.checks import Limits
from tgi_toolkit.bench.errors import BenchError

T = TypeVar("T", bound="Scenario")


def param(default: Any, help: str, *, flag: str | None = None, short: str | None = None, repeat: bool = False,
          type: Any = int, choices: tuple[str, ...] | None = None, metavar: str | None = None,
          common: bool = False) -> Any:
    """A scenario parameter: its default and how the command line spells it (`flag`, default `--name`;
    `repeat`: the flag is given once per value; `common`: the flag is one of every scenario's, whose default
    this scenario sets)."""
    return dataclasses.field(default=default, metadata={
        "help": help, "flag": flag, "short": short, "repeat": repeat, "type": type, "choices": choices,
        "metavar": metavar, "common": common})


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A scenario's parameters, checked when built; `check(limits)` checks its lengths against a server's."""

    name: ClassVar[str]

    def _set(self, field: str, value: Any) -> None:
        object.__setattr__(self, field, value)  # a frozen dataclass normalises its own values once, when built

    def check(self: T, limits: Limits | None) -> T:
        """The values a server with these limits would refuse (BenchError naming the field); self otherwise."""
        return self

    def workload(self) -> dict[str, Any]:
        """The run's workload record (provenance; an earlier run resumes when it is equal)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def extras(self, names: tuple[str, ...]) -> dict[str, Any]:
        """Those of `names` set away from their default: recorded only when used, so that a run made before
        the parameter existed still matches its rerun."""
        fields = {f.name: f for f in dataclasses.fields(self)}
        return {n: _plain(getattr(self, n)) for n in names if getattr(self, n) != fields[n].default}

    @classmethod
    def parameters(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def default(cls, name: str) -> Any:
        return {f.name: f.default for f in dataclasses.fields(cls)}[name]

    @classmethod
    def of(cls: type[T], params: Mapping[str, Any]) -> T:
        """Built from a mapping of its parameters; an unknown name is a BenchError listing the allowed ones."""
        unknown = sorted(set(params) - set(cls.parameters()))
        if unknown:
            raise BenchError(unknown[0], f"is not a parameter of the {cls.name} scenario", ", ".join(cls.parameters()))
        return cls(**params)


def _plain(value: Any) -> Any:
    """JSON-shaped (a length distribution or a stage as its own record)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def split(cls: type[T], params: Mapping[str, Any]) -> tuple[T, dict[str, Any]]:
    """A function's keywords as the scenario they make (its fields) and the run's options (the rest)."""
    own = set(cls.parameters())
    return cls(**{k: v for k, v in params.items() if k in own}), {k: v for k, v in params.items() if k not in own}


def wrapper_signature(cls: type[Scenario], first: str) -> Any:
    """The signature a thin wrapper shows (help(), a notebook's completion): `first`, the scenario's fields with
    their defaults, then **options."""
    import inspect

    kinds = inspect.Parameter
    return inspect.Signature([kinds(first, kinds.POSITIONAL_OR_KEYWORD)]
                             + [kinds(f.name, kinds.KEYWORD_ONLY, default=f.default) for f in dataclasses.fields(cls)]
                             + [kinds("options", kinds.VAR_KEYWORD)])
