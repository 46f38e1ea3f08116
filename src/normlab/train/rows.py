"""Measured steps on their way to the host: one transfer per block of steps, then one row per step and member.

The training loop (normlab.train.fit) adds each step's row tensor — (members, keys), one member for a run
alone — without looking at it; every `train.flush_every` steps `flush` moves the whole block to the host in
one transfer and makes each member's rows there. Everything per member happens here, at a flush: the
learning rate and where the batches came from (asked of the trainer), the monitor's spike and divergence
checks, the callbacks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from normlab.metrics import names
from normlab.metrics.monitor import BatchStarts, Monitor
from normlab.train import flops
from normlab.train.callbacks import Callback, LoopResult


class StepProbe(Protocol):
    """An instrumented step's measurements, member by member (normlab.metrics.instruments.StepProbe for a
    run alone, normlab.train.stacked.probe.StackedProbe for a stack)."""

    def row(self, m: int = 0) -> dict[str, Any]: ...


class RowSource(Protocol):
    """What the rows ask of the trainer, member by member, at a flush."""

    def row_lr(self, m: int, step: int) -> float:
        """Member m's learning rate of the update made at `step` (0.0 for a step that makes none)."""
        ...

    def batch_starts(self, m: int, step: int) -> BatchStarts | None:
        """Where member m's batches of `step` came from, computed if a report asks (None: not kept)."""
        ...


# what a flush says of member m: None (its rows were made), False (its monitor ended it: diverged) or the
# exception its callbacks raised
FlushOutcome = Callable[[int, "bool | Exception"], None]


class PendingRows:
    """Measured steps whose row tensors stay on the device until `flush`: one host transfer for the block.

    A step's row tensor, (members, keys), holds the values of `keys` (Trainer.train_step's row per member);
    `tokens_per_step`, `flops_per_token` and `peak_flops` (the device's, None where unknown) give
    tokens_per_s and mfu; `results[m]`, `callbacks[m]` and `monitors[m]` are member m's; `source` says each
    member's learning rate and batch positions."""

    def __init__(
        self,
        results: Sequence[LoopResult],
        callbacks: Sequence[Sequence[Callback]],
        monitors: Sequence[Monitor],
        source: RowSource,
        *,
        keys: list[str],
        flush_every: int,
        tokens_per_step: int,
        flops_per_token: float,
        peak_flops: float | None,
    ) -> None:
        self.results, self.callbacks, self.monitors, self.source = results, callbacks, monitors, source
        self.keys = keys
        self.flush_every = max(1, flush_every)
        self.tokens_per_step = tokens_per_step
        self.flops_per_token, self.peak_flops = flops_per_token, peak_flops
        # (step, row tensor (members, keys), instrumented-step probe)
        self.entries: list[tuple[int, torch.Tensor, StepProbe | None]] = []
        self.window_start, self.window_steps = time.perf_counter(), 0

    def add(self, step: int, values: torch.Tensor, probe: StepProbe | None) -> None:
        self.entries.append((step, values, probe))
        self.window_steps += 1

    @property
    def full(self) -> bool:
        return len(self.entries) >= self.flush_every

    def flush(self, members: Sequence[int], outcome: FlushOutcome) -> None:
        """Make the pending rows of `members` (those still training), every member's in one transfer; a
        member whose monitor ends its run (diverged) or whose callbacks raise is reported to `outcome` and its
        remaining rows of the block dropped, the others' go on."""
        if not self.entries:
            return
        host = torch.stack([entry[1] for entry in self.entries]).tolist()  # (steps, members, keys)
        now = time.perf_counter()
        tps = self.window_steps * self.tokens_per_step / max(now - self.window_start, 1e-9)
        self.window_start, self.window_steps = now, 0
        entries, self.entries = self.entries, []
        for m in members:
            try:
                ended = not self._member_rows(m, entries, [values[m] for values in host], tps)
            except Exception as e:  # its callbacks failed (a full disk): its ending, said to the caller
                outcome(m, e)
                continue
            if ended:
                outcome(m, False)

    def _member_rows(
        self,
        m: int,
        entries: list[tuple[int, torch.Tensor, StepProbe | None]],
        values: list[list[float]],
        tps: float,
    ) -> bool:
        """Member m's rows of the block, in step order; False when its monitor ended its run."""
        result, callbacks, monitor, source = self.results[m], self.callbacks[m], self.monitors[m], self.source
        for (step, _, probe), vals in zip(entries, values, strict=True):
            row = {
                names.STEP: step,
                names.LR: source.row_lr(m, step),
                **dict(zip(self.keys, vals, strict=True)),
            }
            row[names.CLIPPED] = int(row[names.CLIPPED])
            row[names.TOKENS_PER_S] = tps
            if self.peak_flops:
                row[names.MFU] = flops.mfu(tps, self.flops_per_token, self.peak_flops)
            if probe:
                row.update(probe.row(m))
            if step in result.val_losses:
                row[names.VAL_LOSS] = result.val_losses[step]
                row[names.VAL_PPL] = math.exp(min(result.val_losses[step], 700.0))
                row.update(result.eval_metrics.get(step, {}))
            where = source.batch_starts(m, step) if monitor.writes_reports else None
            reason = monitor.observe(row, where)  # marks spike events in row
            for callback in callbacks:
                callback.on_step(row)
            result.train_losses.append(row[names.LOSS])
            result.tokens_per_s.append(tps)
            if reason is not None:
                result.status, result.diverged_at, result.steps = "diverged", step, step
                result.reason = reason
                return False
        return True
