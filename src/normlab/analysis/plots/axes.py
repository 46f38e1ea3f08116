"""What figures draw on an Axes: integer step axes ending at the true last step, the region the spike
detector does not watch, mean lines with their ± std bands, log-y formatting, spike and divergence
markers, panel titles and grids (where a y range is cut, and how that is said: `cuts.py`)."""

from __future__ import annotations

import math
import textwrap
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.colors import to_rgb
from matplotlib.patches import Patch
from matplotlib.ticker import LogFormatter, MaxNLocator

from normlab.analysis.load import RunSet
from normlab.analysis.plots.series import curve_xy, smooth_frame
from normlab.analysis.plots.style import BAND_ALPHA, STEP_LABEL, WATCH_COLOR, Style, variant_styles
from normlab.metrics import names


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


def color_title(ax, text: str, color) -> None:
    ax.set_title(text, color=darker(color), fontsize=10, fontweight="bold")


def darker(color, factor: float = 0.8):
    r, g, b = to_rgb(color)
    return (r * factor, g * factor, b * factor)


def panel_grid(n: int, max_cols: int = 3) -> tuple[int, int]:
    ncols = min(n, max_cols)
    return math.ceil(n / ncols), ncols


def mark_duplicate_panels(ax_of: dict[str, Any], groups: list[list[str]], rs: RunSet) -> None:
    """Say on a panel when it repeats an earlier one exactly."""
    for group in groups:
        for v in group[1:]:
            ax_of[v].set_title(
                f"{v}\n= {group[0]} (identical)", color=darker(rs.colors[v]), fontsize=10, fontweight="bold"
            )
