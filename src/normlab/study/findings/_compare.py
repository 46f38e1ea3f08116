"""Comparing two arms of a preset (or a weighted sum of several): an interval for the difference of their
means, paired by seed where every arm ran the same seeds (the arms share data order and seeds, so pairing
removes what they have in common), else Welch's unpaired interval.

Its own module because it is the one statistical step between the runs' values and a finding's checks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from normlab.analysis.estimate import Estimate, combination, estimate
from normlab.analysis.load import RunSet


def by_seed(rs: RunSet, values: pd.Series) -> pd.Series | None:
    """Per-run values re-indexed by their runs' seeds (finite values only); None when they are not indexed
    by runs of `rs` or two of them share a seed."""
    if not isinstance(values, pd.Series) or "seed" not in rs.runs.columns:
        return None
    if not values.index.isin(rs.runs.index).all():
        return None
    seeds = rs.runs.loc[values.index, "seed"].astype(str)
    if seeds.duplicated().any():
        return None
    out = pd.Series(pd.to_numeric(values, errors="coerce").to_numpy(dtype=float), index=seeds.to_numpy())
    return out[np.isfinite(out.to_numpy())]


def paired(rs: RunSet, terms: Sequence[tuple[float, pd.Series]]) -> Estimate:
    """Σ wᵢ · mean(armᵢ), paired by seed where every arm ran the same seeds (issue 28): each seed's
    weighted sum, its mean over seeds with n − 1 degrees of freedom — the arms of a preset share data order
    and seeds, so pairing removes what they have in common. Otherwise (different seeds, or per-run values
    without run ids) the arms are independent groups: Welch–Satterthwaite — also where every seed's sum
    is the same number (no noise estimate), for which the unpaired interval is valid and, arms that move
    together being positively correlated, conservative."""
    unpaired = combination([(w, estimate(arm)) for w, arm in terms])
    per_seed = [by_seed(rs, arm) for _, arm in terms]
    if all(x is not None for x in per_seed):
        seeds = set(per_seed[0].index)
        if len(seeds) >= 2 and all(set(x.index) == seeds for x in per_seed):
            order = sorted(seeds)
            total = sum(w * x.reindex(order).to_numpy() for (w, _), x in zip(terms, per_seed, strict=True))
            by_pairs = estimate(total)
            if by_pairs.has_noise or not unpaired.has_noise:
                return by_pairs
    return unpaired


def compare(rs: RunSet, a: pd.Series, b: pd.Series) -> Estimate:
    """mean(a) − mean(b), paired by seed where both arms ran the same seeds, else Welch (`paired`)."""
    return paired(rs, [(1.0, a), (-1.0, b)])


def compare_by_seed(a: pd.Series, b: pd.Series) -> Estimate:
    """a − b for values already indexed by seed: paired where both have the same seeds, else Welch."""
    a, b = a.astype(float).dropna(), b.astype(float).dropna()
    unpaired = combination([(1.0, estimate(a)), (-1.0, estimate(b))])
    if len(a) >= 2 and set(a.index) == set(b.index) and a.index.is_unique and b.index.is_unique:
        by_pairs = estimate((a - b.reindex(a.index)).to_numpy())
        if by_pairs.has_noise or not unpaired.has_noise:
            return by_pairs
    return unpaired
