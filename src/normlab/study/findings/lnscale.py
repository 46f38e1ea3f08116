"""Finding 12 — Sun et al. 2025 (The Curse of Depth): LayerNorm Scaling curbs the growth of the residual
stream's variance with depth and makes deep layers contribute more than under Pre-LN.

What the paper says (read in its abstract, arXiv 2502.05795, as the authors' repository
lmsdss/LayerNorm-Scaling gives it): under Pre-LN the output variance "exponentially grows with the model
depth", so that deep blocks barely contribute; LayerNorm Scaling — each norm's output in block l × 1/√l —
"mitigates the output variance explosion of deeper Transformer layers, improving their contribution". The
repository's README adds that combining it with a depth-scaled initialisation (GPT-2's 1/√(2L), OLMo's)
diminishes its effect, and recommends a plain normal init.

Measured here, Pre-LN (`placement=pre`) against LayerNorm Scaling (`placement=lnscale`), same seeds: the
stream's growth with depth, log(RMS after the last block / after the first) at the end of training
(`act_rms/layer_i`), and the mean contribution of the deeper half of the blocks — the rise of the
validation loss when one of them is skipped (`layer_ablation/layer_i`), at the last evaluation.

"X curbs Y" needs Y without X: the claim about variance is tested only where Pre-LN's stream does grow
with depth, and the one about contributions only where Pre-LN's deeper half contributes less than its
shallower half (the curse itself); where either premise fails, the finding says so.
"""

from __future__ import annotations

from normlab.analysis.estimate import difference, estimate, fmt_estimate
from normlab.analysis.load import RunSet
from normlab.analysis.plots import plot_act_rms, plot_layer_ablation
from normlab.study.findings._common import (
    CI_LABEL,
    Drawn,
    Extras,
    Finding,
    Perturbation,
    baseline_note,
    fmt_series,
    group_labels,
    learned_count,
    loss_of,
    need,
    require_learning,
    where,
)
from normlab.study.findings._depth import (
    CONTRIBUTION_MARGIN,
    GROWTH_MARGIN,
    curse_of_depth,
    depth_profile,
)
from normlab.study.verdicts import CONFIDENCE, Outcome, Precondition, check

PLACEMENTS = {"pre": "Pre-LN", "lnscale": "LayerNorm Scaling"}


def evaluate(rs: RunSet, extras: Extras) -> Outcome:
    need(rs, "placement", list(PLACEMENTS))
    prof = {pl: depth_profile(rs, where(rs, placement=pl).index) for pl in PLACEMENTS}
    pre, lns = prof["pre"], prof["lnscale"]
    depth = int(pre["depth"].max())
    grows = check(
        "Under Pre-LN the residual stream grows with depth",
        "log(RMS after the last block / after the first) at the end of training, Pre-LN (mean over seeds)",
        estimate(pre["growth_end"]),
        margin=GROWTH_MARGIN,
    )
    curbs = check(
        "LayerNorm Scaling curbs that growth",
        "the same log ratio, Pre-LN − LayerNorm Scaling (Welch)",
        difference(pre["growth_end"], lns["growth_end"]),
        margin=GROWTH_MARGIN,
    )
    cursed = curse_of_depth(pre, depth)
    raises = check(
        "LayerNorm Scaling's deeper blocks contribute more than Pre-LN's",
        f"mean loss rise when one of blocks {depth // 2}–{depth - 1} is skipped: LayerNorm Scaling − Pre-LN "
        "(Welch)",
        difference(lns["deep"], pre["deep"]),
        margin=CONTRIBUTION_MARGIN,
        unit="nats",
    )
    table = []
    for pl, label in PLACEMENTS.items():
        runs, p = where(rs, placement=pl), prof[pl]
        table.append(
            {
                "placement": label,
                "runs": len(runs),
                "learned": learned_count(rs, runs),
                "final val loss": fmt_series(loss_of(rs, placement=pl)),
                "log(RMS last/first block), step 0": fmt_series(p["growth_init"], 2),
                f"log(RMS last/first block), end ({CI_LABEL})": fmt_estimate(
                    estimate(p["growth_end"]), CONFIDENCE, 2
                ),
                "loss rise per skipped block, shallower half": fmt_series(p["shallow"], 3),
                f"… deeper half ({CI_LABEL})": fmt_estimate(estimate(p["deep"]), CONFIDENCE, 3),
            }
        )
    gate = require_learning(rs, {label: where(rs, placement=pl) for pl, label in PLACEMENTS.items()})
    notes = [
        f"Final val loss, LayerNorm Scaling − Pre-LN: "
        f"{fmt_estimate(difference(loss_of(rs, placement='lnscale'), loss_of(rs, placement='pre')), CONFIDENCE)} nats "
        "(not part of the claim tested here).",
        "Growth with depth added by training (log ratio at the end − at step 0): Pre-LN "
        f"{fmt_estimate(estimate(pre['growth_end'] - pre['growth_init']), CONFIDENCE, 2)}, LayerNorm Scaling "
        f"{fmt_estimate(estimate(lns['growth_end'] - lns['growth_init']), CONFIDENCE, 2)}; the checks compare the stream as it "
        "is at the end, what the initialisation built in included.",
        *gate.notes,
    ]
    if (base := baseline_note(rs)) is not None:
        notes.append(base)
    # "X curbs Y" needs Y without X: the growth, and the curse of depth, under Pre-LN
    remedy = "A deeper stack or a longer run grows Pre-LN's stream (Sun et al. §3)."
    preconditions = [Precondition.shown_by(grows, remedy), Precondition.shown_by(cursed, remedy)]
    return Outcome.of(
        [curbs, raises],
        table=table,
        notes=notes,
        preconditions=preconditions,
        setup_failures=gate.failures,
    )


def draw(rs: RunSet, extras: Extras) -> Drawn:
    g = group_labels(rs, ["placement"])
    return [
        ("act_rms", "Residual-stream RMS after each block, at step 0 and at the end.", plot_act_rms(g)),
        (
            "layer_ablation",
            "Rise of the validation loss when each block is skipped, at the last evaluation (mean ± std).",
            plot_layer_ablation(g),
        ),
    ]


FINDING = Finding(
    12,
    "lnscale_depth",
    "LayerNorm Scaling vs Pre-LN: variance growth with depth and deep layers' contribution",
    "Pre-LN's residual stream grows with depth and its deep blocks contribute little; scaling each norm's "
    "output by 1/√l (LayerNorm Scaling) curbs that growth and makes the deeper blocks contribute more.",
    "Sun et al. 2025, *The Curse of Depth in Large Language Models* (NeurIPS), abstract: LayerNorm Scaling "
    '"mitigates the output variance explosion of deeper Transformer layers, improving their contribution".',
    False,
    evaluate,
    draw,
    perturbation=Perturbation(
        "depth × 2 (24 blocks)",
        ("depth=24",),
        "the curse of depth grows with depth (the paper's Pre-LN variance grows with the layer count, and "
        "its largest models lose the most); twice the depth is the change most likely to create the deficit "
        "LayerNorm Scaling addresses, or to show its effect where the deficit exists.",
    ),
)
