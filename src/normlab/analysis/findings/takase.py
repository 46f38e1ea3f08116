"""Finding 9 — Takase et al. 2023 ("Spike No More"): small embeddings, large gradients, loss spikes.

What the paper says (read in its abstract and §1, Fig. 1): assuming "the loss spike is caused by the
sudden growth of the gradient norm", its analysis of the sub-layers' Jacobians finds that stable
pre-training needs "small sub-layers and large shortcut", and methods satisfying these conditions
"effectively prevent loss spikes"; Fig. 1 shows spikes early in training for the vanilla 1.7B model.
The mechanism has a simple form we can also check from Xiong et al. 2020 (Lemma 3, read): LayerNorm's
Jacobian scales as √d / ‖x‖, so a residual stream that starts small — unscaled N(0, σ²) embeddings with
σ ≪ 1 — meets large gradients through the first norms.

Measured here (our operationalisation of "large shortcut": embeddings whose entries have standard
deviation ≈ 1, `model.embed_scale=sqrt_d` on embeddings initialised with std d^-½, against the same
embeddings unscaled): the ratio of the first block's gradient to the last block's early in training,
the global gradient norm, and a spike score of each run's loss curve — the largest rise of the loss
above the median of the 10 steps before it, in units of that residual's robust spread (1.4826 × MAD)
over the run. The spike score is continuous, so the spike claim is decidable even where the 6σ detector
(`spike/loss`, counted in the table) fires in neither variant.
"""

from __future__ import annotations

import math

import numpy as np

from normlab.analysis.findings._common import (
    Drawn,
    Extras,
    Finding,
    baseline_note,
    diverged_count,
    fmt_series,
    group_labels,
    learned_count,
    loss_of,
    need,
    require_learning,
    run_metric,
    summary_value,
    where,
)
from normlab.analysis.load import RunSet
from normlab.analysis.plots import plot_grad_heatmap, plot_grad_norm
from normlab.analysis.verdicts import Outcome, check, difference
from normlab.metrics import names

SCALES = ("1.0", "sqrt_d")
EARLY_FRACTION = 0.2
SPIKE_WINDOW = 10  # steps of the running median the spike score detrends with
RATIO_MARGIN = math.log(1.25)
GRAD_MARGIN = math.log(1.25)
SPIKE_MARGIN = 1.0  # robust-noise units


def early_ratio(rs: RunSet, run: str, depth: int, max_steps: int) -> float:
    """log(mean ‖g‖ of block 0 / mean ‖g‖ of the last block) over the first 20 % of the steps."""
    first = run_metric(rs, run, names.grad_norm_layer(0))
    last = run_metric(rs, run, names.grad_norm_layer(depth - 1))
    window = max(1, int(EARLY_FRACTION * max_steps))
    first, last = first[first.index <= window], last[last.index <= window]
    if first.empty or last.empty or last.mean() <= 0 or first.mean() <= 0:
        return math.nan
    return float(np.log(first.mean() / last.mean()))


def mean_log_grad_norm(rs: RunSet, run: str) -> float:
    g = run_metric(rs, run, names.GRAD_NORM)
    g = g[g > 0]
    return float(np.mean(np.log(g.to_numpy()))) if not g.empty else math.nan


def spike_score(loss: np.ndarray, window: int = SPIKE_WINDOW) -> float:
    """How far the largest rise of the loss above its running median stands out: with residuals
    r_t = loss_t − median(loss_{t−w}, …, loss_{t−1}), (max r − median r) / (1.4826 · MAD of r)."""
    loss = np.asarray(loss, dtype=float)
    loss = loss[np.isfinite(loss)]
    if loss.size <= window + 2:
        return math.nan
    windows = np.lib.stride_tricks.sliding_window_view(loss[:-1], window)
    resid = loss[window:] - np.median(windows, axis=1)
    center = np.median(
        resid
    )  # a falling loss sits below its running median: measure from the typical residual
    spread = 1.4826 * np.median(np.abs(resid - center))
    return float((resid.max() - center) / spread) if spread > 0 else math.nan


def run_spike_score(rs: RunSet, run: str) -> float:
    return spike_score(run_metric(rs, run, names.LOSS).sort_index().to_numpy())


