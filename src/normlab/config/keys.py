"""A nested config as the dotted keys users type as Hydra overrides: {"model": {"d_model": 128}} →
{"model.d_model": 128}. One definition for every place that compares configs key by key (a checkpoint's
model against this run's, a run's environment variables against what it wrote)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`tree`'s leaves under their dotted paths, each path starting with `prefix`."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
