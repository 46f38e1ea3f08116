"""When a run counts as diverged: the training stops there, with `status: diverged` (and exit code 0).

Two rules, checked on every row in step order:
- a non-finite loss or global gradient norm;
- a loss above `max_loss_ratio` × the initial loss (the step-0 loss) for `patience` consecutive steps.
  A loss spike recovers within a few steps; a run that stays far above chance level has left the
  basin it started in and only burns compute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from normlab.knobs import Knobs, knob


@dataclass(frozen=True)
class DivergenceConfig(Knobs):
    """A run is diverged (status: diverged, exit 0) on a non-finite loss or gradient norm, or when the loss
    stays above `max_loss_ratio` × the step-0 loss for `patience` consecutive steps."""

    GROUP: ClassVar[str] = "divergence"
    max_loss_ratio: Optional[float] = knob(1.5, "null = only the non-finite rule", gt=0)  # noqa: UP045 (OmegaConf)
    patience: int = knob(50, "consecutive steps above that limit", ge=1)


class DivergenceRule:
    def __init__(self, cfg: DivergenceConfig) -> None:
        self.cfg = cfg
        self.initial_loss: float | None = None
        self.streak = 0  # consecutive steps above the limit so far
        self.streak_start: int | None = None

    def check(self, step: int, loss: float, grad_norm: float) -> str | None:
        """The reason the run diverged at this step (one sentence), or None."""
        if not math.isfinite(loss):
            return f"the training loss became {loss} at step {step}."
        if not math.isfinite(grad_norm):
            return f"the gradient norm became {grad_norm} at step {step}."
        if self.initial_loss is None:
            self.initial_loss = loss
        ratio = self.cfg.max_loss_ratio
        if not ratio or loss <= ratio * self.initial_loss:
            self.streak, self.streak_start = 0, None
            return None
        self.streak += 1
        self.streak_start = step if self.streak_start is None else self.streak_start
        if self.streak >= self.cfg.patience:
            return (
                f"the training loss stayed above {ratio:g} × the initial loss ({self.initial_loss:.3f}) "
                f"for {self.streak} steps, from step {self.streak_start} to step {step}."
            )
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"initial_loss": self.initial_loss, "streak": self.streak, "streak_start": self.streak_start}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.initial_loss, self.streak, self.streak_start = (
            state["initial_loss"],
            state["streak"],
            state["streak_start"],
        )
