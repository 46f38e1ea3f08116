"""One function per figure. Each takes a RunSet and returns a matplotlib Figure, or raises NoData.

Figures are built with `matplotlib.figure.Figure` (no pyplot state), so they work under the Agg backend
in scripts and display inline in a notebook. What every figure does so that it hides nothing:

- each variant has its own colour, line style and marker (`rs.colors`, `rs.linestyles`, `rs.markers`);
  markers are staggered between variants, so two curves drawn on top of each other both stay visible;
- variants whose curves are identical are named in a note in the legend (e.g. the three `none`
  placements, which are one network);
- legends give each variant's number of runs (`n=3`); lines are means over seeds, with a ± one standard
  deviation (ddof=1) band only where n ≥ 2;
- step axes have integer ticks and end at the run's true last step;
- spikes flagged by the detector are marked, and the steps before it starts testing are shaded;
- panels whose ranges differ by more than RANGE_RATIO get their own y scale (or a log scale).
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import LogNorm, Normalize, to_rgb
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import LogFormatter, MaxNLocator

from normlab.analysis.load import RunSet, _sortable, short_names, variant_label
from normlab.analysis.stats import finite, layer_columns, run_series, seed_stats
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


def _figure(nrows: int = 1, ncols: int = 1, *, width: float = 10.0, height: float = 4.2, **kw: Any):
    fig = ReportFigure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    for ax in axes.flat:
        ax.grid(True, alpha=0.3, linewidth=0.6)
    return fig, axes


def _family(layer_name: Callable[[int], str]) -> str:
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


def _styles(rs: RunSet) -> dict[str, Style]:
    variants = rs.variants
    colors, linestyles, markers = rs.colors, rs.linestyles, rs.markers
    return {
        v: Style(colors[v], linestyles[v], markers[v], slot=i, of=len(variants))
        for i, v in enumerate(variants)
    }


def _n_label(rs: RunSet, variant: str) -> str:
    """'ln, pre  (n=3)', with the diverged count where runs diverged."""
    valid = rs.valid[rs.valid["variant"] == variant]
    n, diverged = len(valid), int((valid["status"] == "diverged").sum())
    return f"{variant}  (n={n}" + (f", {diverged} diverged)" if diverged else ")")


def _variant_handles(rs: RunSet, variants: Sequence[str]) -> list[Line2D]:
    styles = _styles(rs)
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
            label=_n_label(rs, v),
        )
        for v in variants
    ]


def _note_handle(text: str, width: int = 34) -> Line2D:
    """A legend entry that is only text (no line, no marker)."""
    return Line2D([], [], ls="none", marker="none", label=textwrap.fill(text, width))


SPIKE_STYLE = dict(marker="^", s=42, facecolors="none", linewidths=1.3, zorder=5)
CROSS_STYLE = dict(marker="X", s=90, edgecolors="black", linewidths=0.8, zorder=6)


def _marker_handles(spikes: bool, crosses: bool, spike_label: str = "loss spike") -> list[Line2D]:
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


def _legend(fig: Figure, handles: list[Any], title: str | None = None) -> None:
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


def _same_network_reason(rs: RunSet, group: Sequence[str]) -> str:
    """Why identical curves are expected, where the harness knows: norm=none in every slot of every placement."""
    runs = rs.valid[rs.valid["variant"].isin(group)]
    if not runs.empty and (runs["norm"] == "none").all():
        return " (norm=none: no norm in any slot, so every placement is the same network)"
    return ""


def coincide_notes(rs: RunSet, groups: Sequence[Sequence[str]]) -> list[str]:
    return [f"identical curves: {' = '.join(g)}{_same_network_reason(rs, g)}" for g in groups]


def _coincide_handles(rs: RunSet, groups: Sequence[Sequence[str]]) -> list[Line2D]:
    return [_note_handle(note) for note in coincide_notes(rs, groups)]


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


def _step_axis(ax, logx: bool, last: int | None = None) -> None:
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


def _shade_unwatched(ax, rs: RunSet, last: int) -> Patch | None:
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


def _band(
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


class _PlainLogFormatter(LogFormatter):
    """Log-axis tick labels as 0.03, 0.1, 1, 30 (scientific only far from 1), minor ticks labelled when
    the axis spans little more than a decade."""

    # LogFormatter's documented extension point has no public hook for the number's text; overriding
    # this private method is what LogFormatterSciNotation does too (tests/test_private_apis.py)
    def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
        return f"{x:g}" if 1e-3 <= abs(x) < 1e5 else f"{x:.0e}".replace("e-0", "e-").replace("e+0", "e")


def _log_y(ax) -> None:
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(_PlainLogFormatter())
    ax.yaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.4)))


def range_ratio(maxima: Sequence[float]) -> float:
    """Largest over smallest of the panels' (or variants') largest absolute values; 1 when undefined."""
    m = np.abs(np.asarray([v for v in maxima if v is not None and np.isfinite(v)], dtype=float))
    m = m[m > 0]
    return float(m.max() / m.min()) if m.size >= 2 else 1.0


def _smooth(d: pd.DataFrame, window: int) -> pd.DataFrame:
    if window <= 1 or len(d) < 2:
        return d
    d = d.copy()
    for col in ("mean", "std"):
        d[col] = d[col].rolling(window, min_periods=1).mean()
    return d


def _value_at(rs: RunSet, metric: str, run: str, steps: Sequence[int]) -> list[tuple[int, float]]:
    m = rs.metrics
    sub = m[(m["run"] == run) & m[names.STEP].isin(list(steps))]
    if metric not in sub:
        return []
    vals = finite(sub[metric])
    return [(int(s), float(v)) for s, v in zip(sub[names.STEP], vals, strict=True) if not math.isnan(v)]


def _spike_points(rs: RunSet, flag: str | None, metric: str) -> list[tuple[str, int, float]]:
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
        points.extend((run, s, v) for s, v in _value_at(rs, metric, run, steps))
    return points


def _divergence_points(rs: RunSet, metric: str) -> list[tuple[str, int, float]]:
    """(run, step, value) at the last finite value of `metric` of each diverged run."""
    diverged = rs.runs.index[rs.runs["status"] == "diverged"]
    if diverged.empty:
        return []
    s = run_series(rs, metric)
    last = s[s["run"].isin(diverged)].groupby("run", sort=False).tail(1)
    return [
        (r, int(st), float(v)) for r, st, v in zip(last["run"], last[names.STEP], last["value"], strict=True)
    ]


def _scatter(ax, rs: RunSet, points, style: dict, top: float | None = None, face: bool = False) -> None:
    colors = rs.colors
    for run, step, value in points:
        color = colors[rs.runs.at[run, "variant"]]
        y = min(value, top) if top is not None else value
        if face:
            ax.scatter([step], [y], color=color, **style)
        else:
            ax.scatter([step], [y], edgecolors=[color], **style)


def _clip_top(ax, stats: pd.DataFrame) -> float | None:
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


def _color_title(ax, text: str, color) -> None:
    ax.set_title(text, color=_darken(color), fontsize=10, fontweight="bold")


def _darken(color, factor: float = 0.8):
    r, g, b = to_rgb(color)
    return (r * factor, g * factor, b * factor)


def _agg_note(rs: RunSet, band: bool = True, panels: bool = False) -> str:
    """How lines relate to runs: 'mean over seeds, band ± 1 std where n ≥ 2', or 'one line per run'."""
    sizes = rs.valid.groupby("variant").size()
    if sizes.empty or sizes.max() <= 1:
        return "one run per variant" if panels else "one run per variant, n=1: no bands"
    return "mean over seeds, band ± 1 std where n ≥ 2" if band and not panels else "mean over seeds"


def _auto_window(stats: pd.DataFrame, smooth: int | None) -> int:
    if smooth is not None:
        return max(1, int(smooth))
    return max(1, stats[names.STEP].nunique() // AUTO_SMOOTH_POINTS) if not stats.empty else 1


def _bands_for(stats: pd.DataFrame) -> bool:
    return stats["variant"].nunique() <= MAX_BANDS


def _panel_grid(n: int, max_cols: int = 3) -> tuple[int, int]:
    ncols = min(n, max_cols)
    return math.ceil(n / ncols), ncols


def _runs_of(rs: RunSet, variant: str) -> list[str]:
    valid = rs.valid
    return valid.index[valid["variant"] == variant].tolist()


def _layer_means(rs: RunSet, variant: str, cols: dict[int, str]) -> pd.DataFrame:
    """Per-step mean over the variant's runs of each layer column: index step, columns layer index."""
    m = rs.metrics
    sub = m[m["run"].isin(_runs_of(rs, variant))]
    present = {i: c for i, c in cols.items() if c in sub.columns}
    if sub.empty or not present:
        return pd.DataFrame()
    values = sub[list(present.values())].apply(finite)
    values.columns = list(present.keys())
    values[names.STEP] = sub[names.STEP].to_numpy()
    out = values.groupby(names.STEP).mean().dropna(how="all")
    return out.dropna(axis=1, how="all")


