"""What every figure shares: styles per variant, legends with n and notes, step axes, bands, spike markers
and the unwatched region, log formatting, smoothing (see the package docstring)."""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import LogFormatter, MaxNLocator

from normlab.analysis.load import RunSet
from normlab.analysis.stats import finite, run_series
from normlab.metrics import names

DPI = 150
STEP_LABEL = "optimizer step"
LOSS_UNIT = "cross-entropy (nats/token)"
LAYER_LABEL = "block index (0 = next to the embedding)"
BAND_ALPHA = 0.18
AUTO_SMOOTH_POINTS = 100  # automatic smoothing of per-step curves keeps about this many windows
MAX_BANDS = 6  # with more variants than this, ± std bands are left out: they would cover each other
MARKS_PER_LINE = 8  # markers along a long curve (every point of a short one)
RANGE_RATIO = 10.0  # panels or variants whose ranges differ more than this get their own or a log scale
SAME_CURVE_RTOL = 1e-6  # curves equal to this relative tolerance at every point are "identical"
WATCH_COLOR = "0.55"


class NoData(Exception):
    """The runs hold no data for this figure; the message says what is missing."""


# ------------------------------------------------------------------------------------------- helpers


class ReportFigure(Figure):
    """A Figure that shows itself as a PNG in a notebook even when pyplot was never imported."""

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png", dpi=100)
        return buf.getvalue()


def new_figure(nrows: int = 1, ncols: int = 1, *, width: float = 10.0, height: float = 4.2, **kw: Any):
    fig = ReportFigure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    for ax in axes.flat:
        ax.grid(True, alpha=0.3, linewidth=0.6)
    return fig, axes


def metric_family(layer_name: Callable[[int], str]) -> str:
    """'act_rms/layer_i' from names.act_rms_layer: how messages name a per-layer metric family."""
    return layer_name(987654321).replace("987654321", "i")


# ------------------------------------------------------------------------------------- variant styles


@dataclass(frozen=True)
class Style:
    """How one variant is drawn in every figure; `slot` of `of` staggers its markers against the others'."""

    color: Any
    ls: Any
    marker: str
    slot: int
    of: int

    def line(self, npoints: int, ms: float = 5.0, markers: bool = True) -> dict[str, Any]:
        kw: dict[str, Any] = dict(color=self.color, ls=self.ls, lw=1.6)
        if markers and npoints:
            of = max(self.of, 1)
            if npoints >= 2 * of:  # long curve: markers staggered, each variant at its own steps
                every = max(of, round(npoints / MARKS_PER_LINE))
                offset = (self.slot * every) // of
                kw.update(marker=self.marker, ms=ms, mfc="white", mew=1.3, markevery=(offset, every))
            else:  # a marker on every point: earlier variants' markers larger and hollow, so nested
                # markers of variants at the same values all show
                size = ms + 3.5 * (self.of - 1 - self.slot) / max(self.of - 1, 1)
                kw.update(marker=self.marker, ms=size, mfc="none", mew=1.3)
        return kw


def variant_styles(rs: RunSet) -> dict[str, Style]:
    variants = rs.variants
    colors, linestyles, markers = rs.colors, rs.linestyles, rs.markers
    return {
        v: Style(colors[v], linestyles[v], markers[v], slot=i, of=len(variants))
        for i, v in enumerate(variants)
    }


def n_label(rs: RunSet, variant: str) -> str:
    """'ln, pre  (n=3)', with the diverged count where runs diverged."""
    valid = rs.valid[rs.valid["variant"] == variant]
    n, diverged = len(valid), int((valid["status"] == "diverged").sum())
    return f"{variant}  (n={n}" + (f", {diverged} diverged)" if diverged else ")")


def variant_handles(rs: RunSet, variants: Sequence[str]) -> list[Line2D]:
    styles = variant_styles(rs)
    return [
        Line2D(
            [],
            [],
            color=styles[v].color,
            ls=styles[v].ls,
            lw=1.8,
            marker=styles[v].marker,
            ms=6,
            mfc="white",
            mew=1.4,
            label=n_label(rs, v),
        )
        for v in variants
    ]


def note_handle(text: str, width: int = 34) -> Line2D:
    """A legend entry that is only text (no line, no marker)."""
    return Line2D([], [], ls="none", marker="none", label=textwrap.fill(text, width))


SPIKE_STYLE = dict(marker="^", s=42, facecolors="none", linewidths=1.3, zorder=5)
CROSS_STYLE = dict(marker="X", s=90, edgecolors="black", linewidths=0.8, zorder=6)


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


def add_legend(fig: Figure, handles: list[Any], title: str | None = None) -> None:
    if handles:
        fig.legend(handles=handles, loc="outside right upper", frameon=False, fontsize=9, title=title)


FEWER_SEEDS = Line2D(
    [], [], color="0.3", lw=1.2, alpha=0.45, label="faded: fewer runs (one diverged/stopped)"
)


# ------------------------------------------------------------------------------------- coinciding curves


