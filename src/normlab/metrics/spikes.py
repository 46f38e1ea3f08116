"""Loss and gradient-norm spikes: OLMo's 6σ rule, applied to a detrended series from the first steps.

The reference is OLMo-core's `StabilityMonitorCallback` (allenai/OLMo-core,
src/olmo_core/train/callbacks/stability_monitor.py): a value is a spike when it exceeds the mean of the
previous `window_size` (128) values by more than `threshold_std` (6) population standard deviations, and
nothing is tested until that window is full. On a short run that rule has two blind spots: the first
window of steps is never watched (where Post-LN and no-warmup runs make their largest jumps), and on a
falling loss curve the window's standard deviation is dominated by the trend, not the noise, so a loss
must jump by several times the recent descent before it counts.

normlab tests the ratio of each value to the running median of the few values just before it:

    r_t = v_t / median(v_{t−trend}, …, v_{t−1})
    spike(v_t)  ⇔  at least `min_history` earlier ratios exist, and
                   r_t > mean(R) + sigma · std(R),  R = the last `window` ratios before r_t (population std)

Why this detrending: a median of a handful of values follows a smooth curve with a lag of about
trend/2 steps and ignores an isolated outlier, so on a smooth decline r_t stays close to 1 whatever
the slope, and R's spread measures the step-to-step noise rather than the descent; a spike moves r_t by
the jump's relative size. A ratio rather than a difference because both series are positive and change
scale over training (the gradient norm by orders of magnitude), and a jump is relative to the level.
The first value tested is therefore value number `trend + min_history` of the series (step 15 with the
defaults when every step is observed from step 0): `watch_start`, written to summary.json as
`spike_watch_start`. Ten ratios give a noisy std, so the early threshold is less strict than later:
for Gaussian noise 6 population std's of 10 values is ≈ 5.4 σ of a t distribution with 9 degrees of
freedom, a false alarm about once in 5,000 tests; from 20 values on it is below one in 100,000.

Like OLMo's, every ratio enters the window, spikes included (a new level stops counting as a spike once
the median has moved to it, after trend/2 steps); dips are never spikes; a window with zero spread tests
nothing. Non-finite values are left to the divergence rule and enter neither the test nor the windows;
a non-positive median (a gradient norm of exactly 0) skips the test for that value.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any, ClassVar

from normlab.knobs import Knobs, knob


@dataclass(frozen=True)
class SpikeConfig(Knobs):
    """Spike rule (docs/metrics.md, "Loss spikes"; OLMo's 6σ rule on a detrended series, from the first steps): a loss or
    grad_norm value is a spike when its ratio to the median of the `trend` values before it is more than
    `sigma` standard deviations above the mean of the previous `window` such ratios, once `min_history`
    ratios exist (the first tested step is trend + min_history: summary.json's spike_watch_start)."""

    GROUP: ClassVar[str] = "spikes"
    window: int = knob(
        100, "previous ratios the mean and standard deviation are taken over (0 = detector off)", ge=0
    )
    sigma: float = knob(6.0, "standard deviations above that mean", gt=0)
    trend: int = knob(5, "previous values whose median each value is divided by (the detrending)", ge=1)
    min_history: int = knob(10, "ratios needed before the first test (2 ≤ min_history ≤ window)", ge=2)
    history: int = knob(
        50,
        "steps of per-layer metrics and batch positions written to spikes/step_{n}.json when a spike fires",
        ge=0,
    )

    @property
    def watch_start(self) -> int | None:
        """Index (in the series) of the first value the rule tests; None when the detector is off."""
        return self.trend + self.min_history if self.window > 0 else None


@dataclass(frozen=True)
class Spike:
    value: float
    trend: float  # median of the `trend` values before this one
    ratio: float  # value / trend
    mean: float  # mean of the window of ratios
    std: float  # population std of the window of ratios
    threshold: float  # trend · (mean + sigma · std): the value above which this step would be a spike

    @property
    def z(self) -> float:
        """How many standard deviations above the window's mean ratio this value's ratio is."""
        return (self.ratio - self.mean) / self.std if self.std > 0 else math.inf


def window_stats(values: list[float] | deque[float]) -> tuple[float, float]:
    """Mean and population standard deviation (a list, not a generator, for the squares: the same sum,
    made faster — every row of every member of a stack comes through here)."""
    n = len(values)
    mean = sum(values) / n
    return mean, math.sqrt(max(sum([(v - mean) ** 2 for v in values]) / n, 0.0))


def median(values: deque[float]) -> float:
    """statistics.median's number (the middle value, or the mean of the middle two), without its checks."""
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


class SpikeDetector:
    """The rule on one series: `update(v)` returns a Spike if v is one, else None, then records v."""

    def __init__(
        self,
        window: int,
        sigma: float,
        trend: int,
        min_history: int,
    ) -> None:
        self.sigma = sigma
        self.min_history = min_history
        self.enabled = window > 0
        self.recent: deque[float] = deque(maxlen=max(trend, 1))  # raw values behind the trend
        self.ratios: deque[float] = deque(maxlen=max(window, 1))

    def update(self, value: float) -> Spike | None:
        if not self.enabled or not math.isfinite(value):
            return None
        spike = None
        if len(self.recent) == self.recent.maxlen:
            trend = median(self.recent)
            if trend > 0:
                ratio = value / trend
                if len(self.ratios) >= self.min_history:
                    mean, std = window_stats(self.ratios)
                    if std > 0 and ratio > mean + self.sigma * std:
                        spike = Spike(value, trend, ratio, mean, std, trend * (mean + self.sigma * std))
                self.ratios.append(ratio)
        self.recent.append(value)
        return spike

    def state_dict(self) -> dict[str, Any]:
        return {"recent": list(self.recent), "ratios": list(self.ratios)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.recent.clear()
        self.ratios.clear()
        if "ratios" not in state:  # a checkpoint from the undetrended rule: start watching afresh
            return
        self.recent.extend(state["recent"][-self.recent.maxlen :])
        self.ratios.extend(state["ratios"][-self.ratios.maxlen :])
