"""The package's import graph reads top-down: no circles, each package on the layers below it (docs/layout.md),
the engine above the configuration.

The graph is read from the source with `ast`, so it holds every import a reader sees: at module
level, inside functions (a lazy import is still a dependency) and under `if TYPE_CHECKING:` (a type
named from another module is one too). Lazy re-exports by name (tgi_toolkit._lazy) are not imports.

Beside the graph: no private name (`_x`) taken from another module, and every module over 400 lines listed with
why it is one concept, which its docstring says at its top (issue 42, 3).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tgi_toolkit"
# What these packages need from the engine lives in tgi_toolkit.config.embedded and tgi_toolkit.models.
BELOW_THE_ENGINE = ("tgi_toolkit.config", "tgi_toolkit.planner", "tgi_toolkit.tune", "tgi_toolkit.app")
ENGINE = "tgi_toolkit.engine"
# The server stands on TGI's router rules, the configuration and what a forward costs (its pacing and forward
# trace), never on what measures or simulates it (issue 28).
ENGINE_FLOOR = (ENGINE, "tgi_toolkit.router", "tgi_toolkit.config", "tgi_toolkit.models", "tgi_toolkit.costs",
                "tgi_toolkit.version", "tgi_toolkit.progress", "tgi_toolkit.data_folder")


def modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """module name -> (file, is a package's __init__)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports (a name imported from a package's
    __init__ counts as importing that __init__; a submodule imported by name, as importing it)."""
    known = modules(root)
    top = root.name
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in known.items():
        here = name if is_package else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in node.names]
            else:
                continue
            edges.update(t for t in targets if t in known and (t == top or t.startswith(top + ".")))
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def reachable(graph: dict[str, set[str]], start: str) -> dict[str, str]:
    """module -> the module that first imported it, for everything `start` imports, directly or not."""
    seen = {start: ""}
    todo = [start]
    while todo:
        v = todo.pop()
        for w in sorted(graph.get(v, ())):
            if w not in seen:
                seen[w] = v
                todo.append(w)
    return seen


def chain(parents: dict[str, str], end: str) -> str:
    path = [end]
    while parents[path[-1]]:
        path.append(parents[path[-1]])
    return " -> ".join(reversed(path))


def test_the_package_has_no_import_circles() -> None:
    found = cycles(import_graph(PACKAGE))
    assert not found, "import circles (each a set of modules that import one another): " + "; ".join(
        ", ".join(c) for c in found)


@pytest.mark.parametrize("package", BELOW_THE_ENGINE)
def test_configuration_planner_tune_and_app_never_reach_the_engine(package: str) -> None:
    graph = import_graph(PACKAGE)
    members = [m for m in graph if m == package or m.startswith(package + ".")]
    assert members, f"{package} not found under {PACKAGE}"
    for module in members:
        parents = reachable(graph, module)
        engine = sorted(m for m in parents if m == ENGINE or m.startswith(ENGINE + "."))
        assert not engine, f"{module} imports the engine: {chain(parents, engine[0])}"


def test_the_engine_stands_on_the_router_configuration_and_forward_costs_only() -> None:
    graph = import_graph(PACKAGE)
    for module in [m for m in graph if m == ENGINE or m.startswith(ENGINE + ".")]:
        parents = reachable(graph, module)
        above = sorted(m for m in parents if not any(m == f or m.startswith(f + ".") for f in ENGINE_FLOOR))
        assert not above, f"{module} stands on {above[0]}: {chain(parents, above[0])}"


# -- the layer order (docs/layout.md, "Layers") -------------------------------------------------------
# Bottom first. A package (a sub-package, or a module at the package's top) imports only packages of the layers
# below its own; two of one layer import each other only where PEERS says so. A new package must be placed here and
# on the page. The tests above keep finer rules: what the engine, the scenarios and the planning side may reach.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("version", "_lazy", "progress", "data_folder", "schema", "pareto"),  # no dependency inside the package
    ("models",),  # a model's files: found, read, loaded, GGUF converted
    ("router",),  # TGI 3's and vLLM V1's scheduling rules
    ("config",),  # the launcher's options and the embedded engine's rules
    ("server",),  # starting, watching and stopping a server process
    ("planner",),  # memory and capacity of a model on a GPU
    ("costs",),  # what a forward costs: linear, roofline, measured kernels
    ("engine",),  # the embedded server
    ("scenarios", "bench"),  # the harness: a scenario's dataclass on bench's rules, bench playing it
    ("reference", "plots"),  # reading result tables: the seeds' published ones, figures of any
    ("simulate",),  # the scenarios on a virtual clock, on a cost model
    ("sweep",),  # a grid of configurations, launched and benchmarked
    ("tune",),  # searching the launcher's knobs, measured or simulated
    ("advise",),  # which GPUs, each tuned by simulation
    ("cookbook",),  # where notebooks and the quickstart read and write
    ("report_figures",),  # the model card's figures
    ("report_sections",),  # its sections
    ("report",),  # the model card
    ("app", "quickstart", "cli", "tgi_toolkit"),  # what a user starts
)
# scenarios stand on bench's checks, errors, ramp and client (test_the_scenarios_stand_on_bench_s_rules_and_plans_only)
PEERS = {("scenarios", "bench"), ("bench", "scenarios")}


def package_of(module: str) -> str:
    """tgi_toolkit.bench.run -> bench; tgi_toolkit.schema -> schema; tgi_toolkit -> tgi_toolkit."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_problems(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...],
                   peers: set[tuple[str, str]]) -> list[str]:
    """Every import from a package to one of its own or a higher layer (not in `peers`), and every package the
    layers do not place."""
    level = {p: i for i, layer in enumerate(layers) for p in layer}
    problems = sorted({f"{package_of(m)} is in no layer" for m in graph if package_of(m) not in level})
    for module, targets in sorted(graph.items()):
        a = package_of(module)
        for target in sorted(targets):
            b = package_of(target)
            if a == b or a not in level or b not in level or (a, b) in peers or level[b] < level[a]:
                continue
            problems.append(f"{module} imports {target}: {a} (layer {level[a] + 1}) may not import {b} "
                            f"(layer {level[b] + 1})")
    return problems


