"""Which numbers a figure's lines show: smoothing windows, spike and divergence points, per-layer means
over a variant's runs, variants that log a metric, identical layer × step matrices, range ratios."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from normlab.analysis.load import RunSet
from normlab.analysis.plots.style import AUTO_SMOOTH_POINTS, MAX_BANDS, coinciding
from normlab.analysis.stats import finite, run_series
from normlab.metrics import names


def range_ratio(maxima: Sequence[float]) -> float:
    """Largest over smallest of the panels' (or variants') largest absolute values; 1 when undefined."""
    m = np.abs(np.asarray([v for v in maxima if v is not None and np.isfinite(v)], dtype=float))
    m = m[m > 0]
    return float(m.max() / m.min()) if m.size >= 2 else 1.0


def smooth_frame(d: pd.DataFrame, window: int) -> pd.DataFrame:
    if window <= 1 or len(d) < 2:
        return d
    d = d.copy()
    for col in ("mean", "std"):
        d[col] = d[col].rolling(window, min_periods=1).mean()
    return d


def value_at(rs: RunSet, metric: str, run: str, steps: Sequence[int]) -> list[tuple[int, float]]:
    m = rs.metrics
    sub = m[(m["run"] == run) & m[names.STEP].isin(list(steps))]
    if metric not in sub:
        return []
    vals = finite(sub[metric])
    return [(int(s), float(v)) for s, v in zip(sub[names.STEP], vals, strict=True) if not math.isnan(v)]


def spike_points(rs: RunSet, flag: str | None, metric: str) -> list[tuple[str, int, float]]:
    """(run, step, value of `metric`) for each spike: from the `flag` column (spike/loss) when the runs
    log it, else (for loss) from summary.json's spike_steps."""
    points: list[tuple[str, int, float]] = []
    m = rs.metrics
    for run in rs.valid.index:
        steps: list[int] = []
        if flag and flag in m.columns:
            sub = m[(m["run"] == run) & (pd.to_numeric(m[flag], errors="coerce") > 0)]
            steps = sub[names.STEP].astype(int).tolist()
        elif flag == names.SPIKE_LOSS:
            steps = [int(s) for s in (rs.runs.at[run, "spike_steps"] or [])]
        points.extend((run, s, v) for s, v in value_at(rs, metric, run, steps))
    return points


def divergence_points(rs: RunSet, metric: str) -> list[tuple[str, int, float]]:
    """(run, step, value) at the last finite value of `metric` of each diverged run."""
    diverged = rs.runs.index[rs.runs["status"] == "diverged"]
    if diverged.empty:
        return []
    s = run_series(rs, metric)
    last = s[s["run"].isin(diverged)].groupby("run", sort=False).tail(1)
    return [
        (r, int(st), float(v)) for r, st, v in zip(last["run"], last[names.STEP], last["value"], strict=True)
    ]


def agg_note(rs: RunSet, band: bool = True, panels: bool = False) -> str:
    """How lines relate to runs: 'mean over seeds, band ± 1 std where n ≥ 2', or 'one line per run'."""
    sizes = rs.valid.groupby("variant").size()
    if sizes.empty or sizes.max() <= 1:
        return "one run per variant" if panels else "one run per variant, n=1: no bands"
    return "mean over seeds, band ± 1 std where n ≥ 2" if band and not panels else "mean over seeds"


def auto_window(stats: pd.DataFrame, smooth: int | None) -> int:
    if smooth is not None:
        return max(1, int(smooth))
    return max(1, stats[names.STEP].nunique() // AUTO_SMOOTH_POINTS) if not stats.empty else 1


def bands_for(stats: pd.DataFrame) -> bool:
    return stats["variant"].nunique() <= MAX_BANDS


def runs_of(rs: RunSet, variant: str) -> list[str]:
    valid = rs.valid
    return valid.index[valid["variant"] == variant].tolist()


def layer_means(rs: RunSet, variant: str, cols: dict[int, str]) -> pd.DataFrame:
    """Per-step mean over the variant's runs of each layer column: index step, columns layer index."""
    m = rs.metrics
    sub = m[m["run"].isin(runs_of(rs, variant))]
    present = {i: c for i, c in cols.items() if c in sub.columns}
    if sub.empty or not present:
        return pd.DataFrame()
    values = sub[list(present.values())].apply(finite)
    values.columns = list(present.keys())
    values[names.STEP] = sub[names.STEP].to_numpy()
    out = values.groupby(names.STEP).mean().dropna(how="all")
    return out.dropna(axis=1, how="all")


def variants_with(rs: RunSet, metric_cols: Sequence[str]) -> list[str]:
    m = rs.metrics
    cols = [c for c in metric_cols if c in m.columns]
    if not cols:
        return []
    has = m[cols].apply(finite).notna().any(axis=1)
    runs = set(m.loc[has, "run"])
    return [v for v in rs.variants if any(r in runs for r in runs_of(rs, v))]


def curve_xy(d: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    return d[names.STEP].to_numpy(dtype=float), d["mean"].to_numpy(dtype=float)


def matrix_groups(mats: dict[str, pd.DataFrame]) -> list[list[str]]:
    """Variants whose whole layer × step matrices are identical (same steps, layers and values)."""
    curves = {}
    for v, m in mats.items():
        x = np.concatenate([m.index.to_numpy(dtype=float), m.columns.to_numpy(dtype=float)])
        curves[v] = (x, m.to_numpy(dtype=float).ravel())
    return coinciding(curves)


def first_value(stats: pd.DataFrame) -> float | None:
    """The largest mean at the first logged step (where every run starts): the reference for capping an axis."""
    if stats.empty:
        return None
    start = stats[stats[names.STEP] == stats[names.STEP].min()]["mean"].max()
    return float(start) if pd.notna(start) else None


def shown_values(
    rs: RunSet,
    stats: pd.DataFrame,
    smooth: int,
    bands: bool,
    points: Sequence[tuple[str, int, float]],
) -> pd.DataFrame:
    """Every value an axis shows, as rows (variant, step, value): the unsmoothed means (what a smoothed
    line stands for), the ± std band edges as drawn (smoothed, where n ≥ 2), and marker values of runs."""
    frames = [stats[["variant", names.STEP, "mean"]].rename(columns={"mean": "value"})]
    if bands:
        for _, d in stats.groupby("variant", sort=False):
            d = smooth_frame(d, smooth)
            has = d["n"] >= 2 if "n" in d else pd.Series(False, index=d.index)
            for sign in (-1.0, 1.0):
                edge = d.loc[has, ["variant", names.STEP]].copy()
                edge["value"] = (d["mean"] + sign * d["std"])[has].to_numpy(dtype=float)
                frames.append(edge)
    if points:
        variant = rs.runs["variant"]
        frames.append(
            pd.DataFrame(
                [(variant[run], step, value) for run, step, value in points],
                columns=["variant", names.STEP, "value"],
            )
        )
    out = pd.concat([f for f in frames if not f.empty], ignore_index=True) if frames else pd.DataFrame()
    return (
        out.astype({"value": float})
        if not out.empty
        else pd.DataFrame(columns=["variant", names.STEP, "value"])
    )
