"""Selecting a sweep's runs by config value (`where`, `values`, `subset`, `need`, …) and reading their
per-run values: final losses (`end_loss`, `loss_of`), one run's metric series, summary.json fields.

Losses are final validation losses; a run that diverged counts as making no progress (its step-0
validation loss when it has one, else the unigram loss of the corpus, else NaN); runs neither completed
nor diverged (interrupted, crashed) are left out.

Its own module because every finding's analysis starts here: it turns a RunSet into the numbers the
comparisons and the tables use.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from normlab.analysis.load import RunSet
from normlab.analysis.stats import finite
from normlab.metrics import names
from normlab.study.findings._finding import CannotEvaluate

SUMMARY_FILE = "summary.json"


def subset(rs: RunSet, runs: Sequence[str] | pd.Index, group_by: Sequence[str] | str | None = None) -> RunSet:
    """A RunSet of some of `rs`'s runs, regrouped (None: by the keys that still vary, seeds averaged)."""
    sub_runs = rs.runs.loc[list(runs)].copy()
    sub_runs.attrs = dict(rs.runs.attrs)
    metrics = rs.metrics[rs.metrics["run"].isin(sub_runs.index)].reset_index(drop=True)
    varying = [
        k for k in rs.varying if k in sub_runs.columns and sub_runs[k].astype(str).nunique(dropna=False) > 1
    ]
    return replace(rs, runs=sub_runs, metrics=metrics, varying=varying).regroup(group_by)


def key(rs: RunSet, name: str) -> str:
    return rs.resolve_key(name)


def has_key(rs: RunSet, name: str) -> bool:
    try:
        key(rs, name)
    except Exception:
        return False
    return True


def values(rs: RunSet, name: str) -> list[Any]:
    """The distinct values of a config key among the runs that trained, numbers sorted."""
    col = rs.valid[key(rs, name)]
    uniq = list(dict.fromkeys(col.tolist()))
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in uniq):
        return sorted(uniq)
    return uniq


def where(rs: RunSet, **conds: Any) -> pd.DataFrame:
    """Runs that trained with the given config values (short key names allowed: placement, depth, lr;
    `model__tie_embeddings` for a dotted key)."""
    runs = rs.valid
    mask = pd.Series(True, index=runs.index)
    for name, value in conds.items():
        col = runs[key(rs, name.replace("__", "."))]
        mask &= col.astype(str) == str(value)
    return runs[mask]


def need(rs: RunSet, name: str, wanted: Sequence[Any]) -> None:
    have = {str(v) for v in values(rs, name)} if has_key(rs, name) else set()
    missing = [str(w) for w in wanted if str(w) not in have]
    if missing:
        raise CannotEvaluate(
            f"the runs have no {name}={','.join(missing)} (found {', '.join(sorted(have)) or 'none'})"
        )


def need_metric(rs: RunSet, metric: str, what: str) -> None:
    if metric not in rs.metrics.columns or not rs.metrics[metric].notna().any():
        raise CannotEvaluate(f"no '{metric}' metric in these runs ({what})")


def group_labels(rs: RunSet, keys: Sequence[str]) -> RunSet:
    """Regroup by those of `keys` that vary (short names), falling back to the default grouping."""
    present = [k for k in keys if varies(rs, k)]
    return rs.regroup(present or None)


def varies(rs: RunSet, name: str) -> bool:
    try:
        return rs.valid[key(rs, name)].astype(str).nunique() > 1
    except Exception:
        return False


# ------------------------------------------------------------------------------------ per-run values


def summary_value(rs: RunSet, run: str, field_name: str) -> Any:
    """A summary.json field of one run: from the loaded table when the loader kept it, else read from the
    run directory (fields newer than the loader's list, such as `learned`)."""
    if field_name in rs.runs.columns:
        v = rs.runs.at[run, field_name]
        if v is not None and not (isinstance(v, float) and math.isnan(v)):
            return v
    path = rs.runs.at[run, "path"] if "path" in rs.runs.columns else None
    if not path:
        return None
    try:
        summary = json.loads((Path(path) / SUMMARY_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return summary.get(field_name) if isinstance(summary, dict) else None


def run_metric(rs: RunSet, run: str, metric: str) -> pd.Series:
    """One run's finite values of a metric, indexed by step."""
    m = rs.metrics
    if metric not in m.columns:
        return pd.Series(dtype=float)
    sub = m.loc[m["run"] == run, [names.STEP, metric]]
    s = pd.Series(finite(sub[metric]).to_numpy(), index=sub[names.STEP].to_numpy())
    return s.dropna()


def step0_val(rs: RunSet, run: str) -> float:
    v = run_metric(rs, run, names.VAL_LOSS)
    return float(v[0]) if 0 in v.index else math.nan


def unigram_loss(rs: RunSet, run: str) -> float:
    v = summary_value(rs, run, "baseline_unigram_loss")
    return float(v) if isinstance(v, numbers.Real) and math.isfinite(v) else math.nan


def end_loss(rs: RunSet, runs: pd.DataFrame) -> pd.Series:
    """Final validation loss per run; a diverged run counts as no progress (its step-0 val loss, else
    the unigram loss); other statuses (interrupted, crashed) are NaN, i.e. left out."""
    out = {}
    for run, r in runs.iterrows():
        if r["status"] == "completed" and r["final_val_loss"] is not None:
            out[run] = float(r["final_val_loss"])
        elif r["status"] == "diverged":
            v = step0_val(rs, run)
            out[run] = v if math.isfinite(v) else unigram_loss(rs, run)
        else:
            out[run] = math.nan
    return pd.Series(out, dtype=float)


def loss_of(rs: RunSet, **conds: Any) -> pd.Series:
    return end_loss(rs, where(rs, **conds))
