"""A block of measured steps on their way to the host: one transfer per block, then one row per step."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from functools import partial

import torch

from normlab.metrics import names
from normlab.metrics.instruments import StepProbe
from normlab.metrics.monitor import Monitor
from normlab.train import flops
from normlab.train.callbacks import Callback, LoopResult


class PendingRows:
    """Measured steps whose row tensors stay on the device until `flush`, every `flush_every` steps: one host
    transfer for the block. `flush` makes the rows, lets the monitor mark spikes, passes each row to the
    callbacks and records it in `result`; it returns False when the monitor ended the run.

    A step's row tensor holds the values of `keys` (Trainer.train_step); `tokens_per_step`,
    `flops_per_token` and `peak_flops` (the device's, None where unknown) give tokens_per_s and mfu;
    `window_starts` maps the data-RNG state a step started from to where its batches came from (the
    monitor's spike reports)."""

    def __init__(
        self,
        result: LoopResult,
        callbacks: Sequence[Callback],
        *,
        keys: list[str],
        flush_every: int,
        tokens_per_step: int,
        flops_per_token: float,
        peak_flops: float | None,
        monitor: Monitor,
        window_starts: Callable[[torch.Tensor], list[list[int]]],
    ) -> None:
        self.result, self.callbacks, self.keys = result, callbacks, keys
        self.flush_every = max(1, flush_every)
        self.tokens_per_step, self.monitor = tokens_per_step, monitor
        self.flops_per_token, self.peak_flops = flops_per_token, peak_flops
        self.window_starts = window_starts
        # (step, lr, row tensor, instrumented-step probe, data-RNG state the step started from)
        self.entries: list[tuple[int, float, torch.Tensor, StepProbe | None, torch.Tensor | None]] = []
        self.window_start, self.window_steps = time.perf_counter(), 0

    def add(
        self,
        step: int,
        lr: float,
        values: torch.Tensor,
        probe: StepProbe | None,
        data_state: torch.Tensor | None,
    ) -> None:
        self.entries.append((step, lr, values, probe, data_state))
        self.window_steps += 1

    @property
    def full(self) -> bool:
        return len(self.entries) >= self.flush_every

    def flush(self, values: list[list[float]] | None = None) -> bool:
        """Make the pending rows; `values`, when given, are their row tensors already on the host (a stack of
        runs moves every member's rows in one transfer: normlab.train.stacked)."""
        if not self.entries:
            return True
        result = self.result
        if values is None:
            values = torch.stack([entry[2] for entry in self.entries]).tolist()
        now = time.perf_counter()
        tps = self.window_steps * self.tokens_per_step / max(now - self.window_start, 1e-9)
        self.window_start, self.window_steps = now, 0
        entries, self.entries = self.entries, []
        for (step, lr, _, probe, data_state), vals in zip(entries, values, strict=True):
            row = {names.STEP: step, names.LR: lr, **dict(zip(self.keys, vals, strict=True))}
            row[names.CLIPPED] = int(row[names.CLIPPED])
            row[names.TOKENS_PER_S] = tps
            if self.peak_flops:
                row[names.MFU] = flops.mfu(tps, self.flops_per_token, self.peak_flops)
            if probe:
                row.update(probe.row())
            if step in result.val_losses:
                row[names.VAL_LOSS] = result.val_losses[step]
                row[names.VAL_PPL] = math.exp(min(result.val_losses[step], 700.0))
                row.update(result.eval_metrics.get(step, {}))
            where = partial(self.window_starts, data_state) if data_state is not None else None
            reason = self.monitor.observe(row, where)  # marks spike events in row
            for callback in self.callbacks:
                callback.on_step(row)
            result.train_losses.append(row[names.LOSS])
            result.tokens_per_s.append(tps)
            if reason is not None:
                result.status, result.diverged_at, result.steps = "diverged", step, step
                result.reason = reason
                return False
        return True
