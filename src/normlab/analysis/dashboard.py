"""A W&B workspace laid out for a sweep's comparison, built with the `wandb-workspaces` library.

W&B's default workspace is one auto-generated panel per logged key (≈ 85 for a 6-block run), nothing
grouped by what the sweep compares. `build(sweep_dir)` reads the sweep's run directories (never W&B) and
returns a `Dashboard`: a plain description of the workspace — its runs (the sweep's W&B group, grouped by
the keys the sweep varies, so a variant's seeds are one line with its spread), and its sections and panels,
each naming the keys it plots — built offline from what the runs logged, so every panel names a key a run
has (metrics.jsonl for the charts, summary.json for the per-run bars, the report's figures for the media).

`Dashboard.workspace()` turns it into a `wandb_workspaces.workspaces.Workspace` (no network), and
`Dashboard.save()` is the online step, one call: it logs the comparison's figures and verdict table as one
W&B run of the sweep's group (job_type "comparison", so the figures appear in the workspace) and saves the
workspace, returning its URL. scripts/dashboard.py is the command line.

Sections: the comparison (the report's sentences and effects table, its figures, the final and best
validation loss per variant), loss and validation loss, gradient norms (global and per block), activation
growth (residual-stream RMS per block), attention logits, model update and update ratios, and spikes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from normlab.analysis import narrative
from normlab.analysis.load import RunSet, load_runs, short_names
from normlab.analysis.stats import layer_columns
from normlab.analysis.sweep_report import EFFECT_HEADERS, md_table
from normlab.metrics import names
from normlab.summary import OUTCOME_FIELDS

COMPARISON_JOB_TYPE = "comparison"
FIGURE_PREFIX = "comparison/"  # the comparison run's media keys: comparison/loss, comparison/grad_norm, ...
LINE, BAR, MARKDOWN, MEDIA = "line", "bar", "markdown", "media"


@dataclass(frozen=True)
class Panel:
    """One panel: its kind (line: metrics.jsonl keys against the step; bar: summary.json keys per variant;
    media: the comparison run's figures; markdown: text), its title and the keys it shows."""

    kind: str
    title: str
    keys: tuple[str, ...] = ()
    log_y: bool = False
    text: str = ""


@dataclass(frozen=True)
class Section:
    name: str
    panels: tuple[Panel, ...]
    is_open: bool = False


@dataclass
class Dashboard:
    """What the workspace shows (module docstring); `figures` maps a media key to the report's PNG."""

    project: str
    entity: str | None
    group: str
    group_by: list[str]  # W&B config keys (`norm`, `placement`, `optim.lr`): one line per variant
    sections: list[Section]
    name: str
    figures: dict[str, Path] = field(default_factory=dict)
    effects: list[list[str]] = field(default_factory=list)  # the verdict table's rows (EFFECT_HEADERS)

    def panels(self) -> list[Panel]:
        return [p for s in self.sections for p in s.panels]

    def workspace(self) -> Any:
        """The `wandb_workspaces` Workspace of this dashboard (built offline; `.save()` uploads it)."""
        import wandb_workspaces.reports.v2 as wr
        import wandb_workspaces.workspaces as ws
        from wandb_workspaces import expr

        groupby = [expr.Config(k) for k in self.group_by]

        def panel(p: Panel) -> Any:
            if p.kind == LINE:
                return wr.LinePlot(
                    title=p.title,
                    x=names.STEP,
                    y=list(p.keys),
                    log_y=p.log_y or None,
                    groupby_aggfunc="mean",
                    groupby_rangefunc="minmax",
                )
            if p.kind == BAR:
                return wr.BarPlot(
                    title=p.title, metrics=list(p.keys), groupby_aggfunc="mean", groupby_rangefunc="minmax"
                )
            if p.kind == MEDIA:
                return wr.MediaBrowser(title=p.title, media_keys=list(p.keys), num_columns=2)
            return wr.MarkdownPanel(markdown=p.text)

        return ws.Workspace(
            entity=self.entity or "",
            project=self.project,
            name=self.name,
            sections=[
                ws.Section(name=s.name, panels=[panel(p) for p in s.panels], is_open=s.is_open)
                for s in self.sections
            ],
            settings=ws.WorkspaceSettings(x_axis=names.STEP),
            runset_settings=ws.RunsetSettings(
                filters=expr.And(expr.Metric("Group") == self.group),
                groupby=groupby,
                pinned_columns=[
                    f"summary:{k}" for k in ("final_val_loss", "best_val_loss", "learned", "n_spikes")
                ],
            ),
        )

    def save(self, wandb: Any = None) -> str:
        """Upload: the comparison's figures and verdict table as one W&B run of the group, then the
        workspace. Returns the workspace's URL. Needs W&B credentials (`wandb login`)."""
        if wandb is None:
            import wandb
        if self.figures or self.effects:
            run = wandb.init(
                project=self.project,
                entity=self.entity,
                group=self.group,
                job_type=COMPARISON_JOB_TYPE,
                name=f"comparison: {self.group}",
            )
            row: dict[str, Any] = {k: wandb.Image(str(path)) for k, path in self.figures.items()}
            if self.effects:
                row[f"{FIGURE_PREFIX}effects"] = wandb.Table(columns=EFFECT_HEADERS, data=self.effects)
            run.log(row)
            run.finish()
        workspace = self.workspace().save()
        return str(workspace.url)


# ------------------------------------------------------------------------------------------ building


def logged_keys(rs: RunSet) -> set[str]:
    """Every metrics.jsonl key some run logged a value for."""
    return set(rs.metric_names())


def summary_keys(rs: RunSet) -> set[str]:
    """summary.json keys some run has a number for (what W&B's run summary gets, WandbSink.finish)."""
    out = set()
    for key in OUTCOME_FIELDS:
        if (
            key in rs.runs
            and rs.runs[key].map(lambda v: isinstance(v, int | float) and not isinstance(v, bool)).any()
        ):
            out.add(key)
    return out


def wandb_group(sweep_dir: Path) -> str:
    """The W&B group of a sweep's runs, as normlab.cli.sweep_group names it: DATE_TIME_EXPERIMENT."""
    sweep_dir = Path(sweep_dir).resolve()
    return f"{sweep_dir.parent.name}_{sweep_dir.name}" if sweep_dir.parent.name else sweep_dir.name


def group_keys(rs: RunSet) -> list[str]:
    """The W&B config keys of the variant: the grouping keys as W&B's flattened config names them (a
    group's choice at the top: `norm.name` → `norm`, normlab.metrics.wandb_sink.run_config)."""
    out = []
    for key in rs.group_keys:
        out.append(key.removesuffix(".name") if key.endswith(".name") and key.count(".") == 1 else key)
    return out


def per_layer(rs: RunSet, keys: set[str], layer_name: Any) -> tuple[str, ...]:
    cols = layer_columns(sorted(keys), layer_name)
    return tuple(cols[i] for i in sorted(cols))


def comparison_text(rs: RunSet, title: str) -> str:
    sentences = narrative.report_sentences(rs)
    parts = [f"## {title}", ""]
    if sentences["warnings"]:
        parts += [f"- ⚠ {w}" for w in sentences["warnings"]] + [""]
    for sentence in sentences["conditions"]:  # what the comparison holds under; converged or not
        parts += [sentence, ""]
    parts += [" ".join(sentences["summary"]), ""]
    effects = narrative.contrasts(rs)
    if effects:
        parts += [" ".join(narrative.contrast_sentences(effects, rs)), ""]
        parts += [md_table(EFFECT_HEADERS, narrative.contrast_rows(effects, rs)), ""]
    parts.append(
        "From `python scripts/compare.py` on the sweep's run directories (metrics.jsonl is the source)."
    )
    return "\n".join(parts)


def build(
    sweep_dir: str | Path,
    *,
    project: str | None = None,
    entity: str | None = None,
    report_dir: str | Path | None = None,
) -> Dashboard:
    """The dashboard of the sweep in `sweep_dir`; `report_dir` holds compare.py's figures (default
    SWEEP/report) — present ones become the comparison's media. Project and entity default to the runs'
    `logger.project` / `logger.entity`."""
    sweep_dir = Path(sweep_dir)
    rs = load_runs(sweep_dir)
    keys, summary = logged_keys(rs), summary_keys(rs)
    project = project or _config_value(rs, "logger.project") or "normlab"
    entity = entity or _config_value(rs, "logger.entity")
    group = wandb_group(sweep_dir)
    display = ", ".join(short_names(rs.group_keys).values()) or "the runs"
    title = f"normlab: {group} - by {display}"

    def line(title: str, wanted: Sequence[str], log_y: bool = False) -> list[Panel]:
        have = tuple(k for k in wanted if k in keys)
        return [Panel(LINE, title, have, log_y)] if have else []

    report = Path(report_dir) if report_dir is not None else sweep_dir / "report"
    figures = {f"{FIGURE_PREFIX}{p.stem}": p for p in sorted(report.glob("*.png"))} if report.is_dir() else {}
    effects = narrative.contrast_rows(narrative.contrasts(rs), rs)
    comparison = [
        Panel(MARKDOWN, "The comparison", text=comparison_text(rs, title)),
        *([Panel(MEDIA, "The report's figures", tuple(figures))] if figures else []),
        *(
            [
                Panel(
                    BAR,
                    "Final and best validation loss per variant",
                    tuple(k for k in ("final_val_loss", "best_val_loss") if k in summary),
                )
            ]
            if {"final_val_loss", "best_val_loss"} & summary
            else []
        ),
    ]
    layers = {
        "grad": per_layer(rs, keys, names.grad_norm_layer),
        "act": per_layer(rs, keys, names.act_rms_layer),
        "attn": per_layer(rs, keys, names.attn_max_logit_layer),
        "update": per_layer(rs, keys, names.update_ratio_layer),
    }
    sections = [
        Section("Comparison", tuple(comparison), is_open=True),
        Section(
            "Loss",
            tuple(line("Training loss", [names.LOSS]) + line("Validation loss", [names.VAL_LOSS])),
            is_open=True,
        ),
        Section(
            "Gradient norms",
            tuple(
                line("Global gradient norm (before clipping)", [names.GRAD_NORM], log_y=True)
                + line("Per-block gradient norm (one line per block and variant)", layers["grad"], log_y=True)
            ),
        ),
        Section(
            "Activation growth",
            tuple(
                line("Residual-stream RMS after each block", layers["act"], log_y=True)
                + line("RMS of the LM head's input", [names.ACT_RMS_HEAD])
            ),
        ),
        Section(
            "Attention logits", tuple(line("Largest attention logit per block", layers["attn"], log_y=True))
        ),
        Section(
            "Model update",
            tuple(
                line("Model update since initialisation (DeepNet)", [names.MODEL_UPDATE])
                + line("Update-to-weight ratio per block", layers["update"], log_y=True)
            ),
        ),
        Section(
            "Spikes",
            tuple(
                line("Flagged spikes (1 on a flagged step)", [names.SPIKE_LOSS, names.SPIKE_GRAD_NORM])
                + (
                    [
                        Panel(
                            BAR,
                            "Spikes per run",
                            tuple(k for k in ("n_loss_spikes", "n_grad_norm_spikes") if k in summary),
                        )
                    ]
                    if {"n_loss_spikes", "n_grad_norm_spikes"} & summary
                    else []
                )
            ),
        ),
    ]
    return Dashboard(
        project=project,
        entity=entity,
        group=group,
        group_by=group_keys(rs),
        sections=[s for s in sections if s.panels],
        name=re.sub(r"[^\w .:,()-]", "", title)[:120],
        figures=figures,
        effects=effects,
    )


def not_in_wandb(sweep_dir: str | Path) -> tuple[int, int]:
    """(runs that logged nothing to W&B — logger=none or logger.mode=disabled —, runs) of a sweep: the
    workspace's panels show W&B's copies of the runs, so these leave them empty."""
    runs = load_runs(Path(sweep_dir)).runs
    off = runs.get("logger.name", pd.Series("wandb", index=runs.index)).astype(str).eq("none")
    if "logger.mode" in runs:
        off |= runs["logger.mode"].astype(str).eq("disabled")
    return int(off.sum()), len(runs)


def _config_value(rs: RunSet, key: str) -> str | None:
    if key not in rs.runs:
        return None
    values = rs.runs[key].dropna().unique()
    return str(values[0]) if len(values) else None


# ------------------------------------------------------------------------------------------ command line


def dashboard_text(d: Dashboard) -> str:
    lines = [
        f"W&B workspace '{d.name}' for project {d.project}, group {d.group}, one line per {', '.join(d.group_by) or 'run'}:"
    ]
    for s in d.sections:
        lines.append(f"  {s.name}:")
        for p in s.panels:
            shown = f"{len(p.keys)} keys" if len(p.keys) > 3 else ", ".join(p.keys) or "text"
            lines.append(f"    {p.kind:8s} {p.title} ({shown})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import dataclasses
    import json
    import sys

    parser = argparse.ArgumentParser(
        prog="python scripts/dashboard.py",
        description="Build a W&B workspace laid out for a sweep's comparison (offline), and with --save "
        "upload it (the comparison's figures and verdict table as one run of the sweep's group, then the "
        "workspace).",
    )
    parser.add_argument("sweep", help="the sweep directory (outputs/sweeps/DATE/TIME_NAME)")
    parser.add_argument("--project", help="W&B project (default: the runs' logger.project)")
    parser.add_argument("--entity", help="W&B entity (default: the runs' logger.entity, else yours)")
    parser.add_argument("--report", help="compare.py's output for the figures (default: SWEEP/report)")
    parser.add_argument("--spec", help="also write the dashboard's description as JSON to this file")
    parser.add_argument("--save", action="store_true", help="upload it to W&B (needs wandb login)")
    args = parser.parse_args(argv)
    try:
        import wandb_workspaces  # noqa: F401
    except ImportError:
        print(
            "error: the dashboard needs the wandb-workspaces library; install it with "
            "pip install -e '.[dashboard]' (or pip install wandb-workspaces).",
            file=sys.stderr,
        )
        return 2
    from normlab.analysis.load import NoRunsFound

    if not Path(args.sweep).is_dir():
        print(
            f"error: {args.sweep} is not a directory; pass a sweep directory (outputs/sweeps/DATE/TIME_NAME).",
            file=sys.stderr,
        )
        return 2
    try:
        dash = build(args.sweep, project=args.project, entity=args.entity, report_dir=args.report)
    except NoRunsFound as e:
        print(f"error: {e}; pass a sweep directory (outputs/sweeps/DATE/TIME_NAME).", file=sys.stderr)
        return 2
    dash.workspace()  # the library checks the spec (panel types, keys) without the network
    print(dashboard_text(dash))
    off, total = not_in_wandb(args.sweep)
    if off == total:
        print(
            f"warning: none of the {total} runs logged to W&B (logger=none): this workspace's panels would "
            "stay empty; rerun the sweep with logger=wandb (the default) to fill them, or read these runs with "
            "python scripts/compare.py.",
            file=sys.stderr,
        )
        if args.save:
            print("error: nothing to show in W&B, so nothing was uploaded.", file=sys.stderr)
            return 2
    elif off:
        print(
            f"warning: {off} of the {total} runs logged nothing to W&B (logger=none): their lines are missing "
            "from these panels.",
            file=sys.stderr,
        )
    if not dash.figures:
        print(
            f"no figures under {args.report or Path(args.sweep) / 'report'}: run python scripts/compare.py first to include them"
        )
    if args.spec:
        spec = dataclasses.asdict(dash)
        spec["figures"] = {k: str(v) for k, v in dash.figures.items()}
        Path(args.spec).write_text(json.dumps(spec, indent=2, default=str) + "\n")
        print(f"spec: {args.spec}")
    if not args.save:
        print("offline only: add --save to upload it (wandb login first; the runs themselves: wandb sync)")
        return 0
    try:
        url = dash.save()
    except Exception as e:  # no credentials, no network, a W&B refusal: one sentence
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        print(
            f"error: W&B refused or could not be reached ({type(e).__name__}: {first}); run wandb login, "
            "check the network, or build it offline without --save.",
            file=sys.stderr,
        )
        return 2
    print(f"workspace: {url}")
    return 0
