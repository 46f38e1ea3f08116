"""Verdict rules: turn a measured effect and its seed-to-seed spread into *reproduced*, *not reproduced*,
*inconclusive* — or *not tested here* when the phenomenon a claim is about did not happen in these runs,
or *setup failed* when the runs cannot test the claim at all.

Every check is phrased so that a **positive** estimate is the direction the source claims. Estimates
(a mean over seeds or a combination of such means, with Student-t intervals) are
`normlab.analysis.estimate.Estimate`, the one vocabulary of every report.

All tests are one-sided at level ALPHA (5 %); the tables show the matching two-sided 1 − 2·ALPHA (90 %)
interval [lo, hi], so every decision can be read off the interval:

- **directional claim** (`check`, "A is larger than B"), with a stated *margin* δ ≥ 0 — the smallest
  effect that counts as the claimed one: *reproduced* when lo > δ (the effect is at least δ at level
  ALPHA), *not reproduced* when hi < δ (the effect, if any, is smaller than δ at level ALPHA: this
  includes a clear effect the other way, and a real effect too small to be the claimed one),
  *inconclusive* otherwise. So an estimate below its own margin is never reproduced.
- **equality claim** (`equivalence_check`, "A matches B within m"), two one-sided tests (TOST) against
  the stated margin m: reproduced when −m < lo and hi < m; not reproduced when lo > m or hi < −m (the
  difference exceeds the margin at level ALPHA); inconclusive otherwise.

A check without a noise estimate (one seed, or seeds that agree exactly) is inconclusive.

A finding is *reproduced* when every counted check is (an intersection–union test: the chance of
calling a finding reproduced when any of its claims is false stays ≤ ALPHA), *not reproduced* when any
counted check is not (with k checks, the chance of that call when every claim holds is ≤ k · ALPHA),
*inconclusive* otherwise. Two conditions come first. *Setup failed*: runs the claim needs to have
learned did not (best validation loss not clearly below the corpus's unigram loss) — a comparison of
runs that learned nothing is not evidence. *Not tested here*: a claim "X prevents Y" needs Y to happen
without X; a finding declares such `Precondition`s, and when one is not shown in these runs its checks
cannot speak to the claim either way; a precondition of one part of a claim (`Precondition.part`)
leaves that part's checks `untested` and the others decide — the verdict then holds *in part*.
Nothing here looks at which verdict a finding "should" get.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from normlab.analysis.estimate import Estimate, fmt_estimate

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
NOT_TESTED = "not tested here"
SETUP_FAILED = "setup failed"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_TESTED, SETUP_FAILED)

ALPHA = 0.05  # level of every one-sided test
CONFIDENCE = 1 - 2 * ALPHA  # the two-sided interval shown in the tables (90 %)

RULE = (
    f"Every check is a one-sided test at level α = {ALPHA:g} on the mean over seeds, with Student-t "
    "critical values: n − 1 degrees of freedom for one group and for a difference between arms that ran "
    "the same seeds (paired by seed: each seed's difference, which removes what the arms share — data "
    "order, seed), Welch–Satterthwaite for arms that did not. Tables show the estimate and its two-sided "
    f"{100 * CONFIDENCE:.0f} % confidence interval [lo, hi], from which each verdict can be read. A *directional* claim is signed so that positive is "
    "the claimed direction and has a stated margin δ ≥ 0, the smallest effect that counts as the claimed "
    "one (from the paper where it reports a size, else a stated smallest effect of interest): it is "
    "*reproduced* only when lo > δ — the data show an effect of at least δ — and *not reproduced* when "
    "hi < δ — the effect, if any, is smaller than δ, which includes a clear effect the other way; an "
    "estimate below its own margin is therefore never called reproduced. An *equality* claim is tested "
    "by two one-sided tests against its stated margin m: *reproduced* when −m < lo and hi < m, *not "
    "reproduced* when lo > m or hi < −m. Anything else — and a check without a noise estimate (a single "
    "seed, or seeds that agree exactly) — is *inconclusive*. A finding is *reproduced* when all its "
    "counted checks are (so a finding is wrongly called reproduced at most α of the time), *not "
    "reproduced* when any is (at most k·α of the time for k checks when every claim holds), "
    "*inconclusive* otherwise. Two conditions come before the checks. *Setup failed*: runs that the "
    "claim needs to learn did not learn (best validation loss not clearly below the corpus's unigram "
    "loss) — runs that learned nothing are not evidence. *Not tested here*: the phenomenon a claim is "
    "about must be able to happen in the runs — a claim that X prevents or curbs Y needs Y to happen "
    "without X, a speed claim needs the norm's share of the step to exceed the claimed saving, a curse of "
    "depth needs deep blocks that contribute little; each such precondition is checked in the runs, and "
    "when one is not met the finding says what did not happen and at what scale it would, instead of a "
    "verdict its runs cannot support. A precondition of one part of a claim (z-loss's loss part needs the "
    "loss to suffer, its log-Z part needs log Z to diverge) leaves that part's checks *not tested here* "
    "and the other parts decide the verdict, which then says *in part*: a part whose premise did happen "
    "is reported, not hidden. Every check names where its source states what it tests, and the "
    "statistic used there. Under every verdict, *robustness* says whether it survives dropping any one "
    "seed (no new runs: the finding is re-evaluated on the remaining seeds), any variation on part of "
    "its runs the finding names, and one change of setup within the claim's premise the finding names as "
    "the most likely to matter (a second sweep), and which check moved. A change that removes the "
    "claim's premise (GPT-2's init for a theorem that assumes Xavier's) is a *scope* line, apart: the "
    "flip it may bring is what the theory predicts. A setup choice the source does not fix is a "
    "*dependence*: where the verdict differs under it, the verdict says what it depends on, with both "
    "outcomes' numbers."
)


# ------------------------------------------------------------------------------------------ checks


DIRECTIONAL = "directional"
EQUALITY = "equality"


@dataclass
class Check:
    """One measurable part of a claim, its estimate and the verdict of its rule."""

    name: str  # what is tested, in words: "Post-LN's last-layer gradient does not shrink with depth"
    statistic: str  # how the estimate is computed, in words
    est: Estimate
    verdict: str = INCONCLUSIVE
    unit: str = ""
    counts: bool = True  # False: reported, but not part of the finding's verdict
    kind: str = DIRECTIONAL
    margin: float = 0.0  # δ (directional) or m (equality)
    note: str = ""  # why the verdict is what it is, when the rule alone does not say (e.g. "no gap")
    # where the source states what this check tests, and the statistic it uses there ("Theorem 1 (§3.3):
    # ‖∂L/∂W^{2,L}‖_F at initialisation, against L"): what a referee checks the statistic against
    source: str = ""

    @property
    def interval(self) -> tuple[float, float]:
        """The two one-sided (1 − ALPHA) bounds: the CONFIDENCE interval every verdict is read from."""
        return self.est.interval(ALPHA)

    @property
    def rule(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        if self.kind == EQUALITY:
            return f"equality within ±{self.margin:.3g}{unit} (TOST)"
        if self.margin > 0:
            return f"> {self.margin:.3g}{unit}"
        return "> 0"


def classify(est: Estimate, margin: float = 0.0, alpha: float = ALPHA) -> str:
    """The directional rule (module docstring): positive = the claimed direction; reproduced only when the
    whole interval lies above the margin, not reproduced when it lies below it."""
    if not est.has_noise:
        return INCONCLUSIVE
    lo, hi = est.interval(alpha)
    if lo > margin:
        return REPRODUCED
    if hi < margin:
        return NOT_REPRODUCED
    return INCONCLUSIVE


def classify_equivalence(est: Estimate, margin: float, alpha: float = ALPHA) -> str:
    """Two one-sided tests against ±margin (module docstring)."""
    if not est.has_noise:
        return INCONCLUSIVE
    lo, hi = est.interval(alpha)
    if -margin < lo and hi < margin:
        return REPRODUCED
    if lo > margin or hi < -margin:
        return NOT_REPRODUCED
    return INCONCLUSIVE


def check(
    name: str,
    statistic: str,
    est: Estimate,
    margin: float = 0.0,
    unit: str = "",
    counts: bool = True,
    source: str = "",
) -> Check:
    """A directional check, classified; `margin` is the smallest effect that would count as the claim;
    `source` where the paper states it, and the statistic it uses there."""
    if margin < 0:
        raise ValueError(f"a margin is a size, got {margin}")
    return Check(
        name,
        statistic,
        est,
        classify(est, margin),
        unit=unit,
        counts=counts,
        kind=DIRECTIONAL,
        margin=margin,
        source=source,
    )


def equivalence_check(
    name: str,
    statistic: str,
    est: Estimate,
    margin: float,
    unit: str = "",
    counts: bool = True,
    source: str = "",
) -> Check:
    """An equality claim ("B matches A within ±margin"), by two one-sided tests."""
    if margin <= 0:
        raise ValueError(f"an equality claim needs a positive margin, got {margin}")
    return Check(
        name,
        statistic,
        est,
        classify_equivalence(est, margin),
        unit=unit,
        counts=counts,
        kind=EQUALITY,
        margin=margin,
        source=source,
    )


def undecided(
    name: str,
    statistic: str,
    est: Estimate,
    why: str,
    unit: str = "",
    counts: bool = True,
    kind: str = DIRECTIONAL,
    margin: float = 0.0,
    source: str = "",
) -> Check:
    """A check that cannot be decided from these runs (e.g. its premise was not established)."""
    return Check(
        name,
        statistic,
        est,
        INCONCLUSIVE,
        unit=unit,
        counts=counts,
        kind=kind,
        margin=margin,
        note=why,
        source=source,
    )


def untested(c: Check, why: str) -> Check:
    """`c` as a part of the claim that cannot be tested here: its precondition (the phenomenon that part is
    about) did not happen in these runs. Its estimate is still shown; it is left out of the verdict, which
    the other parts decide (a finding whose every part is untested is *not tested here*)."""
    return replace(c, verdict=NOT_TESTED, note=why)


def combine(checks: Sequence[Check]) -> str:
    """All counted checks reproduced → reproduced; any not reproduced → not reproduced; else inconclusive.
    Checks of a part that could not be tested here (`untested`) are left out; when that leaves none, the
    finding is not tested here."""
    every = [c.verdict for c in checks if c.counts]
    counted = [v for v in every if v != NOT_TESTED]
    if every and not counted:
        return NOT_TESTED
    if not counted:
        return INCONCLUSIVE
    if NOT_REPRODUCED in counted:
        return NOT_REPRODUCED
    if all(v == REPRODUCED for v in counted):
        return REPRODUCED
    return INCONCLUSIVE


@dataclass(frozen=True)
class Precondition:
    """Something that must happen in these runs before the claim can be tested at all: a claim that X
    prevents or curbs Y needs Y without X. `met` is None when the runs cannot tell."""

    name: str  # what must happen, in words: "without z-loss the loss diverges at lr 1"
    observed: str  # what the runs show, in numbers
    met: bool | None
    remedy: str = ""  # what would make it happen here (a longer horizon, a higher learning rate)
    check: Check | None = None  # the check that decided it, when one did (its estimate: robustness.py)
    # the part of the claim it is the premise of ("the loss part (check 2)"); empty: the whole claim. A
    # part's precondition that is not met makes that part's checks `untested`, not the whole finding
    part: str = ""

    @classmethod
    def shown_by(cls, c: Check, remedy: str = "", part: str = "") -> Precondition:
        """Met when a directional or equality check of the phenomenon is reproduced (at level ALPHA)."""
        value = fmt_estimate(c.est, CONFIDENCE, 3, unit=c.unit, significant=True)
        observed = f"{c.statistic}: {value}, needed {c.rule} ({c.verdict})"
        return cls(c.name, observed, c.verdict == REPRODUCED, remedy, c, part)

    @classmethod
    def all_of(
        cls, name: str, parts: Sequence[Precondition], remedy: str = "", part: str = ""
    ) -> Precondition:
        """Met when every part is (None when one cannot be told and none fails); the parts' numbers in
        `observed`, the first part that is not met as its deciding `check`."""
        states = [p.met for p in parts]
        met: bool | None = False if False in states else (None if None in states else True)
        observed = "; ".join(f"{p.name}: {p.observed}" for p in parts)
        failing = next((p for p in parts if not p.met), None)
        deciding = failing.check if failing is not None else next((p.check for p in parts if p.check), None)
        return cls(name, observed, met, remedy, deciding, part)

    @property
    def sentence(self) -> str:
        """'Not shown in these runs: NAME (OBSERVED). What would make it happen: REMEDY.'"""
        if self.met is None:
            state = "cannot be told from these runs"
        elif self.check is not None and self.check.verdict == INCONCLUSIVE:
            # an inconclusive test of the premise: it may have happened, too weakly to show
            state = "could not be shown in these runs"
        else:
            state = "did not happen in these runs"
        text = f"{self.name} — {state}: {self.observed}."
        return f"{text} {self.remedy}" if self.remedy else text


@dataclass
class Outcome:
    """A finding's measured numbers and verdict."""

    verdict: str
    checks: list[Check]
    table: list[dict[str, object]] = field(default_factory=list)  # measured numbers, one row per variant
    notes: list[str] = field(default_factory=list)
    preconditions: list[Precondition] = field(default_factory=list)  # one not met: not tested here
    setup_failures: list[str] = field(default_factory=list)  # runs that had to learn and did not

    @classmethod
    def of(cls, checks: list[Check], **kw) -> Outcome:
        out = cls(verdict=combine(checks), checks=checks, **kw)
        if out.setup_failures:
            out.verdict = SETUP_FAILED
        elif out.blocking:
            out.verdict = NOT_TESTED
        return out

    @property
    def unmet(self) -> list[Precondition]:
        return [p for p in self.preconditions if not p.met]

    @property
    def blocking(self) -> list[Precondition]:
        """Unmet preconditions of the whole claim (a part's unmet precondition leaves the rest testable)."""
        return [p for p in self.unmet if not p.part]

    @property
    def untested(self) -> list[Check]:
        """Counted checks of a part of the claim that could not be tested here."""
        return [c for c in self.checks if c.counts and c.verdict == NOT_TESTED]

    @property
    def in_part(self) -> str:
        """'; check 2 not tested here' when the verdict rests on part of the claim only, else ''."""
        if self.verdict in (NOT_TESTED, SETUP_FAILED) or not self.untested:
            return ""
        numbers = [str(i) for i, c in enumerate(self.checks, 1) if c.counts and c.verdict == NOT_TESTED]
        return f"; check {', '.join(numbers)} not tested here"

    @property
    def parts(self) -> str:
        counted = [c for c in self.checks if c.counts]
        tested = [c for c in counted if c.verdict != NOT_TESTED]
        passed = sum(c.verdict == REPRODUCED for c in tested)
        text = f"{passed}/{len(tested)} checks reproduced"
        if len(tested) < len(counted):
            text = f"{passed}/{len(tested)} testable checks reproduced, {len(counted) - len(tested)} not tested here"
        if self.verdict == SETUP_FAILED:
            return f"compared runs did not all learn; {text}"
        if self.verdict == NOT_TESTED:
            return f"{len(self.unmet)} precondition(s) not met; {text}"
        return text