def coinciding(
    curves: dict[str, tuple[np.ndarray, np.ndarray]], rtol: float = SAME_CURVE_RTOL
) -> list[list[str]]:
    """Groups (≥ 2, in the given order) of variants whose curves are the same at every point: same x
    values and y equal within `rtol` (NaN where the other is NaN)."""
    groups: list[list[str]] = []
    for variant, (x, y) in curves.items():
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        if y.size < 2 or not np.isfinite(y).any():
            continue
        for group in groups:
            x0, y0 = curves[group[0]]
            same_x = np.shape(x0) == x.shape and np.array_equal(x0, x) and np.shape(y0) == y.shape
            if same_x and np.allclose(y0, y, rtol=rtol, atol=0.0, equal_nan=True):
                group.append(variant)
                break
        else:
            groups.append([variant])
    return [g for g in groups if len(g) > 1]


def same_network_reason(rs: RunSet, group: Sequence[str]) -> str:
    """Why identical curves are expected, where the harness knows: norm=none in every slot of every placement."""
    runs = rs.valid[rs.valid["variant"].isin(group)]
    if not runs.empty and (runs["norm"] == "none").all():
        return " (norm=none: no norm in any slot, so every placement is the same network)"
    return ""


def coincide_notes(rs: RunSet, groups: Sequence[Sequence[str]]) -> list[str]:
    return [f"identical curves: {' = '.join(g)}{same_network_reason(rs, g)}" for g in groups]


def coincide_handles(rs: RunSet, groups: Sequence[Sequence[str]]) -> list[Line2D]:
    return [note_handle(note) for note in coincide_notes(rs, groups)]


# ------------------------------------------------------------------------------------------- step axes


def last_step(rs: RunSet) -> int:
    """The true last step of these runs: the most updates any run made (summary.json `steps`), or the
    largest logged step if that is larger (a final evaluation row sits at step = max_steps)."""
    steps = pd.to_numeric(rs.valid["steps"], errors="coerce").dropna() if "steps" in rs.valid else []
    logged = rs.metrics[names.STEP].max() if not rs.metrics.empty else 0
    candidates = [float(logged) if pd.notna(logged) else 0.0]
    if len(steps):
        candidates.append(float(steps.max()))
    return int(max(candidates))


def step_ticks(last: int, nbins: int = 8) -> list[int]:
    """Integer ticks from 0 that end exactly at `last` (a neighbouring round tick that would crowd it is dropped)."""
    if last <= 0:
        return [0]
    ticks = [int(t) for t in MaxNLocator(nbins=nbins, integer=True).tick_values(0, last) if 0 <= t <= last]
    if ticks[-1] != last:
        if len(ticks) > 1 and last - ticks[-1] < 0.08 * last:
            ticks.pop()
        ticks.append(last)
    return ticks


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


# ------------------------------------------------------------------------------------------- lines


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


class PlainLogFormatter(LogFormatter):
    """Log-axis tick labels as 0.03, 0.1, 1, 30 (scientific only far from 1), minor ticks labelled when
    the axis spans little more than a decade."""

    # LogFormatter's documented extension point has no public hook for the number's text; overriding
    # this private method is what LogFormatterSciNotation does too (tests/test_private_apis.py)
    def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
        return f"{x:g}" if 1e-3 <= abs(x) < 1e5 else f"{x:.0e}".replace("e-0", "e-").replace("e+0", "e")


def log_y(ax) -> None:
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(PlainLogFormatter())
    ax.yaxis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.4)))


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


def scatter_points(ax, rs: RunSet, points, style: dict, top: float | None = None, face: bool = False) -> None:
    colors = rs.colors
    for run, step, value in points:
        color = colors[rs.runs.at[run, "variant"]]
        y = min(value, top) if top is not None else value
        if face:
            ax.scatter([step], [y], color=color, **style)
        else:
            ax.scatter([step], [y], edgecolors=[color], **style)


def clip_top(ax, stats: pd.DataFrame) -> float | None:
    """Fit the y axis to the mean curves, not their bands, and keep a diverging run's exploding loss from
    flattening everyone else's: cap the axis at 1.25 × the largest first-step loss when something goes
    above it. Returns the cap, if set."""
    means = stats["mean"].to_numpy(dtype=float) if not stats.empty else np.array([])
    means = means[np.isfinite(means)]
    if means.size == 0:
        return None
    lo, hi, top = means.min(), means.max(), None
    start = stats[stats[names.STEP] == stats[names.STEP].min()]["mean"].max()
    if np.isfinite(start) and start > 0 and hi > 1.25 * start:
        hi = top = 1.25 * start
    pad = 0.06 * (hi - lo) if hi > lo else 0.5
    ax.set_ylim(lo - pad, hi + pad)
    return None if top is None else hi + pad


def color_title(ax, text: str, color) -> None:
    ax.set_title(text, color=darker(color), fontsize=10, fontweight="bold")


def darker(color, factor: float = 0.8):
    r, g, b = to_rgb(color)
    return (r * factor, g * factor, b * factor)


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


def panel_grid(n: int, max_cols: int = 3) -> tuple[int, int]:
    ncols = min(n, max_cols)
    return math.ceil(n / ncols), ncols


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


def mark_duplicate_panels(ax_of: dict[str, Any], groups: list[list[str]], rs: RunSet) -> None:
    """Say on a panel when it repeats an earlier one exactly."""
    for group in groups:
        for v in group[1:]:
            ax_of[v].set_title(
                f"{v}\n= {group[0]} (identical)", color=darker(rs.colors[v]), fontsize=10, fontweight="bold"
            )
