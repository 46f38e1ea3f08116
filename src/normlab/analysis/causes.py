"""Why runs did not learn or diverged, for the report: each run's `diagnosis` from its summary.json, or —
for runs written before that field — the same rules (normlab.train.diagnosis) applied to its config,
summary and training losses."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from normlab.analysis.load import RunSet
from normlab.analysis.stats import learned_flags
from normlab.metrics import names
from normlab.train.diagnosis import cause


@dataclass(frozen=True)
class Cause:
    run: str
    variant: str
    rule: str  # the diagnosis rule (train.diagnosis.Note.rule), "recorded" when read from summary.json
    sentence: str


def _needs_cause(rs: RunSet) -> pd.DataFrame:
    valid = rs.valid
    failed = (learned_flags(valid) == False) | (valid["status"] == "diverged")  # noqa: E712 (nullable)
    return valid[failed.fillna(False).astype(bool)]


def causes(rs: RunSet) -> list[Cause]:
    """One Cause per run that did not learn or diverged, in the runs' order."""
    out = []
    for run, row in _needs_cause(rs).iterrows():
        record = {k: v for k, v in row.items() if not isinstance(v, float) or pd.notna(v)}
        losses: list[float] = []
        if names.LOSS in rs.metrics:
            losses = rs.metrics.loc[rs.metrics["run"] == run, names.LOSS].dropna().tolist()
        note = cause(record, record, losses)
        recorded = row.get("diagnosis")
        if isinstance(recorded, str) and recorded:
            out.append(Cause(str(run), str(row["variant"]), note.rule if note else "recorded", recorded))
        elif note is not None:
            out.append(Cause(str(run), str(row["variant"]), note.rule, note.sentence))
    return out


def cause_lines(rs: RunSet) -> list[str]:
    """One line per variant and cause: '`ln, post` (2 of 2 runs): it sat at the unigram plateau …' — the
    first run's sentence stands for the runs of that variant with the same cause."""
    found = causes(rs)
    lines = []
    for variant in dict.fromkeys(c.variant for c in found):
        mine = [c for c in found if c.variant == variant]
        total = int((rs.valid["variant"] == variant).sum())
        for rule in dict.fromkeys(c.rule for c in mine):
            same = [c for c in mine if c.rule == rule]
            lines.append(
                f"`{variant}` ({len(same)} of {total} run{'s' if total != 1 else ''}): {same[0].sentence}"
            )
    return lines