def test_each_package_imports_only_the_layers_below_it() -> None:
    problems = layer_problems(import_graph(PACKAGE), LAYERS, PEERS)
    assert not problems, "\n".join(problems)


def test_the_layers_written_down_are_the_layers_asserted() -> None:
    section = (DOCS / "layout.md").read_text().split("## Layers", 1)[1].split("\n## ", 1)[0]
    written = [tuple(re.findall(r"`([\w.]+)`", line.split(":", 1)[0]))
               for line in section.splitlines() if re.match(r"\d+\. ", line)]
    assert written == list(LAYERS), f"docs/layout.md's layers {written} differ from LAYERS"


def test_the_layer_check_finds_an_import_up_or_across(tmp_path: Path) -> None:
    root = write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low.py": "def f():\n    from pkg.high import g\n",  # up, inside a function
        "pkg/high/__init__.py": "from pkg import low\n",
        "pkg/high/a.py": "from pkg.side import x\n",  # across, within one layer
        "pkg/side.py": "",
        "pkg/stray.py": "",
    })
    layers = (("low",), ("high", "side"), ("pkg",))
    assert layer_problems(import_graph(root), layers, set()) == [
        "stray is in no layer",
        "pkg.high.a imports pkg.side: high (layer 2) may not import side (layer 2)",
        "pkg.low imports pkg.high: low (layer 1) may not import high (layer 2)",
    ]
    assert layer_problems(import_graph(root), layers, {("high", "side")})[1:] == [
        "pkg.low imports pkg.high: low (layer 1) may not import high (layer 2)"]


# A scenario's dataclass stands on bench's rules (checks, errors, the ramp), plans and schema only, so the harness,
# the simulator, the sweep and the command line all import it and none of them is below it (issue 42).
SCENARIOS = "tgi_toolkit.scenarios"
SCENARIOS_FLOOR = (SCENARIOS, "tgi_toolkit.bench.checks", "tgi_toolkit.bench.errors", "tgi_toolkit.bench.phase",
                   "tgi_toolkit.schema", "tgi_toolkit._lazy",
                   "tgi_toolkit.bench.client")  # the sampling keys bench.checks.check_options allows


def test_the_scenarios_stand_on_bench_s_rules_and_plans_only() -> None:
    graph = import_graph(PACKAGE)
    for module in [m for m in graph if m == SCENARIOS or m.startswith(SCENARIOS + ".")]:
        parents = reachable(graph, module)
        above = sorted(m for m in parents if not any(m == f or m.startswith(f + ".") for f in SCENARIOS_FLOOR))
        assert not above, f"{module} stands on {above[0]}: {chain(parents, above[0])}"


