"""Curves over training steps — loss, global gradient norm, DeepNet's model update — and everything only
they draw: mean lines with ± std bands, smoothing, spike and divergence markers, the steps the spike
detector does not watch, and every value an axis shows (what its cut y axis, `cuts.fit_y`, is fitted to)."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from normlab.analysis.load import RunSet
from normlab.analysis.plots.base import (
    BAND_ALPHA,
    RANGE_RATIO,
    STEP_LABEL,
    NoData,
    Style,
    add_legend,
    agg_note,
    coincide_handles,
    coinciding,
    fit_suptitle,
    last_step,
    log_y,
    new_figure,
    range_ratio,
    step_ticks,
    variant_handles,
    variant_styles,
)
from normlab.analysis.plots.cuts import first_value, fit_y, mark_y_cut
from normlab.analysis.stats import finite, run_series, seed_stats
from normlab.metrics import names

LOSS_UNIT = "cross-entropy (nats/token)"
AUTO_SMOOTH_POINTS = 100  # automatic smoothing of per-step curves keeps about this many windows
MAX_BANDS = 6  # with more variants than this, ± std bands are left out: they would cover each other
WATCH_COLOR = "0.55"
SPIKE_STYLE = dict(marker="^", s=42, facecolors="none", linewidths=1.3, zorder=5)
CROSS_STYLE = dict(marker="X", s=90, edgecolors="black", linewidths=0.8, zorder=6)
FEWER_SEEDS = Line2D(
    [], [], color="0.3", lw=1.2, alpha=0.45, label="faded: fewer runs (one diverged/stopped)"
)

# ----------------------------------------------------------------------------------------------- figures


def plot_loss(rs: RunSet, *, logx: bool = False, smooth: int | None = None) -> Figure:
    """Training and validation loss vs step; spikes marked (^), diverged runs end in a cross (X), the steps
    before the spike detector watches shaded.

    `smooth`: rolling mean over this many logged steps of the training curve (1 = raw; None = about a
    hundredth of the run, so a few thousand noisy steps read as a curve). Spike markers sit at raw values."""
    train = seed_stats(rs, names.LOSS)
    val = seed_stats(rs, names.VAL_LOSS)
    if train.empty and val.empty:
        raise NoData(f"no finite '{names.LOSS}' or '{names.VAL_LOSS}' values in metrics.jsonl")
    smooth = auto_window(train, smooth)
    bands = bands_for(pd.concat([train, val]))
    fig, axes = new_figure(1, 2, width=13.0, height=4.8)
    ax_tr, ax_val = axes[0]
    styles = variant_styles(rs)
    shown, faded = [], False
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for variant in rs.variants:
        d_tr = train[train["variant"] == variant]
        d_val = val[val["variant"] == variant]
        if d_tr.empty and d_val.empty:
            continue
        shown.append(variant)
        if not d_tr.empty:
            curves[variant] = curve_xy(d_tr)
            faded |= draw_band(ax_tr, smooth_frame(d_tr, smooth), styles[variant], band=bands)
        if not d_val.empty:
            faded |= draw_band(ax_val, d_val, styles[variant], band=bands)
    last = last_step(rs)
    spikes = spike_points(rs, names.SPIKE_LOSS, names.LOSS)
    crosses = divergence_points(rs, names.LOSS)
    shown_tr = shown_values(rs, train, smooth, bands, spikes + crosses)
    cut_tr = fit_y(ax_tr, shown_tr, first_value(train), rs.variants)
    cut_val = fit_y(ax_val, shown_values(rs, val, 1, bands, []), first_value(val), rs.variants)
    top = cut_tr.top if cut_tr else None
    scatter_points(ax_tr, rs, spikes, SPIKE_STYLE, top)
    scatter_points(ax_tr, rs, crosses, CROSS_STYLE, top, face=True)
    watch = shade_unwatched(ax_tr, rs, last)
    cut_notes = mark_y_cut(ax_tr, cut_tr, rs.colors, "training-loss") if cut_tr else []
    cut_notes += mark_y_cut(ax_val, cut_val, rs.colors, "validation-loss") if cut_val else []
    smooth_note = f", rolling mean over {smooth} steps" if smooth > 1 else ""
    ax_tr.set_title(f"training loss (measured before each update{smooth_note})", fontsize=10)
    ax_val.set_title("validation loss", fontsize=10)
    if val.empty:
        ax_val.text(0.5, 0.5, "no evaluation rows", ha="center", va="center", transform=ax_val.transAxes)
    for ax in (ax_tr, ax_val):
        step_axis(ax, logx, last)
        ax.set_ylabel(LOSS_UNIT)
    fit_suptitle(fig, f"Loss vs step — {agg_note(rs, bands)}")
    extra = marker_handles(bool(spikes), bool(crosses)) + ([watch] if watch else [])
    extra += [FEWER_SEEDS] if faded else []
    extra += cut_notes
    add_legend(fig, variant_handles(rs, shown) + extra + coincide_handles(rs, coinciding(curves)))
    return fig


def plot_grad_norm(rs: RunSet, *, logx: bool = False, smooth: int | None = None) -> Figure:
    """Global gradient norm (before clipping) vs step, log y; the clip threshold (train.grad_clip) dashed.

    `smooth`: rolling mean over this many logged steps (None: automatic, 1: raw); spikes sit at raw values."""
    stats = seed_stats(rs, names.GRAD_NORM)
    stats = stats[stats["mean"] > 0]
    if stats.empty:
        raise NoData(f"no finite '{names.GRAD_NORM}' values in metrics.jsonl")
    smooth = auto_window(stats, smooth)
    bands = bands_for(stats)
    fig, axes = new_figure(1, 1, width=11.0, height=4.8)
    ax = axes[0, 0]
    shown, faded, curves = draw_means(ax, rs, stats, smooth=smooth, logy=True, band=bands)
    log_y(ax)
    extra: list[Any] = []
    if "train.grad_clip" in rs.runs.columns:
        clips = sorted(
            {float(c) for c in pd.to_numeric(rs.valid["train.grad_clip"], errors="coerce").dropna() if c > 0}
        )
        for clip, ls in zip(clips, ("--", ":", "-.", (0, (5, 5))), strict=False):
            ax.axhline(clip, color="0.3", ls=ls, lw=1.0, zorder=1)
            extra.append(Line2D([], [], color="0.3", ls=ls, lw=1.0, label=f"clip threshold = {clip:g}"))
    last = last_step(rs)
    spikes = spike_points(rs, names.SPIKE_GRAD_NORM, names.GRAD_NORM)
    crosses = divergence_points(rs, names.GRAD_NORM)
    scatter_points(ax, rs, spikes, SPIKE_STYLE)
    scatter_points(ax, rs, crosses, CROSS_STYLE, face=True)
    watch = shade_unwatched(ax, rs, last)
    step_axis(ax, logx, last)
    ax.set_ylabel("global gradient L2 norm (before clipping)")
    smooth_note = f", rolling mean over {smooth} steps" if smooth > 1 else ""
    ax.set_title(f"Global gradient norm vs step\n{agg_note(rs, bands)}{smooth_note}", fontsize=11)
    extra += marker_handles(bool(spikes), bool(crosses), "grad-norm spike") + ([watch] if watch else [])
    extra += [FEWER_SEEDS] if faded else []
    add_legend(fig, variant_handles(rs, shown) + extra + coincide_handles(rs, coinciding(curves)))
    return fig


def plot_model_update(rs: RunSet, *, logx: bool = False) -> Figure:
    """DeepNet's model update ‖F(x, θ_t) − F(x, θ_0)‖ on a fixed probe batch vs step (log y when the
    variants' ranges differ by more than RANGE_RATIO)."""
    stats = seed_stats(rs, names.MODEL_UPDATE)
    if stats.empty:
        raise NoData(f"no '{names.MODEL_UPDATE}' metric (logged for post and deepnorm runs)")
    bands = bands_for(stats)
    maxima = [stats[stats["variant"] == v]["mean"].abs().max() for v in stats["variant"].unique()]
    logy = range_ratio(maxima) > RANGE_RATIO and (stats["mean"] >= 0).all()
    fig, axes = new_figure(1, 1, width=11.0, height=4.8)
    ax = axes[0, 0]
    shown, faded, curves = draw_means(ax, rs, stats, logy=logy, band=bands)
    if logy:
        log_y(ax)
    step_axis(ax, logx, last_step(rs))
    ax.set_ylabel("‖F(x, θ_t) − F(x, θ_0)‖ on the probe batch" + (" (log)" if logy else ""))
    ax.set_title(f"Model update since initialisation (DeepNet's measure)\n{agg_note(rs, bands)}", fontsize=11)
    extra = [FEWER_SEEDS] if faded else []
    add_legend(fig, variant_handles(rs, shown) + extra + coincide_handles(rs, coinciding(curves)))
    return fig


