"""What a sweep is: a base launcher config, a grid of overrides, workloads, and where it runs.

Everything here is cheap (no server, no benchmark): `Sweep.configs()` expands and checks the grid
so a notebook or `tgi-toolkit sweep --dry-run` can show what would be launched, and which
configurations break a launcher rule, before anything starts.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tgi_toolkit.bench.checks import LaunchLimits
from tgi_toolkit.config import LauncherConfig
from tgi_toolkit.config.options import suggest

# The values live in grid.py, below the runner this module's Sweep.run calls; re-exported here.
from tgi_toolkit.sweep.grid import (  # noqa: F401
    BACKENDS,
    BENCH_OPTIONS,
    EXECUTORS,
    RAY_OPTIONS,
    RESERVED_OPTIONS,
    SERVER_OPTIONS,
    SPEC_KEYS,
    SweepConfig,
    SweepError,
    SweepPlan,
    Workload,
    as_base,
    field_name,
    json_shaped,
    make_config,
)

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.bench.results import Results
    from tgi_toolkit.sweep.executors import Executor


class Sweep:
    """A grid of launcher settings crossed with workloads; the server is relaunched per configuration.

    >>> sweep = Sweep(base=LauncherConfig(max_input_tokens=256, max_total_tokens=512),
    ...               grid={"max_batch_size": [1, 4], "max_batch_prefill_tokens": [256, 1024]},
    ...               workloads=[Workload("concurrency", users=[1, 4], prompt_tokens=64, max_new_tokens=16)])
    >>> [c.label for c in sweep.configs()]      # 4 configurations, checked, not launched
    >>> results = sweep.run("results/sweep")     # bench Results of the whole folder

    base: the settings every configuration shares (a LauncherConfig, a dict of its fields, or
    launcher flags as one string). grid: field -> values, crossed (every combination). configs:
    extra configurations, each a dict of overrides, not crossed. workloads: Workload objects or
    dicts with a `scenario`. options: bench options for every workload (a workload's own value
    wins), e.g. slo_ttft_s. server: Server options (health_timeout, env). output: default folder.
    executor: "local" (one configuration after another) or "ray"; ray: RayExecutor arguments.
    """

    def __init__(self, base: LauncherConfig | Mapping[str, Any] | str | None = None,
                 grid: Mapping[str, Any] | None = None, workloads: Sequence[Workload | Mapping[str, Any]] = (), *,
                 backend: str = "embedded", configs: Sequence[Mapping[str, Any]] = (),
                 options: Mapping[str, Any] | None = None, server: Mapping[str, Any] | None = None,
                 output: str | Path | None = None, name: str | None = None, executor: str = "local",
                 ray: Mapping[str, Any] | None = None) -> None:
        if backend not in BACKENDS:
            raise SweepError(f"backend: {backend!r} cannot be relaunched by a sweep (allowed: {', '.join(BACKENDS)}; "
                             "to measure a running server use tgi_toolkit.bench with its URL)")
        if executor not in EXECUTORS:
            raise SweepError(f"executor: {executor!r} is not known (allowed: {', '.join(EXECUTORS)})")
        self.base = as_base(base)
        self.grid: dict[str, list[Any]] = {}
        for key, values in (grid or {}).items():
            values = list(values) if isinstance(values, (list, tuple, range)) else [values]
            if not values:
                raise SweepError(f"grid: {key!r} has no values")
            self.grid[field_name(key)] = json_shaped(values)
        self.extra_configs = [{field_name(k): v for k, v in dict(c).items()} for c in configs]
        self.workloads = [Workload.from_dict(w) for w in workloads]
        if not self.workloads:
            raise SweepError("workloads: a sweep needs at least one workload, e.g. "
                             "Workload('concurrency', users=[1, 4], prompt_tokens=64, max_new_tokens=16)")
        self.options = json_shaped(dict(options or {}))
        for key in self.options:
            if key in RESERVED_OPTIONS or key not in BENCH_OPTIONS:
                raise SweepError(f"options: {key!r} is not a bench option for every workload"
                                 f"{suggest(key, list(BENCH_OPTIONS))} (allowed: {', '.join(BENCH_OPTIONS)})")
        self.resolved_workloads()  # the options must suit every scenario too (raises SweepError)
        self.server = dict(server or {})
        for key in self.server:
            if key not in SERVER_OPTIONS:
                raise SweepError(f"server: {key!r} is not a Server option (allowed: {', '.join(SERVER_OPTIONS)})")
        self.ray = dict(ray or {})
        for key in self.ray:
            if key not in RAY_OPTIONS:
                raise SweepError(f"ray: {key!r} is not a RayExecutor option (allowed: {', '.join(RAY_OPTIONS)})")
        self.backend = backend
        self.output = Path(output) if output is not None else None
        self.name = name
        self.executor = executor

    # -- reading and writing the specification ---------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Sweep:
        if not isinstance(data, Mapping):
            raise SweepError(f"a sweep specification is a mapping of {', '.join(SPEC_KEYS)}; got {type(data).__name__}")
        unknown = [k for k in data if k not in SPEC_KEYS]
        if unknown:
            raise SweepError(f"{unknown[0]!r} is not a sweep key{suggest(str(unknown[0]), list(SPEC_KEYS))} "
                             f"(allowed: {', '.join(SPEC_KEYS)})")
        kwargs = {k: v for k, v in data.items() if v is not None}
        kwargs["configs"] = kwargs.get("configs") or ()
        kwargs["workloads"] = kwargs.get("workloads") or ()
        return cls(**kwargs)

    @classmethod
    def from_yaml(cls, path: str | Path) -> Sweep:
        """Read a YAML specification (format: tgi_toolkit.sweep's docstring). A relative `output`
        is taken relative to the YAML file's folder."""
        import yaml

        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            # One line: the parser's own message spans several, with a caret drawing.
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise SweepError(f"{path}: not valid YAML{where}: {problem}") from None
        sweep = cls.from_dict(data or {})
        if sweep.output is not None and not sweep.output.is_absolute():
            sweep.output = (path.resolve().parent / sweep.output).resolve()
        return sweep

    def to_dict(self) -> dict[str, Any]:
        """The specification as plain data (secrets redacted): what the manifest records."""
        out: dict[str, Any] = {"name": self.name, "backend": self.backend,
                               "base": self.base.to_dict(non_default_only=True, redact=True),
                               "grid": self.grid, "configs": self.extra_configs,
                               "workloads": [w.to_dict() for w in self.workloads], "options": self.options,
                               "server": {k: v for k, v in self.server.items() if k != "env"},
                               "output": str(self.output) if self.output is not None else None,
                               "executor": self.executor, "ray": self.ray}
        return json_shaped(out)

    def to_yaml(self) -> str:
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    # -- expansion ----------------------------------------------------------------------------------
    def resolved_workloads(self) -> list[Workload]:
        """The workloads with the sweep-wide options filled in (what each configuration runs)."""
        return [w.with_options(self.options) for w in self.workloads]

    def configs(self) -> list[SweepConfig]:
        """Every configuration, checked: the grid's combinations, then `configs`; duplicates dropped.
        The base alone is a configuration only when there is neither a grid nor `configs`.

        Two combinations that end up as the same launcher settings (same config_id) run once.
        """
        combos: list[dict[str, Any]] = []
        keys = list(self.grid)
        if keys:  # the product of no values is one empty combination: the base, which nobody listed
            for values in itertools.product(*(self.grid[k] for k in keys)):
                combos.append(dict(zip(keys, values, strict=True)))
        combos += [dict(c) for c in self.extra_configs]
        if not combos:
            combos = [{}]
        out: list[SweepConfig] = []
        seen: set[str] = set()
        # The servers' environment decides TGI 3's scheduling mode, hence which rules apply.
        env = {**os.environ, **{str(k): str(v) for k, v in (self.server.get("env") or {}).items()}}
        workloads = self.resolved_workloads()
        for overrides in combos:
            made = make_config(self.base, overrides, len(out), env=env, backend=self.backend)
            if made.config_id in seen:
                continue
            if made.valid:  # a workload's lengths over this configuration's limits would fail once launched
                for workload in workloads:
                    try:
                        workload.check(LaunchLimits.of(made.config))
                    except SweepError as exc:
                        made.problems.append({"fields": ["max_input_tokens", "max_total_tokens"], "rule": str(exc)})
            seen.add(made.config_id)
            out.append(made)
        return out

    def knobs(self) -> list[str]:
        """The fields this sweep varies (grid keys, then those of `configs`)."""
        names = list(self.grid)
        for c in self.extra_configs:
            names += [k for k in c if k not in names]
        return names

    # -- running ---------------------------------------------------------------------------------------
    def run(self, output: str | Path | None = None, *, resume: bool = True, progress: bool = True,
            executor: str | Executor | None = None, retry_failed: bool = False,
            on_point: Callable[[dict[str, Any]], None] | None = None,
            on_config: Callable[[dict[str, Any]], None] | None = None,
            command: Sequence[str] | None = None) -> Results:
        """Launch each configuration, run every workload against it, and return the folder's Results.

        output: the results folder (default: the spec's `output`). resume: skip configurations
        (and points) already finished there; False measures everything again as new runs.
        executor: "local", "ray", or a RayExecutor (default: the spec's). retry_failed: also
        relaunch configurations recorded as failed (by default a failure is a result, kept, except
        a server that died mid-run, and configurations that all failed to start: tgi_toolkit.sweep).
        on_point(row): called with each saved point (from the bench; local executor only: Ray tasks
        run elsewhere). on_config(entry): called with each configuration's manifest entry when it is
        done. command: argv, for provenance.
        """
        from tgi_toolkit.sweep.runner import run_sweep

        folder = Path(output) if output is not None else self.output
        if folder is None:
            raise SweepError("output: a sweep needs a results folder (run(output=...) or `output:` in the spec)")
        return run_sweep(self, folder, resume=resume, progress=progress,
                         executor=executor if executor is not None else self.executor,
                         retry_failed=retry_failed, on_point=on_point, on_config=on_config, command=command)

    def __repr__(self) -> str:
        grid = ", ".join(f"{k}={v}" for k, v in self.grid.items())
        return (f"Sweep(backend={self.backend!r}, grid={{{grid}}}, {len(self.extra_configs)} extra config(s), "
                f"workloads={self.workloads})")
