"""REPORT.md from finding sweeps: per finding the claim and source, what ran, figures, the measured
table, the checks with their confidence intervals and the verdict; a summary table, the machine and the
wall times on top. `normlab.study.reproduce` runs the sweeps and calls `build_report`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

from normlab.analysis.estimate import ci_label, fmt_estimate
from normlab.analysis.load import NoRunsFound, RunSet, load_runs, short_names
from normlab.analysis.plots import save
from normlab.analysis.report import md_table
from normlab.configs import CONFIG_DIR
from normlab.study.findings import CORE, FINDINGS, Finding, evaluate
from normlab.study.findings._format import fmt_series
from normlab.study.findings._learning import learned_count
from normlab.study.robustness import Robustness, calibration_dir, robustness_of
from normlab.study.verdicts import CONFIDENCE, NOT_TESTED, RULE, SETUP_FAILED, Check, Outcome

# presets are linked where the package keeps them (src/normlab/configs in a checkout): a link through the
# checkout's configs/ symlink would not open on a code host that shows symlinks as files
PRESET_DIR = CONFIG_DIR / "experiment"
REPORT_FILE = "REPORT.md"


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


TIMINGS_FILE = "timings.json"
MEASURE_S = "measure_s"  # a timing record's seconds spent on the finding's measurements ("profile_s" before)
FIGURE_DPI = 100  # keeps every PNG well under 300 KB

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


def machine_line(m: dict[str, Any]) -> str:
    mem = f", {m['memory_gib']} GiB RAM" if m.get("memory_gib") else ""
    return f"{m['cpu']}, {m['cores']} cores{mem}; {m['os']}; Python {m['python']}, torch {m['torch']}"


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "–"
    seconds = int(round(seconds))
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def load_timings(out: Path) -> dict[str, Any]:
    path = out / TIMINGS_FILE
    if path.is_file():
        return json.loads(path.read_text())
    return {"findings": {}, "sessions": []}


# ---------------------------------------------------------------------------------------- report


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
        "statistic",
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
    where = f" at {scale_of(rs)}" if rs is not None else ""
    lines += [f"**Verdict: {outcome.verdict}**{where} ({outcome.parts}).", ""]
    if robust is not None:
        line = f"**Robustness: {robust.summary}.**"
        detail = robust.details()
        if detail:
            line += " Verdict with " + "; ".join(detail) + "."
        if finding.perturbation is not None:
            line += f" Why {finding.perturbation.label}: {finding.perturbation.why}"
        lines += [line, ""]
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
            what = ", ".join(m.key for m in finding.measurements) or "measurements"
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
    for pre in outcome.preconditions:
        if pre.met:
            lines += [f"Can this happen here? Yes — {_sentence(pre.name)}: {pre.observed}.", ""]
        else:
            lines += [
                f"Can this happen here? Not shown — {_sentence(pre.sentence)} The verdict is therefore "
                "*not tested here*.",
                "",
            ]
    for note in outcome.notes:
        lines += [note, ""]
    if outcome.checks:
        lines += ["**Checks.**", "", checks_table(outcome.checks), ""]
    return lines


README_START = "<!-- --8<-- [start:findings] -->"
README_END = "<!-- --8<-- [end:findings] -->"


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


def headline(outcome: Outcome) -> str:
    """The verdict and the numbers behind it, in one cell: the unmet precondition of a *not tested here*,
    else each counted check's estimate against its rule."""
    verdict = f"**{outcome.verdict}**"
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
    return f"{verdict}: " + "; ".join(parts) if parts else verdict


def _brief(name: str, words: int = 9) -> str:
    """A check's name cut to its first words, for a table cell: 'Warm-up (100 steps) closes most …:'."""
    parts = name.split()
    text = " ".join(parts[:words]) + (" …" if len(parts) > words else "")
    return text.rstrip(".") + ":"


def _sentence(text: str) -> str:
    """A name that starts a sentence, continuing one: its first letter lower-cased (not an acronym's)."""
    return text[0].lower() + text[1:] if text[:1].isupper() and not text[1:2].isupper() else text


