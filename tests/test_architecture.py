"""The import layering of ARCHITECTURE.md: each package imports only the layers below it, and no module
imports itself back through others (no circle, module-level and function-level imports alike)."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "normlab"

ALLOWED = {
    "model": {"knobs"},
    "data": {"errors", "io", "knobs"},
    "metrics": {"model", "io", "knobs", "summary"},
    # the groups' options: their dataclasses live with the code they configure, below
    "config": {"model", "data", "metrics", "errors", "knobs", "configs", "generated"},
    "train": {
        "model",
        "data",
        "metrics",
        "config",
        "distributed",
        "commands",
        "errors",
        "io",
        "knobs",
        "summary",
    },
    # analysis only reads run directories: metric names and summary.json's definition, atomic writes
    # and the rules that name why a run failed (pure functions, no torch: train.diagnosis and its schedule)
    "analysis": {"metrics", "summary", "train.diagnosis", "train.schedule", "errors", "io", "generated"},
    "bench": {"model", "data", "metrics", "train", "config", "configs", "errors", "io"},
    # the study layer reads runs through analysis and measures with bench (finding 5's norm profiler); the
    # GPU pilot's cost model counts a step's FLOPs with train.flops (pure arithmetic on a model's parameters)
    "study": {
        "analysis",
        "bench",
        "model",
        "data",
        "metrics",
        "summary",
        "train.diagnosis",
        "train.flops",
        "train.schedule",
        "config",
        "configs",
        "errors",
        "io",
    },
}
# modules of the bottom layer: what each may import from normlab
BOTTOM = {
    "knobs.py": {"errors"},
    "errors.py": set(),
    "io.py": set(),
    "summary.py": {"io"},
    "commands.py": set(),
    "generated.py": set(),
    "distributed.py": set(),
    "sweep_progress.py": set(),  # a Hydra callback every job loads: nothing of normlab
}
# the top-level modules above the packages: what each may import (None: anything, the entry points)
TOP: dict[str, set[str] | None] = {
    "__init__.py": set(),
    "suggest.py": {"config"},
    "requeue.py": {"distributed", "summary", "train"},
    # a job's ending, shared by cli (one job) and sweeps (many): below both, so neither imports the other
    "job.py": {"commands", "distributed", "errors", "requeue", "train"},
    "cli.py": None,
    "__main__.py": None,
}
EXCEPTIONS: set[tuple[str, str]] = set()


def imported(path: Path) -> set[str]:
    """normlab modules a file imports, as 'train' or 'train.diagnosis' (module level and inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            if name.startswith("normlab."):
                found.add(name.removeprefix("normlab."))
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_lower_layers(package):
    wrong = []
    for path in sorted((SRC / package).rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for mod in imported(path):
            top = mod.split(".")[0]
            if top == package or top in ALLOWED[package] or mod in ALLOWED[package]:
                continue
            if (rel, top) in EXCEPTIONS:
                continue
            wrong.append(f"{rel} imports normlab.{mod}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("module", sorted(BOTTOM))
def test_bottom_modules_import_only_the_bottom(module):
    wrong = [m for m in imported(SRC / module) if m.split(".")[0] not in BOTTOM[module]]
    assert not wrong, f"{module} imports {wrong}"


@pytest.mark.parametrize("module", sorted(TOP))
def test_top_level_modules_import_only_what_the_table_allows(module):
    allowed = TOP[module]
    wrong = [] if allowed is None else [m for m in imported(SRC / module) if m.split(".")[0] not in allowed]
    assert not wrong, f"{module} imports {wrong}"


def test_every_top_level_module_and_package_is_in_the_table():
    """A module or package added at the top of normlab must say where it sits (ARCHITECTURE.md)."""
    modules = {p.name for p in SRC.glob("*.py")}
    assert modules == set(BOTTOM) | set(TOP), modules ^ (set(BOTTOM) | set(TOP))
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    # configs: YAML only; sweeps: the launchers, allowed everything as the entry points are
    assert packages == set(ALLOWED) | {"configs", "sweeps"}, packages ^ (set(ALLOWED) | {"configs", "sweeps"})


def test_the_table_has_no_circle():
    """0 circles: what a package may import never reaches back to it."""
    graph = {name: {m.split(".")[0] for m in allowed} for name, allowed in ALLOWED.items()}
    graph.update({m.removesuffix(".py"): allowed for m, allowed in BOTTOM.items()})

    def reaches(start: str, target: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, set()):
            if nxt == target or (nxt not in seen and reaches(nxt, target, seen | {nxt})):
                return True
        return False

    assert not [name for name in graph if reaches(name, name, {name})]


def test_nothing_reads_configs_yaml_at_build_time():
    """Only the entry points, the config system and the study layer may name the YAML folder (presets)."""
    readers = sorted(
        path.relative_to(SRC).as_posix()
        for path in SRC.rglob("*.py")
        if "configs" in {m.split(".")[0] for m in imported(path)}
    )
    # cli.py: an unknown +experiment=NAME is answered with every preset there (normlab.suggest)
    assert readers == ["cli.py", "config/compose.py", "config/help.py", "study/findings_report/section.py"], (
        readers
    )


# ------------------------------------------------------------------------------------------------------
# Circles: the import graph of the modules themselves. A lazy import (inside a function) is an arrow like
# any other: it only postpones the loop to the first call, and the two modules still need each other.

Graph = Mapping[str, set[str]]


def module_name(path: Path, root: Path, package: str) -> str:
    """`package.a.b` for root/a/b.py, `package.a` for root/a/__init__.py."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def module_imports(path: Path, root: Path, package: str, modules: set[str]) -> set[str]:
    """The modules of `package` (among `modules`) that the file imports anywhere in it: module level, inside
    functions, relative (`from .x import y`) or absolute; `from P import m` is module P.m where one exists."""
    this = module_name(path, root, package)
    base = this if path.name == "__init__.py" else this.rpartition(".")[0]  # what `.` means here
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                up = base.split(".")[: len(base.split(".")) - (node.level - 1)]
                origin = ".".join([*up, node.module] if node.module else up)
            else:
                origin = node.module or ""
            targets = [
                f"{origin}.{a.name}" if f"{origin}.{a.name}" in modules else origin for a in node.names
            ]
        else:
            continue
        for target in targets:
            # `import package.a.b` names a.b; the closest module of the package a dotted name lies in
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != package and target != this:
                found.add(target)
    return found


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Every module of the package under `root` → the modules of the package it imports."""
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(p, root, package) for p in paths}
    return {module_name(p, root, package): module_imports(p, root, package, modules) for p in paths}


def circles(graph: Graph) -> list[list[str]]:
    """The circles of a graph: its strongly connected components of more than one module (Tarjan's
    algorithm), each sorted, smallest first; a module that imports itself is not one (Python allows it)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found, key=lambda c: (len(c), c))


def arrows_within(graph: Graph, circle: list[str]) -> list[str]:
    """The imports that make up a circle, as `a → b` lines (what to cut)."""
    members = set(circle)
    return [f"{a} → {b}" for a in circle for b in sorted(graph.get(a, ())) if b in members]


def packages_of(graph: Graph, package: str) -> dict[str, set[str]]:
    """The graph of the top-level units (`package.model`, `package.cli`): a circle between packages that
    passes through different modules of each still is one."""

    def top(module: str) -> str:
        return ".".join(module.split(".")[:2])

    out: dict[str, set[str]] = {}
    for a, targets in graph.items():
        out.setdefault(top(a), set()).update(top(b) for b in targets if top(b) != top(a))
    return out


def report(graph: Graph, found: list[list[str]]) -> str:
    return "\n".join(f"circle {' ↔ '.join(c)}: " + "; ".join(arrows_within(graph, c)) for c in found)


def test_no_import_circle():
    """0 circles between modules (a function's import counts) and between packages."""
    graph = import_graph(SRC, "normlab")
    assert "normlab.model.norms" in graph["normlab.model.blocks"]  # the graph is read at all
    assert "normlab.model.norms" not in graph["normlab.model.norm_config"]  # the norm-config loop is gone
    found = circles(graph)
    assert not found, report(graph, found)
    packages = packages_of(graph, "normlab")
    assert not circles(packages), report(packages, circles(packages))


@pytest.mark.parametrize(
    ("importer", "imported_module"),
    [
        # issue 41's two circles: the launchers asked cli how a job ended (JobFailed) and ran the stacked
        # jobs there; sweeps.base imported sweeps.pool (its subclass) inside a function
        ("normlab.sweeps", "normlab.cli"),
        ("normlab.sweeps.base", "normlab.sweeps.pool"),
    ],
)
def test_no_arrow_back_up(importer, imported_module):
    """The entry point (cli) is imported by nothing of the library but `python -m normlab` (__main__), and a
    base class does not import its subclass's module: arrows point down only."""
    graph = import_graph(SRC, "normlab")
    wrong = [
        f"{a} → {b}"
        for a, targets in graph.items()
        if a == importer or a.startswith(importer + ".")
        for b in targets
        if b == imported_module or b.startswith(imported_module + ".")
    ]
    assert not wrong, wrong
    users_of_cli = sorted(a for a, targets in graph.items() if "normlab.cli" in targets)
    assert users_of_cli == ["normlab.__main__"], users_of_cli


def write_package(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_the_circle_check_finds_a_crafted_circle_through_a_lazy_import(tmp_path):
    """A package where norms imports batch_norm at module level and batch_norm imports norms inside a
    function (the circle issue 41 found in model/), beside an acyclic chain and a relative-import circle."""
    pkg = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "model/__init__.py": "from pkg.model.norms import NORMS\n",
            "model/norms.py": "from pkg.model.batch_norm import BatchNormConfig\nNORMS = {}\n",
            "model/batch_norm.py": (
                "class BatchNormConfig:\n    def names(self):\n"
                "        from pkg.model.norms import NORMS  # the lazy arrow back\n        return tuple(NORMS)\n"
            ),
            "data/__init__.py": "",
            "data/a.py": "from .b import x\n",
            "data/b.py": "from . import c\nx = 1\n",
            "data/c.py": "def f():\n    from pkg.data import a\n",
            "top.py": "import pkg.model.norms\nfrom pkg import data\n",
        },
    )
    graph = import_graph(pkg, "pkg")
    assert graph["pkg.data.b"] == {"pkg.data.c"} and graph["pkg.top"] == {"pkg.model.norms", "pkg.data"}
    assert circles(graph) == [
        ["pkg.model.batch_norm", "pkg.model.norms"],
        ["pkg.data.a", "pkg.data.b", "pkg.data.c"],
    ]
    assert "pkg.model.batch_norm → pkg.model.norms" in report(graph, circles(graph))
    # the same package with the lazy import gone: no circle
    (pkg / "model" / "batch_norm.py").write_text("class BatchNormConfig:\n    pass\n")
    (pkg / "data" / "c.py").write_text("")
    assert circles(import_graph(pkg, "pkg")) == []


def test_the_circle_check_finds_a_circle_between_packages():
    """Crafted graphs: a circle between packages through different modules of each (no module circle), which
    the package-level graph finds, and that graph without it."""
    graph = {
        "p.cli": {"p.sweeps.stacked"},
        "p.sweeps.stacked": {"p.train.run"},
        "p.sweeps.base": {"p.cli"},
        "p.train.run": set(),
        "p.train.other": {"p.cli"},
    }
    assert circles(graph) == []
    assert circles(packages_of(graph, "p")) == [["p.cli", "p.sweeps", "p.train"]]
    assert report(packages_of(graph, "p"), circles(packages_of(graph, "p"))) == (
        "circle p.cli ↔ p.sweeps ↔ p.train: p.cli → p.sweeps; p.sweeps → p.cli; p.sweeps → p.train; p.train → p.cli"
    )
    graph["p.train.other"] = set()
    assert circles(packages_of(graph, "p")) == [["p.cli", "p.sweeps"]]
    graph["p.sweeps.base"] = set()  # the arrow back up cut: no circle left
    assert circles(packages_of(graph, "p")) == []
    assert circles({"a": {"a"}}) == []  # importing itself is no circle
