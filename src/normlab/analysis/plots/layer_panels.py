"""Per-layer metrics over training, one panel per variant: one line per block (max attention logit,
update ratio) or a layer × step heatmap (gradient norm; its log colour scale leaves out outliers and
says so: `cuts.log_colour_scale`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import LogNorm, Normalize, to_rgb
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from normlab.analysis.load import RunSet
from normlab.analysis.plots.base import (
    LAYER_LABEL,
    RANGE_RATIO,
    STEP_LABEL,
    NoData,
    agg_note,
    coinciding,
    fit_suptitle,
    last_step,
    log_y,
    metric_family,
    n_label,
    new_figure,
    panel_grid,
    range_ratio,
    runs_of,
    step_ticks,
    variants_with,
)
from normlab.analysis.plots.cuts import colour_cut_note, log_colour_scale
from normlab.analysis.stats import finite, layer_columns
from normlab.metrics import names

# ----------------------------------------------------------------------------------------------- figures


def per_layer_over_training(
    rs: RunSet, layer_name: Callable[[int], str], *, what: str, ylabel: str, title: str, logy: bool
) -> Figure:
    """One panel per variant, one line per block. Panels share a y scale unless their largest values
    differ by more than RANGE_RATIO; then each panel gets its own, and the title says so."""
    cols = layer_columns(rs.metrics.columns, layer_name)
    variants = variants_with(rs, list(cols.values()))
    if not variants:
        raise NoData(f"no {what} metrics ({metric_family(layer_name)})")
    mats = {v: layer_means(rs, v, cols) for v in variants}
    maxima = [np.nanmax(np.abs(m.to_numpy(dtype=float))) if m.size else np.nan for m in mats.values()]
    shared = range_ratio(maxima) <= RANGE_RATIO
    n_layers = max(cols) + 1
    cmap = colormaps["viridis"]
    cnorm = Normalize(vmin=0, vmax=max(n_layers - 1, 1))
    nrows, ncols = panel_grid(len(variants))
    fig, axes = new_figure(nrows, ncols, width=4.4 * ncols + 1.4, height=3.3 * nrows + 0.7, sharey=shared)
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
        color_title(ax, n_label(rs, variant), rs.colors[variant])
        ax.set_xlabel(STEP_LABEL)
        ax.set_xticks(step_ticks(last, nbins=5))
        ax.set_xlim(0, max(last, 1))
        if logy:
            log_y(ax)
    for row in axes:
        row[0].set_ylabel(ylabel)
    for ax in list(axes.flat)[len(variants) :]:
        ax.set_visible(False)
    mark_duplicate_panels(ax_of, matrix_groups(mats), rs)
    cbar = fig.colorbar(ScalarMappable(norm=cnorm, cmap=cmap), ax=axes, label=LAYER_LABEL, shrink=0.9)
    cbar.ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    scale = "" if shared else f"; own y scale per panel: ranges differ by {range_ratio(maxima):.0f}×"
    fit_suptitle(fig, f"{title} ({agg_note(rs, panels=True)}; colour = block index{scale})")
    return fig


def plot_attn_max_logit(rs: RunSet) -> Figure:
    """Largest attention logit q·k/√d per block over training, one panel per variant."""
    return per_layer_over_training(
        rs,
        names.attn_max_logit_layer,
        what="attention-logit",
        ylabel="max attention logit q·k/√d_head",
        title="Max attention logit per layer over training",
        logy=False,
    )


def plot_update_ratio(rs: RunSet) -> Figure:
    """‖Δθ‖/‖θ‖ of each block per optimizer step over training, one panel per variant (log y)."""
    return per_layer_over_training(
        rs,
        names.update_ratio_layer,
        what="update-ratio",
        ylabel="update ratio ‖Δθ‖/‖θ‖ per step",
        title="Update-to-parameter ratio per layer over training",
        logy=True,
    )


def plot_grad_heatmap(rs: RunSet) -> Figure:
    """Per-layer gradient norm over training: a layer × step heatmap per variant, one shared log colour scale."""
    cols = layer_columns(rs.metrics.columns, names.grad_norm_layer)
    variants = variants_with(rs, list(cols.values()))
    if not variants:
        raise NoData(f"no per-layer gradient norms ({metric_family(names.grad_norm_layer)})")
    mats = {v: layer_means(rs, v, cols) for v in variants}
    mats = {v: m for v, m in mats.items() if not m.empty}
    scale = log_colour_scale(mats)
    if scale is None:
        raise NoData("per-layer gradient norms are all zero or non-finite")
    norm = LogNorm(vmin=scale.vmin, vmax=scale.vmax)
    nrows, ncols = panel_grid(len(mats))
    fig, axes = new_figure(nrows, ncols, width=4.4 * ncols + 1.2, height=3.3 * nrows + 0.7)
    last = last_step(rs)
    mesh = None
    ax_of = {}
    for ax, (variant, m) in zip(axes.flat, mats.items(), strict=False):
        ax.grid(False)
        ax_of[variant] = ax
        steps = m.index.to_numpy(dtype=float)
        layers = m.columns.to_numpy(dtype=float)
        data = np.ma.masked_invalid(np.where(m.to_numpy(dtype=float) > 0, m.to_numpy(dtype=float), np.nan).T)
        mesh = ax.pcolormesh(
            cell_edges(steps), cell_edges(layers), data, norm=norm, cmap="viridis", shading="flat"
        )
        color_title(ax, n_label(rs, variant), rs.colors[variant])
        ax.set_xlabel(STEP_LABEL)
        ax.set_xticks(step_ticks(last, nbins=5))
        ax.set_ylabel("block index")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in list(axes.flat)[len(mats) :]:
        ax.set_visible(False)
    mark_duplicate_panels(ax_of, matrix_groups(mats), rs)
    fig.colorbar(mesh, ax=axes, label="gradient L2 norm of the block (log)", extend=scale.extend, shrink=0.9)
    title = f"Per-layer gradient norm over training ({agg_note(rs, panels=True)}; block 0 = next to the embedding)"
    cut = colour_cut_note(scale)
    fit_suptitle(fig, title + (f"\n{cut}" if cut else ""))
    return fig


def cell_edges(centers: np.ndarray) -> np.ndarray:
    if len(centers) == 1:
        return np.array([centers[0] - 0.5, centers[0] + 0.5])
    mids = (centers[1:] + centers[:-1]) / 2
    return np.concatenate(
        [[centers[0] - (mids[0] - centers[0])], mids, [centers[-1] + (centers[-1] - mids[-1])]]
    )


# ---------------------------------------------------------------------------- per-layer means and panels


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


def matrix_groups(mats: dict[str, pd.DataFrame]) -> list[list[str]]:
    """Variants whose whole layer × step matrices are identical (same steps, layers and values)."""
    curves = {}
    for v, m in mats.items():
        x = np.concatenate([m.index.to_numpy(dtype=float), m.columns.to_numpy(dtype=float)])
        curves[v] = (x, m.to_numpy(dtype=float).ravel())
    return coinciding(curves)


def color_title(ax, text: str, color) -> None:
    ax.set_title(text, color=darker(color), fontsize=10, fontweight="bold")


def darker(color, factor: float = 0.8):
    r, g, b = to_rgb(color)
    return (r * factor, g * factor, b * factor)


def mark_duplicate_panels(ax_of: dict[str, Any], groups: list[list[str]], rs: RunSet) -> None:
    """Say on a panel when it repeats an earlier one exactly."""
    for group in groups:
        for v in group[1:]:
            ax_of[v].set_title(
                f"{v}\n= {group[0]} (identical)", color=darker(rs.colors[v]), fontsize=10, fontweight="bold"
            )
