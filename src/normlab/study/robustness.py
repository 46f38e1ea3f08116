"""How a verdict survives its own setup: drop any one seed, or change the one setting that matters most.

*Leave one seed out* costs no runs: the finding's own evaluation is repeated on the runs without seed s,
for every seed s, so a verdict that rests on one outlier seed shows it. Dropping a seed also widens the
intervals (fewer degrees of freedom), so a verdict decided by a narrow margin may weaken to
*inconclusive* — which is what "it rests on that seed" means at this number of seeds.

A *perturbation* is one change of setup a finding names as the most likely to decide its verdict (the
learning rate, the depth, the init, warm-up, α₀); `scripts/reproduce.py` runs the preset again with it,
and the verdict of those runs is set beside the original one, with the numbers of every counted check.

What a perturbation is to the claim decides where it is reported (`Perturbation.kind`): a *robustness*
change stays within the claim's premise and joins the robustness line; a *scope* change removes the
premise (the theory then predicts the flip), so it is reported apart as the claim's scope, never as a flip;
a *dependence* is a setup choice the source does not fix, and when the verdict differs under it the
verdict itself names the dependence, with both verdicts' numbers. A `Subset` re-evaluates the finding on
part of its own runs (the depths that matter): a robustness variation that costs no runs.

A variation can only say "stable" where it could have said otherwise: it must move what decides the
verdict — the counted checks (for *not reproduced*, the checks that are not reproduced), the unmet
preconditions of a *not tested here*, the runs that did not learn of a *setup failed*. A variation that
leaves all of them exactly as they were (finding 5's speed measurement, which no seed drop changes) is
reported as *cannot move the verdict*, never as evidence of stability.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from normlab.analysis.estimate import Estimate, fmt_estimate
from normlab.analysis.load import SEED_KEY, RunSet, load_runs
from normlab.study.findings import FINDINGS, evaluate
from normlab.study.findings._finding import (
    DEPENDENCE,
    ROBUSTNESS,
    SCOPE,
    Calibration,
    Finding,
    Perturbation,
    Subset,
)
from normlab.study.findings._runs import key, subset, where
from normlab.study.verdicts import (
    CONFIDENCE,
    NOT_REPRODUCED,
    NOT_TESTED,
    SETUP_FAILED,
    Check,
    Outcome,
)

__all__ = [
    "Perturbation",
    "Robustness",
    "Subset",
    "dependence_verdict",
    "numbers_of",
    "on_subset",
    "Variation",
    "calibration_dir",
    "calibration_dirs",
    "deciding",
    "leave_one_seed_out",
    "perturbed_dir",
    "robustness",
    "robustness_of",
    "seeds_of",
]

PERTURBED_SUFFIX = ".perturbed"  # sweeps/NAME.perturbed holds the preset's run under its perturbation
CALIBRATION_SUFFIX = ".calibration"  # sweeps/NAME.calibration: the calibration sweep (--calibrate)


@dataclass(frozen=True)
class Variation:
    """The verdict of a finding with one thing changed, and the outcome it came from."""

    what: str  # "seed 2 dropped", "lr × ½"
    verdict: str
    outcome: Outcome | None = None
    perturbation: bool = False  # a change of setup (a second sweep), not a dropped seed
    kind: str = ROBUSTNESS  # a perturbation's kind (scope and dependence are reported apart)


def _same(a: Estimate, b: Estimate) -> bool:
    def eq(x: float, y: float) -> bool:
        return (math.isnan(x) and math.isnan(y)) or x == y or abs(x - y) <= 1e-12 * max(1.0, abs(x))

    return eq(a.value, b.value) and eq(a.se, b.se) and a.n == b.n


def deciding(outcome: Outcome) -> list[Estimate]:
    """The estimates that decide `outcome`'s verdict: those of its unmet preconditions for *not tested
    here*; else its counted checks (only those not reproduced, for *not reproduced*) and its met
    preconditions (one that became unmet would change the verdict too)."""
    if outcome.verdict == NOT_TESTED:
        return [p.check.est for p in outcome.unmet if p.check is not None]
    counted = [c for c in outcome.checks if c.counts]
    if outcome.verdict == NOT_REPRODUCED:
        counted = [c for c in counted if c.verdict == NOT_REPRODUCED]
    met = [p.check.est for p in outcome.preconditions if p.met and p.check is not None]
    return [c.est for c in counted] + met


def can_move(base: Outcome, other: Outcome) -> bool:
    """Whether `other` (the finding re-evaluated with one thing changed) differs from `base` in anything
    that decides base's verdict — so that keeping the verdict says something."""
    if other.verdict != base.verdict:
        return True
    if base.verdict == SETUP_FAILED:
        return other.setup_failures != base.setup_failures
    mine = deciding(base)
    theirs = deciding(other)
    if len(mine) != len(theirs):
        return True
    return any(not _same(a, b) for a, b in zip(mine, theirs, strict=True))


