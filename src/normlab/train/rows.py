"""A block of measured steps on their way to the host: one transfer per block, then one row per step."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

import torch

from normlab.metrics import names
from normlab.metrics.instruments import StepProbe
from normlab.train import flops
from normlab.train.callbacks import Callback

if TYPE_CHECKING:
    from normlab.train.loop import LoopResult, Trainer


class PendingRows:
    """Measured steps whose row tensors stay on the device until `flush`, every train.flush_every steps:
    one host transfer for the block. `flush` makes the rows, lets the monitor mark spikes, passes each row
    to the callbacks and records it in `result`; it returns False when the monitor ended the run."""

    def __init__(self, trainer: Trainer, result: LoopResult, callbacks: Sequence[Callback]) -> None:
        self.trainer, self.result, self.callbacks = trainer, result, callbacks
        self.keys = [names.LOSS, names.CLIPPED, *trainer.grad_norms.keys]
        self.flush_every = max(1, trainer.cfg["flush_every"])
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

    def flush(self) -> bool:
        if not self.entries:
            return True
        trainer, result = self.trainer, self.result
        values = torch.stack([entry[2] for entry in self.entries]).tolist()
        now = time.perf_counter()
        tps = self.window_steps * trainer.tokens_per_step / max(now - self.window_start, 1e-9)
        self.window_start, self.window_steps = now, 0
        entries, self.entries = self.entries, []
        for (step, lr, _, probe, data_state), vals in zip(entries, values, strict=True):
            row = {names.STEP: step, names.LR: lr, **dict(zip(self.keys, vals, strict=True))}
            row[names.CLIPPED] = int(row[names.CLIPPED])
            row[names.TOKENS_PER_S] = tps
            if trainer.peak_flops:
                row[names.MFU] = flops.mfu(tps, trainer.flops_per_token, trainer.peak_flops)
            if probe:
                row.update(probe.row())
            if step in result.val_losses:
                row[names.VAL_LOSS] = result.val_losses[step]
                row[names.VAL_PPL] = math.exp(min(result.val_losses[step], 700.0))
                row.update(result.eval_metrics.get(step, {}))
            where = partial(trainer.window_starts, data_state) if data_state is not None else None
            reason = trainer.monitor.observe(row, where)  # marks spike events in row
            for callback in self.callbacks:
                callback.on_step(row)
            result.train_losses.append(row[names.LOSS])
            result.tokens_per_s.append(tps)
            if reason is not None:
                result.status, result.diverged_at, result.steps = "diverged", step, step
                result.reason = reason
                return False
        return True
