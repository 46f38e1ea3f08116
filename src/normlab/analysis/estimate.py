"""The one statistics vocabulary of every report: an `Estimate` over seeds and its confidence interval.

An estimate is a mean over seeds (or a difference or other linear combination of such means) with its
standard error (sample standard deviations, ddof=1) and degrees of freedom: n − 1 for one group,
Welch–Satterthwaite for a difference or any other combination of independent groups. Its intervals use
Student-t quantiles, never the normal ones: with 2–3 seeds, "twice the standard error" is a test at
15–9 %, not 5 %.

Each report states its confidence level once and formats every interval it shows at that level with
`fmt_ci` (the interval) or `fmt_estimate` (the value and its interval): report.md (`LEVEL`,
two-sided 95 %: it compares variants without a direction claimed in advance) and the findings' REPORT.md
(`normlab.study.verdicts.CONFIDENCE`, 90 %: the two-sided interval of one-sided 5 % tests of a direction
a paper claims).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

LEVEL = 0.95  # the confidence level of every interval in report.md (two-sided: no direction claimed)


@dataclass(frozen=True)
class Estimate:
    """A mean effect over seeds: its value, standard error, degrees of freedom and sample size.

    `se` is NaN when there is no noise estimate (fewer than two values); `df` is infinite for a constant
    known exactly (se = 0) and NaN when unknown. Sums, differences and scalings of independent
    estimates combine the standard errors in quadrature and the degrees of freedom by
    Welch–Satterthwaite: df = (Σ sᵢ²)² / Σ (sᵢ⁴ / dfᵢ).
    """

    value: float
    se: float
    df: float
    n: int

    @classmethod
    def constant(cls, value: float) -> Estimate:
        """A number known exactly (a threshold in a statistic such as b + ¼)."""
        return cls(float(value), 0.0, math.inf, 0)

    def __add__(self, other: Estimate | float) -> Estimate:
        other = _as_estimate(other)
        return _combine([(1.0, self), (1.0, other)])

    def __sub__(self, other: Estimate | float) -> Estimate:
        other = _as_estimate(other)
        return _combine([(1.0, self), (-1.0, other)])

    def __neg__(self) -> Estimate:
        return self.scale(-1.0)

    def scale(self, k: float) -> Estimate:
        return Estimate(self.value * k, self.se * abs(k), self.df, self.n)

    @property
    def has_noise(self) -> bool:
        """Whether a test is possible: a finite value and a positive, finite standard error."""
        return (
            math.isfinite(self.value)
            and math.isfinite(self.se)
            and self.se > 0
            and (math.isinf(self.df) or (math.isfinite(self.df) and self.df > 0))
        )

    def t_crit(self, alpha: float) -> float:
        """The one-sided Student-t critical value t_{1−α, df}."""
        if not self.has_noise:
            return math.nan
        return float(stats.norm.ppf(1 - alpha) if math.isinf(self.df) else stats.t.ppf(1 - alpha, self.df))

    def interval(self, alpha: float) -> tuple[float, float]:
        """(lo, hi): the two one-sided (1 − α) bounds, i.e. the two-sided 1 − 2α confidence interval;
        (NaN, NaN) without a noise estimate."""
        t = self.t_crit(alpha)
        if not math.isfinite(t):
            return math.nan, math.nan
        return self.value - t * self.se, self.value + t * self.se

    def ci(self, level: float) -> tuple[float, float]:
        """The two-sided `level` confidence interval (0.95: the 2.5 % and 97.5 % bounds)."""
        return self.interval((1 - level) / 2)

    def p_greater(self, threshold: float = 0.0) -> float:
        """One-sided p-value of H0: effect ≤ threshold."""
        if not self.has_noise:
            return math.nan
        t = (self.value - threshold) / self.se
        return float(stats.norm.sf(t) if math.isinf(self.df) else stats.t.sf(t, self.df))


def _as_estimate(x: Estimate | float) -> Estimate:
    return x if isinstance(x, Estimate) else Estimate.constant(float(x))


def welch_df(parts: Sequence[tuple[float, float]]) -> float:
    """Welch–Satterthwaite degrees of freedom of Σ cᵢ Xᵢ from (scaled se cᵢ·sᵢ, dfᵢ) pairs."""
    num, den = 0.0, 0.0
    for s, df in parts:
        if not math.isfinite(s):
            return math.nan
        if s == 0:
            continue  # an exactly known part carries no noise
        if not (math.isinf(df) or (math.isfinite(df) and df > 0)):
            return math.nan
        num += s * s
        den += 0.0 if math.isinf(df) else s**4 / df
    if num == 0:
        return math.inf
    return math.inf if den == 0 else num * num / den


def _combine(terms: Sequence[tuple[float, Estimate]]) -> Estimate:
    value = sum(c * e.value for c, e in terms)
    scaled = [(abs(c) * e.se, e.df) for c, e in terms]
    if any(not math.isfinite(s) for s, _ in scaled):
        se, df = math.nan, math.nan
    else:
        se = math.sqrt(sum(s * s for s, _ in scaled))
        df = welch_df(scaled)
    sizes = [e.n for _, e in terms if e.n > 0]
    return Estimate(value, se, df, min(sizes) if sizes else 0)


def combination(terms: Iterable[tuple[float, Estimate]]) -> Estimate:
    """Σ cᵢ·Eᵢ of independent estimates (Welch–Satterthwaite degrees of freedom)."""
    return _combine(list(terms))


def finite_values(values: Iterable[float | None]) -> np.ndarray:
    """The finite numbers among `values` (None, NaN, ±inf and non-numbers left out)."""
    out = []
    for x in values:
        if x is None:
            continue
        try:
            f = float(x)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out.append(f)
    return np.array(out, dtype=float)


def estimate(values: Iterable[float | None]) -> Estimate:
    """Mean of the finite values, its standard error (sample std / √n) and n − 1 degrees of freedom."""
    v = finite_values(values)
    if v.size == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    if v.size == 1:
        return Estimate(float(v[0]), math.nan, math.nan, 1)
    return Estimate(float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)), float(v.size - 1), int(v.size))


def difference(a: Iterable[float | None], b: Iterable[float | None]) -> Estimate:
    """mean(a) − mean(b) of independent groups: Welch's standard error √(s_a²/n_a + s_b²/n_b) and the
    Welch–Satterthwaite degrees of freedom (the interval of Welch's unequal-variances t-test)."""
    return estimate(a) - estimate(b)


# ------------------------------------------------------------------------------------------ formatting


def _number(x: float, digits: int, significant: bool) -> str:
    return f"{x:+.{digits}{'g' if significant else 'f'}}"


def fmt_ci(e: Estimate, level: float, digits: int = 3, *, significant: bool = False) -> str:
    """'[+0.120, +0.806]': the two-sided `level` confidence interval of `e`, or '' when it has none (one
    seed, or seeds that agree exactly). `digits` decimals, or significant digits with `significant`."""
    lo, hi = e.ci(level)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return ""
    return f"[{_number(lo, digits, significant)}, {_number(hi, digits, significant)}]"


def fmt_estimate(
    e: Estimate, level: float, digits: int = 3, *, unit: str = "", significant: bool = False
) -> str:
    """'+0.463 [+0.120, +0.806] nats': the value and its `fmt_ci` interval; '+0.463 nats (no noise
    estimate)' without one; '–' without a value."""
    if not math.isfinite(e.value):
        return "–"
    unit = f" {unit}" if unit else ""
    value = _number(e.value, digits, significant)
    ci = fmt_ci(e, level, digits, significant=significant)
    return f"{value} {ci}{unit}" if ci else f"{value}{unit} (no noise estimate)"


def fmt_signed(x: float, digits: int = 3) -> str:
    """'+0.200', '-0.031', '0.000' (signed as the intervals are, `fmt_ci`)."""
    if round(x, digits) == 0:
        return f"{0:.{digits}f}"
    return f"{x:+.{digits}f}"


def ci_label(level: float) -> str:
    """'95 % CI': how a report names its intervals."""
    return f"{100 * level:.0f} % CI"