def _numbered(outcome: Outcome) -> dict[str, tuple[int, Check]]:
    return {c.name: (i, c) for i, c in enumerate(outcome.checks, 1)}


def _stem(name: str) -> str:
    """A check's name without a leading '[… init] ' tag or a trailing parenthesis: what stays the same when
    the setting it names changes."""
    name = re.sub(r"^\[[^\]]*\]\s*", "", name)
    return re.sub(r"\s*\([^()]*\)$", "", name)


def _matched(base: Outcome, other: Outcome) -> list[tuple[int, Check, list[Check]]]:
    """(number, base check, the other outcome's checks of the same claim) for base's counted checks:
    matched by name, else by the name without its tags (finding 1's '[xavier init] …' and '[gpt2 init] …',
    a pooled check and its per-depth checks)."""
    out = []
    counted = [c for c in other.checks if c.counts]
    for i, c in enumerate(base.checks, 1):
        if not c.counts:
            continue
        same = [o for o in counted if o.name == c.name] or [
            o for o in counted if _stem(o.name) == _stem(c.name)
        ]
        if same:
            out.append((i, c, same))
    return out


def moved_checks(base: Outcome, other: Outcome) -> list[str]:
    """'check 2 +0.116 [+0.083, +0.149] → +0.250 [+0.20, +0.30] (inconclusive → reproduced)' for every
    counted check whose verdict changed; preconditions whose state changed likewise."""
    out = []
    for i, c, same in _matched(base, other):
        moved = [o for o in same if o.verdict != c.verdict]
        if moved:
            now = "; ".join(f"{_value(o)} ({o.verdict})" for o in moved)
            out.append(f"check {i} {_value(c)} ({c.verdict}) → {now}")
    pre = {p.name: p for p in other.preconditions}
    for p in base.preconditions:
        q = pre.get(p.name)
        if q is not None and bool(q.met) != bool(p.met):
            state = "met" if q.met else "not met"
            numbers = f" ({_value(p.check)} → {_value(q.check)})" if p.check and q.check else ""
            out.append(f"precondition '{p.name}' {state}{numbers}")
    return out


def _value(c: Check | None) -> str:
    if c is None:
        return "–"
    return fmt_estimate(c.est, CONFIDENCE, 3, unit=c.unit, significant=True)


def perturbed_numbers(base: Outcome, other: Outcome) -> str:
    """Every counted check's estimate without and with the perturbation: 'check 1 +0.33 [..] → +0.40 [..];
    …' (the robustness line prints them whether or not the verdict moved)."""
    parts = [
        f"check {i} {_value(c)} → " + "; ".join(f"{_value(o)} ({o.verdict})" for o in same)
        for i, c, same in _matched(base, other)
    ]
    for p in other.preconditions:
        if p.check is not None:
            parts.append(f"precondition '{p.name}' {_value(p.check)} ({'met' if p.met else 'not met'})")
        elif not p.met:
            parts.append(f"precondition '{p.name}' cannot be told")
    return "; ".join(parts)


def numbers_of(outcome: Outcome) -> str:
    """What a verdict rests on, in numbers: the unmet precondition's estimate of a *not tested here*, else
    each counted check's estimate ('check 1 +0.33 [+0.27, +0.40]; check 2 …')."""
    if outcome.verdict == NOT_TESTED and outcome.unmet:
        pre = outcome.unmet[0]
        return f"precondition '{pre.name}' {_value(pre.check)}" if pre.check else pre.name
    if outcome.verdict == SETUP_FAILED and outcome.setup_failures:
        return outcome.setup_failures[0]
    return "; ".join(
        f"check {i} {_value(c)} ({c.verdict})" for i, c in enumerate(outcome.checks, 1) if c.counts
    )


