"""`tgi-toolkit sweep SPEC.yaml`: run a sweep specification (format: tgi_toolkit.sweep's docstring).

    tgi-toolkit sweep examples/sweep.yaml --output results/sweep
    tgi-toolkit sweep examples/sweep.yaml --dry-run          # the configurations, checked, nothing launched
    tgi-toolkit sweep examples/sweep.yaml --executor ray --ray-address auto

Exit codes: 0 every valid configuration complete; 1 some failed (see the table and sweep.json);
2 a specification that cannot run; 130 interrupted (run it again to resume).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.sweep.spec import Sweep


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("sweep", help="relaunch a server per configuration of a grid and benchmark each",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spec", metavar="SPEC.yaml", help="the sweep specification")
    p.add_argument("--output", "-o", metavar="DIR", help="results folder (default: the spec's `output`)")
    p.add_argument("--executor", choices=("local", "ray"), help="where configurations run (default: the spec's)")
    p.add_argument("--ray-address", help="Ray cluster address for --executor ray (default: a local Ray)")
    p.add_argument("--no-resume", dest="resume", action="store_false",
                   help="measure everything again instead of skipping what the folder already holds")
    p.add_argument("--retry-failed", action="store_true",
                   help="relaunch configurations recorded as failed (by default kept as results, "
                        "except those whose server died mid-run, or when none ever started)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    p.add_argument("--dry-run", action="store_true", help="list the configurations and their problems; launch nothing")
    p.set_defaults(func=main)


def _dry_run(sweep: Sweep) -> str:
    lines = []
    for config in sweep.configs():
        state = "ok" if config.valid else "invalid: " + "; ".join(p["rule"] for p in config.problems)
        lines.append(f"{config.config_id}  {config.label}  {state}")
    for workload in sweep.resolved_workloads():
        lines.append(f"workload {workload.key}  {workload.label}")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    from tgi_toolkit.config import ConfigError
    from tgi_toolkit.sweep.manifest import sweep_status
    from tgi_toolkit.sweep.spec import Sweep, SweepError

    output = args.output
    try:
        sweep = Sweep.from_yaml(args.spec)
        if args.dry_run:
            print(_dry_run(sweep))
            return 0
        executor = args.executor or sweep.executor
        if args.ray_address is not None:
            sweep.ray["address"] = args.ray_address
        output = output or sweep.output
        sweep.run(output, resume=args.resume, progress=args.progress, executor=executor,
                  retry_failed=args.retry_failed, command=["tgi-toolkit", *sys.argv[1:]])
    except (SweepError, ConfigError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted: run the same command again to resume ({output})", file=sys.stderr)
        return 130
    status = sweep_status(output)
    status = status[status["in_spec"]]
    shown = status.drop(columns=["in_spec", "run_ids"]).astype(object)
    shown = shown.where(shown.notna(), "")
    print(shown.to_string(index=False, max_colwidth=80))
    print(f"\nresults: {output} (tgi_toolkit.bench.load_results; sweep.json for each configuration's fate)")
    return 1 if (status["status"] == "failed").any() else 0
