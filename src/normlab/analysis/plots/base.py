"""What every figure shares (see the package docstring for what each figure shows): constants, the
Figure class, fitted titles, each variant's style and legend entry, notes on identical curves, integer
step ticks, log axes, panel layouts and which variants have a metric. Each figure family is one module
beside this one: `step_curves` (loss, gradient norm, model update), `layer_panels` (per-layer metrics
over training), `layer_profiles` (per-layer profiles), `grid` (final values over two keys); the cut
scales two families draw are in `cuts`."""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import LogFormatter, MaxNLocator

from normlab.analysis.load import RunSet
from normlab.analysis.stats import finite
from normlab.metrics import names

DPI = 150
STEP_LABEL = "optimizer step"
LAYER_LABEL = "block index (0 = next to the embedding)"
BAND_ALPHA = 0.18
MARKS_PER_LINE = 8  # markers along a long curve (every point of a short one)
RANGE_RATIO = 10.0  # panels or variants whose ranges differ more than this get their own or a log scale
SAME_CURVE_RTOL = 1e-6  # curves equal to this relative tolerance at every point are "identical"


class NoData(Exception):
    """The runs hold no data for this figure; the message says what is missing."""


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


def fit_suptitle(fig: Figure, text: str, **kw: Any) -> Any:
    """The figure's title, fitted to the figure's width (measured, not guessed: a long title would
    otherwise be cut at both edges of the saved PNG): a line too wide is broken between its clauses
    ("; "), as few times as fits, and a clause still too wide is wrapped at spaces."""
    title = fig.suptitle(text, **kw)
    renderer = _renderer(fig)
    limit = 0.97 * fig.bbox.width

    def fits(candidate: str) -> bool:
        title.set_text(candidate)
        return title.get_window_extent(renderer).width <= limit

    if fits(text):
        return title
    lines: list[str] = []
    for line in text.split("\n"):
        clauses = line.split("; ")
        current = clauses[0]
        for clause in clauses[1:]:
            if fits(f"{current}; {clause}"):
                current = f"{current}; {clause}"
            else:
                lines.append(current + ";")
                current = clause
        lines.append(current)
    for i, line in enumerate(lines):
        chars = len(line)
        while not fits(lines[i]) and chars > 16:
            chars = max(16, int(chars * 0.9))
            lines[i] = textwrap.fill(line, chars)
    title.set_text("\n".join(lines))
    return title


def _renderer(fig: Figure) -> Any:
    """A renderer to measure text with: the figure's own canvas's, or an Agg canvas's (a Figure made
    without pyplot has a canvas that cannot render)."""
    if not hasattr(fig.canvas, "get_renderer"):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    return fig.canvas.get_renderer()


def metric_family(layer_name: Callable[[int], str]) -> str:
    """'act_rms/layer_i' from names.act_rms_layer: how messages name a per-layer metric family."""
    return layer_name(987654321).replace("987654321", "i")


# ---------------------------------------------------------------------------- variant styles and legends


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


def add_legend(fig: Figure, handles: list[Any], title: str | None = None) -> None:
    if handles:
        fig.legend(handles=handles, loc="outside right upper", frameon=False, fontsize=9, title=title)


# -------------------------------------------------------------------------------------- identical curves


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
        return " (norm=none: no norm in any slot, so these placements are the same network)"
    return ""


def coincide_notes(rs: RunSet, groups: Sequence[Sequence[str]]) -> list[str]:
    return [f"identical curves: {' = '.join(g)}{same_network_reason(rs, g)}" for g in groups]


def coincide_handles(rs: RunSet, groups: Sequence[Sequence[str]]) -> list[Line2D]:
    return [note_handle(note) for note in coincide_notes(rs, groups)]


# ----------------------------------------------------------------------------------- axes and selections


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


def panel_grid(n: int, max_cols: int = 3) -> tuple[int, int]:
    ncols = min(n, max_cols)
    return math.ceil(n / ncols), ncols


def agg_note(rs: RunSet, band: bool = True, panels: bool = False) -> str:
    """How lines relate to runs: 'mean over seeds, band ± 1 std where n ≥ 2', or 'one line per run'."""
    sizes = rs.valid.groupby("variant").size()
    if sizes.empty or sizes.max() <= 1:
        return "one run per variant" if panels else "one run per variant, n=1: no bands"
    return "mean over seeds, band ± 1 std where n ≥ 2" if band and not panels else "mean over seeds"


def runs_of(rs: RunSet, variant: str) -> list[str]:
    valid = rs.valid
    return valid.index[valid["variant"] == variant].tolist()


def variants_with(rs: RunSet, metric_cols: Sequence[str]) -> list[str]:
    m = rs.metrics
    cols = [c for c in metric_cols if c in m.columns]
    if not cols:
        return []
    has = m[cols].apply(finite).notna().any(axis=1)
    runs = set(m.loc[has, "run"])
    return [v for v in rs.variants if any(r in runs for r in runs_of(rs, v))]


def range_ratio(maxima: Sequence[float]) -> float:
    """Largest over smallest of the panels' (or variants') largest absolute values; 1 when undefined."""
    m = np.abs(np.asarray([v for v in maxima if v is not None and np.isfinite(v)], dtype=float))
    m = m[m > 0]
    return float(m.max() / m.min()) if m.size >= 2 else 1.0


def fmt_value(x: float) -> str:
    """3 significant digits at least, 2 decimals below 100: '10.99', '250', '0.0031'."""
    return f"{x:.2f}" if 1 <= abs(x) < 100 else f"{x:.3g}"