# ------------------------------------------------ the step axis and the spike detector's unwatched steps


def step_axis(ax, logx: bool, last: int | None = None) -> None:
    if logx:
        ax.set_xscale("symlog", linthresh=1, linscale=0.25)
        ax.set_xlabel(f"{STEP_LABEL} (log scale)")
        ax.set_xlim(left=0, right=max(last or 1, 1))
        return
    ax.set_xlabel(STEP_LABEL)
    if last is None:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlim(left=0)
        return
    ax.set_xticks(step_ticks(last))
    ax.set_xlim(0, max(last, 1))


def watch_starts(rs: RunSet) -> list[int]:
    """Distinct first steps at which the spike detector tests a value, over the runs that trained."""
    if "spike_watch_start" not in rs.valid:
        return []
    starts = pd.to_numeric(rs.valid["spike_watch_start"], errors="coerce").dropna()
    return sorted({int(s) for s in starts if s > 0})


def shade_unwatched(ax, rs: RunSet, last: int) -> Patch | None:
    """Shade steps before the spike detector tests anything; returns the legend entry, None if nothing shaded."""
    starts = watch_starts(rs)
    if not starts:
        return None
    hi = starts[-1]
    ax.axvspan(0, min(hi, max(last, 1)), color=WATCH_COLOR, alpha=0.16, lw=0, zorder=0)
    span = f"{starts[0]}–{hi}, by run" if len(starts) > 1 else f"{hi}"
    if hi >= last:
        label = f"spike detector never watched: it starts at step {span}"
    else:
        label = f"spike detector not yet watching (steps < {span})"
    return Patch(facecolor=WATCH_COLOR, alpha=0.3, lw=0, label=textwrap.fill(label, 34))


