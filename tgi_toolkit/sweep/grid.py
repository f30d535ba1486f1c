"""The values a sweep is made of: workloads, configurations checked against the launcher's rules,
and the error for a specification that cannot run.

Below the runner and the manifest, which take these values, and below `tgi_toolkit.sweep.spec`,
whose `Sweep` expands into them and runs through the runner; `SweepPlan` names what the runner and
the manifest read from a Sweep, so neither imports the module that imports them.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tgi_toolkit import schema as S
from tgi_toolkit.bench.checks import LaunchLimits, check_options
from tgi_toolkit.bench.errors import BenchError
from tgi_toolkit.config import ConfigError, LauncherConfig
from tgi_toolkit.config.options import suggest
from tgi_toolkit.scenarios.kinds import check_scenario, scenario_class

# Backends a sweep can relaunch ("url" attaches to one server: nothing to relaunch).
BACKENDS = ("embedded", "tgi", "tgi-docker", "vllm")
# Set by the sweep for every workload: a workload cannot redirect or silence them.
RESERVED_OPTIONS = ("output", "resume", "progress", "on_point", "command")
# The bench's options shared by every scenario (tgi_toolkit.bench.api's docstring).
BENCH_OPTIONS = ("tokenizer", "seed", "prefix_tokens", "dataset", "api", "api_key", "ignore_eos", "sampling",
                 "slo_ttft_s", "slo_tpot_s", "scrape_interval", "request_timeout")
SERVER_OPTIONS = ("health_timeout", "env")
RAY_OPTIONS = ("address", "num_cpus", "shared_folder", "init")  # RayExecutor's arguments
SPEC_KEYS = ("name", "backend", "base", "grid", "configs", "workloads", "options", "server", "output", "executor",
             "ray")
EXECUTORS = ("local", "ray")


class SweepError(ValueError):
    """A sweep specification that cannot run at all (unknown field, scenario or option).

    Configurations that merely break a launcher rule are not errors: they are recorded as invalid.
    """


def json_shaped(value: Any) -> Any:
    """JSON-shaped copy (tuples and ranges become lists) so keys and manifests do not depend on spelling."""
    return json.loads(json.dumps(value, default=lambda v: list(v) if isinstance(v, (tuple, range, set)) else str(v)))


def _short_hash(value: Any) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:10]


def field_name(name: str) -> str:
    """`--max-batch-size` or `max-batch-size` -> `max_batch_size`, checked against LauncherConfig."""
    norm = str(name).strip().lstrip("-").replace("-", "_")
    fields = list(LauncherConfig.model_fields)
    if norm not in fields:
        raise SweepError(f"grid: {name!r} is not a launcher option{suggest(norm, fields)}")
    return norm


class Workload:
    """One bench scenario and its parameters, run against every configuration.

    >>> Workload("concurrency", users=[1, 4], prompt_tokens=64, max_new_tokens=16)

    `params` are the scenario's parameters (the fields of its dataclass, tgi_toolkit.scenarios) and
    the bench's common options (seed, slo_ttft_s, ...); output, resume and progress belong to the sweep.
    """

    def __init__(self, scenario: str, *, name: str | None = None, **params: Any) -> None:
        if scenario not in S.SCENARIOS:
            raise SweepError(f"workload: scenario {scenario!r} is not known (allowed: {', '.join(S.SCENARIOS)})")
        reserved = sorted(set(params) & set(RESERVED_OPTIONS))
        if reserved:
            raise SweepError(f"workload {scenario}: {', '.join(reserved)} belong to the sweep, not to a workload")
        allowed = (*scenario_class(scenario).parameters(), *BENCH_OPTIONS)  # the scenario dataclass's fields
        for key in params:
            if key not in allowed:
                raise SweepError(f"workload {scenario}: {key!r} is not a parameter of run_{scenario}"
                                 f"{suggest(key, list(allowed))} (allowed: {', '.join(allowed)})")
        self.scenario = scenario
        self.name = name
        self.params: dict[str, Any] = json_shaped(params)
        self.check()

    def check(self, limits: LaunchLimits | None = None) -> None:
        """Its values checked as its run will check them (bench.checks), before any server is launched;
        `limits`: a configuration's, for its lengths. SweepError naming the field and the allowed values."""
        try:
            check_scenario(self.scenario, self.params, limits)
            check_options(self.params if self.scenario != "shared_prefix"  # its prefix_tokens is its own
                          else {k: v for k, v in self.params.items() if k != "prefix_tokens"})
        except BenchError as exc:
            raise SweepError(f"workload {self.label}: {exc}") from None

    @property
    def key(self) -> str:
        """Stable identity of the workload (scenario and parameters), used to resume it."""
        return _short_hash({"scenario": self.scenario, "params": self.params})

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        inner = ",".join(f"{k}={v}" for k, v in self.params.items() if k not in ("api_key",))
        return f"{self.scenario}({inner})"

    def with_options(self, options: Mapping[str, Any]) -> Workload:
        """This workload with sweep-wide options filled in where it sets none of its own."""
        return Workload(self.scenario, name=self.name, **{**dict(options), **self.params})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"scenario": self.scenario}
        if self.name:
            out["name"] = self.name
        out.update(self.params)
        if "api_key" in out:
            out["api_key"] = "***"
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | Workload) -> Workload:
        if isinstance(data, Workload):
            return data
        if not isinstance(data, Mapping) or "scenario" not in data:
            raise SweepError(f"workload: {data!r} needs a `scenario` ({', '.join(S.SCENARIOS)})")
        params = {k: v for k, v in data.items() if k not in ("scenario", "name")}
        return cls(str(data["scenario"]), name=data.get("name"), **params)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Workload) and (self.scenario, self.params) == (other.scenario, other.params)

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"Workload({self.scenario!r}{', ' if args else ''}{args})"


