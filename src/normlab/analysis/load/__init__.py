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

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from normlab.analysis.load.coverage import Missing, inside, missing_jobs, read_record
from normlab.analysis.load.discover import (
    METRICS_FILE,
    SEED_KEY,
    SUMMARY_FIELDS,
    SUMMARY_FILE,
    NoRunsFound,
    UnknownKey,
    discover,
    find_run_dirs,
    is_run_dir,
)
from normlab.analysis.load.files import LINK
from normlab.analysis.load.palette import (
    VARIANT_LINESTYLES,
    VARIANT_MARKERS,
    variant_colors,
)
from normlab.analysis.load.read import (
    load_one,
    missing_steps,
    repeated_steps,
    rows_missing_text,
    rows_repeated_text,
    summary_from_metrics,
)
from normlab.analysis.load.variants import (
    short_names,
    sortable,
    variant_label,
    varying_keys,
)
from normlab.metrics import names

__all__ = [
    "METRICS_FILE",
    "SEED_KEY",
    "SUMMARY_FILE",
    "NoRunsFound",
    "RunSet",
    "UnknownKey",
    "find_run_dirs",
    "is_run_dir",
    "load_runs",
    "short_names",
    "sortable",
    "variant_label",
    "varying_keys",
]

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
    # runs left out of every number: (run, why nothing of it could be read), and links to directories that
    # were not followed
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    # a sweep's jobs that have no run directory (not started yet), by sweep directory
    missing: dict[str, Missing] = field(default_factory=dict)

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
        return variant_colors(self.variants)

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
    found = discover(sources)
    records_of_sweeps = [r for r in (read_record(p) for p in sources) if r is not None]
    if not found.run_dirs and not records_of_sweeps and not found.links:
        where = ", ".join(str(p) for p in sources)
        raise NoRunsFound(
            f"no run directories (with summary.json, metrics.jsonl or .hydra/config.yaml) under {where}"
        )
    every = [load_one(d) for d in found.run_dirs]
    every_ids = _run_ids(found.run_dirs) if found.run_dirs else []
    unreadable = [
        (run_id, "; ".join(r.problems if r.problems else [r.config_problem or "nothing readable"]))
        for run_id, r in zip(every_ids, every, strict=True)
        if r.unreadable
    ]
    unreadable += [(str(link), f"{link.name} {LINK}") for link in found.links]
    kept = [(i, r) for i, r in zip(every_ids, every, strict=True) if not r.unreadable]
    ids = [i for i, _ in kept]
    loaded = [r for _, r in kept]
    missing = {
        str(record.path): gone
        for record in records_of_sweeps
        if (gone := missing_jobs(record, [r.overrides for r in every if inside(r.path, record.path)]))
    }
    warnings: list[str] = []

    records, all_rows = [], []
    config_keys: dict[str, None] = {}
    for run_id, run in zip(ids, loaded, strict=True):
        summary = run.summary or summary_from_metrics(run.rows)
        if not run.summary:
            warnings.append(f"{run_id}: no summary.json; status and final values rebuilt from metrics")
        if run.bad_lines:
            warnings.append(f"{run_id}: skipped {run.bad_lines} unreadable line(s) of metrics.jsonl")
        warnings += [f"{run_id}: {problem}" for problem in run.problems]
        repeated = repeated_steps(run.rows)
        if repeated:
            warnings.append(f"{run_id}: {rows_repeated_text(repeated)}")
        if run.config_problem:
            warnings.append(
                f"{run_id}: {run.config_problem}; its settings are taken from summary.json (norm, placement, "
                "depth, warmup_steps, seed) and it is grouped by those alone"
            )
        holes = missing_steps(run.rows)
        if holes:
            warnings.append(f"{run_id}: {rows_missing_text(holes)}")
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
        record["rows_missing"] = sum(b - a + 1 for a, b in holes)
        record["rows_repeated"] = sum(n - 1 for n in repeated.values())
        records.append(record)
        for row in run.rows:
            row["run"] = run_id
        all_rows.extend(run.rows)

    runs = (
        pd.DataFrame.from_records(records).set_index("run")
        if records
        else pd.DataFrame(columns=list(dict.fromkeys(["run", "status", *SUMMARY_FIELDS, "path"]))).set_index(
            "run"
        )
    )
    runs.attrs["config_keys"] = list(config_keys)
    # derived: an interpolation in every run that has the key (`model.norm.bias` exists only for norms with a bias)
    derived = {k for k in config_keys if all(k in r.derived for r in loaded if k in r.config)}
    varying = varying_keys([r.config for r in loaded], derived)
    metrics = _metrics_frame(all_rows)
    rs = RunSet(
        runs=runs,
        metrics=metrics,
        varying=varying,
        group_keys=[],
        sources=sources,
        warnings=warnings,
        unreadable=unreadable,
        missing=missing,
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