# --------------------------------------------------------------------------------- mean lines over seeds


def curve_xy(d: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    return d[names.STEP].to_numpy(dtype=float), d["mean"].to_numpy(dtype=float)


def smooth_frame(d: pd.DataFrame, window: int) -> pd.DataFrame:
    if window <= 1 or len(d) < 2:
        return d
    d = d.copy()
    for col in ("mean", "std"):
        d[col] = d[col].rolling(window, min_periods=1).mean()
    return d


def auto_window(stats: pd.DataFrame, smooth: int | None) -> int:
    if smooth is not None:
        return max(1, int(smooth))
    return max(1, stats[names.STEP].nunique() // AUTO_SMOOTH_POINTS) if not stats.empty else 1


def bands_for(stats: pd.DataFrame) -> bool:
    return stats["variant"].nunique() <= MAX_BANDS


def draw_band(
    ax, d: pd.DataFrame, style: Style, *, logy: bool = False, band: bool = True, markers: bool = True
) -> bool:
    """Mean line with a ± std band where n ≥ 2. Where fewer runs than the variant's full count contribute
    (a seed diverged or stopped early), the line is faded. Returns whether any faded part was drawn."""
    x = d[names.STEP].to_numpy()
    mean = d["mean"].to_numpy(dtype=float)
    std = d["std"].to_numpy(dtype=float)
    n = d["n"].to_numpy() if "n" in d else np.ones(len(d))
    reduced = n < n.max() if len(n) else np.zeros(0, dtype=bool)
    # the faded part includes its neighbours so the two parts join
    near = reduced.copy()
    near[1:] |= reduced[:-1]
    near[:-1] |= reduced[1:]
    ax.plot(x, np.where(reduced, np.nan, mean), **style.line(len(x), markers=markers))
    if reduced.any():
        kw = style.line(len(x), markers=False)
        ax.plot(x, np.where(near, mean, np.nan), **{**kw, "lw": 1.2, "alpha": 0.45})
    has_std = np.isfinite(std) & (n >= 2)
    if band and has_std.any():
        lo, hi = mean - std, mean + std
        if logy:
            lo = np.maximum(lo, mean * 0.05)
        ax.fill_between(x, lo, hi, where=has_std, color=style.color, alpha=BAND_ALPHA, lw=0)
    return bool(reduced.any())


def draw_means(
    ax, rs: RunSet, stats: pd.DataFrame, *, smooth: int = 1, logy: bool = False, band: bool = True
) -> tuple[list[str], bool, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """One mean line (`draw_band`) per variant with values, smoothed over `smooth` steps; on a log axis
    values ≤ 0 are left out. Returns the variants drawn, whether a faded part was drawn, and each
    variant's unsmoothed curve (for the identical-curve notes)."""
    styles = variant_styles(rs)
    shown, faded = [], False
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for variant in rs.variants:
        d = stats[stats["variant"] == variant]
        if logy:
            d = d[d["mean"] > 0]
        if not d.empty:
            shown.append(variant)
            curves[variant] = curve_xy(d)
            faded |= draw_band(ax, smooth_frame(d, smooth), styles[variant], logy=logy, band=band)
    return shown, faded, curves


# -------------------------------------------------------------------------- spike and divergence markers


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


def scatter_points(ax, rs: RunSet, points, style: dict, top: float | None = None, face: bool = False) -> None:
    colors = rs.colors
    for run, step, value in points:
        color = colors[rs.runs.at[run, "variant"]]
        # a point above a cut axis sits on its top edge (the cut's note gives its value)
        y, inside = (value, True) if top is None or value <= top else (top, False)
        if face:
            ax.scatter([step], [y], color=color, clip_on=inside, **style)
        else:
            ax.scatter([step], [y], edgecolors=[color], clip_on=inside, **style)


def marker_handles(spikes: bool, crosses: bool, spike_label: str = "loss spike") -> list[Line2D]:
    out = []
    if spikes:
        out.append(
            Line2D([], [], ls="", marker="^", mfc="none", mec="0.25", ms=7, mew=1.3, label=spike_label)
        )
    if crosses:
        out.append(
            Line2D(
                [], [], ls="", marker="X", mfc="0.4", mec="black", ms=9, label="diverged (last finite value)"
            )
        )
    return out


# ----------------------------------------------------------------------------- every value an axis shows


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
    frames = [f for f in frames if not f.empty]  # an axis with nothing yet (no evaluation before a stop)
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return (
        out.astype({"value": float})
        if not out.empty
        else pd.DataFrame(columns=["variant", names.STEP, "value"])
    )
