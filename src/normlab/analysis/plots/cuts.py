"""Where a figure cuts its scale for readability, the cut marked and what lies beyond it named: a y axis
capped above where every run started (step curves), and a log colour scale that leaves out outliers
(heatmaps). Nothing is clipped silently: each cut says which variants go beyond it, how far and at which
step.

Its own module because both cuts follow one rule — a scale fitted to the bulk of the data, each value left
outside it reported — and two figure families draw them (`step_curves`, `layer_panels`).

A y axis is capped when a curve rises far above where every run started (more than CAP_OVER_START × the
largest first-step value: an exploding loss would otherwise flatten every other curve to a line); the cut
is marked on the axis (break marks at the top of both spines, a ▲ on the top edge at each peak beyond it,
labelled with the peak's value) and a legend note names the variants beyond it, their peak, its step, how
far above the cut it is, and the steps they spend beyond it.

A heatmap's log colour scale spans every value but outliers: values more than RANGE_RATIO times beyond
the 1st / 99.5th percentile (COLOUR_PERCENTILES), a few extreme cells that would turn every other cell
one colour. Where it leaves some out, the colour bar gets an arrow at that end and the title names the
variants with cells beyond the scale, how many, their extreme value, its step and how far out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from normlab.analysis.plots.base import RANGE_RATIO, fmt_value, note_handle
from normlab.metrics import names

# ------------------------------------------------------------------------------------------ a cut y axis

CAP_OVER_START = 1.25  # a y axis is capped at this × the largest first-step value when data goes above it
PAD = 0.06  # of the shown range, above and below the data
CUT_GID = "y-cut"  # gid of the ▲ markers and value labels a y cut draws (tests find them by it)


@dataclass(frozen=True)
class Overshoot:
    """Where variants' values go above a cut axis (variants whose overshoot is the same share one)."""

    variants: tuple[str, ...]
    peak: float
    step: int  # the step of the peak
    first: int  # the first and last step with a value above the cut
    last: int


@dataclass(frozen=True)
class YCut:
    """An axis capped at `top` (its upper limit), and what goes above it."""

    top: float
    over: tuple[Overshoot, ...]


def first_value(stats: pd.DataFrame) -> float | None:
    """The largest mean at the first logged step (where every run starts): the reference for capping an axis."""
    if stats.empty:
        return None
    start = stats[stats[names.STEP] == stats[names.STEP].min()]["mean"].max()
    return float(start) if pd.notna(start) else None


def fit_y(ax: Any, values: pd.DataFrame, start: float | None, order: Sequence[str] = ()) -> YCut | None:
    """Fit the y axis to every value drawn (rows variant, step, value: lines, bands, markers), capped at
    CAP_OVER_START × `start` (the largest first-step value) when values go above that. Returns the cut
    (variants beyond it listed in `order`, the display order), or None when every value is inside the axis."""
    if values.empty:
        return None
    v = values[np.isfinite(values["value"].to_numpy(dtype=float))]
    if v.empty:
        return None
    lo, hi = float(v["value"].min()), float(v["value"].max())
    capped = start is not None and np.isfinite(start) and start > 0 and hi > CAP_OVER_START * start
    shown_hi = CAP_OVER_START * float(start) if capped else hi
    shown_hi = max(shown_hi, lo)
    pad = PAD * (shown_hi - lo) if shown_hi > lo else 0.5
    top = shown_hi + pad
    ax.set_ylim(lo - pad, top)
    beyond = v[v["value"] > top]
    if beyond.empty:
        return None
    return YCut(top, tuple(_overshoots(beyond, order)))


def _overshoots(beyond: pd.DataFrame, order: Sequence[str]) -> list[Overshoot]:
    rank = {v: i for i, v in enumerate(order)}
    merged: dict[tuple[float, int, int, int], list[str]] = {}
    groups = beyond.groupby("variant", sort=False)
    for variant, d in sorted(groups, key=lambda g: rank.get(g[0], len(rank))):
        peak_at = d["value"].to_numpy(dtype=float).argmax()
        steps = d[names.STEP].to_numpy(dtype=float)
        key = (round(float(d["value"].max()), 6), int(steps[peak_at]), int(steps.min()), int(steps.max()))
        merged.setdefault(key, []).append(str(variant))
    return [Overshoot(tuple(vs), peak, step, first, last) for (peak, step, first, last), vs in merged.items()]


def _steps(o: Overshoot) -> str:
    return f"step {o.first}" if o.first == o.last else f"steps {o.first}–{o.last}"


def y_cut_note(cut: YCut, axis: str) -> str:
    """'training loss axis cut at 9.00 (▲ on the top edge): none, pre = none, post up to 10.99 at step 29,
    1.99 above the cut (beyond it at steps 27–33)'."""
    parts = [
        f"{' = '.join(o.variants)} up to {fmt_value(o.peak)} at step {o.step}, "
        f"{fmt_value(o.peak - cut.top)} above the cut (beyond it at {_steps(o)})"
        for o in cut.over
    ]
    return f"{axis} axis cut at {fmt_value(cut.top)} (▲ on the top edge): " + "; ".join(parts)


