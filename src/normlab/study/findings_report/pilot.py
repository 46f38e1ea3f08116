"""REPORT.md's GPU pilot (issue 38): the column beside each verdict in the summary table, and the pilot's own
section — where it ran and at what scale, whether the curse of depth can happen there, each depth finding's
pilot verdict beside its CPU one, and the pilot's numbers. Until a pilot has run on a GPU the column and the
section say so ("pilot: not yet run on a GPU").

Its own module because it reads another folder (the pilot's, normlab.study.pilot) and adds to the report
without changing what the findings' own sections say.
"""

from __future__ import annotations

from pathlib import Path

from normlab.analysis.plots import save
from normlab.analysis.sweep_report import md_table
from normlab.study.findings import FINDINGS
from normlab.study.findings_report.overview import headline
from normlab.study.findings_report.section import checks_table, describe_runs, shipped, table_markdown
from normlab.study.pilot.evaluate import PilotResult, evaluate_pilot
from normlab.study.pilot.plan import PAPERS_TOKENS_PER_PARAMETER
from normlab.study.pilot.sweeps import PILOT_FINDINGS
from normlab.study.timings import fmt_duration

NOT_YET = "pilot: not yet run on a GPU"
COLUMN = "GPU pilot"
TITLE = "## GPU pilot: the depth findings where the curse of depth can happen"
RUN_IT = (
    "One GPU call runs it (install, a smoke test, the pilot within its budget, the verdicts): `bash "
    "scripts/gpu_pilot.sh`, or `python scripts/reproduce.py --scale pilot --budget 480 --out DIR`; then "
    "`python scripts/reproduce.py --from-existing --out CPU_OUT --pilot DIR` puts it beside these verdicts "
    "([the pilot](index.md#gpu-pilot))."
)


def load_pilot(path: Path | None) -> PilotResult | None:
    return evaluate_pilot(path) if path is not None and path.exists() else None


def pilot_cell(name: str, pilot: PilotResult | None) -> str:
    """A finding's cell in the summary's pilot column."""
    if name not in PILOT_FINDINGS:
        return "–"
    if pilot is None:
        return NOT_YET
    found = pilot.findings.get(name)
    if found is None:
        return f"{NOT_YET}" if not pilot.on_gpu else "not in this pilot (left out for its budget)"
    cell = f"**{found.outcome.verdict}** ({pilot.short_scale()})"
    return cell if pilot.on_gpu else f"{NOT_YET} (a CPU run of the pilot's path: {cell})"


def pilot_section(
    pilot: PilotResult | None, cpu: dict[str, tuple[str, str]], report_dir: Path, dpi: int = 100
) -> list[str]:
    """The pilot's section; `cpu` the CPU verdict and scale of each finding this report evaluated."""
    lines = [TITLE, ""]
    lines += [
        "The CPU presets' models (d_model 64, ≈ 0.4 tokens per parameter) end barely trained, and there a deep "
        "block that costs little to skip is what under-training gives: the curse of depth cannot be told "
        "from it. The pilot trains the depth findings' recipes at d_model 256, 12 blocks, context 256 and "
        "64 × 256 tokens a step (Pre-LN, LayerNorm Scaling and Mix-LN, 3 seeds each; Peri-LN when the budget "
        "fits it) for as many steps as one GPU call's budget allows. It answers *can the curse happen at this "
        "scale, and does each claim hold where it does?* — not what the papers' 130M models at "
        f"≈ {PAPERS_TOKENS_PER_PARAMETER} tokens per parameter show.",
        "",
    ]
    if pilot is None:
        return [*lines, f"**{NOT_YET}.** {RUN_IT}", ""]
    p, actual = pilot.plan, pilot.record.get("actual", {})
    took = f", took {fmt_duration(actual['total_s'])}" if actual.get("total_s") else ""
    where = (
        f"**Where it ran.** {pilot.device}: {p.runs} runs as {p.packing}, {p.steps:,} steps each "
        f"({p.tokens_per_run / 1e6:,.1f} M tokens, {p.tokens_per_parameter:.1f} tokens per parameter; "
        f"{p.shape}); budget {fmt_duration(p.budget_s)}, predicted {fmt_duration(p.predicted_s)}{took} "
        f"(`{pilot.folder.name}/plan.json`)."
    )
    if pilot.record.get("command"):
        where += f" Command: `{shipped(pilot.record['command'])}`."
    if not pilot.on_gpu:
        where += f" This was a run of the pilot's path on the CPU, not the GPU pilot: **{NOT_YET}**. {RUN_IT}"
    lines += [where, ""]
    for name, found in pilot.findings.items():
        if found.cut:
            lines += [
                f"Cut before the planned step, so not evaluated ({name}): {', '.join(found.cut)}.",
                "",
            ]
    lines += [_curse_line(pilot), ""]
    rows = []
    for name, found in pilot.findings.items():
        f = FINDINGS[name]
        here = f"**{cpu[name][0]}** ({cpu[name][1]})" if name in cpu else "– (no CPU sweep in this report)"
        rows.append([str(f.number), f.title, here, headline(found.outcome), pilot.short_scale()])
    lines += [md_table(["#", "finding", "CPU verdict", "pilot verdict", "pilot scale"], rows), ""]
    for sentence in p.left_out:
        lines += [f"Left out of this pilot: {sentence}.", ""]
    for name, found in pilot.findings.items():
        lines += _finding_part(name, found, pilot, report_dir, dpi)
    return lines


