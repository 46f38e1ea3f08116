"""What the training loop tells the rest of a run, through one small protocol.

`Trainer.fit(callbacks)` calls each callback, in list order:

- `on_step(row)`: one training row, in step order, when rows reach the host (every train.flush_every
  steps); the trainer's monitor has already marked spike events in it;
- `on_eval(row)`: the final evaluation row (step = the last step, val_loss, val_ppl);
- `on_checkpoint(step)`: every train.ckpt_every updates, after the rows before `step` were passed on;
- `on_end(result)`: once, when `fit` returns or raises, except when it pauses at `stop_at` (the next
  call goes on), with the `LoopResult` that `fit` returns.

The sinks (metrics/sinks.JsonlSink, metrics/wandb_sink.WandbSink) implement the four methods themselves;
the classes here and in train/progress.py (the progress lines and bar) subclass the protocol, which gives
every method a do-nothing default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from normlab.train import checkpoint

__all__ = ["Callback", "Checkpoints", "LoopResult"]


@dataclass
class LoopResult:
    """What `Trainer.fit` returns and hands to `on_end`: how the loop ended and what it measured."""

    steps: int  # optimizer updates made
    status: str  # completed | diverged | interrupted (`stop` asked for it at a step boundary)
    diverged_at: int | None = None
    reason: str | None = None  # why it diverged, one sentence
    train_losses: list[float] = field(default_factory=list)
    val_losses: dict[int, float] = field(default_factory=dict)
    # an evaluation's other metrics by step (layer_ablation/layer_i with metrics.layer_ablation)
    eval_metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    tokens_per_s: list[float] = field(default_factory=list)


class Callback(Protocol):
    def on_step(self, row: dict[str, Any]) -> None:
        return None

    def on_eval(self, row: dict[str, Any]) -> None:
        return None

    def on_checkpoint(self, step: int) -> None:
        return None

    def on_end(self, result: LoopResult) -> None:
        return None


class Checkpoints(Callback):
    """Writes checkpoints/step_{n}.pt at the loop's checkpoint steps (and, through `save`, any named
    checkpoint) from what `state` returns then, with the last training row it has seen (the history the
    checkpoint follows: normlab.train.checkpoint.same_history)."""

    def __init__(
        self,
        directory: Path,
        state: Callable[[], dict[str, Any]],
        model_cfg: Mapping[str, Any],
        experiment: Mapping[str, Any] | None = None,
    ) -> None:
        self.directory, self.state, self.model_cfg = directory, state, model_cfg
        self.experiment = experiment  # normlab.train.resume.experiment_record: what a resume must keep
        self.last_row: dict[str, Any] | None = None

    def on_step(self, row: dict[str, Any]) -> None:
        if "loss" in row:
            self.last_row = checkpoint.last_row_record(row)

    def save(self, name: str) -> None:
        checkpoint.save_checkpoint(
            self.directory / name, self.state(), self.model_cfg, self.experiment, self.last_row
        )

    def on_checkpoint(self, step: int) -> None:
        self.save(checkpoint.step_file(step))
