"""The command lines behind scripts/compare.py and scripts/plot.py (kept here so tests call them in-process)."""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib

from normlab.analysis import left_out
from normlab.analysis.load import NoRunsFound, UnknownKey, load_runs, short_names
from normlab.analysis.plots import DPI, FIGURES, NoData, plot_grad_norm, plot_loss, save
from normlab.analysis.sweep_report import default_out_dir, summary_markdown, write_report
from normlab.analysis.throughput import throughput_note


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _group_by(value: str | None):
    if value is None:
        return None
    return "run" if value.strip() == "run" else [k.strip() for k in value.split(",") if k.strip()]


def compare_main(argv: Sequence[str] | None = None) -> int:
    matplotlib.use("Agg")
    figure_keys = [f.key for f in FIGURES] + ["grid"]
    parser = argparse.ArgumentParser(
        prog="compare.py",
        description="Compare runs: group them by the config values that differ, average seeds (mean ± std), "
        "and write figures, report.md (with sentences stating each effect and its 95%% CI), report.html (the "
        "same, one self-contained file), summary.csv and runs.csv. Reads metrics.jsonl, summary.json and "
        ".hydra/ only, each a regular file inside its run directory (no symbolic link followed); names the "
        "runs it cannot read, the runs not finished and a sweep's jobs not started.",
    )
    parser.add_argument("paths", nargs="+", metavar="SWEEP_OR_RUN_DIR", help="sweep or run directories")
    parser.add_argument(
        "--out",
        type=Path,
        help="output directory (default: DIR/report for one directory, outputs/compare/<time> for several)",
    )
    parser.add_argument(
        "--grid",
        metavar="A,B",
        help="two config keys for the final-val-loss heatmap, e.g. depth,warmup_steps "
        "or norm,placement (default: the two that vary, when exactly two do)",
    )
    parser.add_argument(
        "--group-by",
        metavar="KEYS",
        help="comma-separated config keys to group by instead of all that "
        "differ (others are averaged over), or 'run' for one line per run",
    )
    parser.add_argument("--logx", action="store_true", help="log-scale step axes")
    parser.add_argument(
        "--smooth",
        type=int,
        default=None,
        metavar="N",
        help="rolling mean of the training loss over N logged steps (default: ~1/100 of the run; 1 = raw)",
    )
    parser.add_argument("--figures", metavar="NAMES", help=f"only these figures: {','.join(figure_keys)}")
    parser.add_argument(
        "--dpi",
        type=int,
        default=DPI,
        help=f"resolution of the PNG figures (default {DPI}; 80 for small files)",
    )
    args = parser.parse_args(argv)
    figures = [f.strip() for f in args.figures.split(",")] if args.figures else None
    if figures and (unknown := [f for f in figures if f not in figure_keys]):
        parser.error(f"unknown figure(s) {','.join(unknown)}; choose from {','.join(figure_keys)}")
    out = args.out or default_out_dir(args.paths)
    created = not out.exists()
    try:
        rs = load_runs(args.paths, group_by=_group_by(args.group_by), on_warning=_warn)
        report = write_report(
            rs, out, grid=args.grid, logx=args.logx, smooth=args.smooth, figures=figures, dpi=args.dpi
        )
    except (FileNotFoundError, NoRunsFound, UnknownKey, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:  # a report that could not be written leaves no folder behind (one that was there stays)
        if created and out.is_dir() and not (out / "report.md").exists():
            shutil.rmtree(out, ignore_errors=True)
    for line in left_out.lines(rs):
        print(f"note: {line}")
    counts = ", ".join(f"{n} {s}" for s, n in rs.runs["status"].value_counts().items())
    print(
        f"{len(rs.runs)} runs ({counts or 'none readable'}) in {len(rs.variants)} variant(s), grouped by: "
        f"{', '.join(short_names(rs.group_keys).values()) or 'nothing (one group)'}"
    )
    if report.summary is not None and not report.summary.empty:
        print()
        print(summary_markdown(report.summary))
        print(throughput_note(rs.valid))
        print()
    for name, why in report.skipped.items():
        print(f"skipped {name}: {why}")
    print(f"figures: {report.out_dir}/ ({', '.join(p.name for p in report.figures.values()) or 'none'})")
    print(f"html: {report.html} (the report as one self-contained file)")
    print(f"report: {report.path}")
    return 0


def plot_main(argv: Sequence[str] | None = None) -> int:
    matplotlib.use("Agg")
    parser = argparse.ArgumentParser(
        prog="plot.py",
        description="Draw loss.png (train and validation loss vs step) and grad_norm.png (global gradient "
        "norm vs step, log scale), one line per run labelled by what differs between runs. "
        "scripts/compare.py draws every figure and writes a report.",
    )
    parser.add_argument("paths", nargs="+", metavar="RUN_OR_SWEEP_DIR")
    parser.add_argument(
        "--out",
        type=Path,
        help="output directory (default: the directory given, or outputs/compare/<time> for several)",
    )
    parser.add_argument(
        "--mean", action="store_true", help="average seeds (mean ± std) instead of one line per run"
    )
    parser.add_argument("--logx", action="store_true", help="log-scale step axis")
    args = parser.parse_args(argv)
    try:
        rs = load_runs(args.paths, group_by=None if args.mean else "run", on_warning=_warn)
    except (FileNotFoundError, NoRunsFound) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = args.out or default_out_dir(args.paths, subdir="")
    written = []
    for filename, draw in (("loss.png", plot_loss), ("grad_norm.png", plot_grad_norm)):
        try:
            written.append(save(draw(rs, logx=args.logx), out / filename))
        except NoData as e:
            print(f"skipped {filename}: {e}", file=sys.stderr)
    for path in written:
        print(f"wrote {path}")
    return 0 if written else 1
