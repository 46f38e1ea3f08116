"""The top of REPORT.md: the commands that produced it (each session, what it ran that the report still
shows, its wall time), the machine and its load when each finding started, and the wall time summed over
the findings.

Its own module because these lines come from timings.json, not from the runs: they say what the report's
numbers cost and where they were measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from normlab.study.findings import CORE, FINDINGS
from normlab.study.findings_report.section import shipped
from normlab.study.timings import fmt_duration

TITLE = "# Reproducing published findings on normalization"


def machine_line(m: dict[str, Any]) -> str:
    mem = f", {m['memory_gib']} GiB RAM" if m.get("memory_gib") else ""
    return f"{m['cpu']}, {m['cores']} cores{mem}; {m['os']}; Python {m['python']}, torch {m['torch']}"


def header_lines(
    timings: dict[str, Any], names: Sequence[str], machines: Sequence[dict[str, Any]], command: str | None
) -> list[str]:
    """The title and the lines under it, before the summary: `machines` are the reported findings'
    (from their timing records), `command` the one building the report."""
    lines = [TITLE, ""]
    sessions = timings.get("sessions", [])
    if command and not any(s["command"] == command for s in sessions):
        lines += [f"Report rebuilt from existing sweeps by `{shipped(command)}`.", ""]
    if sessions:
        lines.append("Produced by:")
        lines.append("")
        for s in sessions:
            current = [n for n in s["names"] if timings["findings"].get(n, {}).get("session") == s["started"]]
            what = ", ".join(current) if current else "all re-run later; superseded"
            if current and len(current) < len(s["names"]):
                what += " (the others were re-run later)"
            lines.append(
                f"- `{shipped(s['command'])}` — {what}: wall time {fmt_duration(s['wall_s'])}, started {s['started']}."
            )
        lines.append("")
    continued = [n for n in names if timings["findings"].get(n, {}).get("sessions", 1) > 1]
    if continued:  # a session's wall time then covers only part of what these findings cost
        lines += [
            f"Continued from earlier sessions that stopped before they ended ({', '.join(continued)}): "
            "a finding's wall time adds the seconds of every session that worked on it.",
            "",
        ]
    if machines:
        distinct = list(dict.fromkeys(machine_line(m) for m in machines))
        lines.append("Machine: " + "; ".join(distinct) + ".")
        loads = [m.get("load_avg_at_start") for m in machines if m.get("load_avg_at_start")]
        if loads:
            lines.append(
                "Load average (1 min) when each finding started: "
                + ", ".join(f"{load[0]:.1f}" for load in loads)
                + f" (a sweep's own jobs account for up to {machines[0].get('cores', '?')} of it; more means other "
                "processes shared the cores and slowed the sweeps down)."
            )
        lines.append("")
    totals = totals_line(timings, names)
    if totals:
        lines += [totals, ""]
    return lines


def totals_line(timings: dict[str, Any], names: Sequence[str]) -> str:
    """'Wall time, summed over the findings' sweeps and measurements: core set (…): …; all N: ….'
    (empty when none of `names` has a timing record)."""
    recs = {n: timings["findings"][n] for n in names if n in timings["findings"]}
    if not recs:
        return ""
    parts = []
    core = [n for n in CORE if n in recs]
    if len(core) == len(CORE):
        numbers = ", ".join(str(FINDINGS[n].number) for n in CORE)
        total = sum(recs[n]["wall_s"] for n in core)
        perturbed = sum((recs[n].get("perturbed") or {}).get("wall_s", 0.0) for n in core)
        share = (
            f" ({fmt_duration(perturbed)} of it the perturbed sweeps of the robustness line)"
            if perturbed
            else ""
        )
        parts.append(f"core set (findings {numbers}): {fmt_duration(total)}{share}")
    if len(recs) == len(FINDINGS):
        parts.append(f"all {len(FINDINGS)}: {fmt_duration(sum(r['wall_s'] for r in recs.values()))}")
    elif not parts:
        parts.append(f"these findings: {fmt_duration(sum(r['wall_s'] for r in recs.values()))}")
    return "Wall time, summed over the findings' sweeps and measurements: " + "; ".join(parts) + "."
