"""Finding 13 — Li et al. 2024 (Mix-LN): Post-LN in the first quarter of the blocks and Pre-LN in the rest
makes the deeper blocks contribute more than under Pre-LN, and trains as stably.

What the paper says (read in its abstract, arXiv 2412.13795, as the authors' repository gives it): Pre-LN
"leads to diminished gradient norms in its deeper layers, reducing their effectiveness", while Post-LN
has vanishing gradients in its earlier layers; Mix-LN "applies Post-LN to the earlier layers and Pre-LN to
the deeper layers", so that "all parts of the network — both shallow and deep layers — … contribute
effectively to training". The authors' run scripts take the number of Post-LN blocks as an argument
(3 for their 130M model, 6 for 250M); the paper's ρ is 0.25.

Measured here, Pre-LN (`placement=pre`) against Mix-LN (`placement=mixln`, ρ = 0.25), same seeds: the mean
contribution of the deeper half of the blocks — the rise of the validation loss when one of them is
skipped (`layer_ablation/layer_i`), at the last evaluation — and how stably each trains: the largest
gradient norm after warm-up relative to the run's median (a Post-LN block's instability would show there
first), with the loss spikes the detector flagged beside it.

"X makes deep layers contribute more" is tested only where the deficit Mix-LN addresses shows under Pre-LN
(`_depth.curse_of_depth`: a model as deep as the papers' smallest, whose deep blocks contribute little in
absolute terms and less than the shallow ones after the first); where it does not, the verdict is *not
tested here*. The preset follows the authors' recipe at their smallest depth (12 blocks, 3 of them
Post-LN) and says where it departs.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normlab.analysis.estimate import estimate, fmt_estimate
from normlab.analysis.load import RunSet
from normlab.analysis.plots import plot_grad_norm, plot_layer_ablation
from normlab.metrics import names
from normlab.study.findings._compare import compare
from normlab.study.findings._depth import (
    CONTRIBUTION_MARGIN,
    DEPTH_CALIBRATION,
    curse_of_depth,
    depth_profile,
)
from normlab.study.findings._finding import Drawn, Extras, Finding, Perturbation
from normlab.study.findings._format import CI_LABEL, diverged_count, fmt_series
from normlab.study.findings._learning import baseline_note, learned_count, require_learning
from normlab.study.findings._runs import group_labels, loss_of, need, run_metric, where
from normlab.study.verdicts import CONFIDENCE, Outcome, check

PLACEMENTS = {"pre": "Pre-LN", "mixln": "Mix-LN"}
# log units: a gradient-norm peak (relative to the run's median) 25 % higher than Pre-LN's counts as less
# stable; the check is one of non-inferiority, so Mix-LN passes when its peak is shown to be below that
STABILITY_MARGIN = math.log(1.25)


def warmup_of(rs: RunSet, run: str) -> int:
    value = rs.runs.at[run, "warmup_steps"] if "warmup_steps" in rs.runs.columns else 0
    return int(value) if value is not None and not (isinstance(value, float) and math.isnan(value)) else 0


def grad_peak(rs: RunSet, run: str) -> float:
    """log(largest / median global gradient norm) over the steps after warm-up."""
    g = run_metric(rs, run, names.GRAD_NORM)
    g = g[g.index >= warmup_of(rs, run)]
    g = g[g > 0]
    return float(np.log(g.max() / g.median())) if len(g) >= 2 else math.nan


def evaluate(rs: RunSet, extras: Extras) -> Outcome:
    need(rs, "placement", list(PLACEMENTS))
    prof = {pl: depth_profile(rs, where(rs, placement=pl).index) for pl in PLACEMENTS}
    pre, mix = prof["pre"], prof["mixln"]
    depth = int(pre["depth"].max())
    peaks = {
        pl: pd.Series({r: grad_peak(rs, r) for r in where(rs, placement=pl).index}, dtype=float)
        for pl in PLACEMENTS
    }
    cursed = curse_of_depth(pre, depth)
    deeper = check(
        "Mix-LN's deeper blocks contribute more than Pre-LN's",
        f"mean loss rise when one of blocks {depth // 2}–{depth - 1} is skipped: Mix-LN − Pre-LN (paired by seed)",
        compare(rs, mix["deep"], pre["deep"]),
        margin=CONTRIBUTION_MARGIN,
        unit="nats",
    )
    stable = check(
        "Mix-LN trains as stably as Pre-LN (its gradient-norm peaks are not larger)",
        "log(max / median gradient norm after warm-up): Pre-LN − Mix-LN + log 1.25 (paired by seed); positive when "
        "Mix-LN's peak is less than 25 % above Pre-LN's (non-inferiority)",
        compare(rs, peaks["pre"], peaks["mixln"]) + STABILITY_MARGIN,
    )
    table = []
    for pl, label in PLACEMENTS.items():
        runs, p = where(rs, placement=pl), prof[pl]
        table.append(
            {
                "placement": label,
                "runs": len(runs),
                "learned": learned_count(rs, runs),
                "diverged": diverged_count(runs),
                "final val loss": fmt_series(loss_of(rs, placement=pl)),
                "loss rise per skipped block, block 0": fmt_series(p["first"], 3),
                "… blocks 1 to the middle": fmt_series(p["shallow_after_first"], 3),
                f"… deeper half ({CI_LABEL})": fmt_estimate(estimate(p["deep"]), CONFIDENCE, 3),
                "log(max/median grad norm)": fmt_series(peaks[pl], 2),
                "loss spikes / run": fmt_series(runs["n_spikes"].astype(float), 1)
                if "n_spikes" in runs.columns
                else "–",
            }
        )
    gate = require_learning(rs, {label: where(rs, placement=pl) for pl, label in PLACEMENTS.items()})
    notes = [
        f"Final val loss, Mix-LN − Pre-LN: "
        f"{fmt_estimate(compare(rs, loss_of(rs, placement='mixln'), loss_of(rs, placement='pre')), CONFIDENCE)} nats "
        "(the paper reports Mix-LN lower; not part of the claim tested here).",
        *gate.notes,
    ]
    if (base := baseline_note(rs)) is not None:
        notes.append(base)
    # "X makes the deep layers contribute more" needs the deficit without X (Pre-LN's curse of depth)
    return Outcome.of(
        [deeper, stable],
        table=table,
        notes=notes,
        preconditions=[cursed],
        setup_failures=gate.failures,
    )


def draw(rs: RunSet, extras: Extras) -> Drawn:
    g = group_labels(rs, ["placement"])
    return [
        (
            "layer_ablation",
            "Rise of the validation loss when each block is skipped, at the last evaluation (mean ± std).",
            plot_layer_ablation(g),
        ),
        ("grad_norm", "Global gradient norm, mean ± std over seeds.", plot_grad_norm(g)),
    ]


FINDING = Finding(
    13,
    "mixln_depth",
    "Mix-LN vs Pre-LN: deep layers' contribution and stability",
    "Making the first quarter of the blocks Post-LN (Mix-LN) makes the deeper blocks contribute more than "
    "under Pre-LN, without making training less stable.",
    "Li et al. 2024, *Mix-LN: Unleashing the Power of Deeper Layers by Combining Pre-LN and Post-LN*, "
    'abstract: Mix-LN lets "both shallow and deep layers" contribute "effectively to training".',
    False,
    evaluate,
    draw,
    perturbation=Perturbation(
        "lr ÷ 3 (1e-3, the authors')",
        ("optim.lr=1e-3", "optim.min_lr=1e-4"),
        "Mix-LN's first blocks are Post-LN, whose training is the most sensitive to the learning rate (at "
        "depth 24 and lr 3e-3 with a 30-step warm-up an earlier preset's Mix-LN did not train); the rate is "
        "the setting most likely to decide both its stability and what its deep blocks learn, and 1e-3 is "
        "the authors' own.",
    ),
    calibration=DEPTH_CALIBRATION,
    short="Mix-LN's deep blocks contribute more than Pre-LN's, training as stably",
    paper_scale="LLaMA models of 71M to 1B parameters (12 to 24 layers); the 130M one trained for 20,000 steps of 512 × 256 tokens (pixeli99/MixLN scripts/run_130m.sh).",
)
