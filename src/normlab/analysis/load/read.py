"""Reading one run directory: its metrics rows, flattened config and summary."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from normlab.analysis.load.discover import (
    CONFIG_FILE,
    HYDRA_FILE,
    METRICS_FILE,
    SUMMARY_FILE,
    SUMMARY_TO_CONFIG,
)
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


def read_metrics(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Rows of a metrics.jsonl file, values as floats; also the number of unreadable lines skipped."""
    rows, bad = [], 0
    if not path.is_file():
        return rows, bad
    with path.open(encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                bad += 1  # e.g. the half-written last line of a killed run
                continue
            if not isinstance(obj, dict) or names.STEP not in obj:
                bad += 1
                continue
            rows.append({k: _to_float(v) for k, v in obj.items()})
    return rows, bad


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
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        return {}, set(), None
    try:
        tree = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
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
    hydra_path = run_dir / HYDRA_FILE
    if hydra_path.is_file():
        try:
            hydra_cfg = yaml.safe_load(hydra_path.read_text()) or {}
            choices = (hydra_cfg.get("hydra") or {}).get("runtime", {}).get("choices", {}) or {}
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


def load_one(path: Path) -> _Run:
    config, interpolated, problem = read_config(path)
    derived = {k for k in config if _is_derived(k, interpolated)}
    summary: dict[str, Any] = {}
    spath = path / SUMMARY_FILE
    if spath.is_file():
        try:
            summary = json.loads(spath.read_text())
        except json.JSONDecodeError:
            summary = {}
    for skey, ckey in SUMMARY_TO_CONFIG.items():
        if ckey not in config and summary.get(skey) is not None:
            config[ckey] = summary[skey]
    rows, bad = read_metrics(path / METRICS_FILE)
    return _Run(path, config, derived, summary, rows, bad, problem)


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
