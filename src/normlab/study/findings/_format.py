"""How the findings write the numbers of their measured tables: a value, mean ± std over seeds, the
per-seed values, the count of diverged runs, and the name of their intervals (at the verdicts' level).

Its own module so that every finding's table reads the same way.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import pandas as pd

from normlab.analysis.estimate import ci_label
from normlab.analysis.stats import finite, fmt_mean_std
from normlab.study.verdicts import CONFIDENCE


def fmt(v: float | None, digits: int = 3) -> str:
    if v is None or not isinstance(v, numbers.Real) or not math.isfinite(v):  # numpy numbers too
        return "–"
    return f"{v:.{digits}f}"


def fmt_series(s: pd.Series | Sequence[float], digits: int = 3) -> str:
    """mean ± sample std over seeds."""
    v = finite(pd.Series(list(s), dtype=float)).dropna()
    if v.empty:
        return "–"
    return fmt_mean_std(float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else None, digits)


def per_seed(s: pd.Series | Sequence[float], digits: int = 2) -> str:
    """The individual values, in seed order: '3.53, 3.50, 5.75'."""
    return ", ".join(fmt(float(v), digits) for v in list(s)) or "–"


CI_LABEL = ci_label(CONFIDENCE)  # how the findings name their intervals (the verdicts' level)


def diverged_count(runs: pd.DataFrame) -> str:
    return f"{int((runs['status'] == 'diverged').sum())}/{len(runs)}"