def mark_y_cut(ax: Any, cut: YCut, colors: Mapping[str, Any], axis: str) -> list[Any]:
    """Mark a cut y axis: break marks at the top of both spines, and at each peak beyond it a ▲ on the top
    edge in the variant's colour, labelled with the peak's value. Returns the legend note saying it all."""
    for x in (0.0, 1.0):
        for dy in (-0.012, 0.0):
            ax.plot(
                [x - 0.012, x + 0.012],
                [0.988 + dy, 1.012 + dy],
                transform=ax.transAxes,
                color="black",
                lw=1.0,
                clip_on=False,
                zorder=8,
            )
    for o in cut.over:
        ax.plot(
            [o.step],
            [cut.top],
            ls="none",
            marker="^",
            ms=10,
            color=colors[o.variants[0]],
            mec="black",
            mew=0.8,
            clip_on=False,
            zorder=9,
            gid=CUT_GID,
        )
        ax.annotate(
            f"↑{fmt_value(o.peak)}",
            (o.step, cut.top),
            xytext=(7, -11),
            textcoords="offset points",
            fontsize=8,
            color="black",
            gid=CUT_GID,
            annotation_clip=False,
        )
    return [note_handle(y_cut_note(cut, axis), width=40)]


# ------------------------------------------------------------------------------------ a cut colour scale

COLOUR_PERCENTILES = (1.0, 99.5)  # a cut colour scale spans these percentiles of the cells' values
MAX_LISTED = 4  # variants named one by one in a colour-cut note; the rest are counted


@dataclass(frozen=True)
class ColourScale:
    """The limits of a log colour scale and, where they cut the data, what lies beyond them."""

    vmin: float
    vmax: float
    above: tuple[tuple[str, float, int, int], ...] = ()  # (variant, largest value, its step, cells beyond)
    below: tuple[tuple[str, float, int, int], ...] = ()  # (variant, smallest value, its step, cells beyond)

    @property
    def extend(self) -> str:
        return {(True, True): "both", (True, False): "max", (False, True): "min"}.get(
            (bool(self.above), bool(self.below)), "neither"
        )


def log_colour_scale(mats: Mapping[str, pd.DataFrame]) -> ColourScale | None:
    """Limits of a log colour scale over the positive finite cells of per-variant step × column matrices.

    The scale spans every value except outliers: values more than RANGE_RATIO times beyond the
    COLOUR_PERCENTILES (a few cells that would turn every other cell one colour). Where there are
    outliers, that end stops at the most extreme value that is not one, and the outliers are listed per
    variant."""
    cells = [m.to_numpy(dtype=float).ravel() for m in mats.values() if m.size]
    allvals = np.concatenate(cells) if cells else np.zeros(0)
    allvals = allvals[np.isfinite(allvals) & (allvals > 0)]
    if allvals.size == 0:
        return None
    mn, mx = float(allvals.min()), float(allvals.max())
    p_lo, p_hi = (float(x) for x in np.percentile(allvals, COLOUR_PERCENTILES))
    inliers = allvals[(allvals >= p_lo / RANGE_RATIO) & (allvals <= RANGE_RATIO * p_hi)]
    vmin, vmax = float(inliers.min()), float(inliers.max())
    if vmax <= vmin:
        vmin, vmax = mn, (mx if mx > mn else mn * 10)
    above, below = [], []
    for variant, m in mats.items():
        values = m.to_numpy(dtype=float)
        with np.errstate(invalid="ignore"):
            high = np.isfinite(values) & (values > vmax)
            low = np.isfinite(values) & (values > 0) & (values < vmin)
        if high.any():
            i = int(np.argmax(np.where(high, values, -np.inf)))
            above.append(
                (variant, float(values.flat[i]), int(m.index[i // values.shape[1]]), int(high.sum()))
            )
        if low.any():
            i = int(np.argmin(np.where(low, values, np.inf)))
            below.append((variant, float(values.flat[i]), int(m.index[i // values.shape[1]]), int(low.sum())))
    return ColourScale(vmin, vmax, tuple(above), tuple(below))


def colour_cut_note(scale: ColourScale) -> str:
    """'' when the scale spans every value, else which variants' cells lie beyond it and how far."""
    if not scale.above and not scale.below:
        return ""
    ends = [f"{fmt_value(scale.vmax)}"] if scale.above else []
    ends += [f"{fmt_value(scale.vmin)}"] if scale.below else []
    head = (
        f"colour scale cut at {' and '.join(ends)} (arrows on the bar) to leave out cells over "
        f"{RANGE_RATIO:g}× beyond the {COLOUR_PERCENTILES[0]:g}st–{COLOUR_PERCENTILES[1]:g}th percentiles"
    )
    parts = []
    for side, rows, limit in (("above", scale.above, scale.vmax), ("below", scale.below, scale.vmin)):
        if not rows:
            continue
        listed = [
            f"{v} ({n} cells, {'up' if side == 'above' else 'down'} to {fmt_value(x)} at step {s}, "
            f"{fmt_value(x / limit if side == 'above' else limit / x)}× beyond)"
            for v, x, s, n in rows[:MAX_LISTED]
        ]
        more = f" and {len(rows) - MAX_LISTED} more" if len(rows) > MAX_LISTED else ""
        parts.append(f"{side} it: " + ", ".join(listed) + more)
    return head + "; " + "; ".join(parts)
