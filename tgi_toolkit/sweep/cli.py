"""`tgi-toolkit sweep SPEC.yaml`: run a sweep specification (format: tgi_toolkit.sweep's docstring).

    tgi-toolkit sweep examples/sweep.yaml --output results/sweep
    tgi-toolkit sweep examples/sweep.yaml --dry-run          # the configurations, checked, nothing launched
    tgi-toolkit sweep examples/sweep.yaml --executor ray --ray-address auto

Exit codes: 0 every valid configuration complete; 1 some failed (see the table and sweep.json);
2 a specification that cannot run; 130 interrupted (run it again with --resume to finish it).
A results folder that already holds this sweep's configurations is refused before anything starts:
--resume finishes an interrupted sweep, --overwrite measures it again in place, --retry-failed
relaunches its failed configurations; nothing is silently reused.
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
    rerun = p.add_mutually_exclusive_group()
    rerun.add_argument("--resume", action="store_true",
                       help="finish the interrupted sweep in the folder (its finished configurations kept)")
    rerun.add_argument("--overwrite", action="store_true",
                       help="measure every configuration again, replacing the folder's earlier runs of them")
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


def runs_to_replace(sweep: Sweep, output: str, args: argparse.Namespace) -> list[str]:
    """What the folder holds of this sweep's configurations, checked against --resume, --overwrite and
    --retry-failed before anything is launched: the bench run ids --overwrite replaces ([] otherwise).
    SweepError for a finished sweep without --overwrite (or --retry-failed, where some failed), an
    unfinished one without --resume, and --resume with nothing to finish."""
    from tgi_toolkit.sweep.manifest import Manifest
    from tgi_toolkit.sweep.spec import SweepError

    ids = {c.config_id for c in sweep.configs() if c.valid}
    entries = [e for e in Manifest(output).read().get("configs", []) if e.get("config_id") in ids]
    if args.overwrite:
        return [w["run_id"] for e in entries for w in (e.get("workloads") or {}).values() if w.get("run_id")]
    if not entries:
        if args.resume:
            raise SweepError(f"--resume: {output} holds none of this sweep's configurations to finish (allowed: "
                             f"no --resume, to start it)")
        return []
    finished = [e for e in entries if e.get("status") in ("complete", "failed")]
    failed = [e for e in finished if e["status"] == "failed"]
    if len(finished) < len(ids):
        if args.resume or args.retry_failed:
            return []
        raise SweepError(f"{output} holds an unfinished run of this sweep ({len(finished)} of {len(ids)} "
                         f"configurations finished) (allowed: --resume to finish it; --overwrite to measure it "
                         f"again, replacing it; or a new --output folder)")
    if args.retry_failed and failed:
        return []
    raise SweepError(f"{output} already holds this sweep, finished ({len(finished) - len(failed)} complete, "
                     f"{len(failed)} failed); nothing is reused (allowed: --overwrite to measure it again, replacing "
                     f"it{'; --retry-failed to relaunch the failed ones' if failed else ''}; or a new --output folder; "
                     f"--resume only finishes an interrupted sweep)")


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
        if output is None:
            raise SweepError("output: a sweep needs a results folder (--output DIR or `output:` in the spec)")
        replaced = runs_to_replace(sweep, str(output), args)
        if replaced:
            from tgi_toolkit.bench.results import ResultsFolder

            folder = ResultsFolder(output)
            for run_id in replaced:
                folder.drop_run(run_id)
        sweep.run(output, resume=not args.overwrite, progress=args.progress, executor=executor,
                  retry_failed=args.retry_failed, command=["tgi-toolkit", *sys.argv[1:]])
    except (SweepError, ConfigError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted: run the same command again with --resume to finish it ({output})", file=sys.stderr)
        return 130
    status = sweep_status(output)
    status = status[status["in_spec"]]
    shown = status.drop(columns=["in_spec", "run_ids"]).astype(object)
    shown = shown.where(shown.notna(), "")
    print(shown.to_string(index=False, max_colwidth=80))
    print(f"\nresults: {output} (tgi_toolkit.bench.load_results; sweep.json for each configuration's fate)")
    return 1 if (status["status"] == "failed").any() else 0
