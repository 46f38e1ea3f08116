"""Each finding's evaluation on fabricated sweeps with chosen numbers: a clear effect reproduces, the
opposite effect does not, an effect within seed noise is inconclusive, and runs that the claim needs
to have learned but did not make the setup fail. Also: a null effect fed through a whole finding many
times is called reproduced at most α of the time."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from finding_checks import draws, jitter, verdicts
from reproduce_crafted import (
    Sweep,
    act_rms_sweep,
    grad_profile_sweep,
    rms_sweep,
    warmup_sweep,
)

from normlab.analysis import load_runs
from normlab.study.findings import CORE, FINDINGS, evaluate, evaluate_sweep
from normlab.study.findings._learning import learned
from normlab.study.verdicts import ALPHA, INCONCLUSIVE, NOT_REPRODUCED, NOT_TESTED, REPRODUCED, SETUP_FAILED

# -------------------------------------------------------------------------------- the registry


def test_every_finding_has_a_preset_a_claim_and_a_source(repo_root):
    folder = repo_root / "configs" / "experiment" / "findings"
    presets = {p.stem for p in folder.glob("*.yaml") if not p.stem.startswith("_")}
    assert set(FINDINGS) == presets
    assert [f.number for f in FINDINGS.values()] == list(range(1, len(FINDINGS) + 1))
    assert set(CORE) <= set(FINDINGS) and CORE
    for f in FINDINGS.values():
        assert f.claim.endswith(".") and f.source
    ours = [f for f in FINDINGS.values() if f.ours]
    assert [f.name for f in ours] == ["tied_embedding_collapse"]
    assert all(f.cite == "observed here" for f in ours)


# ------------------------------------------------------------------------------ did it learn?


def test_learned_comes_from_summary_then_from_the_unigram_baseline(tmp_path):
    sweep = Sweep(tmp_path / "s", "crafted")
    sweep.add({"seed": 0}, final_val=3.0)  # well below 5.74: learned
    sweep.add({"seed": 1}, final_val=5.70)  # within the margin of the unigram loss: not learned
    sweep.add({"seed": 2}, final_val=3.0, summary={"learned": False})  # the run's own verdict wins
    sweep.add({"seed": 3}, final_val=3.0, unigram=None)  # an old run: cannot tell
    rs = load_runs(tmp_path / "s", group_by="run")
    assert [learned(rs, r) for r in rs.runs.index] == [True, False, False, None]


# -------------------------------------------------------------------------------- finding 2 (warmup)


def warmup_losses(pre0, pre1, post0, post1, jitter=0.01, seeds=3):
    wobble = np.linspace(-jitter, jitter, seeds)
    return {
        ("pre", 0): [pre0 + w for w in wobble],
        ("pre", 100): [pre1 + w for w in wobble[::-1]],  # seeds differ between Pre-LN's arms
        ("post", 0): [post0 + w for w in wobble],
        ("post", 100): [post1 + w for w in wobble],
    }


@pytest.mark.parametrize(
    ("losses", "expected"),
    [
        (warmup_losses(3.0, 3.0, 4.5, 3.0), REPRODUCED),  # Post-LN far worse without warmup; warmup fixes it
        (warmup_losses(3.2, 2.9, 4.5, 3.0), NOT_REPRODUCED),  # ... but Pre-LN needs warm-up too (0.3 nats)
        # Post-LN better without warmup: no failure for warm-up to prevent (the precondition)
        (warmup_losses(3.0, 2.9, 2.5, 2.4), NOT_TESTED),
        (warmup_losses(3.0, 2.9, 3.005, 2.9, jitter=0.2), NOT_TESTED),  # a gap within seed noise: not shown
        (warmup_losses(3.0, 2.9, 4.5, 4.4), NOT_REPRODUCED),  # a gap, but warmup does not close it
    ],
)
def test_warmup_verdict(tmp_path, losses, expected):
    rs = load_runs(warmup_sweep(tmp_path / "sweep", losses))
    outcome = evaluate("xiong_warmup", rs)
    assert outcome.verdict == expected, verdicts(outcome)
    assert len(outcome.table) == 4
    assert draws("xiong_warmup", rs) == 2


def test_warmup_gap_must_exist_before_it_can_close(tmp_path):
    """The "closes" check used to pass whenever Post-LN with warmup beat Pre-LN, gap or no gap: the gap is
    now the precondition (the failure warm-up prevents), and without it the verdict is not tested here."""
    rs = load_runs(warmup_sweep(tmp_path / "sweep", warmup_losses(3.0, 3.0, 2.99, 2.5)))
    outcome = evaluate("xiong_warmup", rs)
    (fails,) = outcome.preconditions
    closes, pre_free = outcome.checks
    assert not fails.met and fails.check.verdict == NOT_REPRODUCED
    assert outcome.verdict == NOT_TESTED and "higher learning rate" in fails.sentence
    assert closes.est.value > 0  # the statistic alone would have called this reproduced


def test_warmup_diverged_post_counts_as_no_progress(tmp_path):
    losses = warmup_losses(3.0, 3.0, 3.0, 2.95)
    diverged = {("post", 0, s) for s in range(3)}  # their loss becomes the step-0 loss (7.0)
    rs = load_runs(warmup_sweep(tmp_path / "sweep", losses, diverged))
    outcome = evaluate("xiong_warmup", rs)
    assert outcome.preconditions[0].check.est.value == pytest.approx(7.0 - 3.0)
    assert outcome.verdict == REPRODUCED  # Post-LN without warm-up may fail to learn: that is the claim


def test_warmup_setup_fails_when_pre_ln_does_not_learn(tmp_path):
    losses = warmup_losses(5.74, 2.9, 6.5, 3.0)  # Pre-LN without warmup sits at the unigram loss
    rs = load_runs(warmup_sweep(tmp_path / "sweep", losses))
    outcome = evaluate("xiong_warmup", rs)
    assert outcome.verdict == SETUP_FAILED
    assert "Pre-LN, warmup 0: 3 of 3 runs did not learn" in outcome.setup_failures[0]


def test_old_runs_without_a_baseline_say_so(tmp_path):
    sweep = Sweep(tmp_path / "s", "xiong_warmup")
    for (pl, w), per_seed in warmup_losses(3.0, 3.0, 4.5, 3.0).items():
        for seed, loss in enumerate(per_seed):
            sweep.add({"placement.name": pl, "warmup_steps": w, "seed": seed}, final_val=loss, unigram=None)
    outcome = evaluate("xiong_warmup", load_runs(tmp_path / "s"))
    assert outcome.verdict == REPRODUCED
    assert any("cannot be told" in n for n in outcome.notes)


def test_warmup_counts_pre_ln_without_warm_up_as_an_equality(tmp_path):
    """Issue 37's referee: "Pre-LN does not need warm-up" (Xiong §4) was a note (+0.038 [0.029, 0.046]);
    it is now a counted equality check within ±0.05 nats — a crafted Pre-LN 0.3 nats worse without
    warm-up fails it, an equal one passes it, one 0.02 worse with seed noise ±0.034 is undecided; the paper's Fig. 4 comparison is a note."""
    for pre0, expected in ((3.0, REPRODUCED), (3.02, INCONCLUSIVE), (3.3, NOT_REPRODUCED)):
        rs = load_runs(warmup_sweep(tmp_path / f"p{pre0}", warmup_losses(pre0, 3.0, 4.5, 3.0)))
        outcome = evaluate("xiong_warmup", rs)
        _, pre_free = outcome.checks
        assert pre_free.kind == "equality" and pre_free.margin == 0.05 and "safely removed" in pre_free.source
        assert pre_free.verdict == expected and outcome.verdict == expected, verdicts(outcome)
        assert any("the paper's Fig. 4 comparison" in n for n in outcome.notes)


