"""`LauncherConfig`: every option of `text-generation-launcher`, its checks and its renderings.

The fields are in config.launcher_fields and their cross-field rules in config.launcher_rules (its bases);
here: construction (a bad field raises `ConfigError` naming its flag), renderings and readers.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError, field_validator

from tgi_toolkit.config import options, rust_debug
from tgi_toolkit.config.errors import ConfigError, Problem
from tgi_toolkit.config.launcher_fields import GROUPS
from tgi_toolkit.config.launcher_rules import LauncherRules
from tgi_toolkit.config.options import COMMA_LISTS, OptionSpec, env_for, flag_for, suggest, text

DOCKER_IMAGE = "ghcr.io/huggingface/text-generation-inference:latest"
CONTAINER_PORT = 80  # TGI's image sets PORT=80

# The enum variant names the launcher prints in its `Args { ... }` line.
_VARIANTS: dict[str, str] = {
    "awq": "Awq", "compressed-tensors": "CompressedTensors", "eetq": "Eetq", "exl2": "Exl2", "gptq": "Gptq",
    "marlin": "Marlin", "bitsandbytes": "Bitsandbytes", "bitsandbytes-nf4": "BitsandbytesNf4",
    "bitsandbytes-fp4": "BitsandbytesFp4", "fp8": "Fp8", "float16": "Float16", "bfloat16": "BFloat16",
    "float32": "Float32",
    "fp8_e4m3fn": "Fp8e4m3fn", "fp8_e5m2": "Fp8e5m2", "linear": "Linear", "dynamic": "Dynamic",
    "on": "On", "off": "Off", "no-stack": "NoStack",
}
_SECRETS = frozenset({"api_key", "ngrok_authtoken"})
_ALWAYS_RENDERED = ("model_id", "hostname")  # our defaults differ from the launcher's


class LauncherConfig(LauncherRules):
    """Every `text-generation-launcher` option. None means "let the server work it out"."""

    # -- construction ------------------------------------------------------------------------
    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(_validation_problems(exc)) from None

    def __setattr__(self, name: str, value: Any) -> None:
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise ConfigError(_validation_problems(exc)) from None

    @field_validator("quantize", "dtype", "kv_cache_dtype", "rope_scaling", "usage_stats", mode="before")
    @classmethod
    def _enum_spelling(cls, value: Any, info: Any) -> Any:
        # Accept the launcher's log spelling (`Gptq`, `BitsandbytesNf4`, `NoStack`) for the same value.
        return _match_variant(info.field_name, value)

    @field_validator("cuda_graphs", "cors_allow_origin", mode="before")
    @classmethod
    def _split_lists(cls, value: Any, info: Any) -> Any:
        if isinstance(value, str):
            value = [item.strip() for item in value.split(",") if item.strip()]
        if info.field_name == "cuda_graphs" and value is not None:
            # TGI drops zeros ("0" disables); store the disabled state one way only.
            value = list(value) or [0]
        return value

    @field_validator("cuda_graphs")
    @classmethod
    def _non_negative(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and any(size < 0 for size in value):
            raise ValueError("batch sizes must be >= 0")
        return value

    @classmethod
    def create(cls, **kwargs: Any) -> LauncherConfig:
        """Build from keyword arguments; any bad field raises ConfigError naming its flag."""
        return cls(**kwargs)

    # -- renderings --------------------------------------------------------------------------
    def _rendered_fields(self) -> list[tuple[str, Any]]:
        defaults = _defaults()
        return [(name, value) for name, value in self._values()
                if name in _ALWAYS_RENDERED or value != defaults[name]]

    def _values(self) -> list[tuple[str, Any]]:
        return [(name, getattr(self, name)) for name in type(self).model_fields]

    def to_cli(self) -> list[str]:
        """Launcher arguments for the values that differ from the defaults (model and host always)."""
        argv: list[str] = []
        for name, value in self._rendered_fields():
            flag = flag_for(name)
            if value is None:
                continue
            if isinstance(value, bool) and _SPECS[name].kind == "flag":
                if value:
                    argv.append(flag)
            elif isinstance(value, list):
                if name in COMMA_LISTS:
                    argv += [flag, ",".join(str(item) for item in value)]
                else:
                    for item in value:
                        argv += [flag, str(item)]
            else:
                argv += [flag, text(value)]
        return argv

    def to_env(self) -> dict[str, str]:
        """Environment variables for the values that differ from the defaults (model and host always)."""
        env: dict[str, str] = {}
        for name, value in self._rendered_fields():
            var = env_for(name)
            if var is None or value is None:
                continue
            # List variables are comma-joined; the launcher splits only CUDA_GRAPHS, so give it
            # at most one CORS origin this way.
            env[var] = ",".join(str(item) for item in value) if isinstance(value, list) else text(value)
        return env

    def docker_command(self, image: str = DOCKER_IMAGE, gpus: str | None = "all", volume: str = "$PWD/data",
                       shm_size: str = "1g") -> list[str]:
        """`docker run` for TGI's image serving this config on the host at hostname:port.

        Inside the container the launcher listens on 0.0.0.0:80; the host side is published on
        the configured address and port. HF_TOKEN is passed by name only (docker copies it from
        the caller's environment), never by value. `huggingface_hub_cache`, a host path, becomes
        the mounted volume instead of an argument (the image keeps its cache in /data).
        """
        if self.huggingface_hub_cache and volume == "$PWD/data":
            volume = self.huggingface_hub_cache
        inside = self.model_copy(update={"hostname": "0.0.0.0", "port": CONTAINER_PORT,
                                         "huggingface_hub_cache": None})
        publish = (f"{self.port}:{CONTAINER_PORT}" if self.hostname in ("0.0.0.0", "::", "")
                   else f"{self.hostname}:{self.port}:{CONTAINER_PORT}")
        head = ["docker", "run"]
        if gpus:
            head += ["--gpus", gpus]
        head += ["--shm-size", shm_size, "-p", publish, "-v", f"{volume}:/data", "-e", "HF_TOKEN"]
        return [*head, image, *inside.to_cli()]

    def to_dict(self, non_default_only: bool = False, redact: bool = True) -> dict[str, Any]:
        """Plain field -> value mapping for provenance; secrets are shown as "***" unless redact=False."""
        defaults = _defaults()
        out = {}
        for name, value in self._values():
            if non_default_only and value == defaults[name]:
                continue
            if redact and name in _SECRETS and value is not None:
                value = "***"
            out[name] = list(value) if isinstance(value, list) else value
        return out

    def to_args_log(self, redact: bool = False) -> str:
        """The launcher's `Args { ... }` log line for this config (readable by `from_args_log`)."""
        parts = []
        for name, value in self._values():
            spec = _SPECS[name]
            if redact and name in _SECRETS and value is not None:
                value = "***"
            variant = _VARIANTS.get(value) if spec.choices and isinstance(value, str) else None
            parts.append(f"{name}: {rust_debug.render_value(value, optional=spec.optional, variant=variant)}")
        return "Args { " + ", ".join(parts) + " }"

    def to_deployment_arguments(self) -> str:
        """The "# Deployment Arguments" list of seed 000's model cards, for every field."""
        lines = ["# Deployment Arguments", "## Constant"]
        for name, value in self._values():
            lines.append(f"- {name}: {rust_debug.render_value(value, optional=False)}")
        return "\n".join(lines) + "\n"

    # -- readers -----------------------------------------------------------------------------
    @classmethod
    def from_cli(cls, argv: Sequence[str], environ: Mapping[str, str] | None = None) -> LauncherConfig:
        """Parse launcher arguments; `environ` supplies the launcher's variables as fallbacks.

        Takes `--flag value` and `--flag=value`, bare boolean flags, `-p`/`-e`/`-g`, and an optional
        leading `text-generation-launcher`. Like the launcher, a variable such as HOSTNAME or PORT
        in `environ` is used when its flag is absent. All problems are raised together.
        """
        values, origin, problems = options.parse_argv(list(argv), _SPECS)
        if environ is not None:
            for name, value in options.read_env(environ, _SPECS).items():
                if name not in values:
                    values[name] = value
                    origin[name] = f"${env_for(name)}"
        return _build(cls, values, origin, problems)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> LauncherConfig:
        """The launcher's environment variables (MODEL_ID, MAX_TOTAL_TOKENS, ...) found in `environ`."""
        values = options.read_env(environ, _SPECS)
        return _build(cls, values, {name: f"${env_for(name)}" for name in values}, [])

    @classmethod
    def from_args_log(cls, line: str, strict: bool = False) -> LauncherConfig:
        """Read the launcher's `Args { model_id: "...", quantize: Some(Gptq), ... }` log line.

        Fields of newer launchers that this config does not know are skipped unless strict=True.
        """
        try:
            raw = rust_debug.parse_args_struct(line)
        except rust_debug.DebugSyntaxError as exc:
            raise ConfigError([Problem((), f"cannot read the launcher's Args line: {exc}")]) from None
        return _from_mapping(cls, raw, strict=strict, source="Args line")

    @classmethod
    def from_deployment_arguments(cls, text: str) -> LauncherConfig:
        """Read a "# Deployment Arguments" list (`- max_total_tokens: 1512`, ...) as in seed 000."""
        lines = text.splitlines()
        start = next((i + 1 for i, line in enumerate(lines) if line.strip().lower() == "# deployment arguments"), 0)
        raw: dict[str, Any] = {}
        problems: list[Problem] = []
        for line in lines[start:]:
            if re.match(r"#\s", line) and start:  # the next top-level section ends the list
                break
            match = re.match(r"\s*[-*]\s+([a-z][a-z0-9_]*)\s*:\s*(.*?)\s*$", line)
            if not match:
                continue  # headings, and variables such as `CUDA_VISIBLE_DEVICES (...)`
            try:
                raw[match.group(1)] = rust_debug.parse_value(match.group(2))
            except rust_debug.DebugSyntaxError as exc:
                problems.append(Problem((match.group(1),), f"{match.group(1)}: cannot read {match.group(2)!r}: {exc}"))
        if problems:
            raise ConfigError(problems)
        return _from_mapping(cls, raw, strict=True, source="deployment arguments")

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        """Add every launcher flag to `parser` (for `--help`; parse with `from_cli`)."""
        return options.add_arguments(parser, _SPECS, GROUPS)

    @classmethod
    def argparse_parser(cls, prog: str = "text-generation-launcher") -> argparse.ArgumentParser:
        """A parser whose `--help` looks like the launcher's."""
        return cls.add_arguments(argparse.ArgumentParser(prog=prog, description="text-generation-launcher options"))


# -- field table -----------------------------------------------------------------------------------
_SPECS: dict[str, OptionSpec] = options.build_specs(LauncherConfig.model_fields)
OPTIONS: Mapping[str, OptionSpec] = _SPECS


def _defaults() -> dict[str, Any]:
    return {name: spec.default for name, spec in _SPECS.items()}


def _match_variant(name: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    choices = _SPECS[name].choices
    if value in choices:
        return value
    key = re.sub(r"[^a-z0-9]", "", value.lower())
    for choice in choices:
        if re.sub(r"[^a-z0-9]", "", choice.lower()) == key:
            return choice
    return value


def _validation_problems(exc: ValidationError) -> list[Problem]:
    problems = []
    for error in exc.errors():
        loc = error.get("loc") or ()
        name = str(loc[0]) if loc else ""
        if error["type"] == "extra_forbidden":
            problems.append(Problem((name,), f"unknown launcher option {name!r}"
                                    + suggest(name, list(LauncherConfig.model_fields))))
            continue
        spec = _SPECS.get(name)
        flag = spec.flag if spec else name
        given = "" if name in _SECRETS else f", got {error.get('input')!r}"
        if spec and spec.choices:
            message = f"{flag} must be one of: {', '.join(spec.choices)}{given}"
        else:
            kind = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
                    "list": "a list"}
            wanted = next((text for key, text in kind.items() if error["type"].startswith(key)), None)
            detail = f"expects {wanted}" if wanted else error["msg"][0].lower() + error["msg"][1:]
            message = f"{flag} {detail}{given}"
        problems.append(Problem((name,), message))
    return problems


def _build(cls: type[LauncherConfig], values: dict[str, Any], origin: dict[str, str],
           problems: list[Problem]) -> LauncherConfig:
    try:
        config = cls(**values)
    except ConfigError as exc:
        # Say where a bad value came from when it was not the flag itself (a variable, a log line).
        for problem in exc.problems:
            source = origin.get(problem.fields[0]) if len(problem.fields) == 1 else None
            if source and not source.startswith("--"):
                problem = Problem(problem.fields, f"{problem.message} (from {source})")
            problems = [*problems, problem]
        raise ConfigError(problems) from None
    if problems:
        raise ConfigError(problems)
    return config


def _from_mapping(cls: type[LauncherConfig], raw: dict[str, Any], *, strict: bool, source: str) -> LauncherConfig:
    values: dict[str, Any] = {}
    problems: list[Problem] = []
    for key, value in raw.items():
        if key not in _SPECS:
            if strict:
                problems.append(Problem((), f"{source}: unknown launcher option {key!r}"
                                        + suggest(key, list(_SPECS))))
            continue
        values[key] = value
    return _build(cls, values, {name: source for name in values}, problems)
