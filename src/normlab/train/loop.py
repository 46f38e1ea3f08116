"""A run's trainer: its step (fused gradient norms, no per-step host sync), evaluation and state; the loop
that drives it is normlab.train.fit's, which a stack of runs shares."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from normlab.config.groups import OptimConfig, TrainConfig
from normlab.data.batches import sample_windows
from normlab.distributed import SINGLE, Dist
from normlab.metrics import names
from normlab.metrics.ablation import layer_ablation_keys, losses_with_each_block_skipped
from normlab.metrics.divergence import DivergenceConfig
from normlab.metrics.grad_norms import GradNorms, clip_
from normlab.metrics.instruments import InstrumentConfig, Instruments, StepProbe, wants_model_update
from normlab.metrics.monitor import BatchStarts, Monitor
from normlab.metrics.spikes import SpikeConfig
from normlab.train import flops
from normlab.train.batches import RankBatches
from normlab.train.callbacks import Callback, LoopResult
from normlab.train.fit import fit
from normlab.train.head_loss import HeadLoss, fused_pays
from normlab.train.optim import build_optimizer
from normlab.train.schedule import lr_at

log = logging.getLogger("normlab")

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
PROBE_SEED = 1234  # the model-update probe batch: fixed validation windows, apart from evaluation's


class Trainer:
    """Owns the model, optimizer, monitor and RNG streams of one run; `fit` trains and reports to callbacks.

    Build it with `Trainer.from_config(cfg, ...)` from a composed config. `metrics` is the `metrics`
    group, with model_update resolved to true or false; `monitor` watches rows for spikes and divergence
    (default: one that writes no reports); `dist` is this process's place in a torchrun run
    (normlab.distributed: each rank trains on its slice of the global batch, gradients averaged).
    """

    def __init__(
        self,
        model: nn.Module,
        train_tokens: np.ndarray,
        val_tokens: np.ndarray,
        device: torch.device,
        *,
        train: TrainConfig,
        optim: OptimConfig,
        schedule: str,
        warmup_steps: int,
        seed: int,
        metrics: InstrumentConfig,
        monitor: Monitor | None = None,
        dist: Dist = SINGLE,
        fused_head: bool | None = None,
    ) -> None:
        self.model, self.device, self.dist = model, device, dist
        self.train, self.optim, self.schedule, self.warmup_steps = train, optim, schedule, warmup_steps
        self.train_tokens, self.val_tokens = train_tokens, val_tokens
        self.batches = RankBatches(train.batch_size, train.seq_len, dist, device)
        self.optimizer = build_optimizer(model, optim, device)
        precision = train.precision
        if precision not in DTYPES:
            raise ValueError(f"train.precision={precision} is unknown; choose one of {', '.join(DTYPES)}.")
        self.amp_dtype = DTYPES[precision]
        # the LM head and the objective, fused with each other on the CPU in float32 (train/head_loss.py)
        self.head_loss = HeadLoss(
            model,
            z_loss=optim.z_loss,
            fused=fused_pays(device, self.amp_dtype) if fused_head is None else fused_head,
            compiled=train.compile,
            device=device,
            compile_mode=train.compile_mode,
        )
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        self.data_rng = torch.Generator().manual_seed(seed)
        self.step = 0
        # the global batch: every rank's micro-batches together
        self.tokens_per_step = train.batch_size * train.seq_len * train.grad_accum * dist.world_size
        self.flops_per_token = flops.flops_per_token(
            flops.matmul_params(model), model.n_layers, train.seq_len, model.d_model
        )
        self.peak_flops = flops.peak_flops(device, precision, train.peak_flops)
        # parameters whose every effect the norm subtracts (BatchNorm): their gradient is float rounding,
        # zeroed every step so that Adam does not turn it into a random walk (GPT.norm_cancelled_parameters)
        cancelled = model.norm_cancelled_parameters() if hasattr(model, "norm_cancelled_parameters") else []
        self.cancelled_grads = [(p, rows) for _, p, rows in cancelled]
        self.grad_norms = GradNorms(model, model.n_layers, per_layer=metrics.enabled)
        self.layer_ablation = metrics.enabled and metrics.layer_ablation
        self.instruments = self._instruments(metrics) if metrics.enabled else None
        self.monitor = monitor if monitor is not None else Monitor(n_layers=model.n_layers)
        self.size = 1  # members, for the loop (normlab.train.fit): a run alone is a stack of one
        self.row_keys = [names.LOSS, names.CLIPPED, *self.grad_norms.keys]
        self._data_states: dict[int, torch.Tensor] = {}  # the data-RNG state each step started from

    @classmethod
    def from_config(
        cls,
        cfg: Mapping[str, Any],
        model: nn.Module,
        train_tokens: np.ndarray,
        val_tokens: np.ndarray,
        device: torch.device,
        *,
        reports_dir: Path | None = None,
        histograms: bool = True,
        dist: Dist = SINGLE,
        fused_head: bool | None = None,
        **replace: Any,
    ) -> Trainer:
        """The Trainer a resolved run config describes: its train, optim, schedule, warmup_steps, seed,
        metrics, spikes and divergence groups (and placement, which metrics.model_update=auto asks
        about). The monitor writes spike and divergence reports into `reports_dir` (None: none);
        `histograms` False skips the gradient histograms (only W&B shows them). `replace` swaps whole
        groups (`train=`, `metrics=`, `spikes=`, ...: a benchmark changes a few keys)."""
        group = {**cfg, **replace}
        metrics = InstrumentConfig.from_config(group["metrics"])
        metrics = dataclasses.replace(
            metrics,
            model_update=wants_model_update(metrics.model_update, model.normalises_stream()),
            histogram_every=metrics.histogram_every if histograms else 0,
        )
        monitor = Monitor(
            SpikeConfig.from_config(group["spikes"]),
            DivergenceConfig.from_config(group["divergence"]),
            out_dir=reports_dir,
            n_layers=model.n_layers,
        )
        return cls(
            model,
            train_tokens,
            val_tokens,
            device,
            train=TrainConfig.of(group["train"]),
            optim=OptimConfig.of(group["optim"]),
            schedule=group["schedule"]["name"],
            warmup_steps=group["warmup_steps"],
            seed=group["seed"],
            metrics=metrics,
            monitor=monitor,
            dist=dist,
            fused_head=fused_head,
        )

    def _instruments(self, cfg: InstrumentConfig) -> Instruments:
        probe = None
        if cfg.model_update is True:  # "auto" is resolved by from_config, which knows the variant
            rng = torch.Generator().manual_seed(PROBE_SEED)
            x, _ = sample_windows(self.val_tokens, cfg.probe_batch, self.train.seq_len, rng)
            probe = x.to(self.device)
        return Instruments(self.model, self.grad_norms.layout, cfg, probe)

    def window_starts(self, data_state: torch.Tensor) -> list[list[int]]:
        """Where the batches of a step came from: for each micro-batch, the start offset in the training
        stream of each window, from the data-RNG state the step started from."""
        return self.batches.window_starts(len(self.train_tokens), data_state, self.train.grad_accum)

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def batch(self, tokens: np.ndarray, rng: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's slice of the next global batch drawn from `tokens` with `rng`."""
        return self.batches.draw(tokens, rng)

    def lr(self, step: int) -> float:
        return lr_at(
            step,
            lr=float(self.optim.lr),
            min_lr=float(self.optim.min_lr),
            warmup_steps=self.warmup_steps,
            max_steps=self.train.max_steps,
            schedule=self.schedule,
        )

    def train_step(self, update: bool, probe: StepProbe | None = None) -> torch.Tensor:
        """Forward/backward over grad_accum micro-batches, measure, clip and (if `update`) step.

        Returns, without a host sync, [loss, clipped, *grad norms in GradNorms.keys order]. On an
        instrumented step `probe` takes its measurements along the way (see metrics.instruments).
        """
        self.model.train()
        if self.monitor.writes_reports:  # where this step's batches come from, for the spike reports
            self._data_states[self.step] = self.data_rng.get_state()
        accum = self.train.grad_accum
        loss_sum = torch.zeros((), device=self.device)
        for _ in range(accum):
            x, y = self.batch(self.train_tokens, self.data_rng)
            with self.autocast():
                objective, loss = self.head_loss(x, y, probe)
            self.scaler.scale(objective / accum).backward()
            loss_sum += loss.detach()
        for p, rows in self.cancelled_grads:
            if p.grad is not None:
                p.grad[rows].zero_()
        self.scaler.unscale_(self.optimizer)
        grads = self.grad_norms.grads()
        self.dist.average_([*grads, loss_sum])  # torchrun: every rank goes on with the mean gradient
        norms = self.grad_norms.compute(grads)
        if probe:
            probe.after_backward(grads)
        clipped = torch.zeros((), device=self.device)
        if self.train.grad_clip > 0:
            clipped = clip_(grads, norms[0], float(self.train.grad_clip))
        if update:
            lr = self.lr(self.step)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.scaler.step(self.optimizer)
            self.scaler.update()
        if probe:
            probe.after_update(update)
        self.optimizer.zero_grad(set_to_none=True)
        return torch.cat([(loss_sum / accum).view(1), clipped.view(1), norms])

    @torch.no_grad()
    def evaluate(self) -> list[dict[str, float]]:
        """Mean validation loss over eval_batches global batches, the same windows at every evaluation (under
        torchrun each rank evaluates its slice, and the mean is all-reduced): [{val_loss: …}], and with
        metrics.layer_ablation the same mean with each block skipped (layer_ablation/layer_i), from the
        same batches in one host transfer."""
        self.model.eval()
        rng = torch.Generator().manual_seed(0)
        total = torch.zeros((), device=self.device)
        skipped = torch.zeros(self.model.n_layers if self.layer_ablation else 0, device=self.device)
        for _ in range(self.train.eval_batches):
            x, y = self.batch(self.val_tokens, rng)
            with self.autocast():
                if self.layer_ablation:
                    loss = partial(self.head_loss.cross_entropy, y=y)
                    full, each = losses_with_each_block_skipped(self.model, x, loss)
                    total += full
                    skipped += each
                else:
                    total += self.head_loss.cross_entropy(self.model.features(x), y)
        self.model.train()
        self.dist.average_([total, skipped])
        means = (torch.cat([total.view(1), skipped]) / self.train.eval_batches).tolist()
        return [
            {
                names.VAL_LOSS: means[0],
                **dict(zip(layer_ablation_keys(len(means) - 1), means[1:], strict=True)),
            }
        ]

    # ------------------------------------------------------------------------------------------------
    # what the loop asks of a run (normlab.train.fit.Members): one member
    # ------------------------------------------------------------------------------------------------

    @property
    def monitors(self) -> list[Monitor]:
        return [self.monitor]

    def row_lr(self, m: int, step: int) -> float:
        """The learning rate of the update made at `step` (0.0 for the step-0 row of max_steps=0)."""
        return self.lr(step) if step < self.train.max_steps else 0.0

    def batch_starts(self, m: int, step: int) -> BatchStarts | None:
        """Where the batches of `step` came from (spike reports), from the data-RNG state it started from."""
        state = self._data_states.pop(step, None)
        return partial(self.window_starts, state) if state is not None else None

    def stop_member(self, m: int) -> None:
        """The run's ending: nothing to freeze, the loop stops calling `train_step`."""

    def fit(
        self,
        callbacks: Sequence[Callback] = (),
        stop_at: int | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> LoopResult:
        """Train from self.step to train.max_steps: the loop of normlab.train.fit with this run as its one
        member; each measured step becomes one row for the callbacks.

        Row `step` is measured before that step's update, so step 0 is the gradient profile at init. With
        max_steps=0 the step-0 row is measured and no update is made. Rows reach the host every
        train.flush_every steps, where the monitor marks spikes and may end the run as diverged (see
        metrics.divergence); then each callback gets them (normlab.train.callbacks). `stop_at` pauses after
        that many steps, without the final evaluation: a later call continues (benchmarks interleave
        trainers this way). `stop` is polled after every step (see train.signals): when it returns True,
        every pending row is flushed and the result is `interrupted` at a step boundary, so a checkpoint
        taken then continues exactly where metrics.jsonl ends. A callback's exception ends the loop.
        """
        return fit(self, [list(callbacks)], stop=stop, stop_at=stop_at)[0]

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "step": self.step,
            "data_rng": self.data_rng.get_state(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "monitor": self.monitor.state_dict(),
            "instruments": self.instruments.state_dict() if self.instruments else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.step = state["step"]
        self.data_rng.set_state(state["data_rng"])
        torch.set_rng_state(state["torch_rng"])
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        # checkpoints from before instrumentation carry neither; the monitor then starts afresh
        if state.get("monitor") is not None:
            self.monitor.load_state_dict(state["monitor"])
        if state.get("instruments") is not None and self.instruments is not None:
            self.instruments.load_state_dict(state["instruments"])
