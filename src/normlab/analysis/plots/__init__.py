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
- panels whose ranges differ by more than RANGE_RATIO get their own y scale (or a log scale);
- nothing is clipped silently: where a y axis or a colour scale is cut for readability, the cut is marked
  and the figure names what lies beyond it and how far (`cuts`); titles are rewrapped to fit the figure.

Modules, one per family of figures, each holding everything only its figures draw: `step_curves`
(loss, gradient norm, model update: mean lines and bands, spike and divergence markers), `layer_panels`
(per-layer metrics over training: line panels, heatmaps), `layer_profiles` (per-layer profiles:
gradient at initialisation, residual-stream RMS, layer importance), `grid` (final values over two keys);
what they share is `base` (styles, legends, titles, identical-curve notes, step ticks, log axes) and
`cuts` (a cut y axis and a cut colour scale, each marked and its overshoot named).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure

from normlab.analysis.plots.base import DPI, NoData, ReportFigure, coinciding, log_y, step_ticks
from normlab.analysis.plots.grid import GridCell, grid_cells, plot_grid
from normlab.analysis.plots.layer_panels import plot_attn_max_logit, plot_grad_heatmap, plot_update_ratio
from normlab.analysis.plots.layer_profiles import (
    layer_contributions,
    plot_act_rms,
    plot_grad_profile_init,
    plot_layer_ablation,
)
from normlab.analysis.plots.step_curves import plot_grad_norm, plot_loss, plot_model_update

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
    FigureSpec(
        "layer_ablation",
        "layer_ablation.png",
        "Layer importance: loss with each block skipped",
        plot_layer_ablation,
    ),
)

__all__ = [
    "DPI",
    "FIGURES",
    "FigureSpec",
    "GridCell",
    "NoData",
    "ReportFigure",
    "coinciding",
    "grid_cells",
    "layer_contributions",
    "log_y",
    "plot_grid",
    "save",
    "step_ticks",
    *(spec.draw.__name__ for spec in FIGURES),  # every report figure's function, listed once: in FIGURES
]


def save(fig: Figure, path: str | Path, dpi: int = DPI) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    return path
