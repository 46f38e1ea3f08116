"""Fixtures of the data tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from data_helpers import write_layout

import normlab.data.cache as cache_mod


@pytest.fixture
def layout_dir(tmp_path: Path):
    """Factory: write a layout into a fresh folder and return (folder, stories by split)."""

    def make(
        layout: str, n_train: int = 120, n_val: int = 20, seed: int = 5
    ) -> tuple[Path, dict[str, list[str]]]:
        root = tmp_path / f"{layout}-{seed}-{n_train}"
        return root, write_layout(root, layout, n_train, n_val, seed)

    return make


@pytest.fixture
def count_builds(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every cache build, recorded by wrapping the one function that builds an entry."""
    builds: list[Path] = []
    real = cache_mod.build_entry

    def counting(entry: Path, *args: Any, **kwargs: Any) -> Any:
        builds.append(entry)
        return real(entry, *args, **kwargs)

    monkeypatch.setattr(cache_mod, "build_entry", counting)
    return builds
