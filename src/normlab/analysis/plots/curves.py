"""Curves over training steps: loss, gradient norm, per-layer metrics over training, DeepNet's model update."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from normlab.analysis.load import RunSet
from normlab.analysis.plots.axes import (
    color_title,
    draw_band,
    draw_means,
    last_step,
    log_y,
    mark_duplicate_panels,
    panel_grid,
    scatter_points,
    shade_unwatched,
    step_axis,
    step_ticks,
)
from normlab.analysis.plots.cuts import fit_y, mark_y_cut
from normlab.analysis.plots.series import (
    agg_note,
    auto_window,
    bands_for,
    curve_xy,
    divergence_points,
    first_value,
    layer_means,
    matrix_groups,
    range_ratio,
    shown_values,
    smooth_frame,
    spike_points,
    variants_with,
)
from normlab.analysis.plots.style import (
    CROSS_STYLE,
    FEWER_SEEDS,
    LAYER_LABEL,
    LOSS_UNIT,
    RANGE_RATIO,
    SPIKE_STYLE,
    STEP_LABEL,
    NoData,
    add_legend,
    coincide_handles,
    coinciding,
    fit_suptitle,
    marker_handles,
    metric_family,
    n_label,
    new_figure,
    variant_handles,
    variant_styles,
)
from normlab.analysis.stats import layer_columns, seed_stats
from normlab.metrics import names

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