def readme_table(rows: Sequence[Sequence[str]], command: str, intro: str) -> str:
    """The README's findings table (between README_START and README_END), from one report build."""
    headers = ["#", "finding", "source", "preset", "verdict here (90 % CIs)", "decided at", "robustness"]
    return "\n".join(["", md_table(headers, [list(r) for r in rows]), "", intro, ""])


def write_readme_table(readme: Path, table: str) -> None:
    """Replace what lies between the README's findings markers with `table`."""
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        raise ValueError(f"{readme} has no {README_START} … {README_END} markers for the findings table")
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    readme.write_text(head + README_START + "\n" + table + "\n" + README_END + tail)


def build_report(
    out: Path,
    report_dir: Path,
    names: Sequence[str] | None = None,
    command: str | None = None,
    readme: Path | None = None,
) -> tuple[Path, dict[str, str]]:
    """REPORT.md and figures in report_dir for the findings with sweeps in out (or `names`); with
    `readme`, the README's findings table from the same outcomes."""
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
        verdicts[name] = outcome.verdict
        robust = robustness_of(name, rs, outcome.verdict, sweeps / name, outcome) if rs is not None else None
        calibration = calibration_table(calibration_dir(sweeps / name))
        sections += finding_section(
            finding, rs, outcome, figures, record, error, report_dir.resolve(), robust, calibration
        )
        scale = short_scale(rs) if rs is not None else "–"
        summary_rows.append(
            [
                f"[{finding.number}](#{finding.number}-{_anchor(finding.title)})",
                finding.title + (" (core)" if finding.core else ""),
                finding.cite,
                f"**{outcome.verdict}**",
                outcome.parts,
                scale,
                robust.summary if robust is not None else "–",
                fmt_duration(record.get("wall_s")) if record else "–",
            ]
        )
        readme_rows.append(
            [
                str(finding.number),
                finding.short or finding.title,
                "**observed here**" if finding.ours else finding.cite,
                f"`{finding.name}`" + (" (core)" if finding.core else ""),
                headline(outcome),
                scale,
                robust.summary if robust is not None else "–",
            ]
        )
    lines = ["# Reproducing published findings on normalization", ""]
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
    totals = _totals(timings, names)
    if totals:
        lines += [totals, ""]
    lines += [
        "Each preset runs its jobs with Hydra's joblib launcher, one job per core and one torch thread per "
        "job (`hydra/launcher=joblib`, `n_jobs` = cores). Numbers are measured on small models over a few "
        "hundred steps: a finding that does not reproduce here may still hold at the paper's scale, and the "
        "report says so rather than tuning the presets until it does.",
        "",
        "## Summary",
        "",
        md_table(
            ["#", "finding", "source", "verdict", "checks", "decided at", "robustness", "wall time"],
            summary_rows,
        ),
        "",
        "## How verdicts are decided",
        "",
        RULE,
        "",
    ]
    lines += sections
    path = report_dir / REPORT_FILE
    path.write_text("\n".join(lines).rstrip() + "\n")
    if readme is not None:
        intro = (
            f"Generated with the findings report (`{os.path.relpath(path.resolve(), readme.resolve().parent)}`) "
            f"by `{command or 'scripts/reproduce.py'}`"
            + (
                f" ({_totals(timings, names).split(': ', 1)[1].rstrip('.')})"
                if _totals(timings, names)
                else ""
            )
            + ". Intervals are two-sided 90 % (one-sided tests at 5 %); each check's rule is its margin, the "
            "smallest effect that counts. *Not tested here*: the phenomenon the claim is about did not happen "
            'at this scale (the report says what would make it happen). "Robustness": the verdict with any '
            "one seed dropped and under the one change of setup each finding names; *cannot move it* marks a "
            "variation that leaves what the verdict rests on unchanged."
        )
        write_readme_table(readme, readme_table(readme_rows, command or "", intro))
    return path, verdicts


def _anchor(title: str) -> str:
    keep = "".join(ch.lower() if ch.isalnum() or ch in " -" else "" for ch in title)
    return keep.strip().replace(" ", "-")


def _totals(timings: dict[str, Any], names: Sequence[str]) -> str:
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
