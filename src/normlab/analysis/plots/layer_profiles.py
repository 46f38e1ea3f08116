"""Per-layer profiles against the block index: gradient norm at initialisation, residual-stream RMS at
the start and the end, layer importance (the loss with each block skipped)."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from normlab.analysis.load import RunSet
from normlab.analysis.plots.base import (
    BAND_ALPHA,
    LAYER_LABEL,
    NoData,
    Style,
    add_legend,
    agg_note,
    coincide_handles,
    coinciding,
    fit_suptitle,
    last_step,
    log_y,
    metric_family,
    new_figure,
    runs_of,
    variant_handles,
    variant_styles,
    variants_with,
)
from normlab.analysis.stats import finite, layer_columns
from normlab.metrics import names


def profile_line(ax: Any, layers: list[int], mean: np.ndarray, std: np.ndarray, n: int, style: Style) -> None:
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
        raise NoData(f"no per-layer gradient norms ({metric_family(names.grad_norm_layer)}) at step 0")
    fig, axes = new_figure(1, 1, width=10.5, height=4.8)
    ax = axes[0, 0]
    styles = variant_styles(rs)
    shown = []
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for variant in rs.variants:
        sub = step0[step0["run"].isin(runs_of(rs, variant))]
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
        profile_line(ax, layers, np.array(means), np.array(stds), len(sub), styles[variant])
    if not shown:
        raise NoData("no finite per-layer gradient norms at step 0")
    log_y(ax)
    ax.set_xlabel(LAYER_LABEL)
    ax.set_ylabel("gradient L2 norm of the block's parameters")
    ax.set_title(
        f"Gradient profile at initialisation (step 0, before any update)\n{agg_note(rs)}", fontsize=11
    )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    add_legend(fig, variant_handles(rs, shown) + coincide_handles(rs, coinciding(curves)))
    return fig


def plot_act_rms(rs: RunSet) -> Figure:
    """Residual-stream RMS after each block vs block index, at step 0 and at each run's last measured step."""
    cols = layer_columns(rs.metrics.columns, names.act_rms_layer)
    variants = variants_with(rs, list(cols.values()))
    if not variants:
        raise NoData(f"no residual-stream RMS metrics ({metric_family(names.act_rms_layer)})")
    fig, axes = new_figure(1, 2, width=13.0, height=4.8, sharey=True)
    ax0, ax1 = axes[0]
    styles = variant_styles(rs)
    last_steps: set[int] = set()
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for variant in variants:
        m = rs.metrics
        sub = m[m["run"].isin(runs_of(rs, variant))]
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
            profile_line(ax, layers, mean, std, len(rows), styles[variant])
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
        log_y(ax)
        ax.set_xlabel(LAYER_LABEL)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax0.set_ylabel("RMS of the residual stream after the block")
    fit_suptitle(fig, f"Residual-stream RMS vs layer — {agg_note(rs)}")
    add_legend(fig, variant_handles(rs, variants) + coincide_handles(rs, coinciding(curves)))
    return fig


def layer_contributions(rs: RunSet) -> dict[str, np.ndarray]:
    """Each run's layer importance at its last evaluation with the probe (metrics.layer_ablation): the
    validation loss with block i skipped minus the whole model's, one value per block, by run."""
    cols = layer_columns(rs.metrics.columns, names.layer_ablation)
    if not cols or names.VAL_LOSS not in rs.metrics.columns:
        return {}
    m = rs.metrics.dropna(subset=[names.VAL_LOSS, *cols.values()], how="any")
    out = {}
    for run, rows in m.sort_values(names.STEP).groupby("run"):
        last = rows.iloc[-1]
        out[run] = np.array([last[c] for c in cols.values()], dtype=float) - float(last[names.VAL_LOSS])
    return out


def plot_layer_ablation(rs: RunSet) -> Figure:
    """Layer importance vs block index: how much the validation loss rises when block i is skipped (the
    identity in its place), at each run's last evaluation; mean ± std over seeds."""
    per_run = layer_contributions(rs)
    variants = [v for v in rs.variants if any(r in per_run for r in runs_of(rs, v))]
    if not variants:
        raise NoData(
            f"no layer-ablation losses ({metric_family(names.layer_ablation)}; metrics.layer_ablation=true)"
        )
    fig, axes = new_figure(1, 1, width=10.5, height=4.8)
    ax = axes[0, 0]
    styles = variant_styles(rs)
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for variant in variants:
        arr = np.array([per_run[r] for r in runs_of(rs, variant) if r in per_run])
        width = arr.shape[1]
        layers = list(range(width))
        mean = arr.mean(axis=0)
        std = arr.std(axis=0, ddof=1) if len(arr) > 1 else np.full(width, np.nan)
        style = styles[variant]
        ax.plot(layers, mean, **{**style.line(width, ms=7), "markevery": None, "mfc": "none", "mew": 1.5})
        if len(arr) > 1:
            ax.fill_between(layers, mean - std, mean + std, color=style.color, alpha=BAND_ALPHA, lw=0)
        curves[variant] = (np.array(layers, dtype=float), mean)
    ax.axhline(0, color="0.4", lw=0.8)
    ax.set_xlabel(LAYER_LABEL)
    ax.set_ylabel("val loss with the block skipped − val loss (nats)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"Layer importance at the last evaluation — {agg_note(rs)}", fontsize=11)
    add_legend(fig, variant_handles(rs, variants) + coincide_handles(rs, coinciding(curves)))
    return fig
