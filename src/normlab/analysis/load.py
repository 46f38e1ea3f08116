"""Loading run directories into pandas, and grouping runs into variants by the config values that differ.

A *run directory* holds `.hydra/config.yaml`, `metrics.jsonl` and `summary.json` (any of them may be
missing: an interrupted run may lack a summary, an invalid one has no metrics). A *sweep directory* holds
run directories at any depth. `load_runs` accepts any mix of both and returns a `RunSet`:

- `runs`: one row per run (index `run`), with the summary fields, `norm`, `placement`, the flattened
  config (`depth`, `optim.lr`, `train.grad_clip`, ...), the run's `variant` label and `path`;
- `metrics`: the metrics in wide form, one row per (run, step), one column per metric name;
- `long`: the same in long form (run, step, metric, value), non-missing values only.

Runs are grouped into variants by the config keys whose values differ between runs (`varying`), minus
`seed`, so seeds of one variant are averaged; `group_by` overrides that choice.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from omegaconf import OmegaConf

from normlab.metrics import names

# File names of the run-directory contract (the training side defines them in normlab.train.run; they
# are repeated here so that analysis does not import torch).
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
CONFIG_FILE = ".hydra/config.yaml"
HYDRA_FILE = ".hydra/hydra.yaml"
RUN_MARKERS = (SUMMARY_FILE, METRICS_FILE, CONFIG_FILE)
# Subdirectories of a run that never hold runs themselves.
SKIP_DIRS = {".hydra", "checkpoints", "spikes", "wandb", "report", "__pycache__"}

SEED_KEY = "seed"
# Config keys that never define a variant: run names (derived from the rest), bookkeeping, speed-only knobs.
NON_VARIANT_KEYS = (
    "name",
    "experiment",
    "experiment_name",
    "train.resume",
    "train.progress",
    "train.sample_prompt",
    "train.sample_tokens",
    "train.ckpt_every",
    "train.flush_every",
    "train.num_threads",
    "data.cache_dir",
)
NON_VARIANT_PREFIXES = ("logger", "hydra")
# Groups whose chosen value is shown bare in variant labels ("ln, pre" rather than "norm=ln, placement=pre").
BARE_LABEL_KEYS = ("norm.name", "placement.name")

# summary.json fields read into `RunSet.runs`: the shared outcome fields, plus those other parts of the
# harness add (the corpus's unigram baseline and whether the run learned, where the spike detector starts
# watching, MFU); older runs without them read as missing.
SUMMARY_FIELDS = tuple(
    dict.fromkeys((*names.SUMMARY_FIELDS, "baseline_unigram_loss", "learned", "spike_watch_start", "mfu"))
)
# summary.json fields that mirror config keys: used when .hydra/config.yaml is missing.
SUMMARY_TO_CONFIG = {
    "norm": "norm.name",
    "placement": "placement.name",
    "depth": "depth",
    "warmup_steps": "warmup_steps",
    "seed": "seed",
    "name": "name",
}

_MISSING = "<missing>"


class NoRunsFound(ValueError):
    """None of the given paths is, or contains, a run directory."""


class UnknownKey(ValueError):
    """A config key asked for (grid axis, group_by) is not in the runs, or is ambiguous."""


# ----------------------------------------------------------------------------------------------- discovery


def is_run_dir(path: Path) -> bool:
    return any((path / marker).is_file() for marker in RUN_MARKERS)


def _natural_key(path: Path) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def find_run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Every run directory at or under `paths`, in natural order (job 2 before job 10), without repeats."""
    found: dict[Path, None] = {}
    for raw in paths:
        root = Path(raw)
        if not root.exists():
            raise FileNotFoundError(f"{root} does not exist")
        if is_run_dir(root):
            found[root.resolve()] = None
            continue
        stack = [root]
        hits = []
        while stack:
            d = stack.pop()
            for child in d.iterdir():
                if not child.is_dir() or child.name in SKIP_DIRS:
                    continue
                if is_run_dir(child):
                    hits.append(child)
                else:
                    stack.append(child)
        for hit in sorted(hits, key=_natural_key):
            found[hit.resolve()] = None
    return list(found)


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


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
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
            out[full] = _hashable(value)
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


