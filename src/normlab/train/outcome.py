"""A run's numbers for summary.json, from its metrics rows: pure functions, no files written.

`final_train_loss` averages the last FINAL_LOSS_WINDOW steps (one batch's loss is noisy); `best_val_loss`
is the lowest evaluation across a resume; `tokens_per_s` leaves out the first flush window, which
includes start-up, when there is more than one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from normlab.metrics import names

FINAL_LOSS_WINDOW = 10


def finite_values(rows: Iterable[Mapping[str, Any]], key: str) -> list[float]:
    return [r[key] for r in rows if isinstance(r.get(key), float) and math.isfinite(r[key])]


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def final_train_loss(losses: Sequence[float]) -> float | None:
    return mean(list(losses)[-FINAL_LOSS_WINDOW:])


def from_rows(rows: Sequence[Mapping[str, Any]], before: int) -> dict[str, Any]:
    """The loss and speed fields of the rows of metrics.jsonl measured before step `before` (a run that
    stopped before its loop continued them)."""
    rows = [r for r in rows if r["step"] < before]
    vals = finite_values(rows, names.VAL_LOSS)
    return {
        "final_train_loss": final_train_loss(finite_values(rows, names.LOSS)),
        "best_val_loss": min(vals) if vals else None,
        "tokens_per_s": mean(finite_values(rows, names.TOKENS_PER_S)),
    }


def after_training(
    previous: Sequence[Mapping[str, Any]],
    train_losses: Sequence[float],
    val_losses: Iterable[float],
    tokens_per_s: Sequence[float],
    flush_every: int,
) -> dict[str, Any]:
    """The loss and speed fields once the loop has ended: rows kept from before a resume (`previous`) and
    this process's losses, validation losses and flush-window speeds."""
    losses = finite_values(previous, names.LOSS) + [v for v in train_losses if math.isfinite(v)]
    vals = finite_values(previous, names.VAL_LOSS) + [v for v in val_losses if math.isfinite(v)]
    return {
        "final_train_loss": final_train_loss(losses),
        "best_val_loss": min(vals) if vals else None,
        "tokens_per_s": mean(list(tokens_per_s[flush_every:]) or list(tokens_per_s)),
    }