def _variants_with(rs: RunSet, metric_cols: Sequence[str]) -> list[str]:
    m = rs.metrics
    cols = [c for c in metric_cols if c in m.columns]
    if not cols:
        return []
    has = m[cols].apply(finite).notna().any(axis=1)
    runs = set(m.loc[has, "run"])
    return [v for v in rs.variants if any(r in runs for r in _runs_of(rs, v))]


def _curve(d: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    return d[names.STEP].to_numpy(dtype=float), d["mean"].to_numpy(dtype=float)


# ------------------------------------------------------------------------------------------- figures


def plot_loss(rs: RunSet, *, logx: bool = False, smooth: int | None = None) -> Figure:
    """Training and validation loss vs step; spikes marked (^), diverged runs end in a cross (X), the steps
    before the spike detector watches shaded.

    `smooth`: rolling mean over this many logged steps of the training curve (1 = raw; None = about a
    hundredth of the run, so a few thousand noisy steps read as a curve). Spike markers sit at raw values."""
    train = seed_stats(rs, names.LOSS)
    val = seed_stats(rs, names.VAL_LOSS)
    if train.empty and val.empty:
        raise NoData(f"no finite '{names.LOSS}' or '{names.VAL_LOSS}' values in metrics.jsonl")
    smooth = _auto_window(train, smooth)
    bands = _bands_for(pd.concat([train, val]))
    fig, axes = _figure(1, 2, width=13.0, height=4.8)
    ax_tr, ax_val = axes[0]
    styles = _styles(rs)
    shown, faded = [], False
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for variant in rs.variants:
        d_tr = train[train["variant"] == variant]
        d_val = val[val["variant"] == variant]
        if d_tr.empty and d_val.empty:
            continue
        shown.append(variant)
        if not d_tr.empty:
            curves[variant] = _curve(d_tr)
            faded |= _band(ax_tr, _smooth(d_tr, smooth), styles[variant], band=bands)
        if not d_val.empty:
            faded |= _band(ax_val, d_val, styles[variant], band=bands)
    last = last_step(rs)
    top = _clip_top(ax_tr, train)
    spikes = _spike_points(rs, names.SPIKE_LOSS, names.LOSS)
    crosses = _divergence_points(rs, names.LOSS)
    _scatter(ax_tr, rs, spikes, SPIKE_STYLE, top)
    _scatter(ax_tr, rs, crosses, CROSS_STYLE, top, face=True)
    watch = _shade_unwatched(ax_tr, rs, last)
    _clip_top(ax_val, val)
    smooth_note = f", rolling mean over {smooth} steps" if smooth > 1 else ""
    ax_tr.set_title(f"training loss (measured before each update{smooth_note})", fontsize=10)
    ax_val.set_title("validation loss", fontsize=10)
    if val.empty:
        ax_val.text(0.5, 0.5, "no evaluation rows", ha="center", va="center", transform=ax_val.transAxes)
    for ax in (ax_tr, ax_val):
        _step_axis(ax, logx, last)
        ax.set_ylabel(LOSS_UNIT)
    fig.suptitle(f"Loss vs step — {_agg_note(rs, bands)}")
    extra = _marker_handles(bool(spikes), bool(crosses)) + ([watch] if watch else [])
    extra += [FEWER_SEEDS] if faded else []
    _legend(fig, _variant_handles(rs, shown) + extra + _coincide_handles(rs, coinciding(curves)))
    return fig


def plot_grad_norm(rs: RunSet, *, logx: bool = False, smooth: int | None = None) -> Figure:
    """Global gradient norm (before clipping) vs step, log y; the clip threshold (train.grad_clip) dashed.

    `smooth`: rolling mean over this many logged steps (None: automatic, 1: raw); spikes sit at raw values."""
    stats = seed_stats(rs, names.GRAD_NORM)
    stats = stats[stats["mean"] > 0]
    if stats.empty:
        raise NoData(f"no finite '{names.GRAD_NORM}' values in metrics.jsonl")
    smooth = _auto_window(stats, smooth)
    bands = _bands_for(stats)
    fig, axes = _figure(1, 1, width=11.0, height=4.8)
    ax = axes[0, 0]
    styles = _styles(rs)
    shown, faded = [], False
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for variant in rs.variants:
        d = stats[stats["variant"] == variant]
        if not d.empty:
            shown.append(variant)
            curves[variant] = _curve(d)
            faded |= _band(ax, _smooth(d, smooth), styles[variant], logy=True, band=bands)
    _log_y(ax)
    extra: list[Any] = []
    if "train.grad_clip" in rs.runs.columns:
        clips = sorted(
            {float(c) for c in pd.to_numeric(rs.valid["train.grad_clip"], errors="coerce").dropna() if c > 0}
        )
        for clip, ls in zip(clips, ("--", ":", "-.", (0, (5, 5))), strict=False):
            ax.axhline(clip, color="0.3", ls=ls, lw=1.0, zorder=1)
            extra.append(Line2D([], [], color="0.3", ls=ls, lw=1.0, label=f"clip threshold = {clip:g}"))
    last = last_step(rs)
    spikes = _spike_points(rs, names.SPIKE_GRAD_NORM, names.GRAD_NORM)
    crosses = _divergence_points(rs, names.GRAD_NORM)
    _scatter(ax, rs, spikes, SPIKE_STYLE)
    _scatter(ax, rs, crosses, CROSS_STYLE, face=True)
    watch = _shade_unwatched(ax, rs, last)
    _step_axis(ax, logx, last)
    ax.set_ylabel("global gradient L2 norm (before clipping)")
    smooth_note = f", rolling mean over {smooth} steps" if smooth > 1 else ""
    ax.set_title(f"Global gradient norm vs step\n{_agg_note(rs, bands)}{smooth_note}", fontsize=11)
    extra += _marker_handles(bool(spikes), bool(crosses), "grad-norm spike") + ([watch] if watch else [])
    extra += [FEWER_SEEDS] if faded else []
    _legend(fig, _variant_handles(rs, shown) + extra + _coincide_handles(rs, coinciding(curves)))
    return fig


def _profile_line(
    ax: Any, layers: list[int], mean: np.ndarray, std: np.ndarray, n: int, style: Style
) -> None:
    """One variant's per-layer profile: the mean with hollow markers, and a ± std band where n ≥ 2
    (floored at 5 % of the mean so a log axis never sees values ≤ 0)."""
    ax.plot(layers, mean, **{**style.line(len(layers), ms=7), "markevery": None, "mfc": "none", "mew": 1.5})
    if n >= 2 and np.isfinite(std).any():
        ax.fill_between(
            layers, np.maximum(mean - std, mean * 0.05), mean + std, color=style.color, alpha=BAND_ALPHA, lw=0
        )


def plot_grad_profile_init(rs: RunSet) -> Figure:
    """Per-layer gradient norm at step 0 (before any update) vs block index, one line per variant
    (Xiong et al. 2020, Fig. 3)."""
    cols = layer_columns(rs.metrics.columns, names.grad_norm_layer)
    step0 = rs.metrics[rs.metrics[names.STEP] == 0]
    if not cols or step0.empty:
        raise NoData(f"no per-layer gradient norms ({_family(names.grad_norm_layer)}) at step 0")
    fig, axes = _figure(1, 1, width=10.5, height=4.8)
    ax = axes[0, 0]
    styles = _styles(rs)
    shown = []
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for variant in rs.variants:
        sub = step0[step0["run"].isin(_runs_of(rs, variant))]
        if sub.empty:
            continue
        layers, means, stds = [], [], []
        for i, col in cols.items():
            v = finite(sub[col]).dropna()
            v = v[v > 0]
            if not v.empty:
                layers.append(i)
                means.append(v.mean())
                stds.append(v.std(ddof=1) if len(v) > 1 else np.nan)
        if not layers:
            continue
        shown.append(variant)
        curves[variant] = (np.array(layers, dtype=float), np.array(means))
        _profile_line(ax, layers, np.array(means), np.array(stds), len(sub), styles[variant])
    if not shown:
        raise NoData("no finite per-layer gradient norms at step 0")
    _log_y(ax)
    ax.set_xlabel(LAYER_LABEL)
    ax.set_ylabel("gradient L2 norm of the block's parameters")
    ax.set_title(
        f"Gradient profile at initialisation (step 0, before any update)\n{_agg_note(rs)}", fontsize=11
    )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    _legend(fig, _variant_handles(rs, shown) + _coincide_handles(rs, coinciding(curves)))
    return fig


def _matrix_groups(mats: dict[str, pd.DataFrame]) -> list[list[str]]:
    """Variants whose whole layer × step matrices are identical (same steps, layers and values)."""
    curves = {}
    for v, m in mats.items():
        x = np.concatenate([m.index.to_numpy(dtype=float), m.columns.to_numpy(dtype=float)])
        curves[v] = (x, m.to_numpy(dtype=float).ravel())
    return coinciding(curves)


def _mark_duplicate_panels(ax_of: dict[str, Any], groups: list[list[str]], rs: RunSet) -> None:
    """Say on a panel when it repeats an earlier one exactly."""
    for group in groups:
        for v in group[1:]:
            ax_of[v].set_title(
                f"{v}\n= {group[0]} (identical)", color=_darken(rs.colors[v]), fontsize=10, fontweight="bold"
            )


def plot_grad_heatmap(rs: RunSet) -> Figure:
    """Per-layer gradient norm over training: a layer × step heatmap per variant, one shared log colour scale."""
    cols = layer_columns(rs.metrics.columns, names.grad_norm_layer)
    variants = _variants_with(rs, list(cols.values()))
    if not variants:
        raise NoData(f"no per-layer gradient norms ({_family(names.grad_norm_layer)})")
    mats = {v: _layer_means(rs, v, cols) for v in variants}
    mats = {v: m for v, m in mats.items() if not m.empty}
    allvals = np.concatenate([m.to_numpy(dtype=float).ravel() for m in mats.values()])
    allvals = allvals[np.isfinite(allvals) & (allvals > 0)]
    if allvals.size == 0:
        raise NoData("per-layer gradient norms are all zero or non-finite")
    lo, hi = np.percentile(allvals, [1, 99.5])
    if hi <= lo:
        hi = lo * 10
    norm = LogNorm(vmin=lo, vmax=hi)
    nrows, ncols = _panel_grid(len(mats))
    fig, axes = _figure(nrows, ncols, width=4.4 * ncols + 1.2, height=3.3 * nrows + 0.7)
    last = last_step(rs)
    mesh = None
    ax_of = {}
    for ax, (variant, m) in zip(axes.flat, mats.items(), strict=False):
        ax.grid(False)
        ax_of[variant] = ax
        steps = m.index.to_numpy(dtype=float)
        layers = m.columns.to_numpy(dtype=float)
        data = np.ma.masked_invalid(np.where(m.to_numpy(dtype=float) > 0, m.to_numpy(dtype=float), np.nan).T)
        mesh = ax.pcolormesh(_edges(steps), _edges(layers), data, norm=norm, cmap="viridis", shading="flat")
        _color_title(ax, _n_label(rs, variant), rs.colors[variant])
        ax.set_xlabel(STEP_LABEL)
        ax.set_xticks(step_ticks(last, nbins=5))
        ax.set_ylabel("block index")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in list(axes.flat)[len(mats) :]:
        ax.set_visible(False)
    _mark_duplicate_panels(ax_of, _matrix_groups(mats), rs)
    fig.colorbar(mesh, ax=axes, label="gradient L2 norm of the block (log)", extend="both", shrink=0.9)
    fig.suptitle(
        f"Per-layer gradient norm over training ({_agg_note(rs, panels=True)}; block 0 = next to the embedding)"
    )
    return fig


def _edges(centers: np.ndarray) -> np.ndarray:
    if len(centers) == 1:
        return np.array([centers[0] - 0.5, centers[0] + 0.5])
    mids = (centers[1:] + centers[:-1]) / 2
    return np.concatenate(
        [[centers[0] - (mids[0] - centers[0])], mids, [centers[-1] + (centers[-1] - mids[-1])]]
    )


def plot_act_rms(rs: RunSet) -> Figure:
    """Residual-stream RMS after each block vs block index, at step 0 and at each run's last measured step."""
    cols = layer_columns(rs.metrics.columns, names.act_rms_layer)
    variants = _variants_with(rs, list(cols.values()))
    if not variants:
        raise NoData(f"no residual-stream RMS metrics ({_family(names.act_rms_layer)})")
    fig, axes = _figure(1, 2, width=13.0, height=4.8, sharey=True)
    ax0, ax1 = axes[0]
    styles = _styles(rs)
    last_steps: set[int] = set()
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for variant in variants:
        m = rs.metrics
        sub = m[m["run"].isin(_runs_of(rs, variant))]
        sub = sub[[names.STEP, "run", *cols.values()]].copy()
        sub[list(cols.values())] = sub[list(cols.values())].apply(finite)
        sub = sub.dropna(subset=list(cols.values()), how="all")
        at0 = sub[sub[names.STEP] == 0]
        end = sub.sort_values(names.STEP).groupby("run").tail(1)
        last_steps.update(end[names.STEP].astype(int))
        for ax, rows in ((ax0, at0), (ax1, end)):
            if rows.empty:
                continue
            layers = list(cols)
            mean = rows[list(cols.values())].mean().to_numpy(dtype=float)
            std = rows[list(cols.values())].std(ddof=1).to_numpy(dtype=float)
            _profile_line(ax, layers, mean, std, len(rows), styles[variant])
            if ax is ax1:
                curves[variant] = (np.array(layers, dtype=float), mean)
    last = last_step(rs)
    ax0.set_title("at initialisation (step 0)", fontsize=10)
    if len(last_steps) == 1:
        (measured,) = last_steps
        of = f" of {last}" if measured != last else ""
        end_note = f"at the last measured step ({measured}{of})"
    else:
        end_note = f"at each run's last measured step ({min(last_steps)}–{max(last_steps)})"
    ax1.set_title(end_note, fontsize=10)
    for ax in (ax0, ax1):
        _log_y(ax)
        ax.set_xlabel(LAYER_LABEL)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax0.set_ylabel("RMS of the residual stream after the block")
    fig.suptitle(f"Residual-stream RMS vs layer — {_agg_note(rs)}")
    _legend(fig, _variant_handles(rs, variants) + _coincide_handles(rs, coinciding(curves)))
    return fig


def _per_layer_over_training(
    rs: RunSet, layer_name: Callable[[int], str], *, what: str, ylabel: str, title: str, logy: bool
) -> Figure:
    """One panel per variant, one line per block. Panels share a y scale unless their largest values
    differ by more than RANGE_RATIO; then each panel gets its own, and the title says so."""
    cols = layer_columns(rs.metrics.columns, layer_name)
    variants = _variants_with(rs, list(cols.values()))
    if not variants:
        raise NoData(f"no {what} metrics ({_family(layer_name)})")
    mats = {v: _layer_means(rs, v, cols) for v in variants}
    maxima = [np.nanmax(np.abs(m.to_numpy(dtype=float))) if m.size else np.nan for m in mats.values()]
    shared = range_ratio(maxima) <= RANGE_RATIO
    n_layers = max(cols) + 1
    cmap = colormaps["viridis"]
    cnorm = Normalize(vmin=0, vmax=max(n_layers - 1, 1))
    nrows, ncols = _panel_grid(len(variants))
    fig, axes = _figure(nrows, ncols, width=4.4 * ncols + 1.4, height=3.3 * nrows + 0.7, sharey=shared)
    last = last_step(rs)
    ax_of = {}
    for ax, variant in zip(axes.flat, variants, strict=False):
        ax_of[variant] = ax
        m = mats[variant]
        for layer in m.columns:
            series = m[layer].dropna()
            if logy:
                series = series[series > 0]
            ax.plot(series.index, series.to_numpy(), color=cmap(cnorm(layer)), lw=1.3)
        _color_title(ax, _n_label(rs, variant), rs.colors[variant])
        ax.set_xlabel(STEP_LABEL)
        ax.set_xticks(step_ticks(last, nbins=5))
        ax.set_xlim(0, max(last, 1))
        if logy:
            _log_y(ax)
    for row in axes:
        row[0].set_ylabel(ylabel)
    for ax in list(axes.flat)[len(variants) :]:
        ax.set_visible(False)
    _mark_duplicate_panels(ax_of, _matrix_groups(mats), rs)
    cbar = fig.colorbar(ScalarMappable(norm=cnorm, cmap=cmap), ax=axes, label=LAYER_LABEL, shrink=0.9)
    cbar.ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    scale = "" if shared else f"; own y scale per panel: ranges differ by {range_ratio(maxima):.0f}×"
    fig.suptitle(f"{title} ({_agg_note(rs, panels=True)}; colour = block index{scale})")
    return fig


def plot_attn_max_logit(rs: RunSet) -> Figure:
    """Largest attention logit q·k/√d per block over training, one panel per variant."""
    return _per_layer_over_training(
        rs,
        names.attn_max_logit_layer,
        what="attention-logit",
        ylabel="max attention logit q·k/√d_head",
        title="Max attention logit per layer over training",
        logy=False,
    )


def plot_update_ratio(rs: RunSet) -> Figure:
    """‖Δθ‖/‖θ‖ of each block per optimizer step over training, one panel per variant (log y)."""
    return _per_layer_over_training(
        rs,
        names.update_ratio_layer,
        what="update-ratio",
        ylabel="update ratio ‖Δθ‖/‖θ‖ per step",
        title="Update-to-parameter ratio per layer over training",
        logy=True,
    )


def plot_model_update(rs: RunSet, *, logx: bool = False) -> Figure:
    """DeepNet's model update ‖F(x, θ_t) − F(x, θ_0)‖ on a fixed probe batch vs step (log y when the
    variants' ranges differ by more than RANGE_RATIO)."""
    stats = seed_stats(rs, names.MODEL_UPDATE)
    if stats.empty:
        raise NoData(f"no '{names.MODEL_UPDATE}' metric (logged for post and deepnorm runs)")
    bands = _bands_for(stats)
    maxima = [stats[stats["variant"] == v]["mean"].abs().max() for v in stats["variant"].unique()]
    logy = range_ratio(maxima) > RANGE_RATIO and (stats["mean"] >= 0).all()
    fig, axes = _figure(1, 1, width=11.0, height=4.8)
    ax = axes[0, 0]
    styles = _styles(rs)
    shown, faded = [], False
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for variant in rs.variants:
        d = stats[stats["variant"] == variant]
        if logy:
            d = d[d["mean"] > 0]
        if not d.empty:
            shown.append(variant)
            curves[variant] = _curve(d)
            faded |= _band(ax, d, styles[variant], band=bands, logy=logy)
    if logy:
        _log_y(ax)
    _step_axis(ax, logx, last_step(rs))
    ax.set_ylabel("‖F(x, θ_t) − F(x, θ_0)‖ on the probe batch" + (" (log)" if logy else ""))
    ax.set_title(
        f"Model update since initialisation (DeepNet's measure)\n{_agg_note(rs, bands)}", fontsize=11
    )
    extra = [FEWER_SEEDS] if faded else []
    _legend(fig, _variant_handles(rs, shown) + extra + _coincide_handles(rs, coinciding(curves)))
    return fig


# ---------------------------------------------------------------------------------------------- grid


@dataclass
class GridCell:
    mean: float | None
    std: float | None
    n: int  # runs that trained
    n_diverged: int
    n_invalid: int


def _ordered(values: Sequence[Any]) -> list[Any]:
    uniq = list(dict.fromkeys(values))
    if all(_sortable(v)[0] == 0 for v in uniq):
        return sorted(uniq, key=float)
    return uniq


def grid_cells(
    rs: RunSet, x: str, y: str, metric: str = "final_val_loss"
) -> dict[tuple, dict[tuple, GridCell]]:
    """{facet (values of the other grouping keys): {(x value, y value): GridCell}} of `metric` from summary.json."""
    runs = rs.runs
    rest = [k for k in rs.group_keys if k not in (x, y)]
    out: dict[tuple, dict[tuple, GridCell]] = {}
    for facet_vals, facet in runs.groupby(rest, sort=False, dropna=False) if rest else [((), runs)]:
        facet_key = facet_vals if isinstance(facet_vals, tuple) else (facet_vals,)
        cells = {}
        for (xv, yv), cell in facet.groupby([x, y], sort=False, dropna=False):
            trained = cell[cell["status"] != "invalid"]
            vals = finite(trained[metric]).dropna() if metric in trained else pd.Series(dtype=float)
            cells[(xv, yv)] = GridCell(
                mean=float(vals.mean()) if len(vals) else None,
                std=float(vals.std(ddof=1)) if len(vals) > 1 else None,
                n=len(trained),
                n_diverged=int((trained["status"] == "diverged").sum()),
                n_invalid=len(cell) - len(trained),
            )
        out[facet_key] = cells
    return out


def plot_grid(rs: RunSet, x: str, y: str, *, metric: str = "final_val_loss", max_panels: int = 12) -> Figure:
    """Heatmap of `metric` (mean over seeds) over two config axes, e.g. x="depth", y="warmup_steps".

    Other grouping keys that vary give one panel each. Cells where a run diverged are hatched, with the
    count; cells where all runs diverged are grey; invalid combinations are labelled."""
    xk, yk = rs.resolve_key(x), rs.resolve_key(y)
    if xk == yk:
        raise ValueError(f"the grid needs two different axes, got {x} and {y}")
    facets = grid_cells(rs, xk, yk, metric)
    if not any(c.n for cells in facets.values() for c in cells.values()):
        raise NoData(f"no runs that trained, so no {metric} to put on a {x} × {y} grid")
    xs = _ordered([v for cells in facets.values() for (v, _) in cells])
    ys = _ordered([v for cells in facets.values() for (_, v) in cells])
    panels = list(facets.items())[:max_panels]
    allvals = [c.mean for _, cells in panels for c in cells.values() if c.mean is not None]
    vmin, vmax = (min(allvals), max(allvals)) if allvals else (0.0, 1.0)
    if vmax <= vmin:
        vmin, vmax = vmin - 0.5, vmax + 0.5
    cnorm = Normalize(vmin=vmin, vmax=vmax)
    cmap = colormaps["viridis_r"].with_extremes(bad="#d9d9d9")
    nrows, ncols = _panel_grid(len(panels))
    cell_w = max(1.05, 0.55 + 0.1 * max(len(str(v)) for v in xs))
    fig, axes = _figure(
        nrows,
        ncols,
        width=ncols * (cell_w * len(xs) + 1.6) + 1.4,
        height=nrows * (0.85 * len(ys) + 1.3) + 0.5,
    )
    rest = [k for k in rs.group_keys if k not in (xk, yk)]
    display = short_names([xk, yk, *rest])
    image = None
    for ax, (facet_key, cells) in zip(axes.flat, panels, strict=False):
        ax.grid(False)
        data = np.full((len(ys), len(xs)), np.nan)
        for (xv, yv), c in cells.items():
            if c.mean is not None:
                data[ys.index(yv), xs.index(xv)] = c.mean
        image = ax.imshow(np.ma.masked_invalid(data), cmap=cmap, norm=cnorm, aspect="auto", origin="lower")
        for (xv, yv), c in cells.items():
            i, j = ys.index(yv), xs.index(xv)
            text, color = _cell_text(c, metric), "black"
            if c.mean is not None:
                r, g, b = to_rgb(cmap(cnorm(c.mean)))
                color = "white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.5 else "black"
            box = None
            if c.n_diverged:
                ax.add_patch(
                    Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="//", edgecolor="#b2182b", lw=2)
                )
                box = dict(boxstyle="round,pad=0.25", fc="white", ec="none", alpha=0.85)
                color = "black"
            ax.text(
                j, i, text, ha="center", va="center", fontsize=8, color=color, fontweight="bold", bbox=box
            )
        ax.set_xticks(range(len(xs)), [str(v) for v in xs])
        ax.set_yticks(range(len(ys)), [str(v) for v in ys])
        ax.set_xlabel(display[xk])
        ax.set_ylabel(display[yk])
        if rest:
            ax.set_title(variant_label(dict(zip(rest, facet_key, strict=True)), rest, display), fontsize=10)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    label = metric.replace("_", " ") + (" (nats/token)" if "loss" in metric else "")
    fig.colorbar(image, ax=axes, label=label, shrink=0.9)
    note = f" — first {max_panels} of {len(facets)} panels" if len(facets) > max_panels else ""
    fig.suptitle(
        f"{metric.replace('_', ' ').capitalize()} over {display[xk]} × {display[yk]}{note}\n"
        "mean ± std over a cell's runs (n in the cell); red hatching: a run diverged; grey: no value",
        fontsize=10,
    )
    return fig


