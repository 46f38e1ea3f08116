"""Reading one run directory: its metrics rows, flattened config and summary."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from normlab.analysis.load.discover import (
    CONFIG_FILE,
    HYDRA_FILE,
    METRICS_FILE,
    OVERRIDES_FILE,
    SUMMARY_FILE,
    SUMMARY_TO_CONFIG,
)
from normlab.analysis.load.files import NotReadable, text_inside
from normlab.metrics import names

# ------------------------------------------------------------------------------------------ single run


def _to_float(value: Any) -> Any:
    # metrics.jsonl writes non-finite floats as the strings "nan", "inf", "-inf".
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    if isinstance(value, bool):
        return int(value)
    return value


def read_metrics(run_dir: Path) -> tuple[list[dict[str, Any]], int]:
    """Rows of the run's metrics.jsonl, values as floats; also the number of unreadable lines skipped.
    NotReadable where the file is there but is not the run's own regular file."""
    return parse_metrics(text_inside(run_dir, METRICS_FILE) or "")


def parse_metrics(text: str) -> tuple[list[dict[str, Any]], int]:
    rows, bad = [], 0
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            bad += 1  # e.g. the half-written last line of a killed run
            continue
        if not isinstance(obj, dict) or not _is_step(obj.get(names.STEP)):
            bad += 1
            continue
        rows.append({k: _to_float(v) for k, v in obj.items()})
    return rows, bad


