"""The training loop, written once: the schedule a run alone and a stack of runs both follow.

    step 0 … max_steps − 1:  evaluate (train.eval_every, train.eval_at, step 0 with train.eval_at_start),
                             probe (metrics.*: the instrumented steps), train, add the step's row;
                             every train.flush_every steps (and at a checkpoint, a stop, the end): the rows
                             to the host, each member's monitor and callbacks; every train.ckpt_every
                             updates: each member's checkpoint; a stop request: every member interrupted
    at the end:              the final evaluation, then each member's ending

What a run alone (normlab.train.loop.Trainer) and a stack (normlab.train.stacked.StackedTrainer) differ in
sits behind `Members`: the step (one forward / backward / update of every member, its row tensor
(members, keys) left on the device), the evaluation (each member's validation metrics) and the members'
state (learning rates and batch positions for the rows, and `stop_member` when one's run ends). A run alone
is a stack of one. Nothing here loops over the members inside a step; per member there is only what a
flush, an evaluation, a checkpoint or an ending does.

A member's run ends early when its monitor finds it diverged or its callbacks fail; it is told at once
(`on_member_end`) and stops updating while the others go on. A run alone has no others: its callbacks'
exception ends the loop, raised to its caller as before.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from normlab.config.groups import TrainConfig
from normlab.metrics import names
from normlab.metrics.monitor import Monitor
from normlab.train.callbacks import Callback, LoopResult
from normlab.train.rows import PendingRows, RowSource, StepProbe

# (member, its LoopResult, the exception that ended it or None) when a member's run ends
MemberEnd = Callable[[int, LoopResult, "BaseException | None"], None]


class Probes(Protocol):
    def begin(self, step: int) -> StepProbe | None: ...


class Members(RowSource, Protocol):
    """One run or a stack of runs, as the loop drives it."""

    size: int  # members: 1 for a run alone
    step: int  # updates made so far, the same for every member
    train: TrainConfig  # the schedule's knobs (max_steps, eval_every, eval_at, flush_every, ckpt_every, ...)
    row_keys: list[str]  # the keys of a step's row tensor, in order
    monitors: Sequence[Monitor]
    instruments: Probes | None
    tokens_per_step: int
    flops_per_token: float
    peak_flops: float | None

    def train_step(self, update: bool, probe: Any = None) -> torch.Tensor:
        """One step of every member still training; its rows as a (members, row_keys) tensor (a run alone's
        may be 1-D), without a host sync."""
        ...

    def evaluate(self) -> list[dict[str, float]]:
        """Each member's validation metrics now ({val_loss: …, …})."""
        ...

    def stop_member(self, m: int) -> None:
        """Member m's run has ended: it no longer updates (its state stays as its ending saved it)."""
        ...


def evaluates_at(train: TrainConfig, step: int) -> bool:
    """Evaluation before step `step`: every train.eval_every steps, at each step of train.eval_at, and at
    step 0 only with train.eval_at_start or when eval_at names it (the step-0 row's gradient profile needs
    no validation loss; an evaluation costs as much as eval_batches training forwards)."""
    if step in train.eval_at:
        return True
    if step == 0:
        return bool(train.eval_at_start)
    return train.eval_every > 0 and step % train.eval_every == 0


def fit(
    members: Members,
    callbacks: Sequence[Sequence[Callback]],
    *,
    on_member_end: MemberEnd | None = None,
    stop: Callable[[], bool] | None = None,
    stop_at: int | None = None,
) -> list[LoopResult]:
    """Train every member from members.step to train.max_steps; `callbacks[m]` get member m's rows
    (normlab.train.callbacks), and its `LoopResult` is the m-th returned.

    Row `step` is measured before that step's update, so step 0 is the gradient profile at init; with
    max_steps=0 the step-0 row is measured and no update is made. When member m's run ends — diverged,
    failed in its callbacks, or at the end of the loop (completed, or interrupted when `stop()` asks for it
    at a step boundary, every pending row flushed first) — its callbacks' `on_end` run, then
    `on_member_end(m, result, error)`; without `on_member_end` (a run alone) a callback's exception is raised.
    `stop_at` pauses after that many steps, without the final evaluation or any ending: a later call
    continues (benchmarks interleave trainers this way)."""
    loop = _Loop(members, callbacks, on_member_end, stop, stop_at)
    try:
        loop.run()
    except BaseException:  # the loop's own ending: each run's caller records it (Run._ended_by)
        loop.close_all()
        raise
    if not loop.paused:
        for m in loop.training():
            loop.end(m, None)
    return loop.results


