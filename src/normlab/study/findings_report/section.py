"""One finding's section of REPORT.md: the claim and its source, the verdict with the scale it was reached
at, the robustness line, calibration, what ran (the command as it ran, the runs' fixed and swept
settings, the wall time), figures, the measured table, preconditions, notes and the table of checks.

Its own module because it is most of the report and reads one finding alone; the overview tables and the
top of the report only gather what it decides.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from normlab.analysis.estimate import ci_label, fmt_estimate
from normlab.analysis.load import NoRunsFound, RunSet, load_runs, short_names
from normlab.analysis.sweep_report import md_table
from normlab.configs import CONFIG_DIR
from normlab.study.findings import Finding
from normlab.study.findings._finding import ROBUSTNESS, SCOPE, Calibration
from normlab.study.findings._format import fmt_series
from normlab.study.findings._learning import learned_count
from normlab.study.robustness import Robustness, calibration_dirs, dependence_verdict
from normlab.study.timings import MEASURE_S, fmt_duration
from normlab.study.verdicts import CONFIDENCE, Check, Outcome

# presets are linked where the package keeps them (src/normlab/configs in a checkout): a link through the
# checkout's configs/ symlink would not open on a code host that shows symlinks as files
PRESET_DIR = CONFIG_DIR / "experiment"


def shipped(command: str) -> str:
    """A recorded command as a report may ship it: an absolute path inside the working directory made
    relative, one elsewhere cut to its part from `outputs/` (a checkout's path is nobody else's)."""
    out = []
    for token in command.split(" "):
        key, sep, value = token.rpartition("=") if "=" in token else ("", "", token)
        if value.startswith("/"):
            path = Path(value)
            try:
                value = path.relative_to(Path.cwd()).as_posix()
            except ValueError:
                parts = path.parts
                value = "/".join(parts[parts.index("outputs") :]) if "outputs" in parts else path.name
        out.append(f"{key}{sep}{value}")
    return " ".join(out)


# Config keys described in "What we ran" when they are the same for every run of a finding.
DESCRIBED = (
    ("model", "model"),
    ("model.d_model", "d_model"),
    ("model.n_heads", "heads"),
    ("depth", "depth"),
    ("norm.name", "norm"),
    ("placement.name", "placement"),
    ("model.init", "init"),
    ("model.embed_scale", "embedding scale"),
    ("model.tie_embeddings", "tied head"),
    ("model.bias", "biases"),
    ("model.qk_norm", "qk-norm"),
    ("train.max_steps", "steps"),
    ("train.batch_size", "batch size"),
    ("train.seq_len", "sequence length"),
    ("optim.lr", "peak lr"),
    ("warmup_steps", "warmup steps"),
    ("schedule.name", "schedule"),
    ("train.grad_clip", "grad clip"),
    ("optim.weight_decay", "weight decay"),
    ("optim.z_loss", "z-loss"),
    ("data.name", "data"),
    ("data.vocab_size", "BPE vocabulary"),
)


def describe_runs(rs: RunSet) -> str:
    """'What we ran' in one paragraph, from the runs' own configs."""
    runs = rs.runs
    counts = ", ".join(f"{n} {s}" for s, n in runs["status"].value_counts().items())
    fixed = []
    for col, label in DESCRIBED:
        if col not in runs.columns or col in rs.varying:
            continue
        vals = runs[col].dropna().astype(str).unique()
        if len(vals) == 1:
            fixed.append(f"{label} {vals[0]}")
    display = short_names(rs.varying)
    swept = []
    for k in rs.varying:
        vals = list(dict.fromkeys(runs[k].tolist()))
        with contextlib.suppress(TypeError, ValueError):
            vals = sorted(vals, key=float)
        swept.append(f"{display[k]} ∈ {{{', '.join(str(v) for v in vals)}}}")
    text = f"{len(runs)} runs ({counts})"
    if swept:
        text += ": " + " × ".join(swept)
    if fixed:
        text += "; " + ", ".join(fixed)
    return text + "."


def _values(rs: RunSet, col: str) -> list[str]:
    if col not in rs.valid.columns:
        return []
    vals = list(dict.fromkeys(rs.valid[col].dropna().tolist()))
    with contextlib.suppress(TypeError, ValueError):
        vals = sorted(vals, key=float)
    return [str(v) for v in vals]


def scale_of(rs: RunSet) -> str:
    """Where a verdict was reached, from the runs' configs: 'd_model 64, depth 6, 300 steps of 16 × 64
    tokens'."""
    d, depth = _values(rs, "model.d_model"), _values(rs, "depth")
    steps, batch, seq = (_values(rs, k) for k in ("train.max_steps", "train.batch_size", "train.seq_len"))
    parts = []
    if d:
        parts.append(f"d_model {'/'.join(d)}")
    if depth:
        parts.append(f"depth {depth[0]}" if len(depth) == 1 else f"depths {depth[0]}–{depth[-1]}")
    if steps:
        tokens = f" of {'/'.join(batch)} × {'/'.join(seq)} tokens" if batch and seq else ""
        parts.append("no training (step 0)" if steps == ["0"] else f"{'/'.join(steps)} steps{tokens}")
    return ", ".join(parts) or "–"


