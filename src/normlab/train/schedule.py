"""Learning rate at each optimizer step: linear warmup from 0, then a decay shape (`schedule=`)."""

from __future__ import annotations

import math
from collections.abc import Callable

# Each decay maps progress p ∈ [0, 1] through the post-warmup phase to a weight in [0, 1] on (lr − min_lr).
DECAYS: dict[str, Callable[[float], float]] = {
    "cosine": lambda p: 0.5 * (1.0 + math.cos(math.pi * p)),
    "linear": lambda p: 1.0 - p,
    "constant": lambda p: 1.0,
}


def lr_at(step: int, *, lr: float, min_lr: float, warmup_steps: int, max_steps: int, schedule: str) -> float:
    """Learning rate of the update made at `step` (0-based).

    Warmup rises linearly from 0: step s < warmup_steps gets lr·(s+1)/warmup_steps, so the last warmup
    step reaches lr. Then `schedule` decays from lr to min_lr at max_steps ("constant" stays at lr).
    """
    if schedule not in DECAYS:
        raise ValueError(f"schedule={schedule} is unknown; choose one of {', '.join(DECAYS)}.")
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if schedule == "constant":
        return lr
    progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
    return min_lr + (lr - min_lr) * DECAYS[schedule](progress)
