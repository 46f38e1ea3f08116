"""Finding 12 — Sun et al. 2025 (The Curse of Depth): LayerNorm Scaling curbs the growth of the residual
stream's variance with depth and makes deep layers contribute more than under Pre-LN.

What the paper says (read in its abstract, arXiv 2502.05795, as the authors' repository
lmsdss/LayerNorm-Scaling gives it): under Pre-LN the output variance "exponentially grows with the model
depth", so that deep blocks barely contribute; LayerNorm Scaling — each norm's output in block l × 1/√l —
"mitigates the output variance explosion of deeper Transformer layers, improving their contribution". The
repository's README adds that combining it with a depth-scaled initialisation (GPT-2's 1/√(2L), OLMo's)
diminishes its effect, and recommends a plain normal init.

Measured here, Pre-LN (`placement=pre`) against LayerNorm Scaling (`placement=lnscale`), same seeds, in
the authors' recipe at their smallest depth (the preset says where it departs): the stream's growth with
depth at the end of training, log(RMS after the last block / after the first) (`act_rms/layer_i`) — the
trained model's variance against depth, as the paper states it, with its step-0 value beside it; what
training added to it is reported —
and the mean contribution of the deeper half of the blocks: the rise of the validation loss when one of
them is skipped (`layer_ablation/layer_i`), at the last evaluation.

"X curbs Y" needs Y without X: the claim is tested only where Pre-LN's stream does grow with depth (at the
end of training, what the paper shows). Its parts have premises of their own. The variance part (checks 1
and 2) needs the *explosion* the paper speaks of — growth with depth that training adds under Pre-LN: the
1/√l scaling builds a smaller growth in at initialisation, so an end-of-training difference in a model
whose Pre-LN growth training has shrunk is that construction, eroded, and not a curbed explosion (issue
37's referee: at this scale Pre-LN's growth falls 1.68 → 1.10 in training); check 1's step-0 value is shown
beside its end value. "Deep blocks contribute more" needs models trained as far as the paper's
(`_depth.trained_enough`) and the curse of depth under Pre-LN (`_depth.curse_of_depth`: a model as deep as
the paper's smallest, whose deep blocks contribute little in absolute terms and less than the shallow ones
after the first). A part whose premise fails is *not tested here*; the others decide the verdict.
"""

from __future__ import annotations

from normlab.analysis.estimate import estimate, fmt_estimate
from normlab.analysis.load import RunSet
from normlab.analysis.plots import plot_act_rms, plot_layer_ablation
from normlab.study.findings._compare import compare
from normlab.study.findings._depth import (
    CONTRIBUTION_MARGIN,
    DEPTH_CALIBRATION,
    GROWTH_MARGIN,
    curse_of_depth,
    depth_profile,
    trained_enough,
)
from normlab.study.findings._finding import Drawn, Extras, Finding, Perturbation
from normlab.study.findings._format import CI_LABEL, fmt_series
from normlab.study.findings._learning import baseline_note, learned_count, require_learning
from normlab.study.findings._runs import group_labels, loss_of, need, where
from normlab.study.verdicts import CONFIDENCE, Outcome, Precondition, check, untested

PLACEMENTS = {"pre": "Pre-LN", "lnscale": "LayerNorm Scaling"}


GROWTH_SOURCE = (
    "abstract: under Pre-LN “its output variance exponentially grows with the model depth”; LayerNorm "
    "Scaling “mitigates the output variance explosion of deeper Transformer layers” — the variance of the "
    "deep layers' outputs in the trained model, against depth"
)
CONTRIBUTION_SOURCE = (
    "abstract: the curse of depth is that “nearly half of the layers are less effective than expected”, "
    "and LayerNorm Scaling “enables deeper layers to contribute more effectively during training” — what "
    "removing a deep layer costs the trained model"
)


