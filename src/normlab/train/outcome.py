"""How a run ended, and its numbers for summary.json: pure functions, no files written.

An `Ending` is the status and the one sentence a run ends with: from the training loop's result
(`loop_ending`) or from the exception that ended it (`ending_of`: the user's to fix, a signal, or a bug).

`final_train_loss` averages the last FINAL_LOSS_WINDOW steps (one batch's loss is noisy); `best_val_loss`
is the lowest evaluation across a resume; `tokens_per_s` leaves out the first flush window, which
includes start-up, when there is more than one.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import traceback
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from normlab.errors import UserError
from normlab.metrics import names
from normlab.summary import RunSummary
from normlab.train import memory
from normlab.train.callbacks import LoopResult
from normlab.train.checkpoint import LAST
from normlab.train.run_dir import DISK_ERRNOS, disk_error
from normlab.train.signals import Interrupted, signal_name

log = logging.getLogger("normlab")

FINAL_LOSS_WINDOW = 10


def finite_values(rows: Iterable[Mapping[str, Any]], key: str) -> list[float]:
    return [r[key] for r in rows if isinstance(r.get(key), float) and math.isfinite(r[key])]


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def final_train_loss(losses: Sequence[float]) -> float | None:
    return mean(list(losses)[-FINAL_LOSS_WINDOW:])


def run_losses(previous: Iterable[Mapping[str, Any]], this_process: Sequence[float]) -> list[float]:
    """The run's training losses in step order, across resumes, as its rows in metrics.jsonl hold them: the
    finite losses of the rows kept from before a resume, then every loss this process's rows carry. The one
    source of `final_train_loss` and of the diagnosis's loss curve."""
    return finite_values(previous, names.LOSS) + list(this_process)


def from_rows(rows: Sequence[Mapping[str, Any]], before: int) -> dict[str, Any]:
    """The loss and speed fields of the rows of metrics.jsonl measured before step `before` (a run that
    stopped before its loop continued them)."""
    rows = [r for r in rows if r["step"] < before]
    vals = finite_values(rows, names.VAL_LOSS)
    return {
        "final_train_loss": final_train_loss(run_losses(rows, [])),
        "best_val_loss": min(vals) if vals else None,
        "tokens_per_s": mean(finite_values(rows, names.TOKENS_PER_S)),
    }


def after_training(
    previous: Sequence[Mapping[str, Any]],
    losses: Sequence[float],
    val_losses: Iterable[float],
    tokens_per_s: Sequence[float],
    flush_every: int,
) -> dict[str, Any]:
    """The loss and speed fields once the loop has ended: the run's training losses (`run_losses`), the
    validation losses of the rows kept from before a resume (`previous`) and this process's, and its
    flush-window speeds."""
    losses = [v for v in losses if math.isfinite(v)]
    vals = finite_values(previous, names.VAL_LOSS) + [v for v in val_losses if math.isfinite(v)]
    return {
        "final_train_loss": final_train_loss(losses),
        "best_val_loss": min(vals) if vals else None,
        "tokens_per_s": mean(list(tokens_per_s[flush_every:]) or list(tokens_per_s)),
    }


def load_average() -> float | None:
    """The machine's 1-minute load average, None where the OS has none (Windows)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


@dataclass(frozen=True)
class Ending:
    """How a run ended, for `Run._finish`: its status and one sentence, and what a stop or a crash adds."""

    status: str
    reason: str | None = None
    signal: str | None = None  # interrupted: the signal's name
    forced: bool = False  # interrupted by a repeated signal, without saving
    traceback: str | None = None  # crashed


def loop_ending(result: LoopResult, stopped_by: str | None) -> Ending:
    """The ending of a run the training loop ended: completed, diverged (and why), or stopped at a step
    boundary by the signal named `stopped_by` (checkpoints/last.pt then holds that step)."""
    if result.status != "interrupted":
        return Ending(result.status, result.reason)
    reason = (
        f"stopped by {stopped_by or 'a signal'} at step {result.steps}; checkpoints/{LAST} holds that step."
    )
    return Ending("interrupted", reason, signal=stopped_by)


def ending_of(e: BaseException, steps: int) -> Ending:
    """The ending an exception means: the user's to fix (invalid, failed), a signal, or a bug (crashed);
    `steps` is how many the model holds (a forced stop's sentence says it)."""
    if isinstance(e, UserError):  # InvalidConfig included: its status is invalid
        return Ending(e.status, str(e))
    if isinstance(e, OSError):
        if e.errno in DISK_ERRNOS:
            return Ending("failed", str(disk_error(e)))
    elif isinstance(e, Exception):
        if memory.out_of_memory(e):
            return Ending("failed", str(memory.out_of_memory_error(e)))
    elif isinstance(e, Interrupted | KeyboardInterrupt):
        return stop_ending(e, steps)
    return Ending("crashed", f"{type(e).__name__}: {e}", traceback="".join(traceback.format_exception(e)))


def stop_ending(e: Interrupted | KeyboardInterrupt, steps: int) -> Ending:
    """A stop that came before the loop (nothing new to save) or a forced one (saving was skipped)."""
    name = signal_name(e.signum if isinstance(e, Interrupted) else signal.SIGINT)
    forced = isinstance(e, Interrupted) and e.forced
    if forced:
        reason = f"stopped by a repeated {name} at step {steps} without saving a checkpoint."
    else:
        reason = f"stopped by {name} before training started."
    return Ending("interrupted", reason, signal=name, forced=forced)


def say_outcome(summary: RunSummary, spikes: int, result: LoopResult, run_dir: Path) -> None:
    """What the console hears at the end of a run its loop ended: learned or not (against the corpus's
    unigram loss), the likely cause of a failure, spikes, divergence."""
    if summary.learned is not None:
        log.info(
            "best val loss %.3f vs the corpus's unigram baseline %.3f: %s",
            summary.best_val_loss,
            summary.baseline_unigram_loss,
            "learned" if summary.learned else "did NOT learn (not clearly below the unigram loss)",
        )
    if summary.diagnosis:
        log.warning("likely cause: %s", summary.diagnosis)
    if spikes:
        log.info("%d steps with a loss or grad-norm spike; reports in %s/spikes", spikes, run_dir)
    if result.status == "diverged":
        log.warning("diverged at step %d: %s", result.diverged_at, result.reason)
