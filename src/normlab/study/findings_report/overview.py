"""The tables with one row per finding: REPORT.md's summary (verdict, checks, scale, robustness, wall time)
and the README's findings table, whose verdict cell says in one line what the verdict rests on; the README
table is written between the README's findings markers.

Its own module because these rows summarise every finding's section for a reader who reads no further,
and the README's copy of them is written into another file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from normlab.analysis.estimate import fmt_estimate
from normlab.analysis.sweep_report import md_table
from normlab.study.findings import Finding
from normlab.study.findings_report.section import shipped
from normlab.study.robustness import Robustness, dependence_verdict
from normlab.study.timings import fmt_duration
from normlab.study.verdicts import ALPHA, CONFIDENCE, NOT_TESTED, SETUP_FAILED, Outcome

README_START = "<!-- --8<-- [start:findings] -->"
README_END = "<!-- --8<-- [end:findings] -->"


def summary_row(
    finding: Finding, outcome: Outcome, scale: str, robust: Robustness | None, record: dict[str, Any] | None
) -> list[str]:
    """The finding's row of REPORT.md's summary table."""
    return [
        f"[{finding.number}](#{finding.number}-{_anchor(finding.title)})",
        finding.title + (" (core)" if finding.core else ""),
        finding.cite,
        verdict_cell(finding, outcome, robust),
        outcome.parts,
        scale,
        robust.summary if robust is not None else "–",
        fmt_duration(record.get("wall_s")) if record else "–",
    ]


def readme_row(finding: Finding, outcome: Outcome, scale: str, robust: Robustness | None) -> list[str]:
    """The finding's row of the README's findings table."""
    return [
        str(finding.number),
        finding.short or finding.title,
        "**observed here**" if finding.ours else finding.cite,
        f"`{finding.name}`" + (" (core)" if finding.core else ""),
        headline(outcome, dependence_verdict(finding, robust)),
        scale,
        robust.summary if robust is not None else "–",
    ]


def verdict_cell(finding: Finding, outcome: Outcome, robust: Robustness | None) -> str:
    """The summary table's verdict: 'depends on init' when a setup choice the source does not fix changes
    it, and the part left untested when the verdict rests on part of the claim."""
    depends = dependence_verdict(finding, robust)
    if depends is not None:
        return f"**{depends.split(':', 1)[0]}**"
    return f"**{outcome.verdict}**" + (f" (in part{outcome.in_part})" if outcome.in_part else "")


def headline(outcome: Outcome, depends: str | None = None) -> str:
    """The verdict and the numbers behind it, in one cell: the unmet precondition of a *not tested here*,
    else each counted check's estimate against its rule; a verdict that depends on a setup choice says
    so with both numbers."""
    if depends is not None:
        head, _, rest = depends.partition(": ")
        return f"**{head}**: {rest}"
    verdict = f"**{outcome.verdict}**" + (f" (in part{outcome.in_part})" if outcome.in_part else "")
    if outcome.verdict == NOT_TESTED and outcome.unmet:
        pre = outcome.unmet[0]
        numbers = (
            f" ({fmt_estimate(pre.check.est, CONFIDENCE, 2, unit=pre.check.unit, significant=True)})"
            if pre.check
            else ""
        )
        return f"{verdict}: not shown — {pre.name[0].lower()}{pre.name[1:]}{numbers}"
    if outcome.verdict == SETUP_FAILED and outcome.setup_failures:
        return f"{verdict}: {outcome.setup_failures[0]}"
    parts = [
        f"{_brief(c.name)} {fmt_estimate(c.est, CONFIDENCE, 2, unit=c.unit, significant=True)} vs {c.rule} "
        f"({c.verdict})"
        for c in outcome.checks
        if c.counts
    ]
    parts += [
        f"not shown — {p.name[0].lower()}{p.name[1:]}"
        + (
            f" ({fmt_estimate(p.check.est, CONFIDENCE, 2, unit=p.check.unit, significant=True)})"
            if p.check
            else ""
        )
        for p in outcome.unmet
        if p.part
    ]
    return f"{verdict}: " + "; ".join(parts) if parts else verdict


def _brief(name: str, words: int = 9) -> str:
    """A check's name cut to its first words, for a table cell: 'Warm-up (100 steps) closes most …:'."""
    parts = name.split()
    text = " ".join(parts[:words]) + (" …" if len(parts) > words else "")
    return text.rstrip(".") + ":"


def readme_table(rows: Sequence[Sequence[str]], command: str, intro: str) -> str:
    """The README's findings table (between README_START and README_END), from one report build."""
    headers = [
        "#",
        "finding",
        "source",
        "preset",
        f"verdict here ({100 * CONFIDENCE:.0f} % CIs)",
        "decided at",
        "robustness",
    ]
    return "\n".join(["", md_table(headers, [list(r) for r in rows]), "", intro, ""])


def write_readme_table(readme: Path, table: str) -> None:
    """Replace what lies between the README's findings markers with `table`."""
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        raise ValueError(f"{readme} has no {README_START} … {README_END} markers for the findings table")
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    readme.write_text(head + README_START + "\n" + table + "\n" + README_END + tail)


def readme_intro(report: Path, readme: Path, command: str | None, totals: str) -> str:
    """The paragraph under the README's findings table: where the table comes from and how to read it."""
    return (
        f"Generated with the findings report (`{os.path.relpath(report.resolve(), readme.resolve().parent)}`) "
        f"by `{shipped(command) if command else 'scripts/reproduce.py'}`"
        + (f" ({totals.split(': ', 1)[1].rstrip('.')})" if totals else "")
        + f". Intervals are two-sided {100 * CONFIDENCE:.0f} % (one-sided tests at {100 * ALPHA:g} %); each check's rule is its margin, the "
        "smallest effect that counts. *Not tested here*: the phenomenon the claim is about did not happen "
        "at this scale (the report says what would make it happen); *in part*: a part of the claim whose "
        'premise did not happen is not tested, the other parts decide. "Robustness": the verdict with any '
        "one seed dropped and under the one change of setup within the claim's premise each finding names; "
        "*cannot move it* marks a variation that leaves what the verdict rests on unchanged. A change that "
        "removes the premise is the claim's scope, in the report; *depends on …* names a setup choice the "
        "source does not fix that changes the verdict."
    )


def _anchor(title: str) -> str:
    keep = "".join(ch.lower() if ch.isalnum() or ch in " -" else "" for ch in title)
    return keep.strip().replace(" ", "-")