def short_scale(rs: RunSet) -> str:
    """'d64 · L6 · 300 steps' for the summary tables."""
    d, depth, steps = (_values(rs, k) for k in ("model.d_model", "depth", "train.max_steps"))
    parts = [f"d{'/'.join(d)}"] if d else []
    if depth:
        parts.append(f"L{depth[0]}" if len(depth) == 1 else f"L{depth[0]}–{depth[-1]}")
    if steps:
        parts.append("step 0" if steps == ["0"] else f"{'/'.join(steps)} steps")
    return " · ".join(parts) or "–"


def _fmt_df(df: float) -> str:
    if not math.isfinite(df):
        return "∞" if df == math.inf else "–"
    return f"{df:.1f}" if df < 100 else f"{df:.0f}"


def checks_table(checks: Sequence[Check]) -> str:
    rows = []
    for i, c in enumerate(checks, 1):
        verdict = f"**{c.verdict}**" + (f" ({c.note})" if c.note else "")
        rows.append(
            [
                str(i),
                c.name + ("" if c.counts else " *(not counted)*"),
                c.source or "–",
                c.statistic,
                fmt_estimate(c.est, CONFIDENCE, unit=c.unit),
                _fmt_df(c.est.df),
                c.rule,
                verdict,
            ]
        )
    headers = [
        "#",
        "check",
        "where the source states it, and its statistic",
        "our statistic",
        f"estimate [{ci_label(CONFIDENCE)}]",
        "df",
        "claim tested",
        "verdict",
    ]
    return md_table(headers, rows)


def table_markdown(rows: list[dict[str, object]]) -> str:
    if not rows:
        return ""
    headers = list(dict.fromkeys(k for r in rows for k in r))
    return md_table(headers, [[r.get(h, "–") for h in headers] for r in rows])


def finding_section(
    finding: Finding,
    rs: RunSet | None,
    outcome: Outcome,
    figures: list[tuple[str, str]],
    record: dict[str, Any] | None,
    error: str | None,
    report_dir: Path,
    robust: Robustness | None = None,
    calibration: str | None = None,
) -> list[str]:
    lines = [f"## {finding.number}. {finding.title}", ""]
    if finding.ours:
        lines += [f"**Claim (our own observation, not from the literature).** {finding.claim}", ""]
    elif finding.composite:
        lines += [
            f"**Claim (ours: a composite of the published claims below; neither source makes it for this "
            f"model).** {finding.claim}",
            "",
        ]
    else:
        lines += [f"**Claim.** {finding.claim}", ""]
    lines += [f"**Source.** {finding.source}", ""]
    if finding.stated:
        lines += [f"**Claim as stated.** {finding.stated}", ""]
    lines += verdict_lines(finding, rs, outcome, robust)
    if finding.paper_scale:
        lines += [
            f"**Scale.** This verdict: {scale_of(rs) if rs is not None else '–'} (CPU). The source's "
            f"evidence: {finding.paper_scale} At that scale, on a GPU: `python train.py -m "
            f"+experiment={finding.paper_preset}`.",
            "",
        ]
    if finding.can_happen and not outcome.preconditions:
        lines += [f"**Can this happen here?** {finding.can_happen}", ""]
    if finding.calibration is not None:
        cal = finding.calibration
        seeds = ", ".join(str(x) for x in cal.seeds)
        head = f"**Calibration** (seed{'s' if len(cal.seeds) > 1 else ''} {seeds}, which the verdict does not use)."
        rerun = f"Re-run: `python scripts/reproduce.py {finding.name} --calibrate`."
        if calibration is None:  # the arms as we recorded them when the choice was made
            lines += [f"{head} {cal.arms} Chosen: {cal.chosen} {rerun}", ""]
        else:  # the arms as measured by the calibration sweep beside this one
            lines += [
                f"{head} Final validation loss by arm:",
                "",
                calibration,
                "",
                f"Chosen: {cal.chosen} {rerun}",
                "",
            ]
    cmd = f"python train.py -m +experiment={finding.preset}"
    if record:  # as it ran; sweeps from before the presets moved to findings/ named them without it
        cmd = shipped(record["command"]).replace(
            f"+experiment={finding.name}", f"+experiment={finding.preset}"
        )
    preset = Path(os.path.relpath(PRESET_DIR, report_dir)) / f"{finding.preset}.yaml"
    lines.append(
        f"**What we ran.** `{cmd}` (preset [`configs/experiment/{finding.preset}.yaml`]({preset.as_posix()}))."
    )
    if rs is not None:
        lines.append(describe_runs(rs))
    if record:
        timing = f"Wall time {fmt_duration(record.get('wall_s'))}"
        if record.get("sessions", 1) > 1:  # continued after a stop: the seconds of every session together
            timing += f" (over {record['sessions']} sessions)"
        measured = record.get(MEASURE_S, record.get("profile_s"))
        if measured is not None:
            what = ", ".join(m.key for m in finding.measurements if m.taken) or "measurements"
            timing += f" (sweep {fmt_duration(record.get('sweep_s'))}, {what} {fmt_duration(measured)})"
        if record.get("perturbed"):
            timing += f", of which {fmt_duration(record['perturbed'].get('wall_s'))} for the perturbed sweep"
            timing += f" (`{shipped(str(record['perturbed'].get('command')))}`)"
        lines.append(f"{timing}, started {record.get('started', '?')}.")
    lines.append("")
    if error:
        lines += [f"Could not load the runs: {error}", ""]
    for filename, caption in figures:
        lines += [f"![{caption}]({filename})", "", f"*{caption}*", ""]
    if outcome.table:
        lines += ["**Measured.**", "", table_markdown(outcome.table), ""]
    for note in outcome.setup_failures:
        lines += [f"Setup failed — {note}", ""]
    if outcome.setup_failures:
        lines += ["Runs that learned nothing cannot test the claim, so the verdict is *setup failed*.", ""]
    lines += precondition_lines(outcome)
    for note in outcome.notes:
        lines += [note, ""]
    if outcome.checks:
        lines += ["**Checks.**", "", checks_table(outcome.checks), ""]
    return lines


