"""A sweep's report.md and report.html (`write_report`, `Report`): warnings, the summary table and the
effects table each with generated sentences (normlab.analysis.narrative), every figure that has data,
diverged and invalid runs, all runs.

report.html is the same report as one self-contained file (figures and CSVs embedded as data: URIs,
styles inline) that can be mailed or opened anywhere.

Named for what it writes, a sweep's report, apart from the study's REPORT.md of findings (normlab.study).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from normlab.analysis import captions, conditions, left_out, narrative
from normlab.analysis.escape import markdown_view, md_text
from normlab.analysis.html import markdown_to_html
from normlab.analysis.load import SEED_KEY, RunSet, short_names, sortable
from normlab.analysis.missing_variants import missing
from normlab.analysis.plots import DPI, FIGURES, NoData, plot_grid, save
from normlab.analysis.spike_events import spike_lines
from normlab.analysis.stats import fmt_mean_std, fmt_params, summary_table
from normlab.analysis.throughput import load_text, ran_beside, throughput_note
from normlab.io import write_text_atomic

REPORT_FILE = "report.md"
HTML_FILE = "report.html"
SUMMARY_CSV = "summary.csv"
RUNS_CSV = "runs.csv"
GRID_METRIC = "final_val_loss"


@dataclass
class Report:
    """What write_report produced: report.md, the figures it drew, and why others were skipped."""

    path: Path
    out_dir: Path
    html: Path | None = None
    figures: dict[str, Path] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    summary: pd.DataFrame | None = None


def default_out_dir(paths: Sequence[str | Path], subdir: str = "report") -> Path:
    """One directory given: `DIR/subdir`; several: `outputs/compare/<timestamp>`."""
    if len(paths) == 1 and Path(paths[0]).is_dir():
        return Path(paths[0]) / subdir if subdir else Path(paths[0])
    return Path("outputs") / "compare" / time.strftime("%Y-%m-%d_%H-%M-%S")


def choose_grid(rs: RunSet, grid: str | Sequence[str] | None) -> tuple[str, str] | str:
    """The two grid axes (config keys), or the reason there is no grid."""
    if isinstance(grid, str):
        grid = [g.strip() for g in grid.split(",") if g.strip()]
    if grid:
        if len(grid) != 2:
            raise ValueError(f"--grid takes two config keys separated by a comma, got {','.join(grid)}")
        return rs.resolve_key(grid[0]), rs.resolve_key(grid[1])
    keys = rs.group_keys
    if len(keys) == 2:
        return keys[0], keys[1]
    if "norm.name" in keys and "placement.name" in keys:
        return "placement.name", "norm.name"
    if len(keys) < 2:
        return "fewer than two config keys vary between these runs"
    return f"more than two config keys vary ({', '.join(keys)}); choose two with --grid A,B"


def _md_escape(value: Any) -> str:
    return re.sub(r"(?<!\\)\|", r"\\|", str(value)).replace("\n", " ")  # a pipe escaped once, never twice


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _num(value: Any, fmt: str = "{:.3f}") -> str:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "–"
    return fmt.format(v) if math.isfinite(v) else str(v)


def summary_markdown(table: pd.DataFrame) -> str:
    """The per-variant table; the unigram-baseline and learned columns appear when any run reports them."""
    has_baseline = "baseline_unigram_loss" in table and table["baseline_unigram_loss"].notna().any()
    has_learned = "learned_known" in table and (table["learned_known"] > 0).any()
    headers = [
        "variant",
        "runs",
        "final val loss",
        "best val loss",
        "final train loss",
        *(["unigram baseline"] if has_baseline else []),
        *(["learned"] if has_learned else []),
        "spikes/run",
        "diverged",
        "tokens/s",
        "params",
    ]
    rows = []
    for r in table.itertuples(index=False):
        learned = f"{r.learned}/{r.learned_known}" if r.learned_known else "–"
        if r.learned_known and r.learned < r.learned_known:
            learned = f"**{learned}** ⚠"
        rows.append(
            [
                r.variant,
                r.runs,
                fmt_mean_std(r.final_val_loss_mean, r.final_val_loss_std),
                fmt_mean_std(r.best_val_loss_mean, r.best_val_loss_std),
                fmt_mean_std(r.final_train_loss_mean, r.final_train_loss_std),
                *([_num(r.baseline_unigram_loss)] if has_baseline else []),
                *([learned] if has_learned else []),
                f"{r.n_spikes_mean:.1f}",
                f"{r.diverged}/{r.runs} ({r.divergence_rate:.0%})",
                _num(r.tokens_per_s_mean, "{:,.0f}"),
                fmt_params(r.n_params),
            ]
        )
    return md_table(headers, rows)


EFFECT_HEADERS = ["key", "contrast", "with", "Δ final val loss", narrative.CI_LABEL, "n", "reading"]


def wanted_grid(figures: Sequence[str] | None) -> bool:
    return figures is None or "grid" in figures


def write_report(
    rs: RunSet,
    out_dir: str | Path,
    *,
    grid: str | Sequence[str] | None = None,
    logx: bool = False,
    smooth: int | None = None,
    figures: Sequence[str] | None = None,
    title: str | None = None,
    dpi: int = DPI,
) -> Report:
    """Draw every figure that has data into `out_dir`, and write report.md, summary.csv and runs.csv.

    `grid`: two config keys for the final-val-loss heatmap ("depth,warmup_steps"); by default the two
    grouping keys when exactly two vary (or norm × placement). `figures`: keys of FIGURES (and "grid")
    to draw, default all. `logx`: log-scale step axes. `smooth`: rolling window of the training loss
    (None: automatic, 1: raw). `dpi`: resolution of the PNGs. A figure without data is skipped and listed in
    the report with the reason.
    """
    out = Path(out_dir)
    if rs.runs.empty:  # nothing readable yet (a sweep stopped before any job wrote a file): say what is not
        return _write_empty(rs, out, title)
    out.mkdir(parents=True, exist_ok=True)
    report = Report(path=out / REPORT_FILE, out_dir=out)
    axes = choose_grid(rs, grid) if wanted_grid(figures) else None  # unknown keys fail before any drawing
    options = {"logx": logx, "smooth": smooth}
    wanted = set(figures) if figures is not None else None
    sections: list[tuple[str, str, str]] = []  # (title, filename, figure key)
    for spec in FIGURES:
        if wanted is not None and spec.key not in wanted:
            continue
        try:
            fig = spec.draw(rs, **{k: options[k] for k in spec.options})
        except NoData as e:
            report.skipped[spec.title] = str(e)
            continue
        report.figures[spec.key] = save(fig, out / spec.filename, dpi=dpi)
        sections.append((spec.title, spec.filename, spec.key))

    if axes is not None:
        grid_title = f"Grid of {GRID_METRIC.replace('_', ' ')}"
        if isinstance(axes, str):
            report.skipped[grid_title] = axes
        else:
            display = short_names(list(axes))
            grid_title = f"{grid_title} over {display[axes[0]]} × {display[axes[1]]}"
            try:
                fig = plot_grid(rs, axes[0], axes[1], metric=GRID_METRIC)
            except NoData as e:
                report.skipped[grid_title] = str(e)
            else:
                filename = f"grid_{GRID_METRIC}.png"
                report.figures["grid"] = save(fig, out / filename, dpi=dpi)
                sections.append((grid_title, filename, "grid"))

    table = summary_table(rs)
    report.summary = table
    write_text_atomic(out / SUMMARY_CSV, table.to_csv(index=False))
    write_text_atomic(out / RUNS_CSV, runs_csv(rs))
    # the Markdown from a view whose run-directory strings are escaped: they show as text, never as markup
    view = markdown_view(rs)
    shown_sections = [(md_text(t), f, k) for t, f, k in sections]
    shown_skipped = {md_text(k): md_text(v) for k, v in report.skipped.items()}
    text = _markdown(view, summary_table(view), shown_sections, shown_skipped, _title(view, title, md_text))
    write_text_atomic(report.path, text)
    report.html = out / HTML_FILE
    write_text_atomic(report.html, markdown_to_html(text, out, title=_title(rs, title)))
    return report


def _write_empty(rs: RunSet, out: Path, title: str | None) -> Report:
    """The report of a set without a readable run: what is missing or unreadable, and no figure."""
    out.mkdir(parents=True, exist_ok=True)
    report = Report(path=out / REPORT_FILE, out_dir=out, summary=pd.DataFrame())
    view = markdown_view(rs)
    heading = md_text(title) if title is not None else "No run to compare yet"
    lines = [
        f"# {heading}",
        "",
        f"Generated {time.strftime('%Y-%m-%d %H:%M')} from {', '.join(view.sources)}.",
        "",
    ]
    lines += ["> **Read this first**", ">"] + [f"> - ⚠ {w}" for w in left_out.lines(view)] + [""]
    lines.append("No run here has written a file this report can read yet: no numbers, no figures.")
    text = "\n".join(lines) + "\n"
    write_text_atomic(out / SUMMARY_CSV, "")
    write_text_atomic(out / RUNS_CSV, runs_csv(rs))
    write_text_atomic(report.path, text)
    report.html = out / HTML_FILE
    write_text_atomic(report.html, markdown_to_html(text, out, title=title or "No run to compare yet"))
    return report


def runs_csv(rs: RunSet) -> str:
    """runs.csv: every run's summary and config; its directory relative to the working directory where it
    lies below it (a report copied elsewhere should not carry this machine's absolute paths)."""
    runs = rs.runs.drop(columns=["_order"], errors="ignore").copy()
    if "path" in runs:
        here = Path.cwd().resolve()

        def relative(p: object) -> object:
            try:
                return Path(str(p)).resolve().relative_to(here).as_posix()
            except ValueError:
                return p

        runs["path"] = runs["path"].map(relative)
    return runs.to_csv()


def _title(rs: RunSet, title: str | None, shown: Callable[[str], str] = str) -> str:
    if title is not None:
        return shown(title)
    runs = rs.runs
    title = f"Comparison of {len(runs)} runs"
    experiments = runs["experiment_name"].dropna().unique() if "experiment_name" in runs else []
    if len(experiments) == 1 and experiments[0] != "default":
        title = f"{experiments[0]}: comparison of {len(runs)} runs"
    return title


def _markdown(
    rs: RunSet,
    table: pd.DataFrame,
    sections: list[tuple[str, str, str]],
    skipped: dict[str, str],
    title: str,
) -> str:
    runs = rs.runs
    lines: list[str] = [f"# {title}", ""]
    sources = ", ".join(str(p) for p in rs.sources)
    lines.append(f"Generated {time.strftime('%Y-%m-%d %H:%M')} from {sources}.")
    lines.append("")
    warnings = left_out.lines(rs) + narrative.warnings(rs)
    if warnings:
        lines += ["> **Read this first**", ">"]
        lines += [f"> - ⚠ {w}" for w in warnings]
        lines.append("")
    shared, converged = conditions.conditions_sentence(rs), conditions.convergence_sentence(rs)
    lines += [f"**Conditions.** {shared}", ""] if shared else []
    lines += [f"**Convergence.** {converged}", ""] if converged else []
    display = short_names(rs.group_keys)
    if rs.group_keys:
        by = ", ".join(f"**{display[k]}**" for k in rs.group_keys)
        lines.append(f"Runs are grouped by the config values that differ between them: {by}.")
    else:
        lines.append("No config value other than the seed differs between these runs: they form one group.")
    if SEED_KEY in runs and SEED_KEY not in rs.group_keys and rs.valid.groupby("variant").size().max() <= 1:
        seeds = sorted({s for s in runs[SEED_KEY].dropna()}, key=sortable)
        lines.append(
            f"One run per variant (seed {', '.join(str(s) for s in seeds)}): numbers are single runs, "
            "figures have no bands."
        )
    elif SEED_KEY in runs and SEED_KEY not in rs.group_keys:
        seeds = sorted({s for s in runs[SEED_KEY].dropna()}, key=sortable)
        lines.append(
            f"Seeds ({', '.join(str(s) for s in seeds)}) are averaged: numbers are mean ± sample standard "
            "deviation (ddof=1) over a variant's runs; figures draw the mean, with a ± 1 std band where a "
            "variant has n ≥ 2 runs (legends give n). Every CI below is the two-sided "
            f"{100 * narrative.LEVEL:.0f} % confidence interval of a difference of means (Student's t, "
            "Welch–Satterthwaite degrees of freedom)."
        )
    counts = runs["status"].value_counts()
    lines += ["", "Status: " + ", ".join(f"{n} {s}" for s, n in counts.items()) + ".", ""]

    lines += ["## Summary", ""]
    if table.empty:
        lines.append("No run trained (all invalid).")
    else:
        lines.append(summary_markdown(table))
        budget = conditions.budget_if_fixed(rs)
        lines += ["", " ".join(narrative.summary_sentences(rs, budget=budget)), ""]
        baseline_note = (
            "Unigram baseline: the validation loss of predicting tokens by their training frequencies; "
            "learned: runs whose best val loss is clearly below it (summary.json `learned`). "
            if "unigram baseline" in summary_markdown(table).splitlines()[0]
            or "| learned |" in summary_markdown(table).splitlines()[0]
            else ""
        )
        lines.append(
            "Final val loss: the evaluation at the last step of completed runs (diverged runs have none); "
            "best val loss: the lowest evaluation of any run; final train loss: mean of the last logged steps "
            f"(summary.json). {baseline_note}Spikes/run: loss and grad-norm spikes per run. "
            f"{throughput_note(rs.valid)}"
        )
    lines.append("")

    effects = narrative.contrasts(rs)
    if effects:
        lines += ["## Effects", ""]
        lines += [" ".join(narrative.contrast_sentences(effects, rs)), ""]
        lines += [md_table(EFFECT_HEADERS, narrative.contrast_rows(effects, rs)), ""]
        lines += [
            "Each row: one level of a config key minus the key's first level, the other grouping keys held "
            'fixed ("with"); Δ = difference of the mean final val loss in nats/token (lower is better). '
            f"{narrative.CI_LABEL}: Student's t with Welch–Satterthwaite degrees of freedom over the runs' final val "
            'losses; n = runs with a final val loss on each side. "Worse"/"better" only where the '
            "interval excludes 0. Untested: no noise estimate (one run on a side, or no spread between "
            "the runs), so only the signed Δ is given. Intervals are per row, not adjusted for the number "
            "of rows.",
            "",
        ]

    lines += ["## Figures", ""]
    lines += [
        "Under each figure, one reading computed from these runs: the number it is about, per run, its "
        "highest and lowest variant and their difference, tested as in Effects (untested without a noise "
        "estimate).",
        "",
    ]
    for title_, filename, key in sections:
        lines += [f"### {title_}", "", f"![{title_}]({filename})", ""]
        lines += [text for text in (captions.caption(key, rs), missing(key, rs)) if text]
        if key == "loss":
            spikes = spike_lines(rs)
            if spikes:
                lines += [
                    "",
                    "Spikes flagged (▲; a value more than spikes.sigma standard deviations above its running "
                    "trend, docs/metrics.md):",
                    "",
                ]
                lines += [f"- {line}" for line in spikes]
        lines.append("")
    if skipped:
        lines += ["Skipped (no data for them in these runs):", ""]
        lines += [f"- {name}: {why}." for name, why in skipped.items()]
        lines.append("")

    diverged = runs[runs["status"] == "diverged"]
    if not diverged.empty:
        lines += ["## Diverged runs", ""]
        rows = [
            [
                run,
                r["variant"],
                r.get(SEED_KEY, "–"),
                _num(r["diverged_at"], "{:.0f}"),
                _num(r["best_val_loss"]),
            ]
            for run, r in diverged.iterrows()
        ]
        lines += [md_table(["run", "variant", "seed", "diverged at step", "best val loss"], rows), ""]

    invalid = rs.invalid
    if not invalid.empty:
        lines += ["## Invalid runs", "", "These combinations did not train:", ""]
        rows = [[run, r["norm"], r["placement"], r.get("reason") or "–"] for run, r in invalid.iterrows()]
        lines += [md_table(["run", "norm", "placement", "reason"], rows), ""]

    lines += ["## All runs", ""]
    beside = ran_beside(runs)
    rows = []
    for run, r in runs.sort_values("_order", kind="stable").iterrows():
        rows.append(
            [
                run,
                r["variant"],
                r.get(SEED_KEY, "–"),
                r["status"],
                _num(r["steps"], "{:.0f}"),
                _num(r["final_val_loss"]),
                _num(r["best_val_loss"]),
                _num(r["n_spikes"], "{:.0f}"),
                _num(r["tokens_per_s"], "{:,.0f}"),
                "–" if pd.isna(beside[run]) else int(beside[run]),
                load_text(r.get("load_avg")),
            ]
        )
    headers = [
        "run",
        "variant",
        "seed",
        "status",
        "steps",
        "final val loss",
        "best val loss",
        "spikes",
        "tokens/s",
        "trained beside",
        "load",
    ]
    lines += [md_table(headers, rows), ""]
    lines.append(
        "Trained beside: how many of these runs trained during some part of the run; load: the machine's "
        "1-minute load average when it ended — the context of its tokens/s (see the note under Summary)."
    )
    lines.append("")
    lines.append(f"Per-variant numbers: [{SUMMARY_CSV}]({SUMMARY_CSV}); per-run: [{RUNS_CSV}]({RUNS_CSV}).")
    if rs.warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in rs.warnings]
    return "\n".join(lines) + "\n"