@dataclass
class SweepConfig:
    """One configuration of a sweep: the overrides applied to the base, and what came of checking them.

    `config` is None when a single field was refused outright (e.g. a negative size); `problems`
    lists every broken launcher rule as {"fields": [...], "rule": "..."}; an invalid configuration
    is recorded in the manifest and never launched.
    """

    index: int
    overrides: dict[str, Any]
    config: LauncherConfig | None
    problems: list[dict[str, Any]] = field(default_factory=list)
    config_id: str = ""
    config_label: str = ""  # the bench's label: every non-default setting, base included

    @property
    def valid(self) -> bool:
        return self.config is not None and not self.problems

    @property
    def label(self) -> str:
        """What this configuration changes from the base, e.g. "max_batch_size=4" ("base" for none)."""
        return ",".join(f"{k}={v}" for k, v in self.overrides.items()) or "base"

    def __repr__(self) -> str:
        state = "valid" if self.valid else f"invalid: {'; '.join(p['rule'] for p in self.problems)}"
        return f"SweepConfig({self.index}, {self.label}, {self.config_id}, {state})"


def _problems(exc: ConfigError) -> list[dict[str, Any]]:
    return [{"fields": list(p.fields), "rule": str(p)} for p in exc.problems]


def make_config(base: LauncherConfig, overrides: Mapping[str, Any], index: int = 0, *,
                env: Mapping[str, str] | None = None, backend: str = "tgi") -> SweepConfig:
    """Apply `overrides` to `base` and check every launcher rule (never raises for a broken rule).

    `env` and `backend` are the server's: they say whether prefill chunking applies (LauncherConfig.problems).
    """
    from tgi_toolkit.bench import provenance

    overrides = dict(overrides)
    # Only the fields the user set on the base: the new config derives the rest like the launcher does.
    values = {**base.model_dump(exclude_unset=True), **overrides}
    try:
        config = type(base)(**values)
    except ConfigError as exc:
        asked = {"base": base.to_dict(non_default_only=True), "overrides": json_shaped(overrides)}
        ident = "x" + _short_hash(asked)[:9]
        return SweepConfig(index, overrides, None, _problems(exc), ident, "")
    problems = [{"fields": list(p.fields), "rule": str(p)} for p in config.problems(env, backend=backend)]
    return SweepConfig(index, overrides, config, problems, provenance.config_id(config),
                       provenance.config_label(config))


def as_base(base: LauncherConfig | Mapping[str, Any] | str | None) -> LauncherConfig:
    if base is None:
        return LauncherConfig()
    if isinstance(base, LauncherConfig):
        return base
    if isinstance(base, str):  # launcher flags, as on a command line
        return LauncherConfig.from_cli(shlex.split(base), environ={})
    if isinstance(base, Mapping):
        return LauncherConfig(**{field_name(k): v for k, v in base.items()})
    raise SweepError(f"base: expected a LauncherConfig, a mapping of its fields or launcher flags; got {base!r}")


class SweepPlan(Protocol):
    """What the runner and the manifest read from a `tgi_toolkit.sweep.spec.Sweep`."""

    backend: str
    server: dict[str, Any]
    ray: dict[str, Any]
    output: Path | None

    def configs(self) -> list[SweepConfig]: ...

    def resolved_workloads(self) -> list[Workload]: ...

    def knobs(self) -> list[str]: ...

    def to_dict(self) -> dict[str, Any]: ...
