"""Sweeps: a grid of launcher settings crossed with workloads, the server relaunched per configuration,
everything in one results folder, resumable, locally or on a Ray cluster.

    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.sweep import Sweep, Workload, sweep_status

    sweep = Sweep(base=LauncherConfig(max_input_tokens=256, max_total_tokens=512),
                  grid={"max_batch_size": [1, 4], "max_batch_prefill_tokens": [256, 1024]},
                  workloads=[Workload("concurrency", users=[1, 4], prompt_tokens=64, max_new_tokens=16)],
                  backend="embedded")
    sweep.configs()                       # the configurations, checked against the launcher's rules
    results = sweep.run("results/sweep")  # tgi_toolkit.bench Results of the folder
    sweep_status("results/sweep")         # one row per configuration: swept values, status, why

`tgi-toolkit sweep SPEC.yaml [--output DIR] [--executor local|ray] [--resume|--overwrite] [--dry-run]` runs a
YAML specification (example: examples/sweep.yaml):

    name: batching-knobs            # optional, for people
    backend: embedded               # embedded | tgi | tgi-docker | vllm (default embedded)
    base:                           # LauncherConfig fields every configuration shares (or one string
      max_input_tokens: 256         #   of launcher flags: "--max-input-tokens 256 --max-total-tokens 512")
      max_total_tokens: 512
    grid:                           # field: [values], crossed (every combination); a scalar is one value;
      max_batch_size: [1, 4]        #   flag spellings (max-batch-size) are accepted; null = unset
      max_batch_prefill_tokens: [256, 1024]
    configs:                        # optional extra configurations, each a dict of overrides, not crossed
      - {max_batch_size: 8, waiting_served_ratio: 1.2}
    workloads:                      # each: a bench scenario (batch | concurrency | rate | ingestion) and
      - scenario: concurrency       #   the keyword arguments of tgi_toolkit.bench.run_<scenario>
        users: [1, 4]
        prompt_tokens: 64
        max_new_tokens: 16
        requests: 8
    options:                        # bench options for every workload (a workload's own value wins):
      slo_ttft_s: 1.0               #   seed, slo_ttft_s, slo_tpot_s, tokenizer, sampling, ...
    server:                         # Server options: health_timeout (seconds), env (extra variables)
      health_timeout: 300
    output: results/sweep           # default folder, relative to the YAML file (--output wins)
    executor: local                 # local | ray
    ray: {address: null, num_cpus: 1}   # RayExecutor arguments: address, num_cpus, shared_folder

The folder holds the bench's tables (requests/points/batch/server.parquet, runs/<run_id>.json with
each run's launcher config), `sweep.json` (the manifest: the specification and every
configuration's status, see tgi_toolkit.sweep.manifest) and `logs/<config_id>.log` (each server's
log). A configuration that breaks a launcher rule is recorded as invalid with the rule and never
launched; one whose server fails to start is recorded as failed with its exit code and log tail,
and the sweep goes on. Run it again and finished configurations (and finished points of an
interrupted one) are skipped. A failed configuration is a result and is not relaunched (a setting
that does not fit fails again; a one-line message names those kept), except one whose server died
during a run (killed from outside: it resumes from its finished points) and, when no configuration
ever started (a cause they share, such as a missing model), all of them; `retry_failed=True`
(`--retry-failed`) relaunches every failed one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tgi_toolkit._lazy import lazy_getattr
from tgi_toolkit.sweep.cli import add_parser

_LAZY = {
    "Sweep": ".spec", "Workload": ".spec", "SweepConfig": ".spec", "SweepError": ".spec", "make_config": ".spec",
    "Manifest": ".manifest", "load_manifest": ".manifest", "sweep_status": ".manifest",
    "RayExecutor": ".executors", "LocalExecutor": ".executors", "resources_for": ".config_job",
}

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.sweep.config_job import resources_for
    from tgi_toolkit.sweep.executors import LocalExecutor, RayExecutor
    from tgi_toolkit.sweep.manifest import Manifest, load_manifest, sweep_status
    from tgi_toolkit.sweep.spec import Sweep, SweepConfig, SweepError, Workload, make_config


__getattr__ = lazy_getattr(__name__, _LAZY)


__all__ = [
    "LocalExecutor", "Manifest", "RayExecutor", "Sweep", "SweepConfig", "SweepError", "Workload", "add_parser",
    "load_manifest", "make_config", "resources_for", "sweep_status",
]
