"""What a GPU-hour costs: a small dated table of public on-demand prices (gpu_prices.yaml), or your own.

The file says its date, currency and sources; every answer of `advise` names the file it priced with, so a
recommendation never hides which prices it assumed. A GPU kind may give `by_shards` where a multi-GPU
instance costs more per GPU than a single-GPU one (AWS g5.xlarge against g5.12xlarge).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRICES_FILE = Path(__file__).with_name("gpu_prices.yaml")
LOCAL_KINDS = ("embedded",)  # this machine's engine, priced like any card when the file lists it


@dataclass(frozen=True)
class Prices:
    """Per-GPU hourly prices by GPU kind (the planner's card names), with where they came from."""

    per_gpu_hour: dict[str, float]
    by_shards: dict[str, dict[int, float]] = field(default_factory=dict)
    currency: str = "USD"
    date: str = ""
    source: str = ""
    path: str = ""
    instances: dict[str, str] = field(default_factory=dict)

    def gpu_hour(self, gpu: str, num_shard: int = 1) -> float:
        """One GPU-hour of `gpu` in a replica of `num_shard` GPUs; KeyError naming the priced kinds."""
        if gpu not in self.per_gpu_hour:
            raise KeyError(f"no price for {gpu!r} in {self.path or 'the price table'} "
                           f"(priced: {', '.join(self.per_gpu_hour)}); add it with --prices")
        return float(self.by_shards.get(gpu, {}).get(num_shard, self.per_gpu_hour[gpu]))

    def describe(self) -> str:
        return (f"prices: {self.path} ({self.currency} per GPU-hour, dated {self.date or 'undated'}; "
                f"source: {' '.join(self.source.split()) or 'not given'})")

    def to_dict(self) -> dict[str, Any]:
        return {"per_gpu_hour": self.per_gpu_hour, "by_shards": {k: {str(n): p for n, p in v.items()}
                                                                for k, v in self.by_shards.items()},
                "currency": self.currency, "date": self.date, "source": self.source, "path": self.path,
                "instances": self.instances}


def _kind(name: str) -> str:
    if name in LOCAL_KINDS:
        return name
    from tgi_toolkit.planner.gpus import resolve_gpu

    try:
        return resolve_gpu(name).name
    except ValueError as exc:
        raise ValueError(f"prices: gpus.{name}: {exc}") from None


def _price(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"prices: {where} must be a number of currency units per GPU-hour >= 0; got {value!r}")
    return float(value)


def parse_prices(data: Mapping[str, Any], path: str = "") -> Prices:
    """Prices from the YAML's mapping (gpu_prices.yaml's layout); ValueError naming the bad field."""
    if not isinstance(data, Mapping) or not isinstance(data.get("gpus"), Mapping) or not data["gpus"]:
        raise ValueError(f"prices: {path or 'the file'} needs a `gpus:` mapping of GPU kind -> usd_per_gpu_hour "
                         "(see tgi_toolkit/advise/gpu_prices.yaml)")
    per_gpu, by_shards, instances = {}, {}, {}
    for name, entry in data["gpus"].items():
        kind = _kind(str(name))
        if isinstance(entry, Mapping):
            if "usd_per_gpu_hour" not in entry:
                raise ValueError(f"prices: gpus.{name} has no usd_per_gpu_hour")
            per_gpu[kind] = _price(f"gpus.{name}.usd_per_gpu_hour", entry["usd_per_gpu_hour"])
            shards = entry.get("by_shards") or {}
            by_shards[kind] = {int(n): _price(f"gpus.{name}.by_shards.{n}", p) for n, p in shards.items()}
            if entry.get("instance"):
                instances[kind] = str(entry["instance"])
        else:
            per_gpu[kind] = _price(f"gpus.{name}", entry)
    return Prices(per_gpu, {k: v for k, v in by_shards.items() if v}, str(data.get("currency") or "USD"),
                  str(data.get("date") or ""), str(data.get("source") or ""), path, instances)


def load_prices(prices: str | Path | Mapping[str, Any] | Prices | None = None) -> Prices:
    """The price table: the shipped one (None), a YAML file, a mapping in its layout, or Prices as they are."""
    if isinstance(prices, Prices):
        return prices
    if isinstance(prices, Mapping):
        return parse_prices(prices, "given prices")
    import yaml

    path = Path(prices) if prices is not None else PRICES_FILE
    if not path.is_file():
        raise ValueError(f"prices: {path} is not a file (a YAML like tgi_toolkit/advise/gpu_prices.yaml)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"prices: {path} is not valid YAML ({exc})") from None
    shown = str(path) if prices is not None else "tgi_toolkit/advise/gpu_prices.yaml (shipped)"
    return parse_prices(data, shown)
