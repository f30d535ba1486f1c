"""What the deployment must carry: the traffic (a request rate or a number of users, with its lengths) and
the objectives it must meet at a percentile.

Lengths are one prompt and output length, or a dataset of (prompt, output) lengths: a .jsonl/.json list of
records with `prompt_tokens` (or `input_tokens`) and `output_tokens` (or `max_new_tokens`), or a .csv with
those columns. The simulator then draws each request's lengths from the dataset (seeded).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tgi_toolkit.tune.select import Objectives

PROMPT_KEYS = ("prompt_tokens", "input_tokens", "prompt_len", "input_len")
OUTPUT_KEYS = ("output_tokens", "max_new_tokens", "output_len", "completion_tokens")


@dataclass(frozen=True)
class Traffic:
    """Open-loop requests per second (`rate_rps`) or closed-loop `users`; lengths fixed or from a dataset."""

    rate_rps: float | None = None
    users: int | None = None
    prompt_tokens: int = 512
    max_new_tokens: int = 128
    lengths: tuple[tuple[int, int], ...] = ()
    dataset: str | None = None
    requests: int = 120  # simulated requests per probe: enough for a p90 and a queue that grows when overloaded
    arrival: str = "poisson"

    def __post_init__(self) -> None:
        if (self.rate_rps is None) == (self.users is None):
            raise ValueError("traffic: give exactly one of rate (requests per second) and users")
        if self.rate_rps is not None and not (isinstance(self.rate_rps, (int, float)) and self.rate_rps > 0
                                              and math.isfinite(self.rate_rps)):
            raise ValueError(f"rate must be a number of requests per second > 0; got {self.rate_rps!r}")
        if self.users is not None and not (isinstance(self.users, int) and self.users >= 1):
            raise ValueError(f"users must be an integer >= 1; got {self.users!r}")
        for name in ("prompt_tokens", "max_new_tokens", "requests"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1; got {value!r}")
        if self.arrival not in ("poisson", "constant"):
            raise ValueError(f"arrival must be poisson or constant; got {self.arrival!r}")

    @property
    def closed_loop(self) -> bool:
        return self.users is not None

    @property
    def demand(self) -> float:
        """The load to carry: requests per second, or users."""
        return float(self.users if self.users is not None else self.rate_rps)  # type: ignore[arg-type]

    @property
    def mean_output_tokens(self) -> float:
        return sum(o for _, o in self.lengths) / len(self.lengths) if self.lengths else float(self.max_new_tokens)

    @property
    def longest(self) -> tuple[int, int]:
        """The longest prompt and output: what the server's limits must admit."""
        if not self.lengths:
            return self.prompt_tokens, self.max_new_tokens
        return max(p for p, _ in self.lengths), max(o for _, o in self.lengths)

    def describe(self) -> str:
        load = f"{self.users} users" if self.closed_loop else f"{self.rate_rps:g} requests/s ({self.arrival})"
        if self.lengths:
            return (f"{load}, lengths from {self.dataset or 'a dataset'} ({len(self.lengths)} requests, mean "
                    f"{sum(p for p, _ in self.lengths) / len(self.lengths):.0f} prompt + "
                    f"{self.mean_output_tokens:.0f} output tokens)")
        return f"{load}, {self.prompt_tokens} prompt + {self.max_new_tokens} output tokens"


def _first(record: dict, keys: Sequence[str], path: Path, row: int) -> int:
    for key in keys:
        if key in record and record[key] not in (None, ""):
            value = int(float(record[key]))
            if value < 1:
                raise ValueError(f"dataset: {path} row {row}: {key} must be >= 1; got {record[key]!r}")
            return value
    raise ValueError(f"dataset: {path} row {row} has none of {', '.join(keys)}")


def load_lengths(path: str | Path) -> tuple[tuple[int, int], ...]:
    """(prompt, output) lengths of a dataset file (module docstring); ValueError naming what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"dataset: {path} is not a file (.jsonl, .json or .csv of prompt/output lengths)")
    if path.suffix == ".csv":
        import pandas as pd

        records = pd.read_csv(path).to_dict("records")
    elif path.suffix == ".jsonl":
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    elif path.suffix == ".json":
        data = json.loads(path.read_text())
        records = data if isinstance(data, list) else [data]
    else:
        raise ValueError(f"dataset: {path} is not .jsonl, .json or .csv")
    pairs = tuple((_first(r, PROMPT_KEYS, path, i), _first(r, OUTPUT_KEYS, path, i))
                  for i, r in enumerate(records) if isinstance(r, dict))
    if not pairs:
        raise ValueError(f"dataset: {path} holds no records with prompt and output lengths")
    return pairs


def objectives(ttft_s: float | None, tpot_s: float | None, percentile: int | str = 90) -> Objectives:
    """The tuner's Objectives from seconds and a percentile given as 90 or 'p90'."""
    text = str(percentile).lower().lstrip("p")
    return Objectives(ttft_s=ttft_s, tpot_s=tpot_s, percentile=f"p{text}")
