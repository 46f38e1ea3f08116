"""Reading one run directory: its metrics rows, flattened config and summary."""

from __future__ import annotations

import json
import math
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


def read_config(run_dir: Path) -> tuple[dict[str, Any], set[str]]:
    """The run's flattened, resolved config and the set of its keys that are interpolations (`${...}`).

    Group choices from `.hydra/hydra.yaml` (`model: small`) are added as keys named after the group for
    groups whose config has no `name` field, so `model=tiny` vs `model=small` reads as one key.
    """
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        return {}, set()
    node = OmegaConf.load(path)
    raw = flatten(OmegaConf.to_container(node, resolve=False))
    try:
        resolved = flatten(OmegaConf.to_container(node, resolve=True))
    except Exception:  # an unregistered resolver (e.g. hydra's ${now:}): keep the raw values
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
    return resolved, interpolated


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


def load_one(path: Path) -> _Run:
    config, interpolated = read_config(path)
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
    return _Run(path, config, derived, summary, rows, bad)


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