@dataclass(frozen=True)
class Robustness:
    """A verdict, the outcome it came from, and the verdicts of its variations. Scope and dependence
    perturbations are kept apart from the robustness line (`scope`): they say where the claim holds, not
    whether the verdict survives its own setup."""

    verdict: str
    variations: tuple[Variation, ...]
    base: Outcome | None = None
    scope: tuple[Variation, ...] = ()  # the scope and dependence perturbations

    def informative(self, v: Variation) -> bool:
        """Whether `v` could have changed the verdict (see the module docstring); without outcomes to
        compare, a variation counts as informative."""
        if self.base is None or v.outcome is None:
            return True
        return can_move(self.base, v.outcome)

    @property
    def changed(self) -> list[Variation]:
        return [v for v in self.variations if v.verdict != self.verdict]

    @property
    def inert(self) -> list[Variation]:
        """Variations that moved nothing the verdict rests on."""
        return [v for v in self.variations if v.verdict == self.verdict and not self.informative(v)]

    @property
    def stable(self) -> bool:
        tried = [v for v in self.variations if self.informative(v)]
        return bool(tried) and not self.changed

    @property
    def summary(self) -> str:
        """'stable (each of 3 seeds dropped; lr × ½)', 'flips when seed 2 is dropped (→ inconclusive)',
        'cannot be moved by its variations (…)'."""
        if not self.variations:
            return "not checked (one seed)"
        parts = []
        for verdict in dict.fromkeys(v.verdict for v in self.changed):
            whats = [v.what for v in self.changed if v.verdict == verdict]
            moved = sorted(
                {n for v in self.changed if v.verdict == verdict for n in self._moved_numbers(v)}, key=int
            )
            which = f"; check {', '.join(moved)} moved" if moved else ""
            parts.append(f"flips {_joined(whats)} (→ {verdict}{which})")
        if not parts:
            tried = [v for v in self.variations if self.informative(v)]
            if tried:
                parts.append(f"stable ({_tried(tried)})")
            # a perturbation that leaves the verdict but turns checks: said, or "stable" would hide that
            # the parts it rests on changed (issue 37's second referee, finding 6)
            for v in (v for v in self.variations if v.perturbation):
                turned = self._moved_numbers(v)
                if turned:
                    plural = "s" if len(turned) > 1 else ""
                    parts.append(
                        f"its checks are not: under {v.what} check{plural} {', '.join(turned)} change verdict"
                    )
        inert = self.inert
        if inert:
            parts.append(f"{_tried(inert)}: cannot move it (nothing the verdict rests on changes)")
        return "; ".join(parts)

    def _moved(self, v: Variation) -> list[str]:
        if self.base is None or v.outcome is None:
            return []
        return moved_checks(self.base, v.outcome)

    def _moved_numbers(self, v: Variation) -> list[str]:
        """The numbers of the counted checks whose verdict `v` changed, in order ('1', '5')."""
        return sorted({m.split(" ")[1] for m in self._moved(v) if m.startswith("check ")}, key=int)

    def scope_lines(self, perturbation: Perturbation | None) -> list[str]:
        """The scope line of a scope perturbation ('holds only with Xavier init, as the theory predicts:
        under GPT-2 init it is not reproduced (check 1 …)'), or of a dependence that did not change the
        verdict; a dependence that did is the verdict's own sentence (`dependence_verdict`)."""
        out = []
        for v in self.scope if perturbation is not None else ():
            numbers = numbers_of(v.outcome) if v.outcome is not None else "–"
            base = numbers_of(self.base) if self.base is not None else "–"
            if v.kind == SCOPE and v.verdict != self.verdict:
                out.append(
                    f"holds only with {perturbation.preset}, as the theory predicts: it assumes it, and under "
                    f"{v.what}, which removes that premise, the verdict is {v.verdict} ({numbers}; with "
                    f"{perturbation.preset}: {base})"
                )
            elif v.kind == SCOPE:
                out.append(f"{v.what}, which removes the premise, leaves the verdict {v.verdict} ({numbers})")
            elif self.base is not None and v.outcome is not None and _full(v.outcome) == _full(self.base):
                out.append(
                    f"does not depend on {perturbation.setting}: {v.verdict} under {v.what} too ({numbers})"
                )
        return out

    def details(self) -> list[str]:
        """One phrase per variation for the report: its verdict, what moved, and — for a perturbation —
        every counted check's numbers without and with it."""
        out = []
        for v in self.variations:
            text = f"{v.what}: {v.verdict}"
            if self.base is not None and v.outcome is not None:
                if v.perturbation:
                    numbers = perturbed_numbers(self.base, v.outcome)
                    text += f" ({numbers})" if numbers else ""
                else:
                    moved = self._moved(v)
                    if moved:
                        text += f" ({'; '.join(moved)})"
                    elif not self.informative(v):
                        text += " (moves nothing the verdict rests on)"
            out.append(text)
        return out


