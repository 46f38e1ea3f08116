"""What the depth findings (LayerNorm Scaling, Mix-LN) measure per run: how the residual stream grows with
the block index, and how much the deeper half of the blocks contributes (the layer-ablation probe).

- stream growth with depth: log(RMS of the stream after the last block / after the first), from
  `act_rms/layer_i` at the last instrumented step (and at step 0, for the table);
- contribution of a block: the validation loss with that block skipped minus the whole model's, at the
  last evaluation (`layer_ablation/layer_i`, metrics.layer_ablation=true); the deeper half is blocks
  ⌊L/2⌋ … L − 1, the shallower half 0 … ⌊L/2⌋ − 1.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normlab.analysis.load import RunSet
from normlab.analysis.plots import layer_contributions
from normlab.metrics import names
from normlab.study.findings._common import CannotEvaluate, need_metric
from normlab.study.findings.periln import profiles

# nats: a block whose removal moves the validation loss by less than this (≈ 1 % in perplexity) does
# not count as contributing more or less; applied to the mean over the blocks of a half
CONTRIBUTION_MARGIN = 0.01
# log units (≈ 10 %): smaller differences in the growth of the stream with depth do not count
GROWTH_MARGIN = 0.1


def depth_profile(rs: RunSet, runs: pd.Index | list[str]) -> pd.DataFrame:
    """One row per run: stream growth with depth at step 0 and at the end, and the mean contribution of
    the shallower and deeper halves of the blocks at the last evaluation."""
    need_metric(rs, names.layer_ablation(0), "the layer-ablation probe, metrics.layer_ablation=true")
    contributions = layer_contributions(rs)
    rows = {}
    for run in runs:
        p, delta = profiles(rs, run), contributions.get(run)
        if p is None or delta is None:
            continue
        r0, r1, _ = p
        half = len(delta) // 2
        rows[run] = {
            "growth_init": float(np.log(r0[-1] / r0[0])),
            "growth_end": float(np.log(r1[-1] / r1[0])),
            "shallow": float(np.mean(delta[:half])),
            "deep": float(np.mean(delta[half:])),
            "depth": len(delta),
        }
    if not rows:
        raise CannotEvaluate("no run has both act_rms/layer_i at step 0 and later and layer_ablation/layer_i")
    return pd.DataFrame.from_dict(rows, orient="index")


def halves(depth: int) -> str:
    """'blocks 4–7 vs 0–3' for the table and the check texts."""
    half = depth // 2
    return f"blocks {half}–{depth - 1} vs 0–{half - 1}" if half >= 1 else "one block"


def mean_or_nan(values: pd.Series) -> float:
    v = values.dropna()
    return float(v.mean()) if not v.empty else math.nan
