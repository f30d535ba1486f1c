"""What a tuning found (`TuneResult`), built whole by the tuner (tune.setup.TuningSetup.result) and saved as tune.json
beside the results (`load_tune` reads it back): the configuration chosen and the trade-offs (tune.select's `Choice`),
what was searched (`Searched`), the rounds (`Round`), and where it is saved.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from tgi_toolkit import schema as S
from tgi_toolkit.tune.select import SCORE, Choice, Objectives

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.config import LauncherConfig

TUNE_FILE = "tune.json"


@dataclass(frozen=True)
class Searched:
    """What a tuning searched: on `backend`, candidates sharing `base` (the settings, secrets redacted, as tune.json
    keeps them; `config`: the LauncherConfig itself, secrets included, while in memory), for `workload` (its SLOs
    the objectives), over `space` (knob -> candidate values and where they came from) bounded by `plan` (the
    capacity plan's sizing fields and steps)."""

    backend: str = "embedded"
    base: dict[str, Any] = field(default_factory=dict)
    workload: dict[str, Any] = field(default_factory=dict)
    space: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] | None = None
    config: LauncherConfig | None = None


@dataclass(frozen=True)
class Round:
    """One round of a search: its `number`, what `kind` of round, the `configs` it measured (their labels) and the
    configuration it centred on afterwards (`center`: the best, or the closest, so far)."""

    number: int
    kind: str
    configs: tuple[str, ...] = ()
    center: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"round": self.number, "kind": self.kind, "configs": list(self.configs), "center": self.center}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Round:
        return cls(int(data["round"]), data["kind"], tuple(data.get("configs", ())), data.get("center"))


@dataclass(frozen=True)
class TuneResult:
    """What tuning found: the configuration to use and the trade-offs (`choice`), what was searched (`searched`),
    how the search went (`rounds`; `simulation`: for tune --simulate, how its ranking agreed with the measured one,
    also in simulation.json) and where it is saved (`path`, tune.json beside the results). Built whole by the
    tuner (tune.setup.TuningSetup.result), or read back from tune.json (load_tune)."""

    choice: Choice
    searched: Searched = field(default_factory=Searched)
    rounds: tuple[Round, ...] = ()
    path: Path | None = None
    simulation: dict[str, Any] | None = None

    @property
    def met(self) -> bool:
        """Some configuration met the objectives (the choice's `met`)."""
        return self.choice.met

    @property
    def message(self) -> str:
        """The choice in a sentence: the best and how it measured, or the closest."""
        return self.choice.message

    def to_launcher_config(self, closest: bool = False) -> LauncherConfig:
        """The chosen configuration as a LauncherConfig (closest=True: the closest when none met them)."""
        from tgi_toolkit.config import LauncherConfig

        choice = self.choice
        chosen = choice.best if choice.best is not None else (choice.closest if closest else None)
        if chosen is None:
            raise ValueError(self.message + ("" if choice.closest is None else
                                             "; to_launcher_config(closest=True) gives the closest one"))
        if self.searched.config is not None:
            values = {**self.searched.config.model_dump(exclude_unset=True), **chosen["overrides"]}
        else:  # read back from tune.json: secrets were redacted there
            values = {k: v for k, v in {**self.searched.base, **chosen["overrides"]}.items() if v != "***"}
        return LauncherConfig(**values)

    def command(self, closest: bool = False) -> str:
        """The shell command that serves the chosen configuration on this result's backend."""
        import shlex

        config = self.to_launcher_config(closest=closest)
        backend = self.searched.backend
        if backend == "vllm":
            from tgi_toolkit.config import to_vllm_args

            return shlex.join(to_vllm_args(config).argv)
        if backend == "tgi-docker":  # not shlex-quoted: its volume names $PWD for the shell to expand
            return " ".join(config.docker_command())
        program = ["tgi-toolkit", "serve"] if backend == "embedded" else ["text-generation-launcher"]
        return shlex.join([*program, *config.to_cli()])

    def to_dict(self) -> dict[str, Any]:
        """tune.json's record (flat, as it was before the result was grouped: load_tune reads either)."""
        choice, searched = self.choice, self.searched
        return {"kind": "tgi_toolkit.tune", "version": 1, "objectives": choice.objectives.to_dict(),
                "met": self.met, "message": self.message, "best": _plain(choice.best),
                "closest": _plain(choice.closest), "backend": searched.backend, "base": searched.base,
                "workload": searched.workload, "space": searched.space, "plan": searched.plan,
                "rounds": [r.to_dict() for r in self.rounds], "table": _records(choice.table),
                "pareto": _records(choice.pareto)}

    def save(self, folder: str | Path) -> Path:
        """Write tune.json into `folder` (beside the sweep's results); returns its path (a tuner builds its
        result with that `path`)."""
        path = Path(folder) / TUNE_FILE
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, default=str))
        tmp.replace(path)
        return path

    def __str__(self) -> str:
        return self.message

    def _repr_markdown_(self) -> str:
        table = self.choice.table
        shown = [c for c in table.columns if c not in (S.CONFIG_LABEL, "error", SCORE)]
        text = table[shown].head(20).to_string(index=False, float_format=lambda v: f"{v:.4g}")
        return f"**{self.message}**\n\n```\n{text}\n```"


def _plain(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if row is None else json.loads(json.dumps(dict(row), default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return None if not np.isfinite(value) else float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if value is pd.NA:
        return None
    return str(value)


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    # JSON's own encoder turns NaN, inf and pandas' NA into null.
    return json.loads(df.to_json(orient="records", default_handler=str))


def load_tune(folder: str | Path) -> TuneResult:
    """A TuneResult read back from the tune.json in `folder`."""
    path = Path(folder) / TUNE_FILE
    data = json.loads(path.read_text())
    choice = Choice(Objectives(**data["objectives"]), pd.DataFrame(data["table"]), pd.DataFrame(data["pareto"]),
                    data["best"], data["closest"])
    searched = Searched(data.get("backend", "embedded"), data.get("base", {}), data.get("workload", {}),
                        data.get("space", {}), data.get("plan"))
    return TuneResult(choice, searched, tuple(Round.from_dict(r) for r in data.get("rounds", [])), path)