def test_missing_variant_is_inconclusive_with_a_reason(tmp_path):
    losses = {("pre", 0): [3.0, 3.1], ("pre", 100): [2.9, 3.0]}
    outcome = evaluate("xiong_warmup", load_runs(warmup_sweep(tmp_path / "sweep", losses)))
    assert outcome.verdict == INCONCLUSIVE
    assert "placement=post" in outcome.notes[0]


@pytest.mark.slow
def test_a_null_effect_through_the_whole_finding_is_rarely_reproduced(tmp_path):
    """All four cells from one distribution, 3 seeds each, 300 times through `evaluate`: the finding is
    called reproduced at most α of the time (Monte-Carlo bound)."""
    rs = load_runs(warmup_sweep(tmp_path / "sweep", warmup_losses(3.0, 3.0, 3.0, 3.0)))
    rng = np.random.default_rng(0)
    reps, hits = 300, 0
    for _ in range(reps):
        runs = rs.runs.copy()
        runs["final_val_loss"] = rng.normal(3.0, 0.05, len(runs))
        runs["best_val_loss"] = runs["final_val_loss"]
        hits += evaluate("xiong_warmup", replace(rs, runs=runs)).verdict == REPRODUCED
    assert hits / reps <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / reps)


# ------------------------------------------------------------------------ finding 1 (grad profile)


