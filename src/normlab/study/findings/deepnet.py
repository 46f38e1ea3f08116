"""Finding 3 — Wang et al. 2022 (DeepNet): at depth, Post-LN's early model update explodes and its
training stalls, while DeepNorm's update stays small and it trains.

What the paper says (read in its §3 and §4.2): trained at depth, "Post-LN has an exploding update at the
very beginning of training, and then nearly no update shortly", the model "stuck in a spurious local
optima" (Fig. 4(a), 18L-18L, ‖ΔF‖ = ‖F(x, θ_i) − F(x, θ_0)‖); Post-LN-init and warm-up both help; and
DeepNet "has much smaller and more stable updates than Post-LN" (Fig. 5, 64-128-2 tiny Transformers from
6L-6L to 100L-100L). DeepNorm is x ← LN(α·x + G(x)) with β-gain Xavier init of the value, output and FFN
projections (Fig. 2; decoder-only: α = (2N)^¼, β = (8N)^-¼).

Measured here: `model_update` (DeepNet's ‖ΔF‖ on a fixed probe batch) at every one of the first
EARLY_STEPS steps — where the explosion happens: by step 10 the two variants have caught up, so a sparse
log (every 10 steps) sees nothing; runs need `metrics.dense_until` ≥ EARLY_STEPS — and the final
validation loss, for Post-LN and DeepNorm at one depth. A Pre-LN run of the same shape, when the sweep
has one, is the control that must learn (else the setting, not the norm, is what failed), and the
claim's precondition: DeepNorm is a fix for a Post-LN that fails at this depth, so Post-LN must end
worse than Pre-LN here, or there is nothing for DeepNorm to fix. The checks compare absolute update
sizes — not a ratio that divides the magnitudes out — and whether training proceeds.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normlab.analysis.load import RunSet
from normlab.analysis.plots import plot_loss, plot_model_update
from normlab.metrics import names
from normlab.study.findings._compare import compare
from normlab.study.findings._finding import Calibration, Drawn, Extras, Finding, Perturbation
from normlab.study.findings._format import diverged_count, fmt_series, per_seed
from normlab.study.findings._learning import baseline_note, learned_count, require_learning
from normlab.study.findings._runs import group_labels, loss_of, need, need_metric, run_metric, values, where
from normlab.study.verdicts import Outcome, Precondition, check, undecided

# "The very beginning of training" (Fig. 4(a)): steps 1 … EARLY_STEPS, each measured (metrics.dense_until).
EARLY_STEPS = 20
MIN_EARLY = 15  # a run needs this many of those steps measured, or the window is not "every step"
# The paper reports no size for "exploding" (Fig. 4(a) is a log-scale curve, orders of magnitude at
# depth 18); we count an early update at least 1.5× DeepNorm's, on the geometric mean over the window.
UPDATE_MARGIN = math.log(1.5)
LOSS_MARGIN = 0.05  # nats: the smallest loss difference we count (≈ 5 % in perplexity)


def early_update(rs: RunSet, run: str) -> tuple[float, int]:
    """Mean of log ‖ΔF‖ over steps 1 … EARLY_STEPS; the number of those steps the run measured."""
    mu = run_metric(rs, run, names.MODEL_UPDATE)
    early = mu[(mu.index >= 1) & (mu.index <= EARLY_STEPS) & (mu > 0)]
    if early.empty:
        return math.nan, 0
    return float(np.mean(np.log(early.to_numpy()))), len(early)


def _variant(rs: RunSet, norm: str, placement: str):
    return where(rs, norm=norm, placement=placement)


def evaluate(rs: RunSet, extras: Extras) -> Outcome:
    need(rs, "norm", ["ln", "deepnorm"])
    need_metric(rs, names.MODEL_UPDATE, "metrics.model_update=true")
    variants = {"Post-LN": ("ln", "post"), "DeepNorm": ("deepnorm", "post")}
    has_control = "pre" in [str(v) for v in values(rs, "placement")]
    if has_control:
        variants = {"Pre-LN (control)": ("ln", "pre"), **variants}
    loss, early, table, counted = {}, {}, [], []
    for label, (norm, placement) in variants.items():
        runs = _variant(rs, norm, placement)
        loss[label] = loss_of(rs, norm=norm, placement=placement)
        rows = [early_update(rs, run) for run in runs.index]
        early[label] = pd.Series([r[0] for r in rows], index=runs.index, dtype=float)
        counted += [r[1] for r in rows]
        end = [run_metric(rs, run, names.MODEL_UPDATE) for run in runs.index]
        table.append(
            {
                "variant": label,
                "norm, placement": f"{norm}, {placement}",
                "runs": len(runs),
                "learned": learned_count(rs, runs),
                "diverged": diverged_count(runs),
                "final val loss": fmt_series(loss[label]),
                "per run": per_seed(loss[label]),
                "early ‖ΔF‖ (geometric mean)": fmt_series(
                    [math.exp(v) for v in early[label] if math.isfinite(v)], 2
                ),
                "‖ΔF‖ at step 2": fmt_series([float(s[2]) for s in end if 2 in s.index], 2),
                f"‖ΔF‖ at step {EARLY_STEPS}": fmt_series(
                    [float(s[EARLY_STEPS]) for s in end if EARLY_STEPS in s.index], 2
                ),
                "‖ΔF‖ at the end": fmt_series([float(s.iloc[-1]) for s in end if not s.empty], 2),
            }
        )
    # where the early difference lives: the geometric-mean ratio Post-LN / DeepNorm over windows of the
    # early steps (issue 28: with warm-up it came from the first ramp steps, 31.6 vs 1.8 at step 2)
    windows = ((1, 5), (6, 10), (11, EARLY_STEPS))
    ratio_parts = []
    for a, b in windows:
        per = {}
        for label in ("Post-LN", "DeepNorm"):
            norm, placement = variants[label]
            vals = []
            for run in _variant(rs, norm, placement).index:
                mu = run_metric(rs, run, names.MODEL_UPDATE)
                w = mu[(mu.index >= a) & (mu.index <= b) & (mu > 0)]
                if not w.empty:
                    vals.append(float(np.mean(np.log(w.to_numpy()))))
            per[label] = float(np.mean(vals)) if vals else math.nan
        ratio_parts.append(f"steps {a}–{b}: {math.exp(per['Post-LN'] - per['DeepNorm']):.2f}×")
    update_name = "Post-LN's early model update is larger than DeepNorm's (at least 1.5×)"
    update_statistic = (
        f"mean of log ‖F(x,θ_t) − F(x,θ_0)‖ over steps 1–{EARLY_STEPS}, each measured: "
        "Post-LN − DeepNorm (paired by seed); log 1.5 = 0.405"
    )
    update_gap = compare(rs, early["Post-LN"], early["DeepNorm"])
    fewest = min(counted, default=0)
    if fewest >= MIN_EARLY:
        update = check(update_name, update_statistic, update_gap, margin=UPDATE_MARGIN)
    else:
        update = undecided(
            update_name,
            update_statistic,
            update_gap,
            f"a run measured only {fewest} of steps 1–{EARLY_STEPS}: the explosion lives in those steps, "
            f"so they must each be measured (metrics.dense_until ≥ {EARLY_STEPS})",
            margin=UPDATE_MARGIN,
        )
    checks = [
        update,
        check(
            "Post-LN's training stalls where DeepNorm's proceeds",
            "final val loss of Post-LN − DeepNorm (paired by seed)",
            compare(rs, loss["Post-LN"], loss["DeepNorm"]),
            margin=LOSS_MARGIN,
            unit="nats",
        ),
    ]
    required = (
        {"Pre-LN control": _variant(rs, "ln", "pre")}
        if has_control
        else {"DeepNorm": _variant(rs, "deepnorm", "post")}
    )
    gate = require_learning(rs, required)
    preconditions = []
    if has_control:
        stall = check(
            "Without DeepNorm, Post-LN fails at this depth: it ends worse than Pre-LN",
            "final val loss of Post-LN − Pre-LN (paired by seed)",
            compare(rs, loss["Post-LN"], loss["Pre-LN (control)"]),
            margin=LOSS_MARGIN,
            unit="nats",
        )
        preconditions.append(
            Precondition.shown_by(
                stall,
                "DeepNorm's claim is a fix for deep Post-LN; a deeper stack, a higher learning rate or no "
                "warm-up is what makes Post-LN fail (Wang et al. §3).",
            )
        )
    notes = [
        "The learning check is on "
        + (
            "the Pre-LN control: if the same model with Pre-LN does not learn, the setting failed, not the norm."
            if has_control
            else "DeepNorm (the sweep has no Pre-LN control)."
        )
    ] + gate.notes
    if (base := baseline_note(rs)) is not None:
        notes.append(base)
    depth = values(rs, "depth")
    notes.append(f"Depth {', '.join(str(d) for d in depth)}; α, β as logged in each run's formula line.")
    notes.append(
        "Post-LN's early update over DeepNorm's by window (geometric means over seeds): "
        + "; ".join(ratio_parts)
        + ". Warm-up ramps the learning rate over these steps, so the first window is where a ratio born of "
        "the ramp would show; the robustness line runs the same without warm-up."
    )
    return Outcome.of(
        checks, table=table, notes=notes, setup_failures=gate.failures, preconditions=preconditions
    )


def draw(rs: RunSet, extras: Extras) -> Drawn:
    g = group_labels(rs, ["norm", "placement"])
    return [
        (
            "model_update",
            "DeepNet's model update ‖F(x,θ_t) − F(x,θ_0)‖ on a fixed probe batch, mean ± std over seeds "
            "('ln, post' is Post-LN, 'deepnorm, post' is DeepNorm).",
            plot_model_update(g, logx=True),
        ),
        ("loss", "Training and validation loss, mean ± std over seeds.", plot_loss(g)),
    ]


FINDING = Finding(
    3,
    "deepnet_model_update",
    "DeepNorm vs Post-LN at depth",
    "At depth, Post-LN's model update ‖F(x,θ_t) − F(x,θ_0)‖ is larger than DeepNorm's early in "
    "training and Post-LN's training stalls, while DeepNorm trains.",
    "Wang et al. 2022, *DeepNet: Scaling Transformers to 1,000 Layers*, §3 and Fig. 4(a) (Post-LN's "
    "exploding early update), §4.2 and Fig. 5 (DeepNet's smaller, stable updates).",
    False,
    evaluate,
    draw,
    perturbation=Perturbation(
        "lr ÷ 2 (2.5e-3) in the equal-lr arm",
        ("optim.lr=2.5e-3", "warmup_steps=0"),
        "the early update is a product of the learning rate and how sensitive F is to each parameter; at "
        "equal learning rates the ratio should be the architectures' own, so it must survive a smaller one "
        "(within the range where both train). The warm-up arm, which check 2 judges, is the preset's own.",
        reuse=(("warmup_steps", "30"),),
    ),
    calibration=Calibration(
        seeds=(0,),
        overrides=("model.tie_embeddings=true,false", "optim.lr=1e-3,5e-3", "warmup_steps=30", "seed=0"),
        arms="seed 0, depth 24 (our runs): with the head tied at lr 5e-3, DeepNorm (the paper's init) stayed "
        "at the unigram plateau (5.75 nats) while Pre-LN learned (2.36) — a tied-head failure (finding 10) "
        "that DeepNet's claim is not about; tied at lr 1e-3 DeepNorm learned (3.71), Post-LN 5.76; untied at "
        "lr 5e-3 DeepNorm trained (1.85) and Post-LN stayed at 5.75.",
        chosen="the untied head at lr 5e-3: the setting where the norm, not the tied head, decides.",
    ),
    short="At depth Post-LN's early model update explodes and training stalls; DeepNorm's does not",
    paper_scale="Fig. 4(a): 18L-18L translation models; Fig. 5: 64-128-2 Transformers from 6L-6L to 100L-100L.",
)
