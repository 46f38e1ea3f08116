"""Verdict rules: turn a measured effect and its seed noise into *reproduced*, *not reproduced* or
*inconclusive*.

Every check of a finding is phrased so that a **positive** estimate is the direction the paper claims.
Its noise is the standard error (SE) of the estimate over seeds (sample standard deviations, ddof=1),
never smaller than a stated floor (two seeds can agree by chance to a few decimals):

- reproduced: estimate > Z · noise (a clear effect in the claimed direction);
- not reproduced: estimate < −Z · noise (a clear effect in the opposite direction);
- inconclusive: in between (the effect is within seed noise), or no noise estimate (a single seed).

Claims of *equality* ("matches within seed noise") use `classify_match` instead. A finding's verdict
combines its checks (`combine`): reproduced when every check is, not reproduced when any check is, else
inconclusive. Nothing here looks at which verdict a finding "should" get.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)

Z = 2.0  # how many noise units an effect must exceed to count as clear

RULE = (
    "A check passes (*reproduced*) when its estimate, signed so that positive is the claimed direction, "
    f"exceeds {Z:g} × its noise; it fails (*not reproduced*) below −{Z:g} × noise; in between it is "
    "*inconclusive* (within seed noise). Noise = the standard error over seeds (sample std, ddof=1), never "
    "below the check's stated floor; with a single seed there is no noise estimate and the check is "
    "inconclusive. A finding is *reproduced* when all its checks pass, *not reproduced* when any fails, "
    "and *inconclusive* otherwise."
)


@dataclass
class Estimate:
    """A mean effect, its standard error over seeds and the number of values behind it."""

    value: float
    se: float  # NaN when there is no noise estimate
    n: int

    def __sub__(self, other: Estimate) -> Estimate:
        return Estimate(self.value - other.value, _hypot(self.se, other.se), min(self.n, other.n))

    def __add__(self, other: Estimate) -> Estimate:
        return Estimate(self.value + other.value, _hypot(self.se, other.se), min(self.n, other.n))

    def scale(self, k: float) -> Estimate:
        return Estimate(self.value * k, self.se * abs(k), self.n)

    def __neg__(self) -> Estimate:
        return self.scale(-1.0)


def _hypot(a: float, b: float) -> float:
    return math.sqrt(a * a + b * b) if math.isfinite(a) and math.isfinite(b) else math.nan


def estimate(values: Iterable[float]) -> Estimate:
    """Mean and standard error of the mean (sample std / √n) of finite values; SE is NaN for n < 2."""
    v = np.array([float(x) for x in values if x is not None and math.isfinite(float(x))], dtype=float)
    if v.size == 0:
        return Estimate(math.nan, math.nan, 0)
    se = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan
    return Estimate(float(v.mean()), se, int(v.size))


def difference(a: Iterable[float], b: Iterable[float]) -> Estimate:
    """mean(a) − mean(b) with Welch's standard error √(s_a²/n_a + s_b²/n_b) (independent seeds)."""
    return estimate(a) - estimate(b)


@dataclass
class Check:
    """One measurable part of a claim, its estimate and the verdict of its rule."""

    name: str  # what is tested, in words: "Post-LN's last-layer gradient does not shrink with depth"
    statistic: str  # how the estimate is computed, in words
    est: Estimate
    floor: float  # the smallest noise the rule assumes
    verdict: str = INCONCLUSIVE
    unit: str = ""
    counts: bool = True  # False: reported, but not part of the finding's verdict
    rule: str = ""  # the rule in words, when it is not the default one

    @property
    def noise(self) -> float:
        return max(self.est.se, self.floor) if math.isfinite(self.est.se) else math.nan

    @property
    def z(self) -> float:
        noise = self.noise
        if not math.isfinite(noise) or noise == 0 or not math.isfinite(self.est.value):
            return math.nan
        return self.est.value / noise


def classify(est: Estimate, floor: float = 0.0, z: float = Z) -> str:
    """The directional rule: positive estimate = claimed direction (see the module docstring)."""
    if not math.isfinite(est.value) or not math.isfinite(est.se):
        return INCONCLUSIVE
    noise = max(est.se, floor)
    if est.value > z * noise:
        return REPRODUCED
    if est.value < -z * noise:
        return NOT_REPRODUCED
    return INCONCLUSIVE


def check(
    name: str, statistic: str, est: Estimate, floor: float, unit: str = "", counts: bool = True
) -> Check:
    """A directional check, classified."""
    return Check(name, statistic, est, floor, classify(est, floor), unit=unit, counts=counts)


def classify_match(est: Estimate, floor: float, margin: float, z: float = Z) -> str:
    """An equality claim ("B matches A within seed noise"; est = how much worse B is than A):

    - not reproduced when B is worse by more than Z · noise;
    - reproduced when it is not, and the test could have seen a difference of `margin`
      (Z · noise ≤ margin);
    - inconclusive when the noise is too large to tell (Z · noise > margin) or unknown.
    """
    if not math.isfinite(est.value) or not math.isfinite(est.se):
        return INCONCLUSIVE
    noise = max(est.se, floor)
    if est.value > z * noise:
        return NOT_REPRODUCED
    if z * noise > margin:
        return INCONCLUSIVE
    return REPRODUCED


def match_check(
    name: str, statistic: str, est: Estimate, floor: float, margin: float, unit: str = ""
) -> Check:
    rule = (
        f"equality claim: *not reproduced* if worse by more than {Z:g} × noise; *reproduced* if not, "
        f"provided {Z:g} × noise ≤ {margin:g}{(' ' + unit) if unit else ''} (the test can see a difference "
        "that size); otherwise *inconclusive*"
    )
    return Check(name, statistic, est, floor, classify_match(est, floor, margin), unit=unit, rule=rule)


def combine(checks: Sequence[Check]) -> str:
    """All counted checks reproduced → reproduced; any not reproduced → not reproduced; else inconclusive."""
    counted = [c.verdict for c in checks if c.counts]
    if not counted:
        return INCONCLUSIVE
    if NOT_REPRODUCED in counted:
        return NOT_REPRODUCED
    if all(v == REPRODUCED for v in counted):
        return REPRODUCED
    return INCONCLUSIVE


@dataclass
class Outcome:
    """A finding's measured numbers and verdict."""

    verdict: str
    checks: list[Check]
    table: list[dict[str, object]] = field(default_factory=list)  # measured numbers, one row per variant
    notes: list[str] = field(default_factory=list)
    preconditions: list[str] = field(default_factory=list)  # failed preconditions force inconclusive

    @classmethod
    def of(cls, checks: list[Check], **kw) -> Outcome:
        out = cls(verdict=combine(checks), checks=checks, **kw)
        if out.preconditions:
            out.verdict = INCONCLUSIVE
        return out

    @property
    def parts(self) -> str:
        counted = [c for c in self.checks if c.counts]
        passed = sum(c.verdict == REPRODUCED for c in counted)
        return f"{passed}/{len(counted)} checks reproduced"
