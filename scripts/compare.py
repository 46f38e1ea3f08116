#!/usr/bin/env python
"""Compare runs and write figures + report.md.

    python scripts/compare.py outputs/sweeps/2026-11-23/14-00-00_default
    python scripts/compare.py SWEEP_A SWEEP_B --out outputs/compare/ab --grid depth,warmup_steps --logx

Runs are grouped by the config values that differ between them; seeds are averaged (mean ± std).
The Python API behind it is normlab.analysis (load_runs, summary_table, plot_*, write_report).
"""

import sys

from normlab.analysis.cli import compare_main

if __name__ == "__main__":
    sys.exit(compare_main())