def precondition_lines(outcome: Outcome) -> list[str]:
    """'Can this happen here?' for each precondition: of the whole claim, or of one part of it (which
    leaves that part untested and the others deciding)."""
    lines = []
    for pre in outcome.preconditions:
        premise = f" (the premise of {pre.part})" if pre.part else ""
        if pre.met:
            lines += [f"Can this happen here? Yes — {_sentence(pre.name)}{premise}: {pre.observed}.", ""]
        elif pre.part:
            lines += [
                f"Can this happen here? Not shown for {pre.part} — {_sentence(pre.sentence)} That part is "
                "therefore *not tested here*; the other parts decide the verdict.",
                "",
            ]
        else:
            lines += [
                f"Can this happen here? Not shown — {_sentence(pre.sentence)} The verdict is therefore "
                "*not tested here*.",
                "",
            ]
    return lines


def verdict_lines(
    finding: Finding, rs: RunSet | None, outcome: Outcome, robust: Robustness | None
) -> list[str]:
    """The verdict (naming what it depends on, when a setup choice the source does not fix changes it),
    the robustness line, and the scope line of a perturbation that removes the claim's premise."""
    where = f" at {scale_of(rs)}" if rs is not None else ""
    depends = dependence_verdict(finding, robust)
    if depends is not None:
        head, _, rest = depends.partition(": ")
        lines = [f"**Verdict: {head}**{where} — {rest}.", ""]
    else:
        lines = [f"**Verdict: {outcome.verdict}**{where} ({outcome.parts}).", ""]
    if robust is None:
        return lines
    p = finding.perturbation
    line = f"**Robustness: {robust.summary}.**"
    detail = robust.details()
    if detail:
        line += " Verdict with " + "; ".join(detail) + "."
    if p is not None and p.kind == ROBUSTNESS:
        line += f" Why {p.label}: {p.why}"
    for s in finding.subsets:
        line += f" Why {s.label}: {s.why}"
    lines += [line, ""]
    scope = robust.scope_lines(p)
    if p is not None and p.kind != ROBUSTNESS and (scope or depends):
        label = "Scope" if p.kind == SCOPE else "Dependence"
        text = "; ".join(scope) if scope else f"the verdict names it (under {p.label}: see above)"
        lines += [f"**{label}: {text}.** Why {p.label}: {p.why}", ""]
    return lines


def calibration_tables(sweep: Path, calibration: Calibration | None) -> str | None:
    """Every calibration sweep's arms as measured, beside the preset's sweep `sweep`: one table, or, where
    a finding calibrates in several sweeps (Calibration.then), each table under its overrides."""
    if calibration is None:
        return None
    tables = [
        (overrides, calibration_table(folder))
        for overrides, folder in zip(calibration.sweeps, calibration_dirs(sweep, calibration), strict=True)
    ]
    ran = [(overrides, table) for overrides, table in tables if table is not None]
    if len(tables) == 1 or not ran:
        return tables[0][1]
    return "\n\n".join(f"`{' '.join(overrides)}`:\n\n{table}" for overrides, table in ran)


def calibration_table(sweep: Path) -> str | None:
    """The arms of a calibration sweep as measured (variant → final val loss, learned), if it ran."""
    if not sweep.is_dir():
        return None
    try:
        rs = load_runs(sweep)
    except (NoRunsFound, FileNotFoundError):
        return None
    rows = []
    for variant in rs.variants:
        runs = rs.valid[rs.valid["variant"] == variant]
        losses = runs["final_val_loss"].astype(float)
        rows.append([variant or "–", str(len(runs)), fmt_series(losses), learned_count(rs, runs)])
    return md_table(["arm", "runs", "final val loss", "learned"], rows)


def _sentence(text: str) -> str:
    """A name that starts a sentence, continuing one: its first letter lower-cased (not an acronym's)."""
    return text[0].lower() + text[1:] if text[:1].isupper() and not text[1:2].isupper() else text
