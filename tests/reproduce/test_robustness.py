"""Preconditions ("not tested here") and the robustness line (leave one seed out, a perturbation), on
crafted sweeps whose numbers decide the answer: each check here can come out either way."""

from __future__ import annotations

from reproduce_crafted import warmup_sweep

from normlab.analysis.estimate import Estimate
from normlab.analysis.load import load_runs
from normlab.study.findings import evaluate
from normlab.study.robustness import Robustness, Variation, leave_one_seed_out, perturbed_dir, robustness_of
from normlab.study.verdicts import (
    INCONCLUSIVE,
    NOT_REPRODUCED,
    NOT_TESTED,
    REPRODUCED,
    SETUP_FAILED,
    Outcome,
    Precondition,
    check,
)

# ------------------------------------------------------------------------------------ preconditions


def shown(value: float, se: float = 0.01, margin: float = 0.0):
    return check("without X, Y happens", "Y without X", Estimate(value, se, 4, 5), margin=margin)


def test_an_unmet_precondition_makes_the_finding_not_tested_whatever_its_checks_say():
    claim = shown(1.0)  # the claim's own check would be reproduced
    missing = Precondition.shown_by(shown(0.0), remedy="Run longer.")
    outcome = Outcome.of([claim], preconditions=[missing])
    assert outcome.verdict == NOT_TESTED
    assert not missing.met and missing.sentence.endswith("Run longer.")
    assert "did not happen" in missing.sentence and "precondition" in outcome.parts


def test_a_met_precondition_lets_the_checks_decide():
    present = Precondition.shown_by(shown(1.0))
    assert present.met
    assert Outcome.of([shown(1.0)], preconditions=[present]).verdict == REPRODUCED
    assert Outcome.of([shown(-1.0)], preconditions=[present]).verdict == NOT_REPRODUCED


def test_a_precondition_that_cannot_be_told_is_not_met():
    unknown = Precondition("Y happens", "no runs without X", None)
    assert Outcome.of([shown(1.0)], preconditions=[unknown]).verdict == NOT_TESTED
    assert "cannot be told" in unknown.sentence


def test_setup_failure_comes_before_a_missing_precondition():
    outcome = Outcome.of(
        [shown(1.0)], preconditions=[Precondition("Y", "none", False)], setup_failures=["no learning"]
    )
    assert outcome.verdict == SETUP_FAILED


# ---------------------------------------------------------------------------------------- robustness


def warmup_losses(post_without: list[float], seeds: int) -> dict[tuple[str, int], list[float]]:
    """Finding 2 with Pre-LN at 3.0 and Post-LN with warm-up at 3.0 (± a little), Post-LN without
    warm-up as given per seed."""
    wobble = [0.01 * ((i % 3) - 1) for i in range(seeds)]
    return {
        ("pre", 0): [3.0 + w for w in wobble],
        ("pre", 100): [2.95 + w for w in wobble],
        ("post", 0): post_without,
        ("post", 100): [3.0 - w for w in wobble],
    }


def test_a_verdict_that_rests_on_one_outlier_seed_is_reported_as_flipping(tmp_path):
    # four seeds where Post-LN without warm-up is 0.1 worse than with it (a gap, but warm-up closing it
    # is the claim's second part), one seed where it is 0.6 worse: that seed alone keeps the interval wide
    losses = warmup_losses([3.1, 3.1, 3.1, 3.1, 3.6], seeds=5)
    rs = load_runs(warmup_sweep(tmp_path / "outlier", losses))
    full = evaluate("xiong_warmup", rs).verdict
    robust = robustness_of("xiong_warmup", rs, full)
    dropped = {v.what: v.verdict for v in robust.variations}
    assert set(dropped) == {f"seed {s} dropped" for s in range(5)}
    assert full == INCONCLUSIVE and dropped["seed 4 dropped"] == NOT_REPRODUCED
    assert all(dropped[f"seed {s} dropped"] == INCONCLUSIVE for s in range(4))
    assert robust.summary == "flips when seed 4 is dropped (→ not reproduced)"


def test_a_verdict_two_of_three_seeds_carry_flips_when_either_is_dropped(tmp_path):
    rs = load_runs(warmup_sweep(tmp_path / "three", warmup_losses([3.3, 3.31, 3.32, 3.33, 3.9], seeds=5)))
    full = evaluate("xiong_warmup", rs).verdict
    robust = robustness_of("xiong_warmup", rs, full)
    assert full == REPRODUCED  # the fifth seed's large gap lifts the mean over the margin
    assert robust.summary == "flips when seed 0 or 1 or 2 or 3 is dropped (→ inconclusive)"


def test_a_verdict_every_seed_supports_is_stable(tmp_path):
    losses = warmup_losses([4.5, 4.6, 4.4, 4.55, 4.45], seeds=5)
    rs = load_runs(warmup_sweep(tmp_path / "clear", losses))
    full = evaluate("xiong_warmup", rs).verdict
    robust = robustness_of("xiong_warmup", rs, full)
    assert full == REPRODUCED and robust.stable
    assert robust.summary == "stable (each of 5 seeds dropped)"


def test_the_perturbed_sweep_beside_the_preset_joins_the_line(tmp_path):
    sweep = warmup_sweep(tmp_path / "sweeps" / "xiong_warmup", warmup_losses([4.5, 4.6, 4.4], seeds=3))
    warmup_sweep(perturbed_dir(sweep), warmup_losses([3.0, 3.01, 2.99], seeds=3))  # no gap there
    rs = load_runs(sweep)
    robust = robustness_of("xiong_warmup", rs, evaluate("xiong_warmup", rs).verdict, sweep)
    perturbed = [v for v in robust.variations if not v.what.startswith("seed")]
    assert [v.verdict for v in perturbed] == [NOT_REPRODUCED]
    assert f"flips under {perturbed[0].what} (→ not reproduced)" in robust.summary


def test_one_seed_cannot_be_dropped():
    assert Robustness(REPRODUCED, ()).summary == "not checked (one seed)"


def test_leave_one_seed_out_evaluates_without_each_seed(tmp_path):
    rs = load_runs(warmup_sweep(tmp_path / "s", warmup_losses([4.5, 4.6, 4.4], seeds=3)))
    seen = []

    def spy(sub):
        seen.append(sorted(sub.valid["seed"].astype(int).unique()))
        return Outcome.of([])

    out = leave_one_seed_out(spy, rs)
    assert seen == [[1, 2], [0, 2], [0, 1]]
    assert [v.verdict for v in out] == [INCONCLUSIVE] * 3


def test_the_summary_names_each_flip_and_its_direction():
    r = Robustness(
        REPRODUCED,
        (
            Variation("seed 0 dropped", REPRODUCED),
            Variation("seed 1 dropped", INCONCLUSIVE),
            Variation("seed 2 dropped", INCONCLUSIVE),
            Variation("lr × ½", NOT_REPRODUCED),
        ),
    )
    assert r.summary == (
        "flips when seed 1 or 2 is dropped (→ inconclusive); flips under lr × ½ (→ not reproduced)"
    )
