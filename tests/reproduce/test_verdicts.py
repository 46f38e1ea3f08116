"""Verdict rules on crafted inputs: a clear effect reproduces, the opposite effect does not, an effect
within seed noise is inconclusive — for the rules themselves and for findings evaluated from fabricated
sweep directories."""

from __future__ import annotations

import math

import numpy as np
import pytest
from reproduce_crafted import act_rms_sweep, grad_profile_sweep, rms_sweep, warmup_sweep

from normlab.analysis import load_runs
from normlab.analysis.findings import FINDINGS, evaluate, evaluate_sweep
from normlab.analysis.verdicts import (
    INCONCLUSIVE,
    NOT_REPRODUCED,
    REPRODUCED,
    Estimate,
    check,
    classify,
    classify_match,
    combine,
    difference,
    estimate,
)

# --------------------------------------------------------------------------------------------- rules


def test_estimate_is_mean_and_standard_error():
    e = estimate([1.0, 2.0, 3.0])
    assert e.value == pytest.approx(2.0)
    assert e.se == pytest.approx(1.0 / math.sqrt(3))
    assert e.n == 3
    assert math.isnan(estimate([1.0]).se)
    assert estimate([float("nan"), 2.0, None]).n == 1


def test_difference_uses_welch_standard_error():
    d = difference([2.0, 2.2, 2.4], [1.0, 1.1, 1.2])
    assert d.value == pytest.approx(1.1)
    assert d.se == pytest.approx(math.sqrt(0.04 / 3 + 0.01 / 3))


@pytest.mark.parametrize(
    ("value", "se", "floor", "expected"),
    [
        (1.0, 0.1, 0.0, REPRODUCED),  # clear effect in the claimed direction
        (-1.0, 0.1, 0.0, NOT_REPRODUCED),  # clear effect the other way
        (0.1, 0.1, 0.0, INCONCLUSIVE),  # within noise
        (0.15, 0.01, 0.1, INCONCLUSIVE),  # the floor keeps a lucky tiny SE from deciding
        (1.0, math.nan, 0.0, INCONCLUSIVE),  # one seed: no noise estimate
    ],
)
def test_classify(value, se, floor, expected):
    assert classify(Estimate(value, se, 3), floor) == expected


@pytest.mark.parametrize(
    ("worse_by", "se", "expected"),
    [
        (0.005, 0.01, REPRODUCED),  # matches within noise, and the test could see 0.1
        (0.5, 0.01, NOT_REPRODUCED),  # clearly worse
        (0.05, 0.2, INCONCLUSIVE),  # too noisy to tell
        (-0.5, 0.01, REPRODUCED),  # better is not "worse"
    ],
)
def test_classify_match(worse_by, se, expected):
    assert classify_match(Estimate(worse_by, se, 3), floor=0.01, margin=0.1) == expected


def test_combine():
    yes = check("a", "", Estimate(1, 0.1, 3), 0)
    no = check("b", "", Estimate(-1, 0.1, 3), 0)
    maybe = check("c", "", Estimate(0, 0.1, 3), 0)
    assert combine([yes, yes]) == REPRODUCED
    assert combine([yes, maybe]) == INCONCLUSIVE
    assert combine([yes, maybe, no]) == NOT_REPRODUCED
    no.counts = False
    assert combine([yes, no]) == REPRODUCED
    assert combine([]) == INCONCLUSIVE


# -------------------------------------------------------------------------------- finding 2 (warmup)


def warmup_losses(pre0, pre1, post0, post1, jitter=0.01):
    wobble = [-jitter, 0.0, jitter]
    return {
        ("pre", 0): [pre0 + w for w in wobble],
        ("pre", 100): [pre1 + w for w in wobble],
        ("post", 0): [post0 + w for w in wobble],
        ("post", 100): [post1 + w for w in wobble],
    }


@pytest.mark.parametrize(
    ("losses", "expected"),
    [
        (warmup_losses(3.0, 2.9, 4.5, 3.0), REPRODUCED),  # Post-LN far worse without warmup; warmup fixes it
        (warmup_losses(3.0, 2.9, 2.5, 2.4), NOT_REPRODUCED),  # Post-LN better without warmup
        (warmup_losses(3.0, 2.9, 3.005, 2.9, jitter=0.2), INCONCLUSIVE),  # differences within seed noise
    ],
)
def test_warmup_verdict(tmp_path, losses, expected):
    rs = load_runs(warmup_sweep(tmp_path / "sweep", losses))
    outcome = evaluate("xiong_warmup", rs)
    assert outcome.verdict == expected, [(c.name, c.est, c.verdict) for c in outcome.checks]
    assert len(outcome.table) == 4


def test_warmup_diverged_post_counts_as_no_progress(tmp_path):
    losses = warmup_losses(3.0, 2.9, 3.0, 2.95)
    diverged = {("post", 0, s) for s in range(3)}  # their loss becomes the step-0 loss (7.0)
    rs = load_runs(warmup_sweep(tmp_path / "sweep", losses, diverged))
    outcome = evaluate("xiong_warmup", rs)
    assert outcome.checks[0].est.value == pytest.approx(7.0 - 3.0)
    assert outcome.verdict == REPRODUCED


def test_warmup_precondition_pre_ln_must_train(tmp_path):
    losses = warmup_losses(3.0, 2.9, 4.5, 3.0)
    rs = load_runs(warmup_sweep(tmp_path / "sweep", losses, {("pre", 0, 0)}))
    outcome = evaluate("xiong_warmup", rs)
    assert outcome.preconditions and outcome.verdict == INCONCLUSIVE


