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
    "config": {"model", "data", "metrics", "errors", "knobs", "configs"},
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
    "analysis": {"metrics", "summary", "train.diagnosis", "train.schedule", "errors", "io"},
    "bench": {"model", "data", "metrics", "train", "config", "configs", "errors", "io"},
    # the study layer reads runs through analysis and measures with bench (finding 5's norm profiler)
    "study": {
        "analysis",
        "bench",
        "model",
        "data",
        "metrics",
        "summary",
        "train.diagnosis",
        "train.schedule",
        "config",
        "configs",
        "errors",
        "io",
    },
}
# modules of the bottom layer: what each may import from normlab
BOTTOM = {"knobs.py": {"errors"}, "errors.py": set(), "io.py": set(), "summary.py": {"io"}}
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


def test_nothing_reads_configs_yaml_at_build_time():
    """Only the entry points, the config system and the study layer may name the YAML folder (presets)."""
    readers = sorted(
        path.relative_to(SRC).as_posix()
        for path in SRC.rglob("*.py")
        if "configs" in {m.split(".")[0] for m in imported(path)}
    )
    # cli.py: an unknown +experiment=NAME is answered with every preset there (normlab.suggest)
    assert readers == ["cli.py", "config/compose.py", "config/help.py", "study/report.py"], readers
