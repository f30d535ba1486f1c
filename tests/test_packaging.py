"""Packaging: the wheel carries data/ (as tgi_toolkit/data), so an installed, non-editable package finds
the reference results and the example result set as a checkout does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml")

ROOT = Path(__file__).resolve().parents[1]


def setuptools_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def source_copy(tmp_path: Path) -> Path:
    """What a build reads (it writes build/ and egg-info beside it: not in the checkout)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for name in ("tgi_toolkit", "data"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    return source


def test_every_package_and_data_folder_is_listed() -> None:
    config = setuptools_config()
    code = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "tgi_toolkit").rglob("__init__.py")}
    data = {f"tgi_toolkit.data.{p.name}" for p in (ROOT / "data").iterdir() if p.is_dir()}
    assert set(config["packages"]) == code | {"tgi_toolkit.data"} | data  # a new subpackage must be listed
    assert config["package-dir"] == {"tgi_toolkit.data": "data"}
    assert not (ROOT / "tgi_toolkit" / "data").exists()  # the mapping, not a copy or a link, puts it there


@pytest.mark.slow
def test_an_installed_wheel_reads_its_own_data(tmp_path: Path) -> None:
    build = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--quiet", "-w",
             str(tmp_path / "dist"), str(source_copy(tmp_path))]
    subprocess.run(build, check=True, cwd=tmp_path, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("tgi_toolkit-*.whl")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    script = textwrap.dedent("""
        import tgi_toolkit
        from tgi_toolkit.bench import load_results
        from tgi_toolkit.cookbook import example_results_dir
        from tgi_toolkit.reference import list_references, load_reference
        print(tgi_toolkit.__file__)
        print(",".join(list_references()))
        print(load_reference("tgi-benchmark-mt0-xxl").batch["batch_size"].tolist())
        print(example_results_dir())
        print(len(load_results(example_results_dir()).points))
        from tgi_toolkit.costs.roofline import fitted_factors
        from tgi_toolkit.simulate.corpus import load_figures
        print(round(fitted_factors()["bandwidth_efficiency"], 6), len(load_figures()))
        from tgi_toolkit.models.shipped import shipped_config, shipped_models_dir
        print(shipped_models_dir(), shipped_config("Qwen/Qwen3-8B")["num_hidden_layers"])
        import os
        from tgi_toolkit.server.vllm import TRACE_HOOK
        print(os.path.join(TRACE_HOOK, "sitecustomize.py"))
    """)
    env = {k: v for k, v in os.environ.items() if k != "TGI_TOOLKIT_DATA"}
    env["PYTHONPATH"] = str(site)  # ahead of the checkout's editable install
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True, env=env,
                         cwd=tmp_path).stdout.splitlines()
    package = site / "tgi_toolkit"
    assert out[0] == str(package / "__init__.py")
    # every published result set (a folder); the GPU corpus files beside them are not result sets
    assert out[1].split(",") == sorted(p.name for p in (ROOT / "data" / "reference").iterdir() if p.is_dir())
    assert out[2] == "[16]"
    assert out[3] == str(package / "data" / "examples" / "smollm2-135m-cpu") and int(out[4]) > 0
    # the shipped GPU fit, not the prior, and the corpus it was fitted on (the file's row count)
    fit = json.loads((ROOT / "data" / "reference" / "gpu_fit.json").read_text())
    figures = (ROOT / "data" / "reference" / "gpu_figures.csv").read_text().count("\n")
    bandwidth, rows = out[5].split()
    assert float(bandwidth) == round(fit["factors"]["bandwidth_efficiency"], 6) and 0 < int(rows) < figures
    # the published model shapes, by id, from the wheel's own data/models (Qwen3-8B has 36 layers)
    assert out[6] == f"{package / 'data' / 'models'} 36"
    # vLLM's forward trace hook ships as a file of its own (not a module of the package): vLLM's interpreter runs it
    assert out[7] == str(package / "server" / "vllm_trace" / "sitecustomize.py") and Path(out[7]).is_file()

    # a data folder of one's own wins, and a wrong one says where it looked
    env["TGI_TOOLKIT_DATA"] = str(tmp_path / "nowhere")
    failed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert failed.returncode != 0 and f"no data folder (with reference/ or examples/) at {tmp_path / 'nowhere'}" \
        in failed.stderr


@pytest.mark.slow
def test_the_sdist_carries_data_for_the_wheel_built_from_it(tmp_path: Path) -> None:
    script = f"from setuptools import build_meta; print(build_meta.build_sdist({str(tmp_path)!r}))"
    name = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True,
                          cwd=source_copy(tmp_path)).stdout.splitlines()[-1]
    with tarfile.open(tmp_path / name) as sdist:
        members = {m.split("/", 1)[1] for m in sdist.getnames() if "/" in m}
    committed = {str(p.relative_to(ROOT)) for p in (ROOT / "data").rglob("*") if p.is_file()}
    assert {p for p in committed if p.startswith(("data/reference/", "data/examples/", "data/models/"))} <= members
