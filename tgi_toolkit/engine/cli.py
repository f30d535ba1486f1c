"""`python -m tgi_toolkit.engine` and `tgi-toolkit serve`: text-generation-launcher's flags, and the engine's own
(`--device`, `--random-weights`, `--compile-sizes`)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

# The engine's flags as environment variables, as the launcher's have theirs (a flag wins): what
# tgi_toolkit.server.Server, which renders only launcher flags, passes through its `env`.
DEVICE_ENV = "TGI_TOOLKIT_DEVICE"
RANDOM_WEIGHTS_ENV = "TGI_TOOLKIT_RANDOM_WEIGHTS"
COMPILE_SIZES_ENV = "TGI_TOOLKIT_COMPILE_SIZES"


def add_engine_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The engine's flags beyond the launcher's (`serve.EngineOptions`)."""
    group = parser.add_argument_group("embedded engine (beyond text-generation-launcher)")
    group.add_argument("--device", default=None, metavar="{cuda,cpu}",
                       help="where the model runs: cuda (weights, KV cache and sampling on the GPU, bfloat16 by "
                            f"default, decode steps as CUDA graphs) or cpu; default cuda where torch sees a GPU "
                            f"[env: {DEVICE_ENV}]")
    group.add_argument("--random-weights", action="store_true", default=None,
                       help="--model-id (or --model) names a config.json or a shipped model id: build that shape "
                            "with random weights, for timing only (requests must set ignore_eos; docs/engine.md) "
                            f"[env: {RANDOM_WEIGHTS_ENV}=1]")
    group.add_argument("--compile-sizes", default=None, metavar="N[,N...]",
                       help="on a CUDA card, the --cuda-graphs batch sizes whose decode step runs its layers "
                            "compiled by torch.compile (inductor: elementwise ops fused, one-row matmuls as "
                            "tuned reduction kernels), compiled at start-up; default 1; 0 for none "
                            f"[env: {COMPILE_SIZES_ENV}]")
    return parser


def split_engine_args(argv: list[str], environ: Any = None) -> tuple[Any, list[str]]:
    """The engine's own options (flags, else their variables in `environ`), and the launcher arguments left
    (`--model` spelled as `--model-id`)."""
    from tgi_toolkit.config.embedded import parse_sizes
    from tgi_toolkit.engine.serve import EngineOptions

    environ = {} if environ is None else environ
    parser = add_engine_arguments(argparse.ArgumentParser(add_help=False, allow_abbrev=False))
    known, rest = parser.parse_known_args(argv)
    rest = ["--model-id" if a == "--model" else "--model-id=" + a[8:] if a.startswith("--model=") else a
            for a in rest]
    random_weights = known.random_weights
    if random_weights is None:
        random_weights = environ.get(RANDOM_WEIGHTS_ENV, "").strip().lower() in ("1", "true", "yes")
    sizes = known.compile_sizes if known.compile_sizes is not None else environ.get(COMPILE_SIZES_ENV)
    options = EngineOptions(device=known.device or environ.get(DEVICE_ENV) or None, random_weights=random_weights,
                            compile_sizes=None if sizes is None else parse_sizes(sizes, "--compile-sizes"))
    return options, rest


# What chooses how OpenMP threads wait between parallel regions; the user's choice wins.
OMP_WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def passive_omp_wait(environ: Any = None, modules: Any = None) -> bool:
    """Set OMP_WAIT_POLICY=PASSIVE in `environ` (os.environ) unless a variable of OMP_WAIT_VARIABLES is set, or
    torch is already in `modules` (sys.modules): its OpenMP runtime reads them when it loads. Return whether set.

    Why: by default a thread done with its share of a matmul spins (libgomp: ~300,000 rounds) for the others.
    On a CPU the engine shares (its HTTP thread, the client, another server, other jobs) the partner it
    spins for is often off its core, and the spinning takes that core: decode steps of 1.0-1.7 s against
    56-110 ms passive, 2 threads at load 8-16 on 2 cores (benchmarks/results/engine_vs_vllm.txt)."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    if "torch" in modules or any(name in environ for name in OMP_WAIT_VARIABLES):
        return False
    environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def main(argv: list[str] | None = None, prog: str = "python -m tgi_toolkit.engine") -> int:
    """Serve with the launcher flags in `argv`; `prog` is the command the help names (how it was started)."""
    passive_omp_wait()  # before the imports below load torch
    from tgi_toolkit.config import ConfigError, LauncherConfig
    from tgi_toolkit.config.embedded import resolve_device
    from tgi_toolkit.engine.runner import UnsupportedModelError
    from tgi_toolkit.engine.serve import UnsupportedSetting, decode_step_sizes, serve
    from tgi_toolkit.models.files import ModelNotFoundError

    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        parser = argparse.ArgumentParser(
            prog=prog,
            description="The embedded TGI-compatible engine. Takes text-generation-launcher's flags "
                        "and environment variables.")
        LauncherConfig.add_arguments(parser)
        add_engine_arguments(parser)
        parser.print_help()
        return 0
    try:
        options, argv = split_engine_args(argv, os.environ)
        cfg = LauncherConfig.from_cli(argv, environ=os.environ)
        # a device the machine lacks, or compile sizes it cannot take, refused here, before serve() takes over the
        # process's logging (build() checks both again for callers that skip this)
        decode_step_sizes(cfg.cuda_graphs, options.compile_sizes, resolve_device(options.device))
        return serve(cfg, options)
    except (ConfigError, UnsupportedSetting, ModelNotFoundError, UnsupportedModelError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve", help="start the embedded TGI-compatible engine (text-generation-launcher flags)",
        add_help=False, prefix_chars="\0",  # every argument goes through to the launcher parser
    )
    parser.add_argument("launcher_args", nargs=argparse.REMAINDER)
    parser.set_defaults(func=lambda args: main(args.launcher_args, prog="tgi-toolkit serve"))