def detector_count(rs: RunSet, run: str) -> float:
    flags = run_metric(rs, run, names.SPIKE_LOSS)
    if not flags.empty:
        return float((flags > 0).sum())
    n = summary_value(rs, run, "n_loss_spikes")
    try:  # a numpy integer from the loaded table is not an `int`
        return float(n)
    except (TypeError, ValueError):
        return math.nan


def evaluate(rs: RunSet, extras: Extras) -> Outcome:
    need(rs, "embed_scale", list(SCALES))
    ratio, grad, score, table = {}, {}, {}, []
    for scale in SCALES:
        runs = where(rs, embed_scale=scale)
        ratio[scale] = [
            early_ratio(rs, run, int(r["depth"]), int(r["train.max_steps"])) for run, r in runs.iterrows()
        ]
        grad[scale] = [mean_log_grad_norm(rs, run) for run in runs.index]
        score[scale] = [run_spike_score(rs, run) for run in runs.index]
        watch = {summary_value(rs, run, "spike_watch_start") for run in runs.index} - {None}
        table.append(
            {
                "embed_scale": scale,
                "runs": len(runs),
                "learned": learned_count(rs, runs),
                "diverged": diverged_count(runs),
                "final val loss": fmt_series(loss_of(rs, embed_scale=scale)),
                "log(‖g_block0‖ / ‖g_last‖), first 20 %": fmt_series(ratio[scale], 2),
                "mean log ‖g‖": fmt_series(grad[scale], 2),
                "spike score": fmt_series(score[scale], 1),
                "detector loss spikes per run": fmt_series([detector_count(rs, r) for r in runs.index], 1),
                "detector watches from step": ", ".join(str(w) for w in sorted(watch)) or "–",
            }
        )
    checks = [
        check(
            "Unscaled small embeddings give larger early-layer gradients",
            "log(mean ‖g‖ of block 0 / mean ‖g‖ of the last block) over the first 20 % of steps: "
            "embed_scale=1 − embed_scale=√d (Welch)",
            difference(ratio["1.0"], ratio["sqrt_d"]),
            margin=RATIO_MARGIN,
        ),
        check(
            "Unscaled small embeddings give a larger gradient norm",
            "mean over steps of log ‖g‖ (global, before clipping): embed_scale=1 − embed_scale=√d (Welch)",
            difference(grad["1.0"], grad["sqrt_d"]),
            margin=GRAD_MARGIN,
        ),
        check(
            "Unscaled small embeddings give larger loss spikes",
            f"spike score (largest rise of the loss above its running median of {SPIKE_WINDOW} steps, in "
            "robust-noise units): embed_scale=1 − embed_scale=√d (Welch)",
            difference(score["1.0"], score["sqrt_d"]),
            margin=SPIKE_MARGIN,
        ),
    ]
    gate = require_learning(rs, {f"embed_scale={s}": where(rs, embed_scale=s) for s in SCALES})
    notes = gate.notes
    if (base := baseline_note(rs)) is not None:
        notes.append(base)
    return Outcome.of(checks, table=table, notes=notes, setup_failures=gate.failures)


def draw(rs: RunSet, extras: Extras) -> Drawn:
    g = group_labels(rs, ["embed_scale"])
    return [
        ("grad_layers", "Per-block gradient norm over training (mean over seeds).", plot_grad_heatmap(g)),
        ("grad_norm", "Global gradient norm, spikes marked.", plot_grad_norm(g)),
    ]


FINDING = Finding(
    9,
    "takase_embed_scale",
    "Embedding scale, gradient norms and loss spikes",
    "Small, unscaled embeddings give a Pre-LN model larger early-layer and overall gradients and larger "
    "loss spikes than embeddings scaled to a standard deviation near 1.",
    "Takase et al. 2023, *Spike No More: Stabilizing the Pre-training of Large Language Models*, abstract "
    'and §1 ("small sub-layers and large shortcut" prevent spikes); mechanism: Xiong et al. 2020, Lemma 3 '
    "(LayerNorm's Jacobian ∝ √d / ‖x‖).",
    False,
    evaluate,
    draw,
)
