"""Rehearse the GPU probe's lease here: `gpu_probe.py --device cpu --tiny` with only the packages the lent machine has.

    .venv/bin/python benchmarks/gpu_probe_rehearse.py [--kinds /work/.library/device/KINDS.md]

The lent machine's python3 has the packages the device library's KINDS.md lists, and the probe takes what it lacks
as wheels (benchmarks/gpu_probe_prepare.sh's list). This links those packages, and what they require, from this
checkout's .venv into one folder, and runs the tiny probe with the venv's base interpreter on that folder alone
(`python -S`): an import that the lent machine could not satisfy fails here first, before a lease is spent on it.
Exits with the probe's status; the folder and the probe's output are left in a temporary directory, named at the end.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
KINDS = ROOT.parent / ".library" / "device" / "KINDS.md"
PREPARE = ROOT / "benchmarks" / "gpu_probe_prepare.sh"


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.lower())


def device_packages(kinds: Path) -> set[str]:
    """The names on KINDS.md's "Packages:" line (the first kind's)."""
    line = kinds.read_text().split("Packages:", 1)[1].split("\n", 1)[0]
    return {norm(n.strip().rstrip(".")) for n in line.split(",") if n.strip()}


def carried_wheels() -> set[str]:
    """The wheels gpu_probe_prepare.sh downloads, by name."""
    block = PREPARE.read_text().split("WHEELS=(", 1)[1].split(")", 1)[0]
    return {norm(w.split("==")[0]) for w in block.split()}


def link_site(site: Path, wanted: set[str], into: Path) -> set[str]:
    """Link every distribution of `wanted` found in `site`, and its requirements, into `into`; their names."""
    dists = {norm(d.metadata["Name"]): d for d in md.distributions(path=[str(site)])}
    allowed, todo = set(wanted), list(wanted)
    while todo:
        dist = dists.get(todo.pop())
        for text in (dist.requires or []) if dist else []:
            req = Requirement(text)
            if (req.marker is None or req.marker.evaluate({"extra": ""})) and norm(req.name) not in allowed:
                allowed.add(norm(req.name))
                todo.append(norm(req.name))
    for name in allowed & set(dists):
        for top in {f.parts[0] for f in dists[name].files or []}:
            if not top.startswith("..") and (site / top).exists() and not (into / top).exists():
                os.symlink(site / top, into / top)
    return allowed & set(dists)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", type=Path, default=KINDS, help="the device library's KINDS.md")
    args = parser.parse_args(argv)
    if not args.kinds.is_file():
        print(f"error: --kinds: {args.kinds} is not a file (the device library's KINDS.md)", file=sys.stderr)
        return 2
    tokenizer = ROOT / ".gpu_probe" / "tokenizer"
    if not tokenizer.is_dir():
        print("error: run benchmarks/gpu_probe_prepare.sh first (no .gpu_probe/tokenizer)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="gpu_probe_rehearse-"))
    (work / "site").mkdir()
    linked = link_site(Path(sysconfig.get_paths()["purelib"]), device_packages(args.kinds) | carried_wheels(),
                       work / "site")
    print(f"gpu_probe_rehearse: {len(linked)} packages the lent machine has (or takes as wheels) -> {work / 'site'}",
          flush=True)
    env = {**os.environ, "PYTHONPATH": f"{work / 'site'}{os.pathsep}{ROOT}"}
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    done = subprocess.run([str(base), "-S", str(ROOT / "benchmarks" / "gpu_probe.py"), "--device", "cpu", "--tiny",
                           "--card", "H100", "--tokenizer", str(tokenizer), "--out", str(work / "probe")], env=env)
    print(f"gpu_probe_rehearse: the probe exited {done.returncode}; its folder: {work / 'probe'}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
