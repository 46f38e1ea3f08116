"""Grids of final values: one cell per combination of two swept keys, a panel per value of the others."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.colors import Normalize, to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from normlab.analysis.load import RunSet, short_names, sortable, variant_label
from normlab.analysis.plots.base import (
    NoData,
    fit_suptitle,
    new_figure,
    panel_grid,
)
from normlab.analysis.stats import finite


@dataclass
class GridCell:
    mean: float | None
    std: float | None
    n: int  # runs that trained
    n_diverged: int
    n_invalid: int


def ordered_values(values: Sequence[Any]) -> list[Any]:
    uniq = list(dict.fromkeys(values))
    if all(sortable(v)[0] == 0 for v in uniq):
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
    xs = ordered_values([v for cells in facets.values() for (v, _) in cells])
    ys = ordered_values([v for cells in facets.values() for (_, v) in cells])
    panels = list(facets.items())[:max_panels]
    allvals = [c.mean for _, cells in panels for c in cells.values() if c.mean is not None]
    vmin, vmax = (min(allvals), max(allvals)) if allvals else (0.0, 1.0)
    if vmax <= vmin:
        vmin, vmax = vmin - 0.5, vmax + 0.5
    cnorm = Normalize(vmin=vmin, vmax=vmax)
    cmap = colormaps["viridis_r"].with_extremes(bad="#d9d9d9")
    nrows, ncols = panel_grid(len(panels))
    cell_w = max(1.05, 0.55 + 0.1 * max(len(str(v)) for v in xs))
    fig, axes = new_figure(
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
            text, color = cell_text(c, metric), "black"
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
    fit_suptitle(
        fig,
        f"{metric.replace('_', ' ').capitalize()} over {display[xk]} × {display[yk]}{note}\n"
        "mean ± std over a cell's runs (n in the cell); red hatching: a run diverged; grey: no value",
        fontsize=10,
    )
    return fig


def cell_text(c: GridCell, metric: str) -> str:
    if c.n == 0:
        return "invalid" if c.n_invalid else ""
    if c.mean is None:
        return f"diverged\n{c.n_diverged}/{c.n}" if c.n_diverged else "no value"
    text = f"{c.mean:.3f}"
    if c.std is not None:
        text += f"\n± {c.std:.3f}"
    text += f"\n{c.n_diverged}/{c.n} div." if c.n_diverged else f"\nn={c.n}"
    return text
