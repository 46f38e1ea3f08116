"""Loss and gradient-norm spikes, by the rule OLMo uses.

A value is a spike when it is more than `sigma` standard deviations above the mean of the previous
`window` values of its series, once the window has filled:

    spike(v_t)  ⇔  t ≥ window  and  v_t > mean(v_{t−window} … v_{t−1}) + sigma · std(v_{t−window} … v_{t−1})

with the population standard deviation. Every finite value enters the window, spikes included (a new
level then stops counting as a spike once it dominates the window); non-finite values are left to the
divergence rule and enter neither the test nor the window.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SpikeConfig:
    window: int = 100  # previous values the mean and std are taken over (0 = detector off)
    sigma: float = 6.0  # standard deviations above that mean that make a spike
    history: int = 50  # steps of per-layer metrics and batch positions kept for spikes/step_{n}.json


@dataclass(frozen=True)
class Spike:
    value: float
    mean: float
    std: float
    threshold: float  # mean + sigma · std

    @property
    def z(self) -> float:
        """How many standard deviations above the window mean the value is."""
        return (self.value - self.mean) / self.std if self.std > 0 else math.inf


def window_stats(values: list[float] | deque[float]) -> tuple[float, float]:
    """Mean and population standard deviation."""
    n = len(values)
    mean = sum(values) / n
    return mean, math.sqrt(max(sum((v - mean) ** 2 for v in values) / n, 0.0))


class SpikeDetector:
    """The rule on one series: `update(v)` returns a Spike if v is one, else None, then adds v to the window."""

    def __init__(self, window: int, sigma: float) -> None:
        self.sigma = sigma
        self.values: deque[float] = deque(maxlen=max(window, 0))

    def update(self, value: float) -> Spike | None:
        if not math.isfinite(value):
            return None
        spike = None
        if self.values.maxlen and len(self.values) == self.values.maxlen:
            mean, std = window_stats(self.values)
            threshold = mean + self.sigma * std
            if value > threshold:
                spike = Spike(value, mean, std, threshold)
        if self.values.maxlen:
            self.values.append(value)
        return spike

    def state_dict(self) -> dict[str, Any]:
        return {"values": list(self.values)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.values.clear()
        self.values.extend(state["values"][-self.values.maxlen :] if self.values.maxlen else [])


def find_spikes(values: list[float], window: int, sigma: float) -> list[int]:
    """Indices of the spikes in a whole series (the detector run from the start)."""
    detector = SpikeDetector(window, sigma)
    return [i for i, v in enumerate(values) if detector.update(v) is not None]
