"""The Hydra configs, shipped inside the package: found as `pkg://normlab.configs` by `normlab-train`
and train.py; `configs/` at the root of a checkout is a link to this directory.

The YAML here is the one place a default is written: code that is given no config (a `Monitor()` built in
a test, a benchmark's trainer) reads its values from the group's YAML through `group_defaults`."""

import dataclasses
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import OmegaConf

CONFIG_DIR = Path(__file__).resolve().parent
T = TypeVar("T")


@cache
def _load(group: str, option: str) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / group / f"{option}.yaml"), resolve=True)


def group_defaults(group: str, option: str = "default") -> dict[str, Any]:
    """The values of configs/GROUP/OPTION.yaml (a fresh dict: callers may change it)."""
    return dict(_load(group, option))


def from_group(cls: type[T], group: str, values: Mapping[str, Any] | None = None, **changes: Any) -> T:
    """A dataclass whose fields are keys of configs/GROUP/default.yaml, filled from `values` (that group of a
    composed config) or, when None, from the YAML itself; `changes` replace fields after that."""
    source = group_defaults(group) if values is None else values
    return cls(**{f.name: source[f.name] for f in dataclasses.fields(cls)} | changes)
