"""The loop of a `StackedTrainer` (`StackedLoop`, its base): every member's steps, flushes, checkpoints and
evaluations, and each member's ending — the per-member bookkeeping of which members are still training.

A member whose run ends early — it diverged, or its callbacks failed — is told so (`on_member_end`) at once
and stops updating; the others go on. Its own module because it is the one place a member's run ends,
apart from what one step computes (normlab.train.stacked.trainer); it works on the trainer's state and
calls its `train_step`, `evaluate` and `lr`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from normlab.config.groups import TrainConfig
from normlab.metrics import names
from normlab.metrics.monitor import Monitor
from normlab.train.callbacks import Callback, LoopResult
from normlab.train.rows import PendingRows
from normlab.train.stacked.probe import StackedInstruments

# (member, its LoopResult) when a member's run ends, or (member, exception) when its callbacks failed
MemberEnd = Callable[[int, LoopResult, "BaseException | None"], None]


class StackedLoop:
    """`fit`: the loop over steps of every member, each member's rows to its own callbacks."""

    # set by StackedTrainer.__init__ (normlab.train.stacked.trainer)
    size: int
    step: int
    train: TrainConfig
    alive: list[bool]
    grad_keys: list[str]
    tokens_per_step: int
    flops_per_token: float
    peak_flops: float | None
    monitors: list[Monitor]
    data_rngs: list[torch.Generator]
    instruments: StackedInstruments | None

    def fit(
        self,
        callbacks: Sequence[Sequence[Callback]],
        on_member_end: MemberEnd,
        stop: Callable[[], bool] | None = None,
    ) -> list[LoopResult]:
        """Train every member from self.step to train.max_steps; `callbacks[m]` get member m's rows as a run
        alone's callbacks get its rows (normlab.train.callbacks). When member m's run ends — diverged, failed
        in its callbacks, or at the end of the loop (completed, or interrupted when `stop()` asks for it at a
        step boundary) — its callbacks' `on_end` run and then `on_member_end(m, result, error)`."""
        results = [LoopResult(steps=self.step, status="completed") for _ in range(self.size)]
        try:
            self._fit(results, callbacks, on_member_end, stop)
        except BaseException:  # the stack's ending: each run's caller records it (Run._ended_by)
            for m in range(self.size):
                if self.alive[m]:
                    for callback in callbacks[m]:
                        with contextlib.suppress(Exception):
                            callback.on_end(results[m])
            raise
        for m in range(self.size):
            if self.alive[m]:
                self._end(m, results[m], callbacks[m], on_member_end, None)
        return results

    def _end(
        self,
        m: int,
        result: LoopResult,
        callbacks: Sequence[Callback],
        on_member_end: MemberEnd,
        error: BaseException | None,
    ) -> None:
        """Member m's run is over: it stops updating, its callbacks close, its run writes its files."""
        self.alive[m] = False
        for callback in callbacks:
            try:
                callback.on_end(result)
            except Exception as e:  # one member's sink: the member's ending, not the stack's
                error = error or e
        on_member_end(m, result, error)

    def _guarded(
        self,
        m: int,
        results: list[LoopResult],
        callbacks: Sequence[Sequence[Callback]],
        on_member_end: MemberEnd,
        work: Callable[[], bool],
    ) -> None:
        """Run member m's part of a flush or checkpoint; a False result (its monitor ended the run) or an
        exception from its callbacks ends member m alone."""
        try:
            ok = work()
        except Exception as e:
            self._end(m, results[m], callbacks[m], on_member_end, e)
            return
        if not ok:
            self._end(m, results[m], callbacks[m], on_member_end, None)

    def _fit(
        self,
        results: list[LoopResult],
        callbacks: Sequence[Sequence[Callback]],
        on_member_end: MemberEnd,
        stop: Callable[[], bool] | None,
    ) -> None:
        max_steps, ckpt_every = self.train.max_steps, self.train.ckpt_every
        keys = [names.LOSS, names.CLIPPED, *self.grad_keys]
        rows = [
            PendingRows(
                results[m],
                callbacks[m],
                keys=keys,
                flush_every=self.train.flush_every,
                tokens_per_step=self.tokens_per_step,
                flops_per_token=self.flops_per_token,
                peak_flops=self.peak_flops,
                monitor=self.monitors[m],
                window_starts=self.window_starts,
            )
            for m in range(self.size)
        ]
        pending: list[torch.Tensor] = []
        first = True
        while self.step < max_steps or (max_steps == 0 and first):
            first = False
            if not any(self.alive):
                return
            step = self.step
            if self.evaluates_at(step):
                self._record_evaluation(results, step)
            update = step < max_steps
            states = [
                rng.get_state() if monitor.writes_reports else None
                for rng, monitor in zip(self.data_rngs, self.monitors, strict=True)
            ]
            probe = self.instruments.begin(step) if self.instruments else None
            values = self.train_step(update, probe)
            pending.append(values)
            for m in range(self.size):
                if self.alive[m]:
                    lr = self.lr(m, step) if update else 0.0
                    rows[m].add(step, lr, values[m], probe.member(m) if probe else None, states[m])
            if update:
                self.step += 1
                for m in range(self.size):
                    if self.alive[m]:
                        results[m].steps = self.step
            done = self.step >= max_steps
            stopping = stop is not None and not done and stop()
            checkpoint_due = bool(ckpt_every) and self.step % ckpt_every == 0
            if len(pending) >= self.train.flush_every or done or stopping or checkpoint_due:
                host = torch.stack(pending).tolist()  # every member's rows, one transfer
                pending = []
                for m in range(self.size):
                    if self.alive[m]:
                        block = [step_values[m] for step_values in host]
                        flush = lambda m=m, block=block: rows[m].flush(block)  # noqa: E731
                        self._guarded(m, results, callbacks, on_member_end, flush)
            if checkpoint_due and update and not done:
                for m in range(self.size):
                    if self.alive[m]:

                        def save(m: int = m) -> bool:
                            for callback in callbacks[m]:
                                callback.on_checkpoint(self.step)
                            return True

                        self._guarded(m, results, callbacks, on_member_end, save)
            if stopping:
                for m in range(self.size):
                    if self.alive[m]:
                        results[m].status = "interrupted"
                return
            if done:
                break
        if max_steps > 0 and any(self.alive):
            evaluations = self._record_evaluation(results, self.step)
            for m in range(self.size):
                if not self.alive[m]:
                    continue
                val = evaluations[m][names.VAL_LOSS]
                row = {
                    names.STEP: self.step,
                    names.VAL_LOSS: val,
                    names.VAL_PPL: math.exp(min(val, 700.0)),
                    **results[m].eval_metrics.get(self.step, {}),
                }

                def on_eval(m: int = m, row: dict[str, Any] = row) -> bool:
                    for callback in callbacks[m]:
                        callback.on_eval(row)
                    return True

                self._guarded(m, results, callbacks, on_member_end, on_eval)

    def _record_evaluation(self, results: list[LoopResult], step: int) -> list[dict[str, float]]:
        evaluations = self.evaluate()
        for m, evaluation in enumerate(evaluations):
            if not self.alive[m]:
                continue
            evaluation = dict(evaluation)
            results[m].val_losses[step] = evaluation.pop(names.VAL_LOSS)
            if evaluation:
                results[m].eval_metrics[step] = evaluation
        return evaluations