MAX_LINES = 400  # a module a reader finishes in one sitting (issue 28)
# A module may be longer when it holds one concept (issue 42, 3): it is listed here with why, and its docstring
# says so in its first paragraph, in a sentence with the words "one concept".
LONG_MODULES: dict[str, str] = {}


def docstring_head(path: Path) -> str:
    """The first paragraph of a module's docstring ("" without one)."""
    doc = ast.get_docstring(ast.parse(path.read_text(), str(path))) or ""
    return doc.split("\n\n")[0]


def long_module_problems(root: Path, listed: dict[str, str]) -> list[str]:
    """Every module over MAX_LINES not listed, listed without a reason or without "one concept" at the top of its
    docstring, and every listed module that is not long (or not there) any more; paths relative to `root`."""
    sizes = {path.relative_to(root).as_posix(): len(path.read_text().splitlines()) for path in root.rglob("*.py")}
    problems = [f"{name} ({lines} lines) is not in LONG_MODULES" for name, lines in sorted(sizes.items())
                if lines > MAX_LINES and name not in listed]
    for name, reason in sorted(listed.items()):
        if sizes.get(name, 0) <= MAX_LINES:
            problems.append(f"{name} is listed but not over {MAX_LINES} lines (or gone): take it off the list")
        elif not reason.strip():
            problems.append(f"{name} is listed without a reason")
        elif "one concept" not in " ".join(docstring_head(root / name).lower().split()):
            problems.append(f"{name}: the first paragraph of its docstring does not say why it is one concept")
    return problems


def test_a_module_over_400_lines_holds_one_concept_and_says_so() -> None:
    problems = long_module_problems(PACKAGE, LONG_MODULES)
    assert not problems, "\n".join(problems)


def private_imports(root: Path) -> list[str]:
    """Every private name (`_x`, not `__x__`) one module of the package takes from another: `from M import _x`, or
    `M._x` where `M` names a module of the package. A private module (`_common.py`) is its package's to share."""
    known = modules(root)
    found = []
    for name, (path, is_package) in known.items():
        here = name if is_package else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        bound: dict[str, str] = {}  # a local name -> the module of the package it stands for
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bound.update((a.asname or a.name.split(".")[0], a.name if a.asname else a.name.split(".")[0])
                             for a in node.names if a.name in known)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                if source not in known:
                    continue
                bound.update((a.asname or a.name, f"{source}.{a.name}") for a in node.names
                             if f"{source}.{a.name}" in known)
                found += [f"{name}:{node.lineno}: from {source} import {a.name}" for a in node.names
                          if source != name and _is_private(a.name) and f"{source}.{a.name}" not in known]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _is_private(node.attr):
                dotted, value = [], node.value
                while isinstance(value, ast.Attribute):
                    dotted.insert(0, value.attr)
                    value = value.value
                if isinstance(value, ast.Name) and value.id in bound:
                    module = ".".join([bound[value.id], *dotted])
                    if module in known and module != name:
                        found.append(f"{name}:{node.lineno}: {module}.{node.attr}")
    return sorted(set(found))


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_private_name_is_imported_across_modules() -> None:
    found = private_imports(PACKAGE)
    assert not found, "private names taken from another module (make the name public in its one home, move the " \
                      "helper to its user, or use the public API that does it):\n" + "\n".join(found)


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_the_checks_see_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    # A circle closed only by an import inside a function, one closed under TYPE_CHECKING, and a
    # reach into `engine` two steps away: each is found.
    root = write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import x\n",
        "pkg/b.py": "def f():\n    from pkg import a\n",
        "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import Y\n",
        "pkg/d.py": "from . import c\n",
        "pkg/engine/__init__.py": "",
        "pkg/engine/serve.py": "",
        "pkg/config/__init__.py": "from pkg.config.form import f\n",
        "pkg/config/form.py": "from pkg import util\n",
        "pkg/util.py": "def g():\n    import pkg.engine.serve\n",
        "pkg/plain.py": "import os\nfrom pkg.config import form\n",
    })
    graph = import_graph(root)
    assert cycles(graph) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]
    parents = reachable(graph, "pkg.config")
    assert chain(parents, "pkg.engine.serve") == "pkg.config -> pkg.config.form -> pkg.util -> pkg.engine.serve"
    assert "pkg.engine.serve" not in reachable(graph, "pkg.a")


