"""REPORT.md from finding sweeps: per finding the claim and source, what ran, figures, the measured
table, the checks with their confidence intervals and the verdict; a summary table, the machine and the
wall times on top; with a README, its findings table from the same outcomes. `normlab.study.reproduce`
runs the sweeps and calls `build_report`.

Its parts: `section` (one finding's section), `overview` (the summary table and the README's findings
table), `header` (the top: the commands, the machine, the wall-time totals, from timings.json). Named
for what it writes, apart from `normlab.analysis`'s report of one sweep (report.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

from normlab.analysis.load import NoRunsFound, load_runs
from normlab.analysis.plots import save
from normlab.analysis.sweep_report import md_table
from normlab.study.findings import FINDINGS, evaluate
from normlab.study.findings_report.header import header_lines, totals_line
from normlab.study.findings_report.overview import (
    readme_intro,
    readme_row,
    readme_table,
    summary_row,
    write_readme_table,
)
from normlab.study.findings_report.pilot import COLUMN, load_pilot, pilot_cell, pilot_section
from normlab.study.findings_report.section import calibration_tables, finding_section, short_scale
from normlab.study.robustness import dependence_verdict, robustness_of
from normlab.study.timings import load_timings
from normlab.study.verdicts import RULE, Outcome

REPORT_FILE = "REPORT.md"
FIGURE_DPI = 100  # keeps every PNG well under 300 KB


def build_report(
    out: Path,
    report_dir: Path,
    names: Sequence[str] | None = None,
    command: str | None = None,
    readme: Path | None = None,
    pilot: Path | None = None,
) -> tuple[Path, dict[str, str]]:
    """REPORT.md and figures in report_dir for the findings with sweeps in out (or `names`); with
    `readme`, the README's findings table from the same outcomes; the GPU pilot's column and section from
    `pilot` (a pilot's OUT, default OUT/pilot; normlab.study.pilot)."""
    matplotlib.use("Agg")
    timings = load_timings(out)
    sweeps = out / "sweeps"
    present = [n for n in FINDINGS if (sweeps / n).is_dir()]
    names = [n for n in (names or present) if n in present]
    report_dir.mkdir(parents=True, exist_ok=True)
    sections: list[str] = []
    summary_rows, readme_rows = [], []
    verdicts: dict[str, str] = {}
    machines = []
    gpu_pilot = load_pilot(pilot or out)
    cpu: dict[str, tuple[str, str]] = {}
    for name in names:
        finding = FINDINGS[name]
        record = timings["findings"].get(name)
        if record and record.get("machine"):
            machines.append(record["machine"])
        rs, error = None, None
        try:
            rs = load_runs(sweeps / name)
        except (NoRunsFound, FileNotFoundError) as e:
            error = str(e)
        extras = finding.load_extras(sweeps / name)
        outcome = evaluate(name, rs, extras) if rs is not None else Outcome.of([], notes=[])
        figures: list[tuple[str, str]] = []
        if rs is not None:
            try:
                drawn = finding.draw(rs, extras)
            except Exception as e:  # a figure failing must not lose the verdict
                drawn = []
                outcome.notes.append(f"Figures could not be drawn: {type(e).__name__}: {e}.")
            for fkey, caption, fig in drawn:
                filename = f"{name}_{fkey}.png"
                save(fig, report_dir / filename, dpi=FIGURE_DPI)
                figures.append((filename, caption))
        robust = robustness_of(name, rs, outcome.verdict, sweeps / name, outcome) if rs is not None else None
        depends = dependence_verdict(finding, robust)
        verdicts[name] = depends.split(":", 1)[0] if depends else outcome.verdict
        calibration = calibration_tables(sweeps / name, finding.calibration)
        sections += finding_section(
            finding, rs, outcome, figures, record, error, report_dir.resolve(), robust, calibration
        )
        scale = short_scale(rs) if rs is not None else "–"
        summary_rows.append(
            [*summary_row(finding, outcome, scale, robust, record), pilot_cell(name, gpu_pilot)]
        )
        cpu[name] = (outcome.verdict, scale)
        readme_rows.append(readme_row(finding, outcome, scale, robust))
    lines = header_lines(timings, names, machines, command)
    if summary_rows:
        lines += [
            "Each preset runs its jobs under `hydra/launcher=joblib` — normlab's local pool, each job a process "
            "of its own — one job per core and one torch thread per job (`n_jobs` = cores). Numbers are measured on small models over a few "
            "hundred steps: a finding that does not reproduce here may still hold at the paper's scale, and the "
            "report says so rather than tuning the presets until it does.",
            "",
            "## Summary",
            "",
            md_table(
                [
                    "#",
                    "finding",
                    "source",
                    "verdict",
                    "checks",
                    "decided at",
                    "robustness",
                    "wall time",
                    COLUMN,
                ],
                summary_rows,
            ),
            "",
        ]
    lines += ["## How verdicts are decided", "", RULE, ""]
    lines += sections
    lines += pilot_section(gpu_pilot, cpu, report_dir, FIGURE_DPI)
    path = report_dir / REPORT_FILE
    path.write_text("\n".join(lines).rstrip() + "\n")
    if readme is not None:
        intro = readme_intro(path, readme, command, totals_line(timings, names))
        write_readme_table(readme, readme_table(readme_rows, command or "", intro))
    return path, verdicts
