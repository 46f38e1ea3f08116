"""What the spike detector flagged in each variant of a sweep, for the report's loss figure: each flagged
step as a `SpikeEvent` (how large the jump was against the steps before it, and whether the loss carried
it), and one line per variant (`spike_lines`): what fired, when, how large, and whether it cost training.

Its own module because it reads the detector's flags (`spike/loss`, `spike/grad_norm`) row by row rather
than one number per run, as the captions do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from normlab.analysis.load import RunSet
from normlab.analysis.stats import finite
from normlab.metrics import names


@dataclass(frozen=True)
class SpikeEvent:
    run: str
    step: int
    series: str  # loss | grad_norm
    ratio: float  # the value over the median of the trend steps before it
    loss_after: float  # training loss 10 steps later minus the median before (nats): did the loss carry it?


TREND = 5
AFTER = 10
MATTERS_NATS = 0.1


def spike_events(rs: RunSet) -> list[SpikeEvent]:
    m = rs.metrics
    events = []
    for series, flag in names.SPIKE_SERIES.items():
        if flag not in m or series not in m:
            continue
        for _, row in m[finite(m[flag]) == 1].iterrows():
            run, step = str(row["run"]), int(row[names.STEP])
            sub = m[m["run"] == run].set_index(names.STEP)
            before = finite(sub.loc[(sub.index < step) & (sub.index >= step - TREND), series]).dropna()
            ratio = float(row[series] / before.median()) if len(before) and before.median() > 0 else math.nan
            loss_before = finite(
                sub.loc[(sub.index < step) & (sub.index >= step - TREND), names.LOSS]
            ).dropna()
            later = finite(sub.loc[(sub.index > step) & (sub.index <= step + AFTER), names.LOSS]).dropna()
            after = (
                float(later.iloc[-1] - loss_before.median()) if len(later) and len(loss_before) else math.nan
            )
            events.append(SpikeEvent(run, step, series, ratio, after))
    return sorted(events, key=lambda e: (e.run, e.step))


def spike_lines(rs: RunSet) -> list[str]:
    """Per variant with flagged spikes: what fired, when, how large, and whether the loss carried it."""
    events = spike_events(rs)
    if not events:
        return []
    variant_of = rs.runs["variant"]
    warmup = rs.runs.get("warmup_steps")
    lines = []
    for variant in rs.variants:
        mine = [e for e in events if variant_of.get(e.run) == variant]
        if not mine:
            continue
        runs = sorted({e.run for e in mine})
        n_runs = int((rs.valid["variant"] == variant).sum())
        kinds = []
        for series, label in ((names.LOSS, "loss"), (names.GRAD_NORM, "gradient-norm")):
            of = [e for e in mine if e.series == series]
            if of:
                steps = ", ".join(str(e.step) for e in of[:6]) + (", …" if len(of) > 6 else "")
                ratios = [e.ratio for e in of if math.isfinite(e.ratio)]
                span = (
                    f"{min(ratios):.2g}×"
                    if min(ratios) == max(ratios)
                    else f"{min(ratios):.2g}–{max(ratios):.2g}×"
                )
                size = f", {span} the median of the {TREND} steps before" if ratios else ""
                kinds.append(f"{len(of)} {label} spike{'s' if len(of) != 1 else ''} (step {steps}{size})")
        in_warmup = ""
        if warmup is not None:
            w = [_number(warmup.get(e.run)) for e in mine]
            share = sum(e.step < wi for e, wi in zip(mine, w, strict=True)) / len(mine)
            in_warmup = f"; {share:.0%} during warm-up" if share else ""
        carried = [e.loss_after for e in mine if math.isfinite(e.loss_after)]
        if carried and max(carried) > MATTERS_NATS:
            effect = (
                f"the loss was still up to {max(carried):.2f} nats above its level before the spike {AFTER} steps "
                "later: these jumps cost training"
            )
        elif carried and max(carried) > 0:
            effect = (
                f"{AFTER} steps after each spike the loss was at most {max(carried):.2f} nats above its level "
                f"before it (less than the {MATTERS_NATS:g} nats counted as lasting): flagged jumps with no "
                "lasting effect"
            )
        elif carried:
            effect = (
                f"{AFTER} steps after each spike the loss was below its level before it (by {-max(carried):.2f} "
                "nats or more): flagged jumps with no lasting effect"
            )
        else:
            effect = "too close to the end to see the loss after them"
        lines.append(
            f"`{variant}` ({len(runs)} of {n_runs} run{'s' if n_runs != 1 else ''}): "
            + " and ".join(kinds)
            + f"{in_warmup} — {effect}."
        )
    return lines


def _number(value: object) -> float:
    """A run's warm-up length as a number; 0 where its config holds something else (a broken config)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0