def xiong_like(init, placement, depth, seed, layer):
    """Pre-LN: last layer ∝ 1/√L, flat over layers; Post-LN: rising towards the output, depth-free."""
    noise = (1 + 0.01 * (seed - 1)) * (1 + 0.02 * (seed - 1) * (layer % 2 - 0.5))  # seeds differ per layer
    if placement == "pre":  # flat within ±0.1 over the blocks, with noise that differs between the thirds
        return (
            (1 + 0.03 * (seed - 1) * math.sin(1.7 * layer + depth))
            / math.sqrt(depth)
            * (1 + 0.02 * layer / depth)
        )
    return noise * (0.5 + layer / max(depth - 1, 1))


def opposite(init, placement, depth, seed, layer):
    return xiong_like(init, "post" if placement == "pre" else "pre", depth, seed, layer)


@pytest.mark.parametrize(("profile", "expected"), [(xiong_like, REPRODUCED), (opposite, NOT_REPRODUCED)])
def test_grad_profile_verdict(tmp_path, profile, expected):
    rs = load_runs(grad_profile_sweep(tmp_path / "sweep", profile))
    outcome = evaluate("xiong_grad_profile", rs)
    assert outcome.verdict == expected, verdicts(outcome)
    xavier = [c for c in outcome.checks if c.counts]
    assert len(xavier) == 4 and all("xavier" in c.name for c in xavier)
    assert draws("xiong_grad_profile", rs) == 2
    pre_row = next(r for r in outcome.table if r["init"] == "xavier" and r["placement"] == "pre")
    slope = float(pre_row["depth exponent b (‖g_last‖ ∝ L^b) over L ≥ 6 (the checks'), 90 % CI"].split()[0])
    assert slope == pytest.approx(-0.5 if profile is xiong_like else 0.0, abs=0.01)  # crafted: 1/√L or flat


def test_grad_profile_within_noise_is_not_reproduced(tmp_path):
    rng = np.random.default_rng(0)

    def noisy(init, placement, depth, seed, layer):  # no depth or layer trend, large seed noise
        return float(np.exp(rng.normal(0, 0.5))) * depth**-0.25

    outcome = evaluate("xiong_grad_profile", load_runs(grad_profile_sweep(tmp_path / "sweep", noisy)))
    assert outcome.verdict != REPRODUCED
    assert INCONCLUSIVE in [c.verdict for c in outcome.checks if c.counts]


# ----------------------------------------------------------------------- finding 4 (act growth)


def periln_like(placement, step, layer, seed):
    """Training grows Pre-LN's deep blocks most; Peri-LN's stream starts larger (√(1 + 2l)) but barely moves."""
    if placement == "pre":
        return jitter(seed, layer, step) * (1 + 0.3 * layer * step / 100)
    return jitter(seed, layer, step) * math.sqrt(1 + 2 * layer) * (1 + 0.01 * step / 100)


def periln_at_init_only(placement, step, layer, seed):
    """The old trap: layer growth built in at step 0 (Peri-LN), none added by training anywhere."""
    base = math.sqrt(1 + 2 * layer) if placement == "double" else 1.0
    return jitter(seed, layer, step) * base


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        (periln_like, REPRODUCED),
        # Pre-LN's stream does not grow in training (Peri-LN's does): nothing to balance, not tested here
        (lambda pl, st, la, se: periln_like("double" if pl == "pre" else "pre", st, la, se), NOT_TESTED),
        (periln_at_init_only, NOT_TESTED),  # nothing grows in training: decided by training, not init
        # Pre-LN grows, Peri-LN grows as much: the claim, tested, does not hold
        (lambda pl, st, la, se: periln_like("pre", st, la, se), NOT_REPRODUCED),
    ],
)
def test_act_growth_verdict(tmp_path, profile, expected):
    rs = load_runs(act_rms_sweep(tmp_path / "sweep", profile))
    outcome = evaluate("periln_act_growth", rs)
    assert outcome.verdict == expected, verdicts(outcome)
    assert draws("periln_act_growth", rs) == 2


# --------------------------------------------------------------------------- finding 5 (RMSNorm)


SAME = {"ln": [3.0, 3.02, 2.98], "rms": [3.01, 2.99, 3.0]}