def _tried(variations: Sequence[Variation]) -> str:
    seeds = [v for v in variations if v.what.startswith("seed ")]
    others = [v.what for v in variations if not v.what.startswith("seed ")]
    parts = [f"each of {len(seeds)} seeds dropped"] if seeds else []
    return "; ".join(parts + others)


def _joined(whats: Sequence[str]) -> str:
    """'when seed 0 or 2 is dropped', 'under lr × ½' — seeds gathered into one phrase."""
    seeds = [w.removeprefix("seed ").removesuffix(" dropped") for w in whats if w.startswith("seed ")]
    phrase = [f"when seed {' or '.join(seeds)} is dropped"] if seeds else []
    return " or ".join(phrase + [f"under {w}" for w in whats if not w.startswith("seed ")])


def seeds_of(rs: RunSet) -> list[str]:
    """The seeds of the runs that trained, in their natural order."""
    if SEED_KEY not in rs.valid.columns:
        return []
    values = list(dict.fromkeys(rs.valid[SEED_KEY].dropna().tolist()))
    return [str(v) for v in sorted(values, key=lambda v: (str(type(v)), v))]


def leave_one_seed_out(evaluate: Callable[[RunSet], Outcome], rs: RunSet) -> list[Variation]:
    """The verdict of `evaluate` on the runs without each seed in turn (none with fewer than 2 seeds)."""
    seeds = seeds_of(rs)
    if len(seeds) < 2:
        return []
    column = rs.runs[SEED_KEY].astype(str)
    out = []
    for s in seeds:
        outcome = evaluate(subset(rs, rs.runs.index[column != s]))
        out.append(Variation(f"seed {s} dropped", outcome.verdict, outcome))
    return out


def on_subset(evaluate: Callable[[RunSet], Outcome], rs: RunSet, part: Subset) -> Variation | None:
    """The verdict of `evaluate` on the runs `part` keeps (None when it keeps none, or all of them)."""
    mask = rs.runs.index == rs.runs.index  # every run
    for name, kept in part.keep:
        try:
            column = rs.runs[key(rs, name)].astype(str)
        except Exception:
            return None
        mask &= column.isin([str(k) for k in kept]).to_numpy()
    runs = rs.runs.index[mask]
    if len(runs) == 0 or len(runs) == len(rs.runs):
        return None
    outcome = evaluate(subset(rs, runs))
    return Variation(part.label, outcome.verdict, outcome)


def robustness(
    evaluate: Callable[[RunSet], Outcome],
    rs: RunSet,
    verdict: str,
    perturbed: Sequence[Variation] = (),
    base: Outcome | None = None,
    subsets: Sequence[Subset] = (),
) -> Robustness:
    """The robustness line of a finding: leave-one-seed-out on `rs`, its subsets, plus any perturbed
    verdicts (scope and dependence perturbations kept apart)."""
    parts = [v for v in (on_subset(evaluate, rs, s) for s in subsets) if v is not None]
    within = [v for v in perturbed if v.kind == ROBUSTNESS]
    apart = tuple(v for v in perturbed if v.kind != ROBUSTNESS)
    return Robustness(verdict, (*leave_one_seed_out(evaluate, rs), *parts, *within), base, apart)


