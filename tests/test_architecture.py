"""The import layering of ARCHITECTURE.md: each package imports only the layers below it."""

from __future__ import annotations

import ast
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
