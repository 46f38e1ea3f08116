"""Fixtures of the data tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# the helpers next to this file must be importable by name, also from spawned child processes
sys.path.insert(0, str(Path(__file__).resolve().parent))

from data_helpers import write_layout  # noqa: E402


@pytest.fixture
def layout_dir(tmp_path: Path):
    """Factory: write a layout into a fresh folder and return (folder, stories by split)."""

    def make(
        layout: str, n_train: int = 120, n_val: int = 20, seed: int = 5
    ) -> tuple[Path, dict[str, list[str]]]:
        root = tmp_path / f"{layout}-{seed}-{n_train}"
        return root, write_layout(root, layout, n_train, n_val, seed)

    return make
