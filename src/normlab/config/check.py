"""Check a composed config against the schemas: one sentence for the first bad value or combination.

`checked(cfg)` returns the resolved config as plain containers, with values converted to their declared
types (an int given for a float becomes a float, ...), or raises `InvalidConfig` naming the key, the value
and what the key takes. Keys are checked top-level first, then group by group in `CHECK_ORDER`, so a bad
`depth` is reported as `depth`, not as `model.n_layers` (which copies it).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import math
import typing
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from normlab.config.schema import (
    CHECK_ORDER,
    GROUP_SCHEMAS,
    STORE_GROUP,
    RootSchema,
    Rule,
    register,
    store_name,
)
from normlab.errors import InvalidConfig


def shown(value: Any) -> str:
    """A value as a user types it on the command line: abc, 3, true, null, [0.9, 0.95]."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # nan, inf, -inf: as typed, not JSON's NaN / Infinity
    return json.dumps(value, default=str)


def _type_phrase(annotation: Any) -> tuple[str, bool]:
    """(what the type is called, whether null is allowed) for the annotations the schemas use."""
    optional = False
    origin = typing.get_origin(annotation)
    if origin is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional, annotation = True, args[0]
        origin = typing.get_origin(annotation)
    if origin is list:
        (item,) = typing.get_args(annotation) or (Any,)
        return f"a list of {_type_phrase(item)[0].removeprefix('a ')}s", optional
    phrases = {int: "a whole number", float: "a finite number", bool: "true or false", str: "a string"}
    return phrases.get(annotation, "a value"), optional


def _range_phrase(rule: Rule) -> str:
    lo = f"≥ {_num(rule.ge)}" if rule.ge is not None else f"> {_num(rule.gt)}" if rule.gt is not None else ""
    hi = f"≤ {_num(rule.le)}" if rule.le is not None else f"< {_num(rule.lt)}" if rule.lt is not None else ""
    if lo and hi:
        left = "[" if rule.ge is not None else "("
        right = "]" if rule.le is not None else ")"
        low = rule.ge if rule.ge is not None else rule.gt
        high = rule.le if rule.le is not None else rule.lt
        return f"in {left}{_num(low)}, {_num(high)}{right}"
    return lo or hi


def _num(x: float | None) -> str:
    return str(int(x)) if x is not None and float(x).is_integer() else str(x)


def _choices(rule: Rule) -> list[Any] | None:
    if rule.choices is None:
        return None
    return list(rule.choices() if callable(rule.choices) else rule.choices)


def describe(annotation: Any, rule: Rule) -> str:
    """What a key takes, e.g. "a whole number ≥ 1", "one of fp32, bf16, fp16", "a finite number > 0 or null"."""
    choices = _choices(rule)
    type_phrase, optional = _type_phrase(annotation)
    if choices is not None:
        text = "one of " + ", ".join(shown(c) for c in choices)
    else:
        text = type_phrase if type_phrase != "a value" else "a finite number"
        if rule.length is not None:
            text = f"a list of {rule.length} {type_phrase.removeprefix('a list of ')}"
        if rng := _range_phrase(rule):
            text += f" {rng}"
        if rule.also is not None:
            text += f", or {rule.also}"
    return text + (" or null" if optional else "")


def _in_range(value: float, rule: Rule) -> bool:
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return not (
        (rule.ge is not None and value < rule.ge)
        or (rule.gt is not None and value <= rule.gt)
        or (rule.le is not None and value > rule.le)
        or (rule.lt is not None and value >= rule.lt)
    )


