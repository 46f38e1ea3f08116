"""How a config knob is declared: once, as a dataclass field with its default, its help text and its rule.

    eps: float = knob(1e-5, "added to the variance", gt=0)

The field's annotation is its type (OmegaConf, the library under Hydra, converts a typed value to it: `1`
for a float becomes 1.0, `abc` for an int is refused); `knob(...)` adds what `--help` shows beside it and
the range or choices it must satisfy. A config class is a dataclass deriving from `Knobs`: its
`__post_init__` applies every field's rule, so a bad value is refused with one sentence naming the key,
the value and what the key takes, whether the config came from the command line or from code.

The config classes live with the code they configure (the norms' in model/norms.py, the spike detector's
in metrics/spikes.py, ...); `normlab.config` collects them into Hydra's config groups.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import math
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar, TypeVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from normlab.errors import InvalidConfig

T = TypeVar("T", bound="Knobs")


@dataclass(frozen=True)
class Rule:
    """What a value of the right type must also satisfy. `choices` may be a callable returning them (a
    registry defined further down its module, looked up only when a value is checked)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: Sequence[Any] | Callable[[], Sequence[Any]] | None = None
    length: int | None = None  # lists: exact number of items
    also: str | None = None  # a value accepted besides the range (e.g. "sqrt_d" for a number)


def knob(default: Any, doc: str, **rule: Any) -> Any:
    """A config field: its default, the sentence `--help` shows beside it, and its Rule (ge, gt, le, lt,
    choices, length, also)."""
    metadata = {"doc": doc, "rule": Rule(**rule)}
    if isinstance(default, list | dict):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


class Knobs:
    """Base of every config dataclass. `GROUP` is the config group it is ("" for the top level), the prefix
    of its keys in messages (`spikes.sigma`)."""

    GROUP: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if not _is_interpolation(value):  # checked once resolved
                check_rule(type(self), f.name, value)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every field's default, in declaration order (a fresh dict: callers may change it)."""
        return {f.name: _default(f) for f in dataclasses.fields(cls)}  # type: ignore[arg-type]

    @classmethod
    def from_config(cls: type[T], values: Mapping[str, Any] | None = None, **changes: Any) -> T:
        """From a composed config's group (None: the defaults), with `changes` applied. The group's values
        are converted to the fields' types as a command line's are (`"400"` for a whole number becomes 400;
        a value that is not one is InvalidConfig naming the key); keys the class does not have are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        given = {
            k: v if _is_interpolation(v) else _converted(cls, k, v)
            for k, v in (values or {}).items()
            if k in names
        }
        return cls(**given | changes)

    @classmethod
    def of(cls: type[T], values: T | Mapping[str, Any] | None) -> T:
        """`values` itself when it is already this config, else `from_config(values)`: code that takes a
        group accepts either the typed config or that group of a composed config."""
        return values if isinstance(values, cls) else cls.from_config(values)


def _is_interpolation(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return copy.deepcopy(f.default)


def key_of(cls: type, name: str) -> str:
    group = getattr(cls, "GROUP", "")
    return f"{group}.{name}" if group else name


def fields_of(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


# ------------------------------------------------------------------------------------------ the sentences


def shown(value: Any) -> str:
    """A value as a user types it on the command line: abc, 3, true, null, [0.9, 0.95]."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # nan, inf, -inf: as typed, not JSON's NaN / Infinity
    return json.dumps(value, default=str)


def _type_phrase(annotation: Any) -> tuple[str, bool]:
    """(what the type is called, whether null is allowed) for the annotations the configs use."""
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


def _num(x: float | None) -> str:
    return str(int(x)) if x is not None and float(x).is_integer() else str(x)


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


def choices(rule: Rule) -> list[Any] | None:
    if rule.choices is None:
        return None
    return list(rule.choices() if callable(rule.choices) else rule.choices)


def what_it_takes(annotation: Any, rule: Rule) -> str:
    """What a key takes, e.g. "a whole number ≥ 1", "one of fp32, bf16, fp16", "a finite number > 0 or null"."""
    options = choices(rule)
    type_phrase, optional = _type_phrase(annotation)
    if options is not None:
        text = "one of " + ", ".join(shown(c) for c in options)
    else:
        text = type_phrase if type_phrase != "a value" else "a finite number"
        if rule.length is not None:
            text = f"a list of {rule.length} {type_phrase.removeprefix('a list of ')}"
        if rng := _range_phrase(rule):
            text += f" {rng}"
        if rule.also is not None:
            text += f", or {rule.also}"
    return text + (" or null" if optional else "")