def _load_one(path: Path) -> _Run:
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


def _summary_from_metrics(rows: list[dict[str, Any]]) -> dict[str, Any]:
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


# ------------------------------------------------------------------------------------------- grouping


def sortable(value: Any) -> tuple[int, Any]:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return (2, "")
    if isinstance(value, bool | int | float):
        return (0, float(value))
    return (1, str(value))


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
        values = {_hashable(cfg.get(key, _MISSING)) for cfg in configs}
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
                mapping.setdefault(cfg.get(identity, _MISSING), set()).add(cfg.get(key, _MISSING))
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
        value = values.get(key, _MISSING)
        if key in BARE_LABEL_KEYS:
            parts.append(_fmt_value(value))
        else:
            parts.append(f"{display[key]}={_fmt_value(value)}")
    return ", ".join(parts)


# --------------------------------------------------------------------------------------------- RunSet


@dataclass
class RunSet:
    """Runs loaded from disk: see the module docstring for what each frame holds."""

    runs: pd.DataFrame
    metrics: pd.DataFrame
    varying: list[str]
    group_keys: list[str]
    sources: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        counts = ", ".join(f"{n} {s}" for s, n in self.runs["status"].value_counts().items())
        keys = ", ".join(short_names(self.group_keys).values()) or "nothing"
        return (
            f"<RunSet: {len(self.runs)} runs ({counts}) in {len(self.variants)} variant(s) grouped by {keys}; "
            f"{len(self.metric_names())} metrics over {len(self.metrics)} rows — see .runs, .metrics, .long>"
        )

    @property
    def long(self) -> pd.DataFrame:
        """Metrics in long form: columns run, step, metric, value (rows with a value only)."""
        value_cols = [c for c in self.metrics.columns if c not in ("run", names.STEP)]
        out = self.metrics.melt(
            id_vars=["run", names.STEP], value_vars=value_cols, var_name="metric", value_name="value"
        )
        out = out[pd.to_numeric(out["value"], errors="coerce").notna()]
        return out.sort_values(["run", "metric", names.STEP], kind="stable").reset_index(drop=True)

    @property
    def variants(self) -> list[str]:
        """Variant labels in display order (the order of `colors`), invalid-only variants included."""
        return list(dict.fromkeys(self.runs.sort_values("_order", kind="stable")["variant"]))

    @property
    def colors(self) -> dict[str, Any]:
        """One colour per variant, the same in every figure."""
        return _palette(self.variants)

    @property
    def markers(self) -> dict[str, str]:
        """One marker per variant (for point-wise figures), so overlapping lines stay tellable apart."""
        return {label: VARIANT_MARKERS[i % len(VARIANT_MARKERS)] for i, label in enumerate(self.variants)}

    @property
    def linestyles(self) -> dict[str, Any]:
        """One line style per variant, so curves that lie on top of each other stay tellable apart."""
        return {
            label: VARIANT_LINESTYLES[i % len(VARIANT_LINESTYLES)] for i, label in enumerate(self.variants)
        }

    @property
    def counts(self) -> dict[str, int]:
        """Runs that trained (invalid ones left out) per variant: the n of every mean and legend."""
        sizes = self.valid.groupby("variant").size()
        return {v: int(sizes.get(v, 0)) for v in self.variants}

    @property
    def valid(self) -> pd.DataFrame:
        """Runs that trained (status other than invalid)."""
        return self.runs[self.runs["status"] != "invalid"]

    @property
    def invalid(self) -> pd.DataFrame:
        return self.runs[self.runs["status"] == "invalid"]

    def metric_names(self) -> list[str]:
        cols = [c for c in self.metrics.columns if c not in ("run", names.STEP)]
        return [c for c in cols if self.metrics[c].notna().any()]

    def regroup(self, group_by: Sequence[str] | str | None) -> RunSet:
        """The same runs grouped by other config keys (`"run"`: every run on its own)."""
        return _with_groups(replace(self, runs=self.runs.copy()), group_by)

    def resolve_key(self, name: str) -> str:
        """A config key from a short name: `depth`, `norm` (-> norm.name), `lr` (-> optim.lr)."""
        cols = [c for c in self.runs.columns if c in self._config_keys]
        if name in cols:
            return name
        if f"{name}.name" in cols:
            return f"{name}.name"
        matches = [c for c in cols if c.endswith("." + name)]
        preferred = [c for c in matches if c in self.varying]
        if len(preferred) == 1:
            return preferred[0]
        if len(matches) == 1:
            return matches[0]
        hint = ", ".join(self.varying) or "none"
        if matches:
            raise UnknownKey(f"'{name}' is ambiguous ({', '.join(matches)}); keys that vary here: {hint}")
        raise UnknownKey(f"no config key '{name}' in these runs; keys that vary here: {hint}")

    @property
    def _config_keys(self) -> list[str]:
        return list(self.runs.attrs.get("config_keys", []))