def _check_rule(value: Any, rule: Rule) -> bool:
    if value is None:
        return True  # the type check already refused null where it is not allowed
    choices = _choices(rule)
    if choices is not None:
        # True == 1 in Python: compare types too, so that `1` is not taken for `true`
        return any(type(value) is type(c) and value == c for c in choices)
    if rule.also is not None and value == rule.also:
        return True
    if isinstance(value, list):
        return (rule.length is None or len(value) == rule.length) and all(_check_rule(v, rule) for v in value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        # strings, flags, mappings: fine only where no numeric constraint applies
        return all(x is None for x in (rule.ge, rule.gt, rule.le, rule.lt)) and rule.also is None
    return _in_range(value, rule)


def _did_you_mean(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f"did you mean {close[0]}?" if close else f"the settings here are {', '.join(known)}."


def stored_schema(name: str) -> DictConfig:
    """A fresh copy of the schema node stored in Hydra's ConfigStore under normlab_schema/NAME."""
    from hydra.core.config_store import ConfigStore

    return copy.deepcopy(ConfigStore.instance().load(f"{STORE_GROUP}/{name}.yaml").node)


def check_group(prefix: str, values: Mapping[str, Any], schema: type, name: str) -> dict[str, Any]:
    """Check one mapping against one schema (its class for the rules, its ConfigStore node for the types);
    return it with values converted to their types."""
    fields = {f.name: f for f in dataclasses.fields(schema)}
    hints = typing.get_type_hints(schema)
    node = stored_schema(name)
    out: dict[str, Any] = {}
    for key, value in values.items():
        full = f"{prefix}{key}"
        if key not in fields:
            known = [f"{prefix}{k}" for k in fields if not k.startswith("_") and k in values]
            raise InvalidConfig(f"{full} is not a setting; {_did_you_mean(full, known)}", full)
        rule: Rule = fields[key].metadata["rule"]
        annotation = hints[key]
        bad = InvalidConfig(
            f"{full}={shown(value)} is not allowed; {full} takes {describe(annotation, rule)}.", full
        )
        if annotation is Any:
            converted = value
            if rule.also is not None and isinstance(value, int) and not isinstance(value, bool):
                converted = float(value)
        else:
            try:
                node[key] = value
            except (OmegaConfBaseException, ValueError, TypeError):
                raise bad from None
            converted = node[key]
            if OmegaConf.is_config(converted):
                converted = OmegaConf.to_container(converted)
        if not _check_rule(converted, rule):
            raise bad
        out[key] = converted
    return out


def schema_for(group: str, values: Mapping[str, Any]) -> tuple[type, str]:
    """The schema class of a group's chosen option, and its ConfigStore name."""
    schema = GROUP_SCHEMAS[group]
    if isinstance(schema, dict):
        option = values.get("name")
        if option not in schema:
            choices = ", ".join(schema)
            raise InvalidConfig(
                f"{group}.name={shown(option)} is not allowed; {group}.name takes one of {choices}.",
                f"{group}.name",
            )
        return schema[option], store_name(group, option)
    return schema, store_name(group)


def resolved(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """The config as plain containers with every ${...} resolved; a broken reference is InvalidConfig."""
    if not OmegaConf.is_config(cfg):
        return dict(cfg)
    try:
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "the config"
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InvalidConfig(
            f"{key} could not be resolved ({first}); fix that value or the ${{...}} reference in it.", key
        ) from None


def checked(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """The resolved, type-converted config; InvalidConfig for the first bad value or combination."""
    # (again) every time: Hydra's joblib launcher replaces a worker's ConfigStore with the parent's
    register()
    plain = resolved(cfg)
    top = {k: v for k, v in plain.items() if k not in GROUP_SCHEMAS}
    out = check_group("", top, RootSchema, store_name(None))
    for group in CHECK_ORDER:
        if group in plain:
            values = plain[group]
            if not isinstance(values, Mapping):
                raise InvalidConfig(
                    f"{group}={shown(values)} is not a config group option; choose one in configs/{group}/.",
                    group,
                )
            out[group] = check_group(f"{group}.", values, *schema_for(group, values))
    check_combinations(out)
    return {k: out[k] for k in plain}


def check_combinations(cfg: Mapping[str, Any]) -> None:
    """Values that are fine alone but not together."""
    from normlab.model.variant import InvalidVariant, check_heads, check_variant

    try:
        check_variant(cfg["norm"], cfg["placement"])
    except InvalidVariant as e:
        raise InvalidConfig(str(e), "placement") from None
    model, train, optim = cfg["model"], cfg["train"], cfg["optim"]
    if train["seq_len"] > model["context_length"]:
        raise InvalidConfig(
            f"train.seq_len={train['seq_len']} exceeds model.context_length={model['context_length']}; "
            "lower train.seq_len or raise model.context_length.",
            "train.seq_len",
        )
    try:
        check_heads(model["d_model"], model["n_heads"])
    except InvalidVariant as e:
        raise InvalidConfig(str(e), "model.n_heads") from None
    if optim["min_lr"] > optim["lr"]:
        raise InvalidConfig(
            f"optim.min_lr={shown(optim['min_lr'])} is above optim.lr={shown(optim['lr'])}; the schedule decays "
            "from optim.lr down to optim.min_lr, so set optim.min_lr ≤ optim.lr.",
            "optim.min_lr",
        )
    spikes = cfg.get("spikes")
    if spikes and spikes["window"] > 0 and spikes["min_history"] > spikes["window"]:
        raise InvalidConfig(
            f"spikes.min_history={spikes['min_history']} is above spikes.window={spikes['window']}; the "
            "detector needs that many ratios in its window, so set spikes.min_history ≤ spikes.window.",
            "spikes.min_history",
        )
    data = cfg["data"]
    if data["name"] == "text" and not data.get("path"):
        raise InvalidConfig(
            "data=text needs a corpus: set data.path=FILE_OR_DIR (.txt, .jsonl or .parquet files).",
            "data.path",
        )
