"""The `norm` config group's base: the knob every norm type has (its name), which each norm's own config
dataclass extends with its `norm.*` knobs. Its own module so that a norm defined beside its module outside
norms.py (model/batch_norm.py) builds its config without importing the registry that lists it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from normlab.knobs import Knobs, knob


def _registered() -> tuple[str, ...]:
    from normlab.model.norms import NORMS  # the registry lists the configs: read when a name is checked

    return tuple(NORMS)


def norm_name(name: str) -> Any:
    """The `name` knob of a norm's config, defaulting to that norm: valid names are NORMS' keys."""
    return knob(name, "the norm type (norm=NAME)", choices=_registered)


@dataclass(frozen=True)
class NormConfig(Knobs):
    """The `norm` config group: the norm's name, then its own knobs (one subclass per norm type)."""

    GROUP: ClassVar[str] = "norm"
    name: str = norm_name("ln")
