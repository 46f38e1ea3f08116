"""Seed averaging and the per-variant summary table.

Standard deviations are sample standard deviations over seeds (ddof=1); with one seed there is none.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np
import pandas as pd

from normlab.analysis.load import RunSet
from normlab.metrics import names

LayerName = Callable[[int], str]


def layer_columns(columns, layer_name: LayerName) -> dict[int, str]:
    """{block index: column} for a per-layer metric family given by its names function
    (e.g. `names.grad_norm_layer`), matching exactly that family (not its per-sublayer children)."""
    sentinel = 987654321
    pattern = re.compile("^" + re.escape(layer_name(sentinel)).replace(str(sentinel), r"(\d+)") + "$")
    found = {}
    for col in columns:
        m = pattern.match(str(col))
        if m:
            found[int(m.group(1))] = col
    return dict(sorted(found.items()))


def finite(series: pd.Series) -> pd.Series:
    values = pd.to_numeric(series, errors="coerce")
    return values.where(np.isfinite(values))


def run_series(rs: RunSet, metric: str) -> pd.DataFrame:
    """Finite values of one metric: columns run, variant, step, value."""
    if metric not in rs.metrics.columns:
        return pd.DataFrame(columns=["run", "variant", names.STEP, "value"])
    df = rs.metrics[["run", names.STEP, metric]].rename(columns={metric: "value"})
    df = df.assign(value=finite(df["value"])).dropna(subset=["value"])
    df.insert(1, "variant", df["run"].map(rs.runs["variant"]))
    return df.reset_index(drop=True)


def seed_stats(rs: RunSet, metric: str) -> pd.DataFrame:
    """Mean, std (ddof=1) and count over the runs of each variant, at each step: columns variant, step,
    mean, std, n. Non-finite values (a diverging run's last steps) are left out."""
    df = run_series(rs, metric)
    if df.empty:
        return pd.DataFrame(columns=["variant", names.STEP, "mean", "std", "n"])
    out = df.groupby(["variant", names.STEP], sort=False)["value"].agg(["mean", "std", "count"])
    out = out.rename(columns={"count": "n"}).reset_index()
    return out.sort_values(["variant", names.STEP], kind="stable").reset_index(drop=True)


def fmt_mean_std(mean: float | None, std: float | None, digits: int = 3) -> str:
    """'2.600 ± 0.141'; just the mean when there is no std (one seed); '–' when there is no value."""
    if mean is None or (isinstance(mean, float) and not math.isfinite(mean)):
        return "–"
    if std is None or not math.isfinite(std):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def fmt_params(n: float | None) -> str:
    if n is None or not math.isfinite(n):
        return "–"
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    if n >= 1e3:
        return f"{n / 1e3:.1f}k"
    return f"{int(n)}"


def _mean_std(values: pd.Series) -> tuple[float | None, float | None]:
    v = finite(values).dropna()
    if v.empty:
        return None, None
    return float(v.mean()), (float(v.std(ddof=1)) if len(v) > 1 else None)


def learned_flags(runs: pd.DataFrame) -> pd.Series:
    """summary.json's `learned` per run as a nullable boolean (missing for runs that predate the field)."""
    if "learned" not in runs:
        return pd.Series(pd.NA, index=runs.index, dtype="boolean")
    return runs["learned"].map(lambda v: v if isinstance(v, bool | np.bool_) else pd.NA).astype("boolean")


SUMMARY_COLUMNS = [
    "variant",
    "runs",
    "seeds",
    "completed",
    "diverged",
    "other",
    "divergence_rate",
    "final_val_loss_mean",
    "final_val_loss_std",
    "best_val_loss_mean",
    "best_val_loss_std",
    "final_train_loss_mean",
    "final_train_loss_std",
    "n_spikes_mean",
    "n_spikes_total",
    "tokens_per_s_mean",
    "n_params",
    "baseline_unigram_loss",
    "learned",
    "learned_known",
]


def summary_table(rs: RunSet) -> pd.DataFrame:
    """One row per variant (invalid runs left out; `RunSet.invalid` lists them).

    Loss means/stds are over the runs that have the value (a diverged run has no final_val_loss, but may
    have a best_val_loss from evaluations before it diverged). `divergence_rate` = diverged / runs;
    `other` counts runs neither completed nor diverged (interrupted, crashed, still running).
    """
    valid = rs.valid
    rows = []
    for variant in rs.variants:
        group = valid[valid["variant"] == variant]
        if group.empty:
            continue
        status = group["status"]
        row: dict[str, object] = {
            "variant": variant,
            "runs": len(group),
            "seeds": ",".join(str(s) for s in group["seed"].dropna().tolist()) if "seed" in group else "",
            "completed": int((status == "completed").sum()),
            "diverged": int((status == "diverged").sum()),
        }
        row["other"] = len(group) - row["completed"] - row["diverged"]
        row["divergence_rate"] = row["diverged"] / len(group)
        for key in ("final_val_loss", "best_val_loss", "final_train_loss"):
            row[f"{key}_mean"], row[f"{key}_std"] = _mean_std(group[key])
        spikes = pd.to_numeric(group["n_spikes"], errors="coerce").fillna(0)
        row["n_spikes_mean"] = float(spikes.mean())
        row["n_spikes_total"] = int(spikes.sum())
        row["tokens_per_s_mean"], _ = _mean_std(group["tokens_per_s"])
        params = pd.to_numeric(group["n_params"], errors="coerce").dropna()
        row["n_params"] = float(params.median()) if not params.empty else None
        baseline = finite(group["baseline_unigram_loss"]).dropna() if "baseline_unigram_loss" in group else []
        row["baseline_unigram_loss"] = float(baseline.mean()) if len(baseline) else None
        learned = learned_flags(group)
        row["learned"] = int(learned.sum())
        row["learned_known"] = int(learned.notna().sum())
        rows.append(row)
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
