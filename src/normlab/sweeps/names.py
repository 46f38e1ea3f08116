"""Run names that tell a sweep's jobs apart: every swept value that differs between the jobs is in the name.

A run's name (`name`, by default `${norm.name}-${placement.name}-L${depth}-w${warmup_steps}-s${seed}`) is
its run directory's suffix, its W&B name and what the sweep's progress lines show. A sweep over something
the template does not show — `-m seed=0,1,2,3 optim.lr=1e-3,3e-3` — would give two jobs of each seed the
same name (`[sweep] 1/8 done · ln-pre-L6-w100-s1` twice). So each job gets a `name=` override: the template
as it is, then one part per swept key it does not show (`-lr0.003`; a config group's option as it is:
`-tiny`). A key the template shows (`${seed}`, or `${norm.name}` for an option whose name is its own) adds
nothing, and a sweep that sets `name` itself is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from omegaconf import DictConfig

from normlab.commands import hydra_value, override_key
from normlab.config.groups import GROUPS

NAME_KEY = "name"
LEFT_OUT = ("train.resume", "experiment_name")  # not part of what a run is


def _value(override: str) -> str:
    return override.split("=", 1)[1] if "=" in override else ""


def template(config: DictConfig) -> str | None:
    """The name as the config writes it, interpolations unresolved ('${norm.name}-…-s${seed}')."""
    node = config._get_node(NAME_KEY) if NAME_KEY in config else None
    value = node._value() if node is not None else None
    return value if isinstance(value, str) else None


def swept(job_overrides: Sequence[Sequence[str]]) -> list[str]:
    """The keys whose values differ between the jobs, in the order the overrides name them."""
    values: dict[str, set[str]] = {}
    for overrides in job_overrides:
        for o in overrides:
            key = override_key(o)
            if key.startswith("hydra") or key in LEFT_OUT:
                continue
            values.setdefault(key, set()).add(_value(o))
    return [k for k, v in values.items() if len(v) > 1]


def shown(key: str, values: set[str], name: str) -> bool:
    """Whether the name template already tells the values of `key` apart."""
    if "${" + key + "}" in name:
        return True
    options = GROUPS.get(key)
    if options is None or "${" + key + ".name}" not in name:
        return False
    # a group shown by its option's `name` field: an option named otherwise (a recipe: dyt_llama's is dyt)
    # would read as another option
    return all(v in options and options[v].values().get("name") == v for v in values)


def part(key: str, value: str) -> str:
    """'optim.lr', '0.003' → 'lr0.003'; 'model.qk_norm', 'ln' → 'qk_norm_ln' (a word after a word); a config
    group's option as it is ('model', 'tiny' → 'tiny')."""
    short = key.split(".")[-1]
    joint = "" if re.match(r"[\d.+-]", value) else "_"
    text = value if key in GROUPS or "/" in key else f"{short}{joint}{value}"
    return re.sub(r"[^\w.+-]+", "_", text).strip("_")


def distinct_names(config: DictConfig, job_overrides: Sequence[Sequence[str]]) -> list[str | None]:
    """Per job, the `name=` override that makes its name carry every swept value the template does not
    show, or None (nothing to add, a single job, or a sweep that sets the name itself)."""
    name = template(config)
    if name is None or len(job_overrides) < 2:
        return [None] * len(job_overrides)
    if any(override_key(o) == NAME_KEY for overrides in job_overrides for o in overrides):
        return [None] * len(job_overrides)
    values = {
        k: {_value(o) for ov in job_overrides for o in ov if override_key(o) == k}
        for k in swept(job_overrides)
    }
    extra = [k for k, v in values.items() if not shown(k, v, name)]
    if not extra:
        return [None] * len(job_overrides)
    out: list[str | None] = []
    for overrides in job_overrides:
        mine = {override_key(o): _value(o) for o in overrides}
        parts = [part(k, mine[k]) for k in extra if k in mine]
        out.append(f"{NAME_KEY}={hydra_value(name + '-' + '-'.join(parts))}" if parts else None)
    return out