def not_allowed(cls: type, name: str, value: Any) -> InvalidConfig:
    """`train.batch_size=0 is not allowed; train.batch_size takes a whole number ≥ 1.`"""
    key = key_of(cls, name)
    takes = what_it_takes(typing.get_type_hints(cls)[name], fields_of(cls)[name].metadata["rule"])
    return InvalidConfig(f"{key}={shown(value)} is not allowed; {key} takes {takes}.", key)


# ------------------------------------------------------------------------------------------ the checks


def _in_range(value: float, rule: Rule) -> bool:
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return not (
        (rule.ge is not None and value < rule.ge)
        or (rule.gt is not None and value <= rule.gt)
        or (rule.le is not None and value > rule.le)
        or (rule.lt is not None and value >= rule.lt)
    )


def satisfies(value: Any, rule: Rule) -> bool:
    if value is None:
        return True  # the type check refuses null where it is not allowed
    options = choices(rule)
    if options is not None:
        # True == 1 in Python: compare types too, so that `1` is not taken for `true`
        return any(type(value) is type(c) and value == c for c in options)
    if rule.also is not None and value == rule.also:
        return True
    if isinstance(value, list | tuple):
        return (rule.length is None or len(value) == rule.length) and all(satisfies(v, rule) for v in value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        # strings, flags, mappings: fine only where no numeric constraint applies
        return all(x is None for x in (rule.ge, rule.gt, rule.le, rule.lt)) and rule.also is None
    return _in_range(value, rule)


def check_rule(cls: type, name: str, value: Any) -> None:
    """InvalidConfig unless `value` (already of the field's type) satisfies field `name`'s rule."""
    if not satisfies(value, fields_of(cls)[name].metadata.get("rule", Rule())):
        raise not_allowed(cls, name, value)


@cache
def _typed_node(cls: type) -> DictConfig:
    """A node typed by `cls`'s annotations, which converts (or refuses) a value assigned to it. Reused: each
    assignment replaces the one value it converts, and nothing reads the node's other values."""
    node = OmegaConf.structured(cls)
    OmegaConf.set_readonly(node, False)  # frozen dataclasses give read-only nodes
    return node


def checked_values(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` (a group of a composed config, resolved) with each value converted to its field's type, as
    OmegaConf converts it (`1` → 1.0 for a float, `123` → "123" for a string), and checked against the
    field's rule, key by key in the order given; InvalidConfig naming the first bad key."""
    known = fields_of(cls)
    extra = cls.extra_keys(values) if hasattr(cls, "extra_keys") else None
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name in known:
            out[name] = _converted(cls, name, value)
        elif extra is not None and name in fields_of(extra):
            out[name] = _converted(extra, name, value)
        else:
            raise unknown_key(cls, name, [k for k in known if not k.startswith("_") and k in values])
    return out


def _converted(cls: type, name: str, value: Any) -> Any:
    rule: Rule = fields_of(cls)[name].metadata.get("rule", Rule())
    if typing.get_type_hints(cls)[name] is Any:
        out = value
        if rule.also is not None and isinstance(value, int) and not isinstance(value, bool):
            out = float(value)  # a number or a word: the number as a float
    else:
        node = _typed_node(cls)
        try:
            node[name] = value
        except (OmegaConfBaseException, ValueError, TypeError):
            raise not_allowed(cls, name, value) from None
        out = node[name]
        if OmegaConf.is_config(out):
            out = OmegaConf.to_container(out)
    if not satisfies(out, rule):
        raise not_allowed(cls, name, value)  # the value as the user typed it
    return out


def unknown_key(cls: type, name: str, known: list[str]) -> InvalidConfig:
    """`train.max_step is not a setting; did you mean train.max_steps?`"""
    key = key_of(cls, name)
    keys = [key_of(cls, k) for k in known]
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else f"the settings here are {', '.join(keys)}."
    return InvalidConfig(f"{key} is not a setting; {hint}", key)
