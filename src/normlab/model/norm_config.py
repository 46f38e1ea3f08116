"""The `norm` config group's base: the knob every norm type has (its name), which each norm's own config
dataclass extends with its `norm.*` knobs. Its own module so that a norm defined beside its module outside
norms.py (model/batch_norm.py) builds its config without importing the registry that lists it: a config
knows its own name only, and the registry (NORMS) maps names to configs. Which names exist is checked where
that map is read — the config group picking a config by its name (`normlab.config.config_class`) and
`check_variant` — never here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from normlab.knobs import Knobs, knob


def norm_name(name: str) -> Any:
    """The `name` knob of a norm's config: that norm's name, the one value its config takes (a config built
    with another norm's name would be mislabelled)."""
    return knob(name, "the norm type (norm=NAME)", choices=(name,))


@dataclass(frozen=True)
class NormConfig(Knobs):
    """The `norm` config group: the norm's name, then its own knobs (one subclass per norm type)."""

    GROUP: ClassVar[str] = "norm"
    name: str = norm_name("ln")