def dependence_verdict(finding: Finding, robust: Robustness | None) -> str | None:
    """'depends on init: not tested here under Xavier init … (numbers); reproduced under GPT-2 init
    (numbers)' when the verdict differs under a setup choice the source does not fix; else None."""
    p = finding.perturbation
    if robust is None or p is None or p.kind != DEPENDENCE or robust.base is None:
        return None
    for v in robust.scope:
        if v.kind == DEPENDENCE and v.outcome is not None and _full(v.outcome) != _full(robust.base):
            return (
                f"depends on {p.setting}: {_full(robust.base)} under {p.preset} ({numbers_of(robust.base)}"
                f"{_reported(robust.base)}); {_full(v.outcome)} under {v.what} ({numbers_of(v.outcome)}"
                f"{_reported(v.outcome)})"
            )
    return None


REPORTED = "(reported) "  # a check's name prefix: not counted, shown beside every arm of a dependence


def _reported(outcome: Outcome) -> str:
    """'; reported: NAME +0.1 [...]' for each uncounted check named '(reported) …' — what a reader needs
    beside an arm's verdict to judge it (whether that arm's models trained comparably)."""
    shown = [
        f"{c.name.removeprefix(REPORTED)} {_value(c)}"
        for c in outcome.checks
        if not c.counts and c.name.startswith(REPORTED)
    ]
    return f"; reported: {'; '.join(shown)}" if shown else ""


def _full(outcome: Outcome) -> str:
    """'reproduced', or 'reproduced in part (check 1 not tested here)': the verdict with what it rests on."""
    part = outcome.in_part
    return f"{outcome.verdict} in part ({part.removeprefix('; ')})" if part else outcome.verdict


def perturbed_dir(sweep_dir: str | Path) -> Path:
    """Where the sweep of a preset under its finding's perturbation lies: beside the preset's own."""
    path = Path(sweep_dir)
    return path.with_name(path.name + PERTURBED_SUFFIX)


def calibration_dir(sweep_dir: str | Path, index: int = 0) -> Path:
    """Where a preset's calibration sweep lies, beside the preset's own: sweeps/NAME.calibration for the
    first (index 0), NAME.calibration-2, -3, … for the ones after it (Calibration.then)."""
    path = Path(sweep_dir)
    return path.with_name(path.name + CALIBRATION_SUFFIX + (f"-{index + 1}" if index else ""))


def calibration_dirs(sweep_dir: str | Path, calibration: Calibration | None) -> list[Path]:
    """The directories of a finding's calibration sweeps (none without a calibration), in the order they
    run."""
    return [calibration_dir(sweep_dir, i) for i in range(len(calibration.sweeps))] if calibration else []


def perturbed_runs(rs: RunSet, other: Path, perturbation: Perturbation) -> RunSet:
    """The runs the perturbed verdict is computed on: the perturbed sweep, with the preset's own runs
    that the change leaves alone (`Perturbation.reuse`)."""
    reused: list[str] = []
    for key_name, value in perturbation.reuse:
        reused += [str(p) for p in where(rs, **{key_name: value})["path"]]
    return load_runs([other, *reused])


def robustness_of(
    name: str,
    rs: RunSet,
    verdict: str,
    sweep_dir: str | Path | None = None,
    base: Outcome | None = None,
) -> Robustness:
    """Leave-one-seed-out on `rs`, and the verdict of the perturbed sweep beside `sweep_dir` if it ran.
    `base` is the outcome `verdict` came from (computed here when not given)."""
    finding = FINDINGS[name]
    extras = finding.load_extras(sweep_dir) if sweep_dir is not None else {}
    base = base or evaluate(name, rs, extras)
    perturbed: list[Variation] = []
    other = perturbed_dir(sweep_dir) if sweep_dir is not None else None
    if finding.perturbation is not None and other is not None and other.is_dir():
        try:
            prs = perturbed_runs(rs, other, finding.perturbation)
        except Exception as e:  # a broken second sweep must not lose the first one's verdict
            label = f"{finding.perturbation.label} (could not be loaded: {e})"
            perturbed.append(
                Variation(label, verdict, None, perturbation=True, kind=finding.perturbation.kind)
            )
        else:
            # measurements of the models' shape (finding 5's profile) are not repeated for the perturbed
            # sweep: it is judged with the preset's own
            outcome = evaluate(name, prs, finding.load_extras(other) or extras)
            perturbed.append(
                Variation(
                    finding.perturbation.label,
                    outcome.verdict,
                    outcome,
                    perturbation=True,
                    kind=finding.perturbation.kind,
                )
            )
    return robustness(lambda sub: evaluate(name, sub, extras), rs, verdict, perturbed, base, finding.subsets)
