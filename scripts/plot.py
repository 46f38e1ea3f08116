#!/usr/bin/env python
"""Draw loss.png and grad_norm.png for runs, one line per run (--mean: seeds averaged).

    python scripts/plot.py outputs/sweeps/2026-11-23/14-00-00_default      # writes into that directory
    python scripts/plot.py RUN_A RUN_B --out plots/

scripts/compare.py draws every figure and writes report.md; this is the quick look.
"""

import sys

from normlab.analysis.cli import plot_main

if __name__ == "__main__":
    sys.exit(plot_main())