def test_missing_variant_is_inconclusive_with_a_reason(tmp_path):
    losses = {("pre", 0): [3.0, 3.1], ("pre", 100): [2.9, 3.0]}
    rs = load_runs(warmup_sweep(tmp_path / "sweep", losses))
    outcome = evaluate("xiong_warmup", rs)
    assert outcome.verdict == INCONCLUSIVE
    assert "placement=post" in outcome.notes[0]


# ------------------------------------------------------------------------ finding 1 (grad profile)


def xiong_like(init, placement, depth, seed, layer):
    """Pre-LN: last layer ∝ 1/√L, flat over layers; Post-LN: rising towards the output, depth-free."""
    noise = 1 + 0.01 * (seed - 1)
    if placement == "pre":
        return noise / math.sqrt(depth) * (1.5 - 0.5 * layer / max(depth - 1, 1))
    return noise * (0.5 + layer / max(depth - 1, 1))


def opposite(init, placement, depth, seed, layer):
    return xiong_like(init, "post" if placement == "pre" else "pre", depth, seed, layer)


@pytest.mark.parametrize(("profile", "expected"), [(xiong_like, REPRODUCED), (opposite, NOT_REPRODUCED)])
def test_grad_profile_verdict(tmp_path, profile, expected):
    rs = load_runs(grad_profile_sweep(tmp_path / "sweep", profile))
    outcome = evaluate("xiong_grad_profile", rs)
    assert outcome.verdict == expected, [(c.name, c.est, c.verdict) for c in outcome.checks]
    xavier = [c for c in outcome.checks if c.counts]
    assert len(xavier) == 3 and all("xavier" in c.name for c in xavier)
    pre_row = next(r for r in outcome.table if r["init"] == "xavier" and r["placement"] == "pre")
    slope = float(pre_row["depth exponent b (‖g_last‖ ∝ L^b)"].split()[0])
    assert slope == pytest.approx(-0.5 if profile is xiong_like else 0.0, abs=0.01)  # crafted: 1/√L or flat


def test_grad_profile_within_noise_is_inconclusive(tmp_path):
    rng = np.random.default_rng(0)

    def noisy(init, placement, depth, seed, layer):  # no depth or layer trend, large seed noise
        return float(np.exp(rng.normal(0, 0.5))) * depth**-0.25

    rs = load_runs(grad_profile_sweep(tmp_path / "sweep", noisy))
    assert evaluate("xiong_grad_profile", rs).verdict in (INCONCLUSIVE, NOT_REPRODUCED)
    counted = [c.verdict for c in evaluate("xiong_grad_profile", rs).checks if c.counts]
    assert INCONCLUSIVE in counted


# ----------------------------------------------------------------------- finding 4 (act growth)


def periln_like(placement, step, layer, seed):
    growth = 1 + 0.3 * layer * step / 100 if placement == "pre" else 1 + 0.02 * layer * step / 100
    return (1 + 0.01 * seed) * growth


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        (periln_like, REPRODUCED),
        (lambda pl, st, la, se: periln_like("double" if pl == "pre" else "pre", st, la, se), NOT_REPRODUCED),
    ],
)
def test_act_growth_verdict(tmp_path, profile, expected):
    rs = load_runs(act_rms_sweep(tmp_path / "sweep", profile))
    outcome = evaluate("periln_act_growth", rs)
    assert outcome.verdict == expected, [(c.name, c.est, c.verdict) for c in outcome.checks]


# --------------------------------------------------------------------------- finding 5 (RMSNorm)


@pytest.mark.parametrize(
    ("losses", "log_ratio", "se", "expected"),
    [
        (
            {"ln": [3.0, 3.02, 2.98], "rms": [3.01, 2.99, 3.0]},
            0.10,
            0.01,
            REPRODUCED,
        ),  # same loss, 10 % faster
        ({"ln": [3.0, 3.02, 2.98], "rms": [3.01, 2.99, 3.0]}, -0.10, 0.01, NOT_REPRODUCED),  # slower
        ({"ln": [3.0, 3.02, 2.98], "rms": [3.5, 3.52, 3.48]}, 0.10, 0.01, NOT_REPRODUCED),  # worse loss
        (
            {"ln": [3.0, 3.02, 2.98], "rms": [3.01, 2.99, 3.0]},
            0.002,
            0.01,
            INCONCLUSIVE,
        ),  # speed within noise
    ],
)
def test_rmsnorm_verdict(tmp_path, losses, log_ratio, se, expected):
    sweep = rms_sweep(tmp_path / "sweep", losses, log_ratio, se)
    rs, outcome = evaluate_sweep("rmsnorm_speed", sweep)
    assert outcome.verdict == expected, [(c.name, c.est, c.verdict) for c in outcome.checks]
    assert any("norm share of step time" in row for row in outcome.table)
    assert FINDINGS["rmsnorm_speed"].draw(rs, {"profile": None})  # figures without a profile too


def test_every_finding_has_a_preset_and_a_claim(repo_root):
    presets = {p.stem for p in (repo_root / "configs" / "experiment").glob("*.yaml")}
    assert set(FINDINGS) <= presets
    assert [f.number for f in FINDINGS.values()] == list(range(1, 9))
    assert {f.number for f in FINDINGS.values() if f.core} == {1, 2, 4, 5}
    for f in FINDINGS.values():
        assert f.claim.endswith(".") and f.source
