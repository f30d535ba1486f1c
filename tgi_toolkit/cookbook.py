"""Where the cookbook's notebooks (and the quickstart) read and write, so their defaults work the same
run by hand from `notebooks/`, by papermill from anywhere, or by `pytest --nbval-lax notebooks/`.

    from tgi_toolkit.cookbook import out_dir, example_results_dir
    out_dir("02_benchmark")        # <checkout>/out/02_benchmark (created), or ./out/... when installed
    example_results_dir()          # data/examples/smollm2-135m-cpu: a real run of the embedded engine
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

EXAMPLE = "smollm2-135m-cpu"
NOTEBOOKS = ("01_configure_and_launch", "02_benchmark", "03_sweep", "04_compare_and_visualize", "05_model_card",
             "06_tune", "07_simulate", "08_chunked_prefill_and_prefix_cache", "09_advise")


def checkout_root() -> Path | None:
    """The repository this package runs from (an editable install), or None for an installed wheel."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "notebooks").is_dir() and (root / "pyproject.toml").is_file() else None


def out_dir(*parts: str) -> Path:
    """`out/<parts>` of the checkout (gitignored; CI uploads it), else of the working directory; created.
    TGI_TOOLKIT_OUT moves it elsewhere."""
    base = Path(os.environ["TGI_TOOLKIT_OUT"]) if os.environ.get("TGI_TOOLKIT_OUT") else \
        (checkout_root() or Path.cwd()) / "out"
    path = base.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def example_results_dir(name: str = EXAMPLE) -> Path:
    """A committed example result set under data/examples/ (see data/examples/README.md), from the
    installed package or the checkout (`tgi_toolkit.data_folder.default_data_dir`)."""
    from tgi_toolkit.data_folder import DATA_ENV, EXAMPLES_SUBDIR, default_data_dir

    path = default_data_dir() / EXAMPLES_SUBDIR / name
    if not (path / "points.parquet").is_file():
        raise FileNotFoundError(f"no example result set at {path} (set {DATA_ENV} to a copy of the repository's "
                                f"data/)")
    return path


# What `check` prints for a timing claim the figure of a busy run does not show.
NOT_SHOWN_BUSY = ("this run's figure does not show it (the machine was busy: other processes took the CPU; "
                  "run it again on an idle machine)")


def check(claim: str, holds: bool, evidence: Any, busy: bool = False) -> None:
    """A sentence of a notebook's prose about its figure, checked on the data the notebook just produced:
    prints the claim when it holds; raises AssertionError naming the claim and the evidence when not, so
    that prose and results cannot drift apart (nbval and the papermill tests run every notebook).

    busy: the points were measured while other processes took the CPU (their `machine_busy` flag). A timing
    claim that fails then says that this run's figure does not show it, instead of failing: the other
    processes, not the server, made those timings (never the inverted claim)."""
    if not holds:
        if busy:
            print(f"{NOT_SHOWN_BUSY}: {claim}; measured: {evidence}")
            return
        raise AssertionError(f"the notebook says {claim!r}, but this run's data does not show it: {evidence}")
    print(f"checked on this run's data: {claim}")


def memory_fraction_for(tokens: int, base: Any, backend: str = "embedded") -> float:
    """The smallest `cuda_memory_fraction` (4 significant digits) whose KV cache holds `tokens` for the
    launcher settings `base` (a LauncherConfig or a dict of its fields), by the server's own arithmetic on
    this machine (the tuner's `KvSizing`: the embedded engine's dtype, TGI_TOOLKIT_KV_CACHE_GIB): how the
    cookbook gives a server "KV memory for one request" the way a smaller GPU would."""
    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.tune.sizing import Demand, kv_sizing, plan_for

    config = base if isinstance(base, LauncherConfig) else LauncherConfig(**base)
    prompt = config.max_input_tokens or 1
    demand = Demand(prompt, max((config.max_total_tokens or prompt + 1) - prompt, 1), 1)
    return kv_sizing(config, backend, demand, plan_for(config, backend, demand)).fraction_for(tokens)