def _cell_text(c: GridCell, metric: str) -> str:
    if c.n == 0:
        return "invalid" if c.n_invalid else ""
    if c.mean is None:
        return f"diverged\n{c.n_diverged}/{c.n}" if c.n_diverged else "no value"
    text = f"{c.mean:.3f}"
    if c.std is not None:
        text += f"\n± {c.std:.3f}"
    text += f"\n{c.n_diverged}/{c.n} div." if c.n_diverged else f"\nn={c.n}"
    return text


# ------------------------------------------------------------------------------------------ registry


@dataclass(frozen=True)
class FigureSpec:
    key: str
    filename: str
    title: str
    draw: Callable[..., Figure]
    options: tuple[str, ...] = ()  # which of write_report's options (logx, smooth) it takes


FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("loss", "loss.png", "Training and validation loss", plot_loss, ("logx", "smooth")),
    FigureSpec("grad_norm", "grad_norm.png", "Global gradient norm", plot_grad_norm, ("logx", "smooth")),
    FigureSpec(
        "grad_profile_init",
        "grad_profile_init.png",
        "Gradient profile at initialisation",
        plot_grad_profile_init,
    ),
    FigureSpec(
        "grad_norm_layers", "grad_norm_layers.png", "Per-layer gradient norm over training", plot_grad_heatmap
    ),
    FigureSpec("act_rms", "act_rms.png", "Residual-stream RMS vs layer", plot_act_rms),
    FigureSpec("attn_max_logit", "attn_max_logit.png", "Max attention logit per layer", plot_attn_max_logit),
    FigureSpec("update_ratio", "update_ratio.png", "Update ratio per layer", plot_update_ratio),
    FigureSpec(
        "model_update", "model_update.png", "Model update since initialisation", plot_model_update, ("logx",)
    ),
)


def save(fig: Figure, path: str | Path, dpi: int = DPI) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    return path
