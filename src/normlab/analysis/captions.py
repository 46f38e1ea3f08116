"""The sentence under each figure of a report, computed from the sweep's own runs.

Each figure gets one reading: what it shows for these runs — which variant is highest and which lowest on
the number the figure is about, by how much, and whether that difference is tested (the report's Welch
interval at `estimate.LEVEL`, or "untested" without a noise estimate, as everywhere in the report). The
number is one per run, so seeds are compared as seeds:

| figure | the number per run |
|---|---|
| loss | final validation loss |
| grad_norm | the largest global gradient norm, and the share of clipped steps |
| grad_profile_init | block L−1's gradient norm over block 0's at step 0, read against Xiong et al. (2020, Fig. 3) |
| grad_norm_layers | how far the median block's gradient norm falls below its step-0 value |
| act_rms | residual-stream RMS after the last block over after the first, at the last measured step |
| attn_max_logit | the largest attention logit of any block at the last measured step |
| update_ratio | the largest update-to-weight ratio of one step |
| model_update | DeepNet's model update at the last measured step |
| layer_ablation | the largest loss rise from skipping one block |

Beside it in the report: the variants a figure leaves out and why (`missing_variants`), and what the
spike detector flagged in each variant (`spike_events`). The gradient profile's sentence, read against
Xiong et al.'s prediction, is `grad_profile`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from normlab.analysis import grad_profile, narrative
from normlab.analysis.load import RunSet
from normlab.analysis.stats import finite, layer_columns
from normlab.metrics import names

PerRun = Callable[[pd.DataFrame, pd.Series], float]  # (the run's metric rows, its run row) → a number


# ------------------------------------------------------------------------------------------ numbers


def _rows(rs: RunSet, run: str, cols: Sequence[str]) -> pd.DataFrame:
    m = rs.metrics
    sub = m.loc[m["run"] == run, [names.STEP, *[c for c in cols if c in m.columns]]].copy()
    for c in sub.columns[1:]:
        sub[c] = finite(sub[c])
    return sub.sort_values(names.STEP)


def per_variant(rs: RunSet, cols: Sequence[str], fn: PerRun) -> dict[str, list[float]]:
    """{variant: [fn(run) for each of its runs that has a finite value]}, in display order."""
    out: dict[str, list[float]] = {}
    valid = rs.valid
    for variant in rs.variants:
        values = []
        for run, row in valid[valid["variant"] == variant].iterrows():
            sub = _rows(rs, str(run), cols)
            v = fn(sub, row) if not sub.empty else math.nan
            if v is not None and math.isfinite(v):
                values.append(float(v))
        if values:
            out[variant] = values
    return out


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values))


def contrast(values: dict[str, list[float]], *, log: bool = False) -> tuple[str, str, str]:
    """(highest variant, lowest variant, 'difference (test)') of the variants' mean values; on `log` the
    difference is of log values (a ratio), as for quantities that vary by factors."""
    ranked = sorted(values, key=lambda v: _mean(values[v]))
    lo, hi = ranked[0], ranked[-1]

    def vv(v: str) -> narrative.VariantValues:
        xs = values[v]
        xs = [math.log(x) for x in xs if x > 0] if log else xs
        return narrative.VariantValues(v, tuple(xs), len(xs), 0, 0, 0)

    c = narrative.compare(vv(hi), vv(lo))
    r = narrative.reading(c)
    if log:
        ratio = math.exp(c.est.value)
        what = f"{ratio:.3g}×"
        if r in (narrative.WORSE, narrative.BETTER):
            a, b = c.interval
            test = f"tested: 95 % CI {math.exp(a):.3g}× to {math.exp(b):.3g}×, n = {c.n_a} vs {c.n_b}"
        elif r == narrative.UNCLEAR:
            a, b = c.interval
            test = f"within noise: 95 % CI {math.exp(a):.3g}× to {math.exp(b):.3g}×, n = {c.n_a} vs {c.n_b}"
        elif r == narrative.IDENTICAL:
            test = "the same values on both sides"
        else:
            test = narrative.untested_note(c)
    else:
        what = narrative.fmt_signed(c.est.value)
        if r in (narrative.WORSE, narrative.BETTER):
            test = f"tested: {narrative.fmt_interval(c)}"
        elif r == narrative.UNCLEAR:
            test = f"within noise: {narrative.fmt_interval(c)}"
        elif r == narrative.IDENTICAL:
            test = "the same values on both sides"
        else:
            test = narrative.untested_note(c)
    return hi, lo, f"{what} ({test})"


def _fmt(x: float) -> str:
    return f"{x:.2f}" if 1 <= abs(x) < 100 else f"{x:.3g}"


def _extremes(values: dict[str, list[float]], what: str, fmt: Callable[[float], str], log: bool) -> str:
    """'{what} is highest in `a` (x) and lowest in `b` (y): a/b = 3.2× (tested: …)'."""
    if len(values) < 2:  # nothing to compare with: the spread over its runs is the reference
        ((v, xs),) = values.items()
        spread = (
            f"mean of {len(xs)} runs, from {fmt(min(xs))} to {fmt(max(xs))}" if len(xs) > 1 else "one run"
        )
        return f"{what} is {fmt(_mean(xs))} in `{v}` ({spread}; no other variant has it to compare with)"
    hi, lo, diff = contrast(values, log=log)
    sep = "/" if log else "−"
    return (
        f"{what} is highest in `{hi}` ({fmt(_mean(values[hi]))}) and lowest in `{lo}` "
        f"({fmt(_mean(values[lo]))}): `{hi}` {sep} `{lo}` = {diff}"
    )


# ------------------------------------------------------------------------------------------ per figure


def _loss(rs: RunSet) -> str | None:
    vals = {k: list(v.values) for k, v in narrative.variant_values(rs).items() if v.values}
    if not vals:
        return None
    text = _extremes(vals, "The final validation loss (nats/token)", lambda x: f"{x:.3f}", log=False)
    failed = [v for v, vv in narrative.variant_values(rs).items() if vv.did_not_learn]
    if failed:
        text += f"; {', '.join(f'`{v}`' for v in failed)} did not learn (see Read this first)"
    return text + "."


def _peak(sub: pd.DataFrame, _: pd.Series) -> float:
    return float(sub[names.GRAD_NORM].max()) if names.GRAD_NORM in sub else math.nan


def _clipped_share(sub: pd.DataFrame, _: pd.Series) -> float:
    return float(sub[names.CLIPPED].mean()) if names.CLIPPED in sub else math.nan


def _grad_norm(rs: RunSet) -> str | None:
    peaks = per_variant(rs, [names.GRAD_NORM], _peak)
    if not peaks:
        return None
    text = _extremes(peaks, "The largest gradient norm of a run", _fmt, log=True)
    clipped = per_variant(rs, [names.CLIPPED], _clipped_share)
    if clipped:
        shares = {v: _mean(x) for v, x in clipped.items()}
        most = max(shares, key=lambda v: shares[v])
        least = min(shares, key=lambda v: shares[v])
        text += f"; gradient clipping scaled {shares[most]:.0%} of the steps in `{most}`" + (
            f" and {shares[least]:.0%} in `{least}`" if least != most else ""
        )
    return text + "."


def _profile_ratio(rs: RunSet) -> PerRun:
    cols = layer_columns(rs.metrics.columns, names.grad_norm_layer)

    def ratio(sub: pd.DataFrame, _: pd.Series) -> float:
        at0 = sub[sub[names.STEP] == 0]
        if at0.empty or len(cols) < 2:
            return math.nan
        first, last = at0[cols[min(cols)]].iloc[0], at0[cols[max(cols)]].iloc[0]
        return float(last / first) if first > 0 and last > 0 else math.nan

    return ratio


def _grad_profile_init(rs: RunSet) -> str | None:
    cols = layer_columns(rs.metrics.columns, names.grad_norm_layer)
    ratios = per_variant(rs, list(cols.values()), _profile_ratio(rs))
    if not ratios:
        return None
    return grad_profile.reading(rs, ratios, max(cols))


def _dip(rs: RunSet) -> PerRun:
    cols = list(layer_columns(rs.metrics.columns, names.grad_norm_layer).values())

    def dip(sub: pd.DataFrame, _: pd.Series) -> float:
        med = sub.set_index(names.STEP)[cols].median(axis=1).dropna()
        if 0 not in med.index or med[0] <= 0 or len(med) < 3:
            return math.nan
        later = med[med.index > 0]
        return float(later.min() / med[0]) if len(later) else math.nan

    return dip


def _grad_norm_layers(rs: RunSet) -> str | None:
    cols = list(layer_columns(rs.metrics.columns, names.grad_norm_layer).values())
    dips = per_variant(rs, cols, _dip(rs))
    if not dips:
        return None
    return (
        _extremes(
            dips,
            "The median block's gradient norm at its lowest, as a fraction of its step-0 value,",
            lambda x: f"{x:.2g}",
            log=True,
        )
        + " — a low value is a stretch of training where the blocks get almost no gradient."
    )


def _at_last_measured(cols: Sequence[str], reduce: Callable[[pd.Series], float]) -> PerRun:
    def value(sub: pd.DataFrame, _: pd.Series) -> float:
        have = sub.dropna(subset=list(cols), how="all")
        if have.empty:
            return math.nan
        return reduce(have.iloc[-1][list(cols)])

    return value


def _act_rms(rs: RunSet) -> str | None:
    cols = layer_columns(rs.metrics.columns, names.act_rms_layer)
    if len(cols) < 2:
        return None
    first, last = cols[min(cols)], cols[max(cols)]
    growth = per_variant(
        rs,
        list(cols.values()),
        _at_last_measured([first, last], lambda r: float(r[last] / r[first]) if r[first] > 0 else math.nan),
    )
    if not growth:
        return None
    return (
        _extremes(
            growth,
            f"At the last measured step the residual stream's RMS after block {max(cols)} over after block 0",
            lambda x: f"{x:.3g}×",
            log=True,
        )
        + " (1× is no growth with depth; a stream normalised after every block, Post-LN's, stays near 1)."
    )


def _attn(rs: RunSet) -> str | None:
    cols = list(layer_columns(rs.metrics.columns, names.attn_max_logit_layer).values())
    top = per_variant(rs, cols, _at_last_measured(cols, lambda r: float(r.max())))
    if not top:
        return None
    return (
        _extremes(top, "The largest attention logit of any block at the last measured step", _fmt, log=True)
        + "."
    )


def _update_ratio(rs: RunSet) -> str | None:
    cols = list(layer_columns(rs.metrics.columns, names.update_ratio_layer).values())

    def peak(sub: pd.DataFrame, _: pd.Series) -> float:
        have = [c for c in cols if c in sub]
        return float(sub[have].max().max()) if have else math.nan

    peaks = per_variant(rs, cols, peak)
    if not peaks:
        return None
    return (
        _extremes(
            peaks,
            "The largest update of one block in one step, relative to its weights,",
            lambda x: f"{x:.2%}",
            log=True,
        )
        + "."
    )


MODEL_UPDATE_TEXT = (
    "DeepNet's model update (the distance of the output logits from their values at initialisation, "
    "‖F(x, θ_t) − F(x, θ_0)‖ per position on a fixed probe batch)"
)


def _half_way(sub: pd.DataFrame, _: pd.Series) -> float:
    """The first measured step at which the model update reached half of its last measured value: whether
    the function moved early in training (DeepNet's concern) or late."""
    have = sub.dropna(subset=[names.MODEL_UPDATE])
    if have.empty:
        return math.nan
    last = float(have[names.MODEL_UPDATE].iloc[-1])
    reached = have[have[names.MODEL_UPDATE] >= last / 2]
    return float(reached[names.STEP].iloc[0]) if len(reached) else math.nan


def _model_update(rs: RunSet) -> str | None:
    end = per_variant(
        rs, [names.MODEL_UPDATE], _at_last_measured([names.MODEL_UPDATE], lambda r: float(r.iloc[0]))
    )
    if not end:
        return None
    if len(end) > 1:
        return _extremes(end, f"{MODEL_UPDATE_TEXT} at the last measured step", _fmt, log=True) + "."
    ((variant, values),) = end.items()
    runs = rs.valid[rs.valid["variant"] == variant].index
    steps = rs.metrics[rs.metrics["run"].isin(runs)].dropna(subset=[names.MODEL_UPDATE])[names.STEP]
    text = f"{MODEL_UPDATE_TEXT} is {_fmt(_mean(values))} in `{variant}` at its last measured step"
    if len(steps):
        text += f" (step {int(steps.max())})"
    half = per_variant(rs, [names.MODEL_UPDATE], _half_way).get(variant)
    if half:
        text += f"; it had reached half of that by step {_mean(half):.0f} (mean over its runs)"
    return text + f", and `{variant}` is the only variant that logs it."


def _layer_ablation(rs: RunSet) -> str | None:
    cols = list(layer_columns(rs.metrics.columns, names.layer_ablation).values())
    if not cols or names.VAL_LOSS not in rs.metrics:
        return None

    def rise(sub: pd.DataFrame, _: pd.Series) -> float:
        have = sub.dropna(subset=[*cols, names.VAL_LOSS], how="any")
        if have.empty:
            return math.nan
        r = have.iloc[-1]
        return float(max(r[c] for c in cols) - r[names.VAL_LOSS])

    rises = per_variant(rs, [*cols, names.VAL_LOSS], rise)
    if not rises:
        return None
    return (
        _extremes(
            rises, "The largest loss rise from skipping one block (nats)", lambda x: f"{x:.3f}", log=False
        )
        + "."
    )


def _grid(rs: RunSet) -> str | None:
    vals = {k: v for k, v in narrative.variant_values(rs).items() if v.values}
    if len(vals) < 2:
        return None
    lo = min(vals.values(), key=lambda v: v.mean)
    hi = max(vals.values(), key=lambda v: v.mean)
    return (
        f"The loss figure's comparison in one picture: cells from {lo.mean:.3f} (`{lo.variant}`, n = "
        f"{len(lo.values)}) to {hi.mean:.3f} (`{hi.variant}`, n = {len(hi.values)}); the differences are tested "
        "under Effects."
    )


CAPTIONS: dict[str, Callable[[RunSet], str | None]] = {
    "loss": _loss,
    "grad_norm": _grad_norm,
    "grad_profile_init": _grad_profile_init,
    "grad_norm_layers": _grad_norm_layers,
    "act_rms": _act_rms,
    "attn_max_logit": _attn,
    "update_ratio": _update_ratio,
    "model_update": _model_update,
    "layer_ablation": _layer_ablation,
    "grid": _grid,
}


def caption(key: str, rs: RunSet) -> str | None:
    """The sentence under figure `key` (a FIGURES key, or "grid"), None where it has nothing to say."""
    fn = CAPTIONS.get(key)
    if fn is None:
        return None
    try:
        return fn(rs)
    except (KeyError, ValueError, IndexError):  # a figure drawn from data too sparse for its number
        return None