def _curse_line(pilot: PilotResult) -> str:
    pre = pilot.curse
    if pre is None:
        return "**Can the curse of depth happen here?** These runs cannot say (no Pre-LN run of the depth sweep completed)."
    if pre.met:
        return f"**Can the curse of depth happen here?** Yes — {pre.name}: {pre.observed}."
    return f"**Can the curse of depth happen here?** Not shown — {pre.sentence}"


def _finding_part(name: str, found, pilot: PilotResult, report_dir: Path, dpi: int) -> list[str]:
    f = FINDINGS[name]
    outcome = found.outcome
    lines = [f"### {f.number}. {f.title}, at the pilot's scale", ""]
    lines += [f"**Pilot verdict: {outcome.verdict}** at {pilot.scale()} ({outcome.parts}).", ""]
    if found.rs is not None:
        lines += [describe_runs(found.rs), ""]
        try:
            drawn = f.draw(found.rs, {})
        except Exception as e:  # a figure failing must not lose the verdict
            drawn = []
            lines += [f"Figures could not be drawn: {type(e).__name__}: {e}.", ""]
        for key, caption, fig in drawn:
            filename = f"pilot_{name}_{key}.png"
            save(fig, report_dir / filename, dpi=dpi)
            lines += [f"![{caption}]({filename})", "", f"*{caption} (pilot)*", ""]
    if outcome.table:
        lines += ["**Measured.**", "", table_markdown(outcome.table), ""]
    for note in outcome.setup_failures:
        lines += [f"Setup failed — {note}", ""]
    for pre in outcome.preconditions:
        state = f"Yes — {pre.name}: {pre.observed}." if pre.met else f"Not shown — {pre.sentence}"
        lines += [f"Can this happen here? {state}", ""]
    lines += [*(x for note in outcome.notes for x in (note, ""))]
    if outcome.checks:
        lines += ["**Checks.**", "", checks_table(outcome.checks), ""]
    return lines


def verdict_lines(path: Path) -> list[str]:
    """The pilot's verdicts for the terminal: the curse of depth, then one line per finding."""
    pilot = evaluate_pilot(path)
    if pilot is None:
        return [f"no pilot in {path}"]
    lines = [f"Pilot verdicts ({pilot.short_scale()}):"]
    if pilot.curse is not None:
        state = "yes" if pilot.curse.met else "not shown"
        lines.append(f"  can the curse of depth happen here? {state} — {pilot.curse.observed}")
    for name, found in pilot.findings.items():
        cut = f" ({len(found.cut)} run(s) cut, not evaluated)" if found.cut else ""
        lines.append(f"  {FINDINGS[name].number}. {name}: {headline(found.outcome)}{cut}")
    return lines