def _is_step(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(hashable(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return value


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"train": {"grad_clip": 1.0}} -> {"train.grad_clip": 1.0}; lists become tuples."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, full + "."))
        else:
            out[full] = hashable(value)
    return out


# `${name:...}`: a resolver call (oc.env, now, hydra, ...), as opposed to `${a.b}`, a reference to a key
RESOLVER_CALL = re.compile(r"\$\{\s*[\w.\-]+\s*:")


def _resolver_calls_as_written(tree: Any) -> Any:
    """Every string that calls a resolver, escaped so that OmegaConf keeps it as written: reading a run
    directory never runs a resolver (a received run's `${oc.env:WANDB_API_KEY}` stays that text)."""
    if isinstance(tree, dict):
        return {k: _resolver_calls_as_written(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_resolver_calls_as_written(v) for v in tree]
    if isinstance(tree, str) and RESOLVER_CALL.search(tree):
        return tree.replace("\\${", "${").replace("${", "\\${")
    return tree


def read_config(run_dir: Path) -> tuple[dict[str, Any], set[str], str | None]:
    """The run's flattened config, the set of its keys that are interpolations (`${...}`), and why the config
    could not be read (None when it could).

    References to other keys (`${model.d_model}`) are followed; resolver calls (`${oc.env:...}`, `${now:...}`)
    are never run: they are shown as written. Group choices from `.hydra/hydra.yaml` (`model: small`) are
    added as keys named after the group for groups whose config has no `name` field, so `model=tiny` vs
    `model=small` reads as one key.
    """
    try:
        text = text_inside(run_dir, CONFIG_FILE)
    except NotReadable as exc:
        return {}, set(), str(exc)
    if text is None:
        return {}, set(), None
    try:
        tree = OmegaConf.to_container(OmegaConf.create(text), resolve=False)
        if not isinstance(tree, dict):
            raise ValueError("not a mapping of settings")
    except Exception as exc:  # a damaged or hand-edited file: the run is read without its config
        first = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
        return {}, set(), f"{CONFIG_FILE} cannot be read ({first})"
    raw = flatten(tree)
    try:
        resolved = flatten(
            OmegaConf.to_container(OmegaConf.create(_resolver_calls_as_written(tree)), resolve=True)
        )
    except Exception:  # a reference to a key that is not there: keep the raw values
        resolved = dict(raw)
    interpolated = {k for k, v in raw.items() if isinstance(v, str) and "${" in v}
    try:
        hydra_text = text_inside(run_dir, HYDRA_FILE)
    except NotReadable:  # not needed to report the run: its group choices are left out
        hydra_text = None
    if hydra_text is not None:
        try:
            hydra_cfg = yaml.safe_load(hydra_text) or {}
            choices = (hydra_cfg.get("hydra") or {}).get("runtime", {}).get("choices", {}) or {}
            if not isinstance(choices, dict):
                choices = {}
        except (yaml.YAMLError, AttributeError):
            choices = {}
        for group, choice in choices.items():
            if "/" in group or group.startswith("hydra") or group in resolved:
                continue
            if f"{group}.name" not in resolved:
                resolved[group] = choice
    return resolved, interpolated, None


def rows_missing_text(holes: list[tuple[int, int]]) -> str:
    """[(70, 159)] → "metrics.jsonl has no rows for steps 70–159 (90 steps)"."""
    parts = [f"{a}–{b}" if b > a else str(a) for a, b in holes]
    n = sum(b - a + 1 for a, b in holes)
    return f"metrics.jsonl has no rows for steps {', '.join(parts)} ({n} step{'s' if n != 1 else ''})"


def repeated_steps(rows: list[dict[str, Any]]) -> dict[int, int]:
    """Steps with more than one training row in metrics.jsonl (a row copied, or two histories mixed), with
    how many rows each has."""
    counts: dict[int, int] = {}
    for r in rows:
        if names.LOSS in r:
            counts[int(r[names.STEP])] = counts.get(int(r[names.STEP]), 0) + 1
    return {step: n for step, n in sorted(counts.items()) if n > 1}


def rows_repeated_text(repeated: dict[int, int]) -> str:
    """{20: 2} → "metrics.jsonl has 2 training rows for step 20 (a step must have one)"."""
    parts = [f"{n} training rows for step {step}" for step, n in repeated.items()]
    shown = ", ".join(parts[:5]) + (f" and {len(parts) - 5} more steps" if len(parts) > 5 else "")
    return f"metrics.jsonl has {shown} (a step must have one: a row copied, or two histories mixed)"


def missing_steps(rows: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """Runs of steps without a training row between a run's first and last (a hole in metrics.jsonl), as
    (first, last) pairs."""
    steps = sorted({int(r[names.STEP]) for r in rows if names.LOSS in r})
    return [(a + 1, b - 1) for a, b in zip(steps, steps[1:], strict=False) if b > a + 1]


def _is_derived(key: str, interpolated: set[str]) -> bool:
    parts = key.split(".")
    return any(".".join(parts[:n]) in interpolated for n in range(1, len(parts) + 1))


@dataclass
class _Run:
    path: Path
    config: dict[str, Any]
    derived: set[str]
    summary: dict[str, Any]
    rows: list[dict[str, Any]]
    bad_lines: int
    config_problem: str | None = None
    problems: list[str] = field(default_factory=list)  # files there but not read (links, not regular, …)
    overrides: list[str] | None = None  # .hydra/overrides.yaml: the job of a sweep this run is

    @property
    def unreadable(self) -> bool:
        """Nothing of it could be read: no config, no summary and no rows, but files there that were not."""
        return bool(self.problems or self.config_problem) and not (self.config or self.summary or self.rows)


def load_one(path: Path) -> _Run:
    problems: list[str] = []
    config, interpolated, problem = read_config(path)
    derived = {k for k in config if _is_derived(k, interpolated)}
    summary: dict[str, Any] = {}
    try:
        text = text_inside(path, SUMMARY_FILE)
    except NotReadable as e:
        problems.append(str(e))
        text = None
    if text is not None:
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError:
            loaded = {}
        summary = loaded if isinstance(loaded, dict) else {}
    for skey, ckey in SUMMARY_TO_CONFIG.items():
        if ckey not in config and summary.get(skey) is not None:
            config[ckey] = hashable(summary[skey])
    try:
        rows, bad = read_metrics(path)
    except NotReadable as e:
        problems.append(str(e))
        rows, bad = [], 0
    return _Run(path, config, derived, summary, rows, bad, problem, problems, read_overrides(path))


def read_overrides(run_dir: Path) -> list[str] | None:
    """The overrides Hydra gave the run's job (.hydra/overrides.yaml), None where there are none to read."""
    try:
        text = text_inside(run_dir, OVERRIDES_FILE)
        overrides = yaml.safe_load(text) if text is not None else None
    except (NotReadable, yaml.YAMLError):
        return None
    return [str(o) for o in overrides] if isinstance(overrides, list) else None


def summary_from_metrics(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What a missing summary.json can be rebuilt from: steps and the last finite losses."""

    def finite(key: str) -> list[float]:
        return [r[key] for r in rows if isinstance(r.get(key), float | int) and math.isfinite(r[key])]

    val = finite(names.VAL_LOSS)
    train = finite(names.LOSS)
    return {
        "status": "unknown",
        "steps": max((int(r[names.STEP]) for r in rows), default=0),
        "final_train_loss": train[-1] if train else None,
        "final_val_loss": val[-1] if val else None,
        "best_val_loss": min(val) if val else None,
    }
