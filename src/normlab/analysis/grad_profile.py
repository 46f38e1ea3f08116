"""The gradient profile at initialisation read against Xiong et al. (2020, Thm. 1 and Fig. 3): Post-LN's
per-block gradient grows towards the output, Pre-LN's stays about level. Each variant's block L−1 / block 0
ratio at step 0, one per run, is read on log values with the report's interval (`estimate.LEVEL`):

- rises / falls / level where the interval lies wholly beyond / within ±LEVEL_BAND (×1.25);
- `falls_some` / `rises_some` where it lies wholly below / above 1× but reaches into the band: the direction
  is known, the size against the band is not — it reads "falls towards the output", with what the interval
  shows, never "not clearly rising, level or falling";
- undecided where it spans 1×.

A prediction is read against the shapes a reading leaves possible (`POSSIBLE`): as predicted where only the
predicted one is, against it where it is not among them, undecided otherwise. Where Post-LN's profile peaks
at block 0 with GPT-2's unscaled N(0, 0.02) embeddings, the sentence says why (`small_embeddings`).

Its own module: the sentence under one figure that reads a paper's prediction (normlab.analysis.captions
calls it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from normlab.analysis import narrative
from normlab.analysis.estimate import estimate
from normlab.analysis.load import RunSet
from normlab.analysis.stats import finite, layer_columns
from normlab.metrics import names

# Xiong et al. 2020, Thm. 1 and Fig. 3: at initialisation Post-LN's gradient norm grows with the layer
# index (largest next to the output); Pre-LN's stays about the same in every layer.
XIONG_EXPECTS = {"post": "rises", "pre": "level"}
LEVEL_BAND = math.log(1.25)  # |log(top / bottom)| below this: "about level"


def profile_shape(log_ratios: Sequence[float]) -> tuple[str, str]:
    """(shape, how sure) of a profile from its runs' log(top / bottom): rises / falls / level when the
    report's interval of their mean lies wholly beyond / within ±LEVEL_BAND; `falls, by an undecided
    amount` (`rises, …`) when it lies wholly below (above) 1× but reaches into the level band; undecided
    when it spans 1×. One run (or no spread) reads the point value, marked untested."""
    e = estimate(log_ratios)
    lo, hi = e.ci(narrative.LEVEL)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo = hi = e.value
        sure = f"n = {len(log_ratios)}, untested"
    else:
        sure = f"95 % CI {math.exp(lo):.3g}× to {math.exp(hi):.3g}×, n = {len(log_ratios)}"
    if lo > LEVEL_BAND:
        return "rises", sure
    if hi < -LEVEL_BAND:
        return "falls", sure
    if lo >= -LEVEL_BAND and hi <= LEVEL_BAND:
        return "level", sure
    band = f"part of it within the ×{math.exp(LEVEL_BAND):.3g} counted as level"
    if hi < 0:
        return "falls_some", f"{sure}: all of it below 1×, {band}"
    if lo > 0:
        return "rises_some", f"{sure}: all of it above 1×, {band}"
    return "undecided", f"{sure}: from below 1× to above it"


SHAPE_TEXT = {
    "rises": "rises towards the output",
    "falls": "falls towards the output",
    "level": "is about level",
    # the interval lies on one side of 1×, part of it inside the band counted as level
    "falls_some": "falls towards the output",
    "rises_some": "rises towards the output",
    "undecided": "has no clear direction",
}
# the shapes each reading leaves possible, against which a prediction is read
POSSIBLE = {
    "rises": {"rises"},
    "falls": {"falls"},
    "level": {"level"},
    "falls_some": {"falls", "level"},
    "rises_some": {"rises", "level"},
    "undecided": {"falls", "level", "rises"},
}


def reading(rs: RunSet, ratios: dict[str, list[float]], top: int) -> str:
    """The sentence under the figure: each variant's profile (`ratios`: block `top` over block 0 at step 0,
    one per run) read against Xiong et al.'s prediction for its placement."""
    placement = rs.valid.groupby("variant")["placement"].first()
    parts, against = [], []
    for variant, xs in ratios.items():
        logs = [math.log(x) for x in xs]
        shape, sure = profile_shape(logs)
        ratio = math.exp(float(np.mean(logs)))
        expected = XIONG_EXPECTS.get(str(placement.get(variant)))
        verdict = ""
        if expected is not None:
            possible = POSSIBLE[shape]
            if expected not in possible:
                verdict = "; against the prediction"
                against.append(variant)
            else:
                verdict = "; as predicted" if possible == {expected} else "; undecided against the prediction"
        parts.append(
            f"`{variant}` {SHAPE_TEXT[shape]} (block {top} / block 0 = {ratio:.3g}×, {sure}{verdict})"
        )
    text = (
        "At initialisation Xiong et al. (2020, Fig. 3) predict Post-LN's per-block gradient to grow towards "
        f"the output and Pre-LN's to stay about level (here: within ×{math.exp(LEVEL_BAND):.3g} from block 0 "
        "to the last); " + "; ".join(parts)
    )
    small_embed = small_embeddings(rs, against)
    if small_embed:
        text += (
            f". Where Post-LN's is largest at block 0 ({', '.join(f'`{v}`' for v in small_embed)}), its first "
            "norm divides the block's output by the scale of N(0, 0.02) embeddings (model.init=gpt2, "
            "embed_scale 1), which multiplies block 0's gradient; the paper's unit-scale inputs are "
            "model.init=xavier model.embed_scale=sqrt_d (finding 1 runs them)"
        )
    return text + "."


def small_embeddings(rs: RunSet, variants: Sequence[str]) -> list[str]:
    """The Post-LN variants among `variants` whose gradient at step 0 is largest in block 0 and whose
    embeddings are GPT-2's N(0, 0.02) unscaled."""
    cols = layer_columns(rs.metrics.columns, names.grad_norm_layer)
    out = []
    for variant in variants:
        runs = rs.valid[rs.valid["variant"] == variant]
        row = runs.iloc[0]
        if row.get("placement") != "post" or row.get("model.init", "gpt2") != "gpt2":
            continue
        if str(row.get("model.embed_scale", 1.0)) not in ("1", "1.0"):
            continue
        at0 = rs.metrics[(rs.metrics["run"].isin(runs.index)) & (rs.metrics[names.STEP] == 0)]
        if at0.empty:
            continue
        means = at0[list(cols.values())].apply(finite).mean()
        if int(np.argmax(means.to_numpy())) == 0:
            out.append(variant)
    return out
