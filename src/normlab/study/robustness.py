"""How a verdict survives its own setup: drop any one seed, or change the one setting that matters most.

*Leave one seed out* costs no runs: the finding's own evaluation is repeated on the runs without seed s,
for every seed s, so a verdict that rests on one outlier seed shows it. Dropping a seed also widens the
intervals (fewer degrees of freedom), so a verdict decided by a narrow margin may weaken to
*inconclusive* — which is what "it rests on that seed" means at this number of seeds.

A *perturbation* is one change of setup a finding names as the most likely to decide its verdict (the
learning rate, the width, warm-up); `scripts/reproduce.py` runs the preset again with it, and the
verdict of those runs is set beside the original one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from normlab.analysis.load import SEED_KEY, RunSet, load_runs
from normlab.study.findings import FINDINGS, evaluate
from normlab.study.findings._common import Perturbation, subset
from normlab.study.verdicts import Outcome

__all__ = [
    "Perturbation",
    "Robustness",
    "Variation",
    "calibration_dir",
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
    """The verdict of a finding with one thing changed."""

    what: str  # "seed 2 dropped", "lr × ½"
    verdict: str


@dataclass(frozen=True)
class Robustness:
    """A verdict and the verdicts of its variations."""

    verdict: str
    variations: tuple[Variation, ...]

    @property
    def changed(self) -> list[Variation]:
        return [v for v in self.variations if v.verdict != self.verdict]

    @property
    def stable(self) -> bool:
        return bool(self.variations) and not self.changed

    @property
    def summary(self) -> str:
        """'stable (each of 3 seeds dropped; lr × ½)', 'flips when seed 2 is dropped (→ inconclusive)'."""
        if not self.variations:
            return "not checked (one seed)"
        if self.stable:
            return f"stable ({_tried(self.variations)})"
        parts = []
        for verdict in dict.fromkeys(v.verdict for v in self.changed):
            whats = [v.what for v in self.changed if v.verdict == verdict]
            parts.append(f"flips {_joined(whats)} (→ {verdict})")
        return "; ".join(parts)


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
    return [
        Variation(f"seed {s} dropped", evaluate(subset(rs, rs.runs.index[column != s])).verdict)
        for s in seeds
    ]


def robustness(
    evaluate: Callable[[RunSet], Outcome],
    rs: RunSet,
    verdict: str,
    perturbed: Sequence[Variation] = (),
) -> Robustness:
    """The robustness line of a finding: leave-one-seed-out on `rs`, plus any perturbed verdicts."""
    return Robustness(verdict, (*leave_one_seed_out(evaluate, rs), *perturbed))


def perturbed_dir(sweep_dir: str | Path) -> Path:
    """Where the sweep of a preset under its finding's perturbation lies: beside the preset's own."""
    path = Path(sweep_dir)
    return path.with_name(path.name + PERTURBED_SUFFIX)


def calibration_dir(sweep_dir: str | Path) -> Path:
    """Where the calibration sweep of a preset lies: beside the preset's own."""
    path = Path(sweep_dir)
    return path.with_name(path.name + CALIBRATION_SUFFIX)


def robustness_of(name: str, rs: RunSet, verdict: str, sweep_dir: str | Path | None = None) -> Robustness:
    """Leave-one-seed-out on `rs`, and the verdict of the perturbed sweep beside `sweep_dir` if it ran."""
    finding = FINDINGS[name]
    extras = finding.load_extras(sweep_dir) if sweep_dir is not None else {}
    perturbed: list[Variation] = []
    other = perturbed_dir(sweep_dir) if sweep_dir is not None else None
    if finding.perturbation is not None and other is not None and other.is_dir():
        try:
            prs = load_runs(other)
        except Exception as e:  # a broken second sweep must not lose the first one's verdict
            perturbed.append(Variation(f"{finding.perturbation.label} (could not be loaded: {e})", verdict))
        else:
            # measurements of the models' shape (finding 5's profile) are not repeated for the perturbed
            # sweep: it is judged with the preset's own
            outcome = evaluate(name, prs, finding.load_extras(other) or extras)
            perturbed.append(Variation(finding.perturbation.label, outcome.verdict))
    return robustness(lambda sub: evaluate(name, sub, extras), rs, verdict, perturbed)