@pytest.mark.parametrize(
    ("losses", "log_ratio", "se", "expected"),
    [
        (SAME, 0.10, 0.01, REPRODUCED),  # same loss, 10 % faster
        (SAME, -0.10, 0.01, NOT_REPRODUCED),  # slower
        ({"ln": [3.0, 3.02, 2.98], "rms": [3.5, 3.52, 3.48]}, 0.10, 0.01, NOT_REPRODUCED),  # worse loss
        (SAME, 0.07, 0.02, INCONCLUSIVE),  # a speed-up near the paper's smallest (7 %), within noise
        (SAME, 0.02, 0.005, NOT_REPRODUCED),  # faster, but clearly by less than the paper's smallest 7 %
        (
            {"ln": [3.0, 3.3, 2.7], "rms": [3.0, 3.3, 2.7]},
            0.10,
            0.01,
            INCONCLUSIVE,
        ),  # loss too noisy to call equal
    ],
)
def test_rmsnorm_verdict(tmp_path, losses, log_ratio, se, expected):
    sweep = rms_sweep(tmp_path / "sweep", losses, log_ratio, se)  # measured on a GPU: norms 20 % of a step
    rs, outcome = evaluate_sweep("rmsnorm_speed", sweep)
    assert outcome.verdict == expected, verdicts(outcome)
    assert all(p.met for p in outcome.preconditions)
    assert any("norm share of step time" in row for row in outcome.table)
    assert FINDINGS["rmsnorm_speed"].draw(rs, {"profile": None})  # figures without a profile too


@pytest.mark.parametrize(
    ("device", "share", "met"),
    [
        ("cuda", 0.2, True),  # a crafted effect: norms are 20 % of a GPU step, a 7 % saving is possible
        ("cuda", 0.05, False),  # a crafted null: 5 % of the step, less than the 7 % the claim needs
        ("cuda", 0.07, False),  # exactly the saving: not shown to exceed it
        ("cpu", 0.2, None),  # the wrong device: a CPU measurement cannot tell, whatever its share
        (None, 0.2, None),  # nothing measured
    ],
)
def test_rmsnorm_speed_needs_a_norm_share_above_the_claimed_saving_on_the_claims_device(
    tmp_path, device, share, met
):
    """Issue 28: the speed check could not pass here (all norms are ≈ 6 % of a CPU step, the claim's
    smallest saving 7 %). The precondition fails on a crafted null and passes on a crafted effect; it is the
    premise of the speed part only (issue 37's referee): without it the speed check is *not tested here*,
    with the command that would test it, and the loss part decides — reproduced in part."""
    sweep = rms_sweep(tmp_path / "sweep", SAME, 0.10, 0.01, device=device, share=share)
    _, outcome = evaluate_sweep("rmsnorm_speed", sweep)
    (possible,) = outcome.preconditions
    assert possible.met is met, possible.observed
    assert possible.part == "check 2, the speed"
    speed = next(c for c in outcome.checks if "faster" in c.name)
    if met:
        assert outcome.verdict == REPRODUCED and speed.verdict == REPRODUCED
        return
    assert outcome.verdict == REPRODUCED and outcome.in_part == "; check 2 not tested here"
    assert speed.verdict == NOT_TESTED and "precondition" in speed.note
    assert "python -m normlab.bench.norm_share --device cuda" in possible.sentence
    # a loss part that fails is not hidden behind the untested speed part
    apart = rms_sweep(
        tmp_path / "apart",
        {"ln": [3.0, 3.02, 2.98], "rms": [3.3, 3.32, 3.28]},
        0.1,
        0.01,
        device=device,
        share=share,
    )
    assert evaluate_sweep("rmsnorm_speed", apart)[1].verdict == NOT_REPRODUCED


# ------------------------------------------------------------------------- finding 6 (BatchNorm)


def bn_sweep(root, gap_at, ln_loss=3.0, batches=(4, 8, 16, 32, 64), seeds=3, jitter=0.01):
    sweep = Sweep(root, "batchnorm_batch_size")
    for b in batches:
        for norm in ("bn", "ln"):
            for seed in range(seeds):
                loss = ln_loss + (gap_at(b) if norm == "bn" else 0.0) + jitter * (seed - 1)
                sweep.add({"norm.name": norm, "train.batch_size": b, "seed": seed}, final_val=loss)
    return root