# "^" (loss spikes) and "X" (divergence) are left out: they mark events in the figures.
VARIANT_MARKERS = ("o", "s", "D", "v", "P", "*", "h", "<", ">", "p", "d")
# solid, dashed, dotted, dash-dot, dash-dot-dot, long dash: distinct at a glance, also in greyscale
VARIANT_LINESTYLES: tuple[Any, ...] = (
    "-",
    (0, (5, 2)),
    (0, (1, 1.5)),
    (0, (6, 2, 1, 2)),
    (0, (4, 1.5, 1, 1.5, 1, 1.5)),
    (0, (10, 3)),
)


def _palette(labels: Sequence[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    n = len(labels)
    if n <= 10:
        colors = colormaps["tab10"].colors
    elif n <= 20:
        # tab20's strong colours first, then its light ones: neighbours in a sweep stay distinct
        pairs = colormaps["tab20"].colors
        colors = list(pairs[0::2]) + list(pairs[1::2])
    else:
        cmap = colormaps["turbo"]
        colors = [cmap(i / max(n - 1, 1)) for i in range(n)]
    return {label: colors[i % len(colors)] for i, label in enumerate(labels)}


def _with_groups(rs: RunSet, group_by: Sequence[str] | str | None) -> RunSet:
    runs = rs.runs
    if group_by == "run":
        keys = list(rs.varying)
        if SEED_KEY in runs.columns and SEED_KEY not in keys and runs[SEED_KEY].nunique(dropna=False) > 1:
            keys.append(SEED_KEY)
    elif group_by is None:
        keys = [k for k in rs.varying if k != SEED_KEY]
    else:
        if isinstance(group_by, str):
            group_by = [k for k in group_by.split(",") if k]
        keys = [rs.resolve_key(k) for k in group_by]
    display = short_names(keys)
    labels = []
    for _, row in runs.iterrows():
        labels.append(variant_label(row.to_dict(), keys, display) if keys else _single_label(row))
    runs["variant"] = labels
    if group_by == "run" and runs["variant"].duplicated().any():
        runs["variant"] = [
            f"{lab} ({run})" if lab else run for lab, run in zip(labels, runs.index, strict=True)
        ]
    # display order: numbers ascending, strings in first-seen (sweep) order
    first_seen = {k: {v: i for i, v in enumerate(dict.fromkeys(runs[k]))} for k in keys if k in runs}
    order_keys = []
    for _, row in runs.iterrows():
        key = []
        for k in keys:
            v = row.get(k)
            rank, val = sortable(v)
            key.append((rank, val if rank != 1 else first_seen[k].get(v, 0)))
        order_keys.append(tuple(key))
    ranks = {k: i for i, k in enumerate(sorted(set(order_keys)))}
    runs["_order"] = [ranks[k] for k in order_keys]
    return replace(rs, runs=runs, group_keys=keys)


def _single_label(row: pd.Series) -> str:
    norm, placement = row.get("norm"), row.get("placement")
    if isinstance(norm, str) and isinstance(placement, str):
        return f"{norm}, {placement}"
    return "all runs"


def watch_start_from_config(config: dict[str, Any]) -> int | None:
    """The first step the spike detector tests, for runs whose summary.json predates `spike_watch_start`:
    the detector then tested a value once `spikes.window` earlier values filled its window (0 = off).
    None when the detector was off or the config does not say."""
    if config.get("metrics.enabled") is False:
        return None
    window = config.get("spikes.window")
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        return None
    return window


def _run_ids(paths: Sequence[Path]) -> list[str]:
    """Directory names when they are unique, else paths relative to the runs' common ancestor."""
    base = [p.name for p in paths]
    if len(set(base)) == len(base):
        return base
    root = Path(os.path.commonpath([str(p) for p in paths]))
    return [str(p.relative_to(root)) for p in paths]


def load_runs(
    paths: str | Path | Iterable[str | Path],
    group_by: Sequence[str] | str | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> RunSet:
    """Load every run at or under `paths` (run or sweep directories) into a RunSet.

    `group_by`: None groups by the config keys that differ between runs except the seed (seeds are
    averaged); a list of keys (short names allowed: "norm", "depth", "lr") groups by those; "run" keeps
    every run on its own.
    """
    if isinstance(paths, str | Path):
        paths = [paths]
    sources = [Path(p) for p in paths]
    dirs = find_run_dirs(sources)
    if not dirs:
        where = ", ".join(str(p) for p in sources)
        raise NoRunsFound(
            f"no run directories (with summary.json, metrics.jsonl or .hydra/config.yaml) under {where}"
        )
    loaded = [_load_one(d) for d in dirs]
    ids = _run_ids(dirs)
    warnings: list[str] = []

    records, all_rows = [], []
    config_keys: dict[str, None] = {}
    for run_id, run in zip(ids, loaded, strict=True):
        summary = run.summary or _summary_from_metrics(run.rows)
        if not run.summary:
            warnings.append(f"{run_id}: no summary.json; status and final values rebuilt from metrics")
        if run.bad_lines:
            warnings.append(f"{run_id}: skipped {run.bad_lines} unreadable line(s) of metrics.jsonl")
        record: dict[str, Any] = {"run": run_id}
        for key in SUMMARY_FIELDS:
            record[key] = summary.get(key)
        if record["spike_steps"] is None:
            record["spike_steps"] = []
        if record["spike_watch_start"] is None:
            record["spike_watch_start"] = watch_start_from_config(run.config)
        record["status"] = record["status"] or "unknown"
        record["norm"] = run.config.get("norm.name", summary.get("norm"))
        record["placement"] = run.config.get("placement.name", summary.get("placement"))
        for key, value in run.config.items():
            config_keys.setdefault(key, None)
            record[key] = value
        record["path"] = str(run.path)
        records.append(record)
        for row in run.rows:
            row["run"] = run_id
        all_rows.extend(run.rows)

    runs = pd.DataFrame.from_records(records).set_index("run")
    runs.attrs["config_keys"] = list(config_keys)
    # derived: an interpolation in every run that has the key (`model.norm.bias` exists only for norms with a bias)
    derived = {k for k in config_keys if all(k in r.derived for r in loaded if k in r.config)}
    varying = varying_keys([r.config for r in loaded], derived)
    metrics = _metrics_frame(all_rows)
    rs = RunSet(
        runs=runs, metrics=metrics, varying=varying, group_keys=[], sources=sources, warnings=warnings
    )
    rs = _with_groups(rs, group_by)
    for message in warnings:
        if on_warning:
            on_warning(message)
    return rs


def _metrics_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    if not rows:
        return pd.DataFrame({"run": pd.Series(dtype=str), names.STEP: pd.Series(dtype="int64")})
    df = pd.DataFrame.from_records(rows)
    cols = ["run", names.STEP] + [c for c in df.columns if c not in ("run", names.STEP)]
    df = df[cols]
    for col in cols[2:]:
        df[col] = pd.to_numeric(df[col], errors="coerce")
    df[names.STEP] = df[names.STEP].astype("int64")
    if df.duplicated(["run", names.STEP]).any():
        # several rows for one step (e.g. an evaluation row after the training row): merge them
        df = df.groupby(["run", names.STEP], sort=False, as_index=False).last()
    return df.sort_values(["run", names.STEP], kind="stable").reset_index(drop=True)
