"""The verdict statistics against independent references and on simulated seeds.

References: scipy's Welch t-test (`ttest_ind(equal_var=False)`) and one-sample t-test, the textbook
Welch–Satterthwaite formula. Simulations: many replications of a few seeds drawn from a chosen truth —
a null effect must be called *reproduced* at most ALPHA of the time (up to Monte-Carlo error), a true
effect must be found. Each simulation also runs the rule this project used before (an effect larger
than twice its standard error, normal quantiles) on the same draws and shows that it fails the same bound:
the bound is tight enough to catch a lenient rule, so these tests can fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from normlab.analysis.estimate import Estimate, combination, difference, estimate, welch_df
from normlab.study.verdicts import (
    ALPHA,
    INCONCLUSIVE,
    NOT_REPRODUCED,
    REPRODUCED,
    classify,
    classify_equivalence,
)

REPS = 4000


def mc_bound(p: float, reps: int = REPS) -> float:
    """p plus three Monte-Carlo standard errors: a rate at or below p stays below this."""
    return p + 3 * math.sqrt(p * (1 - p) / reps)


def z_rule(est: Estimate) -> str:
    """The old rule: reproduced when the estimate exceeds 2 standard errors (a z-test on few seeds)."""
    return REPRODUCED if est.value > 2 * est.se else INCONCLUSIVE


# ---------------------------------------------------------------------------------- references


def test_estimate_is_mean_standard_error_and_n_minus_one_df():
    e = estimate([1.0, 2.0, 3.0])
    assert (e.value, e.n, e.df) == (pytest.approx(2.0), 3, 2)
    assert e.se == pytest.approx(1.0 / math.sqrt(3))
    one = estimate([1.0])
    assert math.isnan(one.se) and not one.has_noise
    assert estimate([float("nan"), 2.0, None]).n == 1


def test_welch_difference_matches_scipy():
    rng = np.random.default_rng(1)
    for _ in range(20):
        a = rng.normal(0.3, rng.uniform(0.5, 2), size=rng.integers(2, 7))
        b = rng.normal(0.0, rng.uniform(0.5, 2), size=rng.integers(2, 7))
        d = difference(a, b)
        ref = stats.ttest_ind(a, b, equal_var=False, alternative="greater")
        assert d.value / d.se == pytest.approx(ref.statistic)
        assert d.p_greater() == pytest.approx(ref.pvalue)
        va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
        textbook = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
        assert d.df == pytest.approx(textbook)


def test_one_sample_matches_scipy():
    x = np.array([0.4, 1.1, 0.2, 0.9])
    ref = stats.ttest_1samp(x, 0.0, alternative="greater")
    assert estimate(x).p_greater() == pytest.approx(ref.pvalue)


def test_interval_uses_student_t_quantiles():
    e = estimate([1.0, 2.0, 4.0])
    lo, hi = e.interval(ALPHA)
    assert e.ci(1 - 2 * ALPHA) == (lo, hi)
    t = stats.t.ppf(1 - ALPHA, 2)  # 2.92 with 2 degrees of freedom, not 1.64 or 2
    assert (lo, hi) == (pytest.approx(e.value - t * e.se), pytest.approx(e.value + t * e.se))


def test_constants_carry_no_noise_and_combinations_use_welch_satterthwaite():
    e = estimate([1.0, 2.0, 4.0])
    shifted = e - Estimate.constant(0.25)
    assert (shifted.value, shifted.se, shifted.df) == (pytest.approx(e.value - 0.25), e.se, e.df)
    a, b, c = estimate([1, 2, 3.5]), estimate([0, 1, 1, 3]), estimate([2, 2.5])
    comb = combination([(0.5, a), (-1.0, b), (2.0, c)])
    parts = [(0.5 * a.se, a.df), (1.0 * b.se, b.df), (2.0 * c.se, c.df)]
    assert comb.se == pytest.approx(math.sqrt(sum(s * s for s, _ in parts)))
    assert comb.df == pytest.approx(welch_df(parts))
    assert comb.df == pytest.approx(sum(s * s for s, _ in parts) ** 2 / sum(s**4 / d for s, d in parts))


@pytest.mark.parametrize(
    ("value", "se", "df", "margin", "expected"),
    [
        (1.0, 0.1, 4, 0.0, REPRODUCED),  # clearly positive
        (-1.0, 0.1, 4, 0.0, NOT_REPRODUCED),  # clearly the other way
        (0.1, 0.1, 4, 0.0, INCONCLUSIVE),  # within noise
        (0.2, 0.1, 1, 0.0, INCONCLUSIVE),  # z = 2 but 1 degree of freedom: t₀.₉₅ = 6.3
        (0.0, 0.01, 4, 0.1, NOT_REPRODUCED),  # no effect, and the test could see one of size 0.1
        (0.0, 0.2, 4, 0.1, INCONCLUSIVE),  # no effect, but too noisy to rule out 0.1
        (0.05, 0.005, 4, 0.1, NOT_REPRODUCED),  # a real effect, but shown smaller than the margin
        (0.078, 0.004, 4, 0.1, NOT_REPRODUCED),  # finding 4's second check: below its margin of 0.1
        (0.078, 0.02, 4, 0.1, INCONCLUSIVE),  # positive, but not shown to reach the margin: never reproduced
        (0.12, 0.02, 4, 0.1, INCONCLUSIVE),  # above the margin, but its interval reaches below it
        (0.15, 0.02, 4, 0.1, REPRODUCED),  # the whole interval above the margin
        (1.0, 0.0, 4, 0.0, INCONCLUSIVE),  # seeds that agree exactly: no noise estimate
        (1.0, math.nan, math.nan, 0.0, INCONCLUSIVE),  # a single seed
    ],
)
def test_directional_rule(value, se, df, margin, expected):
    assert classify(Estimate(value, se, df, 5), margin) == expected


@pytest.mark.parametrize(
    ("value", "se", "expected"),
    [
        (0.005, 0.01, REPRODUCED),  # equal within ±0.1, and the interval fits inside
        (0.5, 0.01, NOT_REPRODUCED),  # differs by more than the margin
        (-0.5, 0.01, NOT_REPRODUCED),  # either way
        (0.05, 0.2, INCONCLUSIVE),  # too noisy to tell
        (0.09, 0.01, INCONCLUSIVE),  # inside the margin but its interval crosses it
    ],
)
def test_equivalence_rule(value, se, expected):
    assert classify_equivalence(Estimate(value, se, 4, 5), margin=0.1) == expected


# -------------------------------------------------------------------------------- simulations


def simulate(draw, rule, reps: int = REPS, seed: int = 0) -> dict[str, float]:
    """The rate of each verdict of `rule(draw(rng))` over `reps` replications."""
    rng = np.random.default_rng(seed)
    counts: dict[str, int] = {}
    for _ in range(reps):
        v = rule(draw(rng))
        counts[v] = counts.get(v, 0) + 1
    return {k: n / reps for k, n in counts.items()}


NULL_CASES = {
    # one group of per-seed differences, 3 seeds (2 degrees of freedom)
    "paired, 3 seeds": lambda rng: estimate(rng.normal(0.0, 1.0, 3)),
    # two groups of 2 seeds each, equal spread
    "2 vs 2 seeds": lambda rng: difference(rng.normal(0, 1, 2), rng.normal(0, 1, 2)),
    # unequal sizes and spreads: Welch's case
    "3 vs 5 seeds, σ 3:1": lambda rng: difference(rng.normal(0, 3, 3), rng.normal(0, 1, 5)),
}


@pytest.mark.parametrize("case", list(NULL_CASES))
def test_null_effect_is_rarely_called_reproduced(case):
    draw = NULL_CASES[case]
    rate = simulate(draw, classify).get(REPRODUCED, 0.0)
    assert rate <= mc_bound(ALPHA), f"{case}: false-positive rate {rate:.3f} above α = {ALPHA}"


@pytest.mark.parametrize("case", ["paired, 3 seeds", "2 vs 2 seeds"])
def test_the_old_z_rule_fails_the_same_bound(case):
    """The same simulation catches a lenient rule: 2 standard errors on 2–3 seeds is not a 5 % test."""
    rate = simulate(NULL_CASES[case], z_rule).get(REPRODUCED, 0.0)
    assert rate > mc_bound(ALPHA), f"{case}: z-rule false-positive rate {rate:.3f} unexpectedly small"


def test_a_true_effect_is_found():
    """Power: a 2.5-σ difference with 5 seeds per variant is called reproduced almost always (the
    noncentral-t power of a one-sided Welch test there is ≈ 0.9), and never not reproduced."""
    rates = simulate(lambda rng: difference(rng.normal(2.5, 1, 5), rng.normal(0, 1, 5)), classify)
    assert rates.get(REPRODUCED, 0.0) >= 0.85
    assert rates.get(NOT_REPRODUCED, 0.0) == 0.0


def test_not_reproduced_is_rare_when_the_claim_holds_and_common_when_it_does_not():
    margin = 0.5
    holds = simulate(
        lambda rng: difference(rng.normal(margin, 0.3, 4), rng.normal(0, 0.3, 4)),
        lambda e: classify(e, margin),
    )
    assert holds.get(NOT_REPRODUCED, 0.0) <= mc_bound(ALPHA)
    absent = simulate(
        lambda rng: difference(rng.normal(0, 0.1, 5), rng.normal(0, 0.1, 5)), lambda e: classify(e, margin)
    )
    assert absent.get(NOT_REPRODUCED, 0.0) >= 0.85
    assert absent.get(REPRODUCED, 0.0) <= mc_bound(ALPHA)


def test_an_estimate_below_its_margin_is_never_reproduced():
    """Whatever its noise, an estimate smaller than the margin cannot be called reproduced."""
    rng = np.random.default_rng(3)
    for _ in range(2000):
        margin = rng.uniform(0.01, 1.0)
        value = margin * rng.uniform(-2.0, 0.999)
        est = Estimate(value, rng.uniform(1e-4, 1.0), float(rng.integers(1, 10)), 3)
        assert classify(est, margin) != REPRODUCED, (value, margin, est.interval(ALPHA))


def test_an_effect_exactly_at_the_margin_is_rarely_called_reproduced():
    """The margin is the smallest effect that counts: a true effect of exactly δ is the null of the test."""
    margin = 0.1
    rates = simulate(
        lambda rng: difference(rng.normal(margin, 0.05, 3), rng.normal(0, 0.05, 3)),
        lambda e: classify(e, margin),
    )
    assert rates.get(REPRODUCED, 0.0) <= mc_bound(ALPHA)
    found = simulate(
        lambda rng: difference(rng.normal(3 * margin, 0.05, 3), rng.normal(0, 0.05, 3)),
        lambda e: classify(e, margin),
    )
    assert found.get(REPRODUCED, 0.0) >= 0.85  # a clear effect above δ is found


def test_equivalence_at_the_margin_is_rarely_called_equal():
    """TOST: when the true difference sits exactly at the margin, "equal" is wrong — at most α of the time."""
    m = 0.1
    at_margin = simulate(
        lambda rng: difference(rng.normal(m, 0.05, 4), rng.normal(0, 0.05, 4)),
        lambda e: classify_equivalence(e, m),
    )
    assert at_margin.get(REPRODUCED, 0.0) <= mc_bound(ALPHA)
    equal = simulate(
        lambda rng: difference(rng.normal(0, 0.02, 5), rng.normal(0, 0.02, 5)),
        lambda e: classify_equivalence(e, m),
    )
    assert equal.get(REPRODUCED, 0.0) >= 0.85


def test_the_rule_printed_in_the_report_is_fully_formatted_and_names_the_interval_the_tables_use():
    """REPORT.md prints RULE verbatim: no placeholder may survive, and the interval it names is the one the
    tables show (CONFIDENCE)."""
    from normlab.study.verdicts import CONFIDENCE, RULE

    assert "{" not in RULE and "}" not in RULE
    assert f"two-sided {100 * CONFIDENCE:.0f} % confidence interval" in RULE
