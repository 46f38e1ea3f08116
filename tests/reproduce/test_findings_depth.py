"""Findings 11–13 (DyT, LayerNorm Scaling, Mix-LN) on fabricated sweeps with chosen numbers: the claimed
effect reproduces, the opposite does not, a missing premise ("Y never happened without X") is named as a
failed precondition, and runs that did not learn make the setup fail."""

from __future__ import annotations

import math

import pytest
from finding_checks import draws, jitter, verdicts
from reproduce_crafted import Sweep

from normlab.analysis import load_runs
from normlab.metrics import names
from normlab.study.findings import evaluate
from normlab.study.verdicts import INCONCLUSIVE, NOT_REPRODUCED, NOT_TESTED, REPRODUCED, SETUP_FAILED

DEPTH, END, WARMUP = 8, 100, 30


# ----------------------------------------------------------------------------- finding 11 (DyT)


def dyt_sweep(root, ln, dyt):
    sweep = Sweep(root, "dyt_vs_ln")
    for norm, losses in (("ln", ln), ("dyt", dyt)):
        for seed, loss in enumerate(losses):
            sweep.add({"norm.name": norm, "seed": seed, "norm.alpha_init": 0.5}, final_val=loss)
    return root


@pytest.mark.parametrize(
    ("dyt", "expected"),
    [
        ([3.01, 2.99, 3.0, 3.02, 2.98], REPRODUCED),  # equal within ±0.05
        ([3.3, 3.32, 3.28, 3.31, 3.29], NOT_REPRODUCED),  # 0.3 nats worse
        ([3.0, 3.3, 2.7, 3.2, 2.8], INCONCLUSIVE),  # too noisy to call equal
        ([5.72, 5.73, 5.71, 5.72, 5.73], SETUP_FAILED),  # DyT at the unigram loss: learned nothing
    ],
)
def test_dyt_verdict(tmp_path, dyt, expected):
    rs = load_runs(dyt_sweep(tmp_path / "sweep", [3.0, 3.02, 2.98, 3.01, 2.99], dyt))
    outcome = evaluate("dyt_vs_ln", rs)
    assert outcome.verdict == expected, verdicts(outcome)
    assert draws("dyt_vs_ln", rs) == 1


# ------------------------------------------------------------------ findings 12, 13 (depth probes)


def depth_run(sweep, placement, seed, *, growth, shallow, deep, peak=1.2, final=3.0):
    """One run: the stream's RMS rising to exp(growth) from block 0 to the last at the end (flat at step 0),
    each shallower block's removal costing `shallow` nats and each deeper block's `deep`, and a gradient
    norm of 1 after warm-up with one step at `peak`."""
    act = {
        step: {
            names.act_rms_layer(i): jitter(seed, i, step) * math.exp(g * i / (DEPTH - 1))
            for i in range(DEPTH)
        }
        for step, g in ((0, 0.0), (END, growth))
    }
    ablation = {
        names.layer_ablation(i): final + (shallow if i < DEPTH // 2 else deep) * jitter(seed, i, END)
        for i in range(DEPTH)
    }
    grads = [
        {names.STEP: s, names.GRAD_NORM: (peak if s == 60 else 1.0) * jitter(seed, 1, s)}
        for s in range(1, END)
    ]
    sweep.add(
        {"placement.name": placement, "seed": seed, "depth": DEPTH, "warmup_steps": WARMUP},
        final_val=final,
        rows=[{names.STEP: 0, **act[0]}, {names.STEP: END, **act[END], **ablation}, *grads],
    )


PAPER = {  # Pre-LN: the stream grows with depth and the deeper half contributes little
    "pre": {"growth": 0.8, "shallow": 0.3, "deep": 0.02},
    "lnscale": {"growth": 0.3, "shallow": 0.3, "deep": 0.08},
    "mixln": {"growth": 0.6, "shallow": 0.3, "deep": 0.08},
}


def depth_sweep(root, experiment, variants, seeds=(0, 1, 2)):
    sweep = Sweep(root, experiment)
    for placement, kw in variants.items():
        for seed in seeds:
            depth_run(sweep, placement, seed, **kw)
    return root


@pytest.mark.parametrize(
    ("changes", "expected", "precondition"),
    [
        ({}, REPRODUCED, None),
        ({"lnscale": {"growth": 0.9, "shallow": 0.3, "deep": 0.005}}, NOT_REPRODUCED, None),
        # no growth and no curse under Pre-LN: nothing for LayerNorm Scaling to curb or lift
        ({"pre": {"growth": 0.0, "shallow": 0.05, "deep": 0.05}}, None, "no growth"),
    ],
)
def test_lnscale_verdict(tmp_path, changes, expected, precondition):
    variants = {pl: {**PAPER[pl], **changes.get(pl, {})} for pl in ("pre", "lnscale")}
    rs = load_runs(depth_sweep(tmp_path / "sweep", "lnscale_depth", variants))
    outcome = evaluate("lnscale_depth", rs)
    assert draws("lnscale_depth", rs) == 2
    if precondition:
        assert outcome.verdict == NOT_TESTED  # no growth, no curse: nothing for LayerNorm Scaling to curb
        assert [p.met for p in outcome.preconditions] == [False, False]
        assert "Under Pre-LN the residual stream grows with depth" in outcome.unmet[0].sentence
        return
    assert outcome.verdict == expected, verdicts(outcome)
    assert all(p.met for p in outcome.preconditions)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, REPRODUCED),
        ({"mixln": {**PAPER["mixln"], "peak": 3.0}}, NOT_REPRODUCED),  # deeper blocks help, training spikes
        ({"mixln": {**PAPER["mixln"], "deep": 0.0}}, NOT_REPRODUCED),  # deeper blocks contribute less
    ],
)
def test_mixln_verdict(tmp_path, changes, expected):
    variants = {pl: changes.get(pl, PAPER[pl]) for pl in ("pre", "mixln")}
    rs = load_runs(depth_sweep(tmp_path / "sweep", "mixln_depth", variants))
    outcome = evaluate("mixln_depth", rs)
    assert outcome.verdict == expected, verdicts(outcome)
    assert draws("mixln_depth", rs) == 2


def test_mixln_without_a_deficit_under_pre_ln_is_a_failed_precondition(tmp_path):
    variants = {"pre": {**PAPER["pre"], "deep": 0.3}, "mixln": PAPER["mixln"]}
    outcome = evaluate("mixln_depth", load_runs(depth_sweep(tmp_path / "sweep", "mixln_depth", variants)))
    assert outcome.verdict == NOT_TESTED
    assert "deeper blocks contribute less" in outcome.unmet[0].name