def test_the_private_name_check_sees_imports_and_module_attributes(tmp_path: Path) -> None:
    # Taken by `from ... import`, renamed, relatively, inside a function, through a module's name or its alias:
    # each is found; dunders, another object's attribute, a module's own names and a package's private module are not.
    root = write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "_x = 1\n__all__ = []\n\ndef _f(): pass\n",
        "pkg/b.py": "from pkg.a import _x, __all__\nfrom pkg.a import _f as f\n",
        "pkg/c.py": "def g():\n    from . import a\n    return a._f()\n",
        "pkg/d.py": "import os\nimport pkg.a\nimport pkg.a as m\nm._x\npkg.a._x\nos._exit\n",
        "pkg/e.py": "_y = 1\n\nclass C:\n    def m(self, other):\n        return self._y + other._x\n",
        "pkg/sub/__init__.py": "from pkg.sub import _common\nfrom ._common import helper\n",
        "pkg/sub/_common.py": "def helper(): pass\n",
    })
    assert private_imports(root) == ["pkg.b:1: from pkg.a import _x", "pkg.b:2: from pkg.a import _f",
                                     "pkg.c:3: pkg.a._f", "pkg.d:4: pkg.a._x", "pkg.d:5: pkg.a._x"]


def test_the_long_module_check_wants_each_listed_with_one_concept_said_at_its_top(tmp_path: Path) -> None:
    body = "x = 1\n" * 401
    root = write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/unlisted.py": body,
        "pkg/buried.py": '"""The queue.\n\nOne concept: admission."""\n' + body,  # said, but not in the first paragraph
        "pkg/said.py": '"""The queue: one\nconcept, admission and its order."""\n' + body,
        "pkg/short.py": '"""One concept."""\n',
        "pkg/sub/quiet.py": body,
    })
    listed = {"buried.py": "admission", "said.py": "admission", "short.py": "was long", "sub/quiet.py": ""}
    assert long_module_problems(root, listed) == [
        "unlisted.py (401 lines) is not in LONG_MODULES",
        "buried.py: the first paragraph of its docstring does not say why it is one concept",
        f"short.py is listed but not over {MAX_LINES} lines (or gone): take it off the list",
        "sub/quiet.py is listed without a reason"]


# -- what docstrings cite ------------------------------------------------------------------------------
DOCS = PACKAGE.parent / "docs"
# Documents the project was built from, beside a checkout but not in it: a user of the repository
# has none of them, so the code cites docs/ instead.
NOT_SHIPPED = ("shared/reference", "shared/seeds", "TGI3-SCHEDULER.md", "MEASUREMENT.md", "CPU-PERF.md")


def cited_texts() -> dict[str, str]:
    root = PACKAGE.parent
    paths = [*sorted(PACKAGE.rglob("*.py")), root / "README.md", *sorted((root / "notebooks_py").glob("*.py"))]
    return {str(p.relative_to(root)): p.read_text() for p in paths}


def test_code_cites_the_repository_own_docs_not_documents_it_lacks() -> None:
    found = [f"{name}:{n}: {line.strip()}" for name, text in cited_texts().items()
             for n, line in enumerate(text.splitlines(), 1)
             if any(ref in line for ref in NOT_SHIPPED) or re.search(r"(?<![\w-])TGI\.md", line)]
    assert not found, "cite docs/tgi-rules.md or docs/measurement.md instead:\n" + "\n".join(found)


def test_every_cited_rule_label_and_pitfall_is_on_its_page() -> None:
    rules = (DOCS / "tgi-rules.md").read_text()
    labels = set(re.findall(r"\*\*([A-Z]\d+)\.", rules))
    sections = set(re.findall(r"^## (\d+)\.", rules, re.M))
    pitfalls = set(re.findall(r"^(\d+)\. ", (DOCS / "measurement.md").read_text().split("## Pitfalls")[1], re.M))
    assert {"F3", "B3", "Q4", "S5", "A5", "L2", "L4", "M2", "N4"} <= labels and "9" in sections
    wrong = []
    for name, text in cited_texts().items():
        for n, line in enumerate(text.splitlines(), 1):
            if "tgi-rules.md" in line:
                wrong += [f"{name}:{n}: {label}" for label in re.findall(r"\b([FBQSALMN]\d{1,2})\b", line)
                          if label not in labels]
                wrong += [f"{name}:{n}: section {s}" for s in re.findall(r"section (\d+)", line) if s not in sections]
            if "measurement.md" in line:
                wrong += [f"{name}:{n}: pitfall {p}" for p in re.findall(r"pitfall (\d+)", line) if p not in pitfalls]
    assert not wrong, "cited but not on the page: " + "; ".join(wrong)
