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

from normlab.analysis.findings._common import Perturbation, subset
from normlab.analysis.load import SEED_KEY, RunSet
from normlab.analysis.verdicts import Outcome

__all__ = ["Perturbation", "Robustness", "Variation", "leave_one_seed_out", "robustness", "seeds_of"]


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