def evaluate(rs: RunSet, extras: Extras) -> Outcome:
    need(rs, "placement", list(PLACEMENTS))
    prof = {pl: depth_profile(rs, where(rs, placement=pl).index) for pl in PLACEMENTS}
    pre, lns = prof["pre"], prof["lnscale"]
    depth = int(pre["depth"].max())
    added = {pl: p["growth_end"] - p["growth_init"] for pl, p in prof.items()}
    grows = check(
        "Under Pre-LN the residual stream grows with depth",
        "log(RMS after the last block / after the first) at the end of training, Pre-LN (mean over seeds)",
        estimate(pre["growth_end"]),
        margin=GROWTH_MARGIN,
    )
    at_init = compare(rs, pre["growth_init"], lns["growth_init"])
    step0 = fmt_estimate(at_init, CONFIDENCE, 2)
    curbs_end = check(
        "LayerNorm Scaling's stream grows less with depth at the end of training",
        "log(RMS after the last block / after the first) at the end: Pre-LN − LayerNorm Scaling (paired by "
        "seed); half the log of the variance ratio the paper speaks of. It includes the smaller growth the "
        f"1/√l scaling builds in at initialisation: at step 0 the same difference is {step0}",
        compare(rs, pre["growth_end"], lns["growth_end"]),
        margin=GROWTH_MARGIN,
        source=GROWTH_SOURCE,
    )
    training_adds = check(
        "Under Pre-LN, training adds to the growth with depth (the variance explosion)",
        "change from step 0 to the end of log(RMS after the last block / after the first), Pre-LN (mean "
        "over seeds)",
        estimate(added["pre"]),
        margin=GROWTH_MARGIN,
    )
    variance_part = "checks 1–2, the variance part"
    nothing_to_curb = Precondition.shown_by(
        training_adds,
        "The paper's explosion is growth that training builds in Pre-LN's stream over billions of tokens "
        "(findings/paper/lnscale_depth); where training shrinks it, an end-of-training difference is what "
        "the 1/√l scaling built in at step 0, eroded, and there is no explosion to curb.",
        part=variance_part,
    )
    curbs = check(
        "LayerNorm Scaling curbs the growth with depth that training adds (ours, reported)",
        "change from step 0 to the end of log(RMS after the last block / after the first): Pre-LN − "
        "LayerNorm Scaling (paired by seed); what training did, not what the initialisation built in",
        compare(rs, added["pre"], added["lnscale"]),
        margin=GROWTH_MARGIN,
        counts=False,
        source="not in the paper: round 3's statistic, kept to show what training did",
    )
    if not nothing_to_curb.met:
        why = (
            "no explosion to curb: training did not add growth with depth under Pre-LN "
            f"(check 1 at step 0: {step0}; at the end: {fmt_estimate(curbs_end.est, CONFIDENCE, 2)})"
        )
        curbs_end, curbs = untested(curbs_end, why), untested(curbs, why)
    contribution_part = "check 3, the deep blocks' contribution"
    measurable = Precondition.all_of(
        "A deep block's contribution can be measured here: the models are trained, and the curse of depth "
        "shows under Pre-LN",
        [trained_enough(rs, rs.valid.index), curse_of_depth(pre, depth)],
        part=contribution_part,
    )
    raises = check(
        "LayerNorm Scaling's deeper blocks contribute more than Pre-LN's",
        f"mean loss rise when one of blocks {depth // 2}–{depth - 1} is skipped, at the last evaluation: "
        "LayerNorm Scaling − Pre-LN (paired by seed)",
        compare(rs, lns["deep"], pre["deep"]),
        margin=CONTRIBUTION_MARGIN,
        unit="nats",
        source=CONTRIBUTION_SOURCE,
    )
    if not measurable.met:
        raises = untested(raises, "the models are barely trained, or show no curse of depth (precondition)")
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
                f"added by training ({CI_LABEL})": fmt_estimate(estimate(added[pl]), CONFIDENCE, 2),
                "loss rise per skipped block, block 0": fmt_series(p["first"], 3),
                "… blocks 1 to the middle": fmt_series(p["shallow_after_first"], 3),
                f"… deeper half ({CI_LABEL})": fmt_estimate(estimate(p["deep"]), CONFIDENCE, 3),
            }
        )
    gate = require_learning(rs, {label: where(rs, placement=pl) for pl, label in PLACEMENTS.items()})
    notes = [
        f"Check 1's difference (Pre-LN − LayerNorm Scaling, log(RMS last/first block)) at step 0: {step0}; "
        f"at the end: {fmt_estimate(curbs_end.est, CONFIDENCE, 2)} — the scaling builds it in at "
        "initialisation; the paper's claim is about growth that training adds.",
        f"Final val loss, LayerNorm Scaling − Pre-LN: "
        f"{fmt_estimate(compare(rs, loss_of(rs, placement='lnscale'), loss_of(rs, placement='pre')), CONFIDENCE)} nats "
        "(the paper reports LayerNorm Scaling lower; not part of the claim tested here).",
        *gate.notes,
    ]
    if (base := baseline_note(rs)) is not None:
        notes.append(base)
    # "X curbs Y" needs Y without X: the growth under Pre-LN (the whole claim); each part its own premise
    remedy = "A deeper stack or a longer run grows Pre-LN's stream (Sun et al. §3)."
    preconditions = [Precondition.shown_by(grows, remedy), nothing_to_curb, measurable]
    return Outcome.of(
        [curbs_end, curbs, raises],
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
    calibration=DEPTH_CALIBRATION,
    short="LayerNorm Scaling curbs the stream's growth with depth and makes deep blocks contribute more",
    stated="“While Pre-LN stabilizes the training of Transformer LLMs, its output variance exponentially "
    "grows with the model depth, which undesirably causes the derivative of the deep Transformer blocks to "
    "be an identity matrix, and therefore barely contributes to the training … LayerNorm Scaling (LNS), "
    "which scales the variance of output of the layer normalization inversely by the square root of its "
    "depth … mitigates the output variance explosion of deeper Transformer layers, improving their "
    "contribution” (abstract, arXiv 2502.05795).",
    paper_scale="LLaMA models of 130M to 7B parameters (12 to 32 layers); the 130M one trained for 20,000 steps of 512 × 256 tokens (lmsdss/LayerNorm-Scaling run_130m.sh).",
)
