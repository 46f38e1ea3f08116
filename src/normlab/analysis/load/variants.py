"""Grouping runs into variants: the config keys that differ between runs, short names and labels."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from normlab.analysis.load.discover import (
    BARE_LABEL_KEYS,
    MISSING,
    NON_VARIANT_KEYS,
    NON_VARIANT_PREFIXES,
)
from normlab.analysis.load.read import (
    hashable,
)

# ------------------------------------------------------------------------------------------- grouping


def sortable(value: Any) -> tuple[int, Any]:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return (2, "")
    if isinstance(value, bool | int | float):
        return (0, float(value))
    return (1, str(value))


# values that set nothing (a list knob left empty, an optional one left null): a run from before the knob
# existed ran as these do
UNSET = {None, (), ""}


def _is_non_variant(key: str) -> bool:
    return key in NON_VARIANT_KEYS or key.split(".")[0] in NON_VARIANT_PREFIXES


def varying_keys(configs: Sequence[dict[str, Any]], derived: set[str] | None = None) -> list[str]:
    """Config keys whose values differ between the given flattened configs, in first-seen order.

    Dropped: keys that are interpolations of other keys in every run (`model.n_layers: ${depth}`), keys
    that never define a variant (`name`, `train.resume`, `logger.*`, ...; see NON_VARIANT_KEYS), and
    keys of a config group that merely follow that group's choice (`norm.eps` when `norm.name` varies and
    each norm has one eps).
    """
    derived = derived or set()
    order: dict[str, None] = {}
    for cfg in configs:
        for key in cfg:
            order.setdefault(key, None)
    keys = []
    for key in order:
        if key in derived or _is_non_variant(key):
            continue
        values = {hashable(cfg.get(key, MISSING)) for cfg in configs}
        if MISSING in values and values - {MISSING} <= UNSET:
            continue  # a knob older runs do not have, left unset by the newer ones: the same behaviour
        if len(values) > 1:
            keys.append(key)
    # a group member that is a function of the group's identity (its name or its hydra choice) is noise
    kept = []
    for key in keys:
        group = key.split(".")[0]
        identity = next((k for k in (f"{group}.name", group) if k in keys and k != key), None)
        if identity is not None and "." in key:
            mapping: dict[Any, set[Any]] = {}
            for cfg in configs:
                mapping.setdefault(cfg.get(identity, MISSING), set()).add(cfg.get(key, MISSING))
            if all(len(v) == 1 for v in mapping.values()):
                continue
        kept.append(key)
    return kept


def short_names(keys: Sequence[str]) -> dict[str, str]:
    """Display names: `norm.name` -> `norm`, `optim.lr` -> `lr`; the full key where short ones collide."""
    short = {}
    for key in keys:
        parts = key.split(".")
        if parts[-1] == "name" and len(parts) > 1:
            short[key] = parts[-2]
        else:
            short[key] = parts[-1]
    counts: dict[str, int] = {}
    for s in short.values():
        counts[s] = counts.get(s, 0) + 1
    return {k: (s if counts[s] == 1 else k) for k, s in short.items()}


def _fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ",".join(_fmt_value(v) for v in value)
    return str(value)


def variant_label(values: dict[str, Any], keys: Sequence[str], display: dict[str, str]) -> str:
    parts = []
    for key in keys:
        value = values.get(key, MISSING)
        if key in BARE_LABEL_KEYS:
            parts.append(_fmt_value(value))
        else:
            parts.append(f"{display[key]}={_fmt_value(value)}")
    return ", ".join(parts)
