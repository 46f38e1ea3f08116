"""The import layering of ARCHITECTURE.md: each package imports only the layers below it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "normlab"

ALLOWED = {
    "model": {"configs"},
    "data": {"errors", "io", "configs"},
    "metrics": {"model", "io", "configs", "train.summary"},
    "train": {"model", "data", "metrics", "config", "configs", "distributed", "commands", "errors", "io"},
    # analysis only reads run directories: metric names and summary.json's definition, atomic writes
    "analysis": {"metrics", "train.summary", "errors", "io"},
    "bench": {"model", "data", "metrics", "train", "config", "configs", "errors", "io"},
    # the study layer reads runs through analysis and measures with bench (finding 5's norm profiler)
    "study": {
        "analysis",
        "bench",
        "model",
        "data",
        "metrics",
        "train.summary",
        "config",
        "configs",
        "errors",
        "io",
    },
}
EXCEPTIONS: set[tuple[str, str]] = set()


def imported(path: Path) -> set[str]:
    """normlab modules a file imports, as 'train' or 'train.summary' (module level and inside functions)."""
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