@pytest.mark.parametrize(
    ("gap_at", "expected"),
    [
        (lambda b: 0.8 / math.log2(b), REPRODUCED),  # worse, less so at large batch
        (lambda b: 0.3, NOT_REPRODUCED),  # worse everywhere, no trend
        (lambda b: -0.2, NOT_REPRODUCED),  # better than LN
    ],
)
def test_batchnorm_verdict(tmp_path, gap_at, expected):
    rs = load_runs(bn_sweep(tmp_path / "s", gap_at))
    outcome = evaluate("batchnorm_batch_size", rs)
    assert outcome.verdict == expected, verdicts(outcome)
    assert len(outcome.table) == 10
    assert len(outcome.checks) == 6  # one per batch size, and the trend
    assert draws("batchnorm_batch_size", rs) == 2


def test_batchnorm_is_tested_per_batch_size_and_as_a_trend_never_averaged(tmp_path):
    """The measured pattern: worse at batch 4 alone, equal or better from 8 on. An average over batch sizes
    (+0.045) would hide the change of sign; per batch size the claim holds at 4 only."""
    measured = {4: 0.364, 8: 0.003, 16: -0.038, 32: -0.054, 64: -0.051}
    outcome = evaluate("batchnorm_batch_size", load_runs(bn_sweep(tmp_path / "s", measured.get)))
    by_name = {c.name: c.verdict for c in outcome.checks}
    assert by_name["BatchNorm ends worse than LayerNorm at batch 4"] == REPRODUCED
    assert by_name["BatchNorm ends worse than LayerNorm at batch 32"] == NOT_REPRODUCED
    assert by_name["BatchNorm's disadvantage shrinks as the batch grows"] == REPRODUCED
    assert outcome.verdict == NOT_REPRODUCED
    trend = outcome.notes[0]
    assert "worse at batch 4; equal at batch 8; equal or better at batch 16, 32, 64;" in trend
    assert "changes between batch 8 and 16" in trend


def test_batchnorm_setup_fails_when_layernorm_does_not_learn(tmp_path):
    outcome = evaluate(
        "batchnorm_batch_size", load_runs(bn_sweep(tmp_path / "s", lambda b: 0.5, ln_loss=5.74))
    )
    assert outcome.verdict == SETUP_FAILED


# ------------------------------------------------------------------------ every finding


@pytest.mark.parametrize("name", sorted(FINDINGS))
def test_every_finding_says_why_it_cannot_evaluate_unrelated_runs(tmp_path, name):
    sweep = Sweep(tmp_path / "s", "crafted")
    for seed in range(2):
        sweep.add({"seed": seed}, final_val=3.0)
    outcome = evaluate(name, load_runs(tmp_path / "s"))
    assert outcome.verdict == INCONCLUSIVE
    assert outcome.notes and outcome.notes[0].startswith("Could not evaluate")


def test_arms_that_ran_the_same_seeds_are_compared_seed_by_seed(tmp_path):
    """Issue 28: paired by seed where the arms share seeds. Seeds that move both arms together (a spread of
    ±0.3 nats) hide a consistent 0.01-nat difference from Welch's test, not from the paired one."""
    from normlab.analysis.estimate import difference
    from normlab.study.findings._compare import compare
    from normlab.study.findings._runs import loss_of

    ln = [3.0, 3.3, 2.7, 3.2, 2.8]
    rms = [x + 0.01 + 0.002 * ((i % 3) - 1) for i, x in enumerate(ln)]
    sweep = rms_sweep(tmp_path / "sweep", {"ln": ln, "rms": rms}, 0.10, 0.01)
    rs, outcome = evaluate_sweep("rmsnorm_speed", sweep)
    equal = outcome.checks[0]
    assert equal.verdict == REPRODUCED and equal.est.df == 4  # n − 1: paired by seed
    welch = difference(loss_of(rs, norm="rms"), loss_of(rs, norm="ln"))
    assert welch.se > 20 * equal.est.se  # the unpaired interval is far wider
    # different seeds in the two arms: no pairing, Welch
    other = Sweep(tmp_path / "other", "rmsnorm_speed")
    for norm, seeds in (("ln", range(5)), ("rms", range(5, 10))):
        for seed, loss in zip(seeds, ln, strict=True):
            other.add({"norm.name": norm, "seed": seed}, final_val=loss)
    rs2 = load_runs(tmp_path / "other")
    est = compare(rs2, loss_of(rs2, norm="rms"), loss_of(rs2, norm="ln"))
    assert est.df != 4 and est.value == pytest.approx(0.0)
