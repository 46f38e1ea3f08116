"""Loading runs, comparing variants, drawing figures and writing report.md — from a script or a notebook.

from normlab.analysis import load_runs, summary_table, plot_loss, write_report
rs = load_runs("outputs/sweeps/2026-11-23/14-00-00_default")  # run or sweep dirs, any mix
rs.runs              # one row per run: status, final/best val loss, config keys, variant
rs.metrics           # wide: one row per (run, step); rs.long: (run, step, metric, value)
rs.group_keys        # config keys that differ between runs (seed excluded: seeds are averaged)
summary_table(rs)    # per-variant mean ± std table
report_sentences(rs) # what the numbers show, with Welch-t intervals, and the warnings (n = 1, not learned)
plot_loss(rs, logx=True)            # a matplotlib Figure
write_report(rs, "outputs/compare/mine", grid="depth,warmup_steps")  # report.md + report.html
"""

from normlab.analysis.load import NoRunsFound, RunSet, find_run_dirs, load_runs, varying_keys
from normlab.analysis.narrative import contrasts, report_sentences
from normlab.analysis.plots import FIGURES, NoData, grid_cells, plot_grid, save
from normlab.analysis.stats import fmt_mean_std, layer_columns, seed_stats, summary_table
from normlab.analysis.sweep_report import Report, default_out_dir, write_report

# Every report figure's function is exported here under its own name (`from normlab.analysis import
# plot_loss`), taken from FIGURES, so a new figure is one FigureSpec and no second list of names to keep.
# They are bound as real attributes of this module, not served by a PEP 562 `__getattr__`: dir(), `import
# *`, help() and tab completion then show exactly what __all__ lists, where a `__getattr__` would hide them
# from dir() unless a `__dir__` repeated the list, and would tell a type checker that any attribute of this
# package (a misspelt `plot_los` too) is a figure. Type-checked code imports them from
# normlab.analysis.plots, where each is a static import.
FIGURE_FUNCTIONS = {spec.draw.__name__: spec.draw for spec in FIGURES}
globals().update(FIGURE_FUNCTIONS)

__all__ = [
    "FIGURES",
    "NoData",
    "NoRunsFound",
    "Report",
    "RunSet",
    "contrasts",
    "default_out_dir",
    "find_run_dirs",
    "fmt_mean_std",
    "grid_cells",
    "layer_columns",
    "load_runs",
    "plot_grid",
    "report_sentences",
    "save",
    "seed_stats",
    "summary_table",
    "varying_keys",
    "write_report",
    *FIGURE_FUNCTIONS,
]
