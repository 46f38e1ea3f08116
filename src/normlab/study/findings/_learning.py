"""Did the runs learn? Whether a run's validation loss went below the corpus's unigram loss (`learned`),
the count per arm for the tables, and the gate a finding's setup must pass before its claim can be
tested (`require_learning`: a required run that did not learn makes the verdict "setup failed").

Its own module because "a run that did not learn is not evidence" is one rule every finding applies the
same way, apart from how each selects and compares its runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from normlab.analysis.load import RunSet
from normlab.data.unigram import did_learn
from normlab.study.findings._format import fmt
from normlab.study.findings._runs import summary_value, unigram_loss


def learned(rs: RunSet, run: str) -> bool | None:
    """Whether a run learned anything: summary.json's `learned` when present; else best_val_loss below
    (1 − LEARNED_MARGIN) × its `baseline_unigram_loss` (the training side's rule, `did_learn`); None when
    neither can be had. A diverged run
    without a best validation loss did not learn."""
    flag = summary_value(rs, run, "learned")
    if isinstance(flag, bool | np.bool_):
        return bool(flag)
    base = unigram_loss(rs, run)
    if not math.isfinite(base):
        return None
    best = rs.runs.at[run, "best_val_loss"]
    if best is None or not math.isfinite(float(best)):
        return False if rs.runs.at[run, "status"] in ("diverged", "completed") else None
    return did_learn(float(best), base)


def learned_count(rs: RunSet, runs: pd.DataFrame | Sequence[str]) -> str:
    """'3/3', '1/3', or '?' when the runs cannot tell."""
    ids = list(runs.index if isinstance(runs, pd.DataFrame) else runs)
    flags = [learned(rs, r) for r in ids]
    if ids and all(f is None for f in flags):
        return "?"
    return f"{sum(bool(f) for f in flags)}/{len(ids)}"


@dataclass
class LearningGate:
    """Which runs had to learn for the claim to be testable, and what they did."""

    failures: list[str] = field(default_factory=list)  # → verdict "setup failed"
    notes: list[str] = field(default_factory=list)


def require_learning(rs: RunSet, required: dict[str, pd.DataFrame | Sequence[str]]) -> LearningGate:
    """Every run of every `required` group (label → runs) must have learned; one that did not makes the
    finding's setup fail. Runs that cannot tell (no `learned`, no unigram baseline) are named in a note."""
    gate = LearningGate()
    unknown = []
    for label, runs in required.items():
        ids = list(runs.index if isinstance(runs, pd.DataFrame) else runs)
        flags = {r: learned(rs, r) for r in ids}
        failed = [r for r, f in flags.items() if f is False]
        if failed:
            best = ", ".join(fmt(_best(rs, r), 2) for r in failed)
            base = np.nanmean([unigram_loss(rs, r) for r in failed])
            line = f"{label}: {len(failed)} of {len(ids)} runs did not learn (best val loss {best}"
            line += f" vs unigram {base:.2f})" if math.isfinite(base) else ")"
            gate.failures.append(line)
        unknown += [f"{label}" for f in flags.values() if f is None][:1]
    if unknown:
        gate.notes.append(
            "Whether these runs learned cannot be told: their summary.json has neither `learned` nor "
            "`baseline_unigram_loss` (runs written before the unigram baseline existed): "
            + ", ".join(dict.fromkeys(unknown))
            + "."
        )
    return gate


def _best(rs: RunSet, run: str) -> float:
    v = rs.runs.at[run, "best_val_loss"]
    return float(v) if v is not None and math.isfinite(float(v)) else math.nan


def baseline_note(rs: RunSet) -> str | None:
    """'Unigram loss of the corpus: 5.737 nats/token.' when the runs report it."""
    vals = [unigram_loss(rs, r) for r in rs.valid.index]
    vals = [v for v in vals if math.isfinite(v)]
    if not vals:
        return None
    return (
        f"Unigram cross-entropy of the corpus (the 'learned anything?' line): {np.mean(vals):.3f} nats/token."
    )
