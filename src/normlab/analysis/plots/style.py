"""What every figure shares: constants, styles per variant, legends with n and notes, identical-curve notes
(see the package docstring). What goes on an Axes is in `axes.py`; which numbers a line shows, in
`series.py`."""

from __future__ import annotations

import io
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from normlab.analysis.load import RunSet

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
        return " (norm=none: no norm in any slot, so these placements are the same network)"
    return ""


def coincide_notes(rs: RunSet, groups: Sequence[Sequence[str]]) -> list[str]:
    return [f"identical curves: {' = '.join(g)}{same_network_reason(rs, g)}" for g in groups]


def coincide_handles(rs: RunSet, groups: Sequence[Sequence[str]]) -> list[Line2D]:
    return [note_handle(note) for note in coincide_notes(rs, groups)]