class _Loop:
    def __init__(
        self,
        members: Members,
        callbacks: Sequence[Sequence[Callback]],
        on_member_end: MemberEnd | None,
        stop: Callable[[], bool] | None,
        stop_at: int | None,
    ) -> None:
        self.members, self.callbacks = members, callbacks
        self.on_member_end, self.stop, self.stop_at = on_member_end, stop, stop_at
        self.results = [LoopResult(steps=members.step, status="completed") for _ in range(members.size)]
        self.alive = [True] * members.size
        self.paused = False

    def training(self) -> list[int]:
        return [m for m in range(self.members.size) if self.alive[m]]

    def end(self, m: int, error: BaseException | None) -> None:
        """Member m's run is over: it stops updating, its callbacks close, its caller hears of it."""
        self.alive[m] = False
        self.members.stop_member(m)
        result = self.results[m]
        for callback in self.callbacks[m]:
            try:
                callback.on_end(result)
            except Exception as e:  # one member's sink: the member's ending, not the stack's
                error = error or e
        if self.on_member_end is not None:
            self.on_member_end(m, result, error)
        elif error is not None:
            raise error

    def close_all(self) -> None:
        """The loop itself ended by an exception: every member still training closes its callbacks."""
        for m in self.training():
            self.results[m].steps = self.members.step
            for callback in self.callbacks[m]:
                with contextlib.suppress(Exception):
                    callback.on_end(self.results[m])

    def guarded(self, m: int, work: Callable[[], None]) -> None:
        """Member m's part of a checkpoint or evaluation; its callbacks' exception ends member m alone."""
        try:
            work()
        except Exception as e:
            self.end(m, e)

    def flushed(self, m: int, outcome: bool | Exception) -> None:
        self.end(m, outcome if isinstance(outcome, Exception) else None)

    def run(self) -> None:
        members, train = self.members, self.members.train
        max_steps, ckpt_every = train.max_steps, train.ckpt_every
        rows = PendingRows(
            self.results,
            self.callbacks,
            members.monitors,
            members,
            keys=members.row_keys,
            flush_every=train.flush_every,
            tokens_per_step=members.tokens_per_step,
            flops_per_token=members.flops_per_token,
            peak_flops=members.peak_flops,
        )
        first = True
        while members.step < max_steps or (max_steps == 0 and first):
            first = False
            step = members.step
            if evaluates_at(train, step):
                self.record_evaluation(step)
            update = step < max_steps
            probe = members.instruments.begin(step) if members.instruments else None
            rows.add(step, members.train_step(update, probe).view(members.size, -1), probe)
            if update:
                members.step += 1
            done = members.step >= max_steps
            paused = self.stop_at is not None and members.step >= self.stop_at and not done
            stopping = self.stop is not None and not done and self.stop()
            checkpoint_due = bool(ckpt_every) and members.step % ckpt_every == 0
            if rows.full or done or paused or stopping or checkpoint_due:
                for m in self.training():
                    self.results[m].steps = members.step
                rows.flush(self.training(), self.flushed)
            if not any(self.alive):
                return
            if checkpoint_due and update and not done:
                for m in self.training():
                    self.guarded(m, lambda m=m: self.checkpoint(m))
            if stopping:
                for m in self.training():
                    self.results[m].status = "interrupted"
                return
            if paused:
                self.paused = True
                return
            if done:
                break
        if max_steps > 0 and any(self.alive):
            self.final_evaluation()

    def checkpoint(self, m: int) -> None:
        for callback in self.callbacks[m]:
            callback.on_checkpoint(self.members.step)

    def final_evaluation(self) -> None:
        step = self.members.step
        evaluations = self.record_evaluation(step)
        for m in self.training():
            val = evaluations[m][names.VAL_LOSS]
            row = {
                names.STEP: step,
                names.VAL_LOSS: val,
                names.VAL_PPL: math.exp(min(val, 700.0)),
                **self.results[m].eval_metrics.get(step, {}),
            }

            def on_eval(m: int = m, row: dict[str, Any] = row) -> None:
                for callback in self.callbacks[m]:
                    callback.on_eval(row)

            self.guarded(m, on_eval)

    def record_evaluation(self, step: int) -> list[dict[str, float]]:
        """Evaluate before step `step` and keep each training member's results in its LoopResult."""
        evaluations = self.members.evaluate()
        for m in self.training():
            evaluation = dict(evaluations[m])
            self.results[m].val_losses[step] = evaluation.pop(names.VAL_LOSS)
            if evaluation:
                self.results[m].eval_metrics[step] = evaluation
        return evaluations
