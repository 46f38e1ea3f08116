"""`StackedTrainer`: what normlab.train.loop.Trainer is to a run alone — the step, the evaluation and the
state — for a stack of runs; the one training loop (normlab.train.fit) drives either.

Per member, everything a run alone has per run: its data-RNG stream (its batches are the windows its run
alone draws, in the same order: normlab.train.stacked.batches), its learning rate and schedule, warm-up,
weight decay, betas, eps and z-loss, its global / per-block / per-sublayer gradient norms and its own
clipping, its monitor (spikes, divergence, reports in its own directory), its instrumented-step
measurements, its rows through the single run's `PendingRows` to its own callbacks, its evaluations and
checkpoints in the single run's format (`MemberView.state_dict`).

What the members share: the shapes, the model's architecture, the loop's cadence (steps, evaluation,
instrumented steps, flushes, checkpoints) and one forward / backward. A step runs no Python per member
(what is per member is a column on the device: learning rates, AdamW's coefficients, clipping limits,
z-loss) and nothing syncs with the host between flushes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from normlab.config.groups import OptimConfig, TrainConfig
from normlab.data.batches import sample_windows
from normlab.distributed import SINGLE
from normlab.metrics import names
from normlab.metrics.ablation import layer_ablation_keys, losses_with_each_block_skipped
from normlab.metrics.divergence import DivergenceConfig
from normlab.metrics.instruments import InstrumentConfig, wants_model_update
from normlab.metrics.layout import ParamLayout
from normlab.metrics.monitor import BatchStarts, Monitor
from normlab.metrics.spikes import SpikeConfig
from normlab.train import flops
from normlab.train.batches import RankBatches
from normlab.train.callbacks import Callback, LoopResult
from normlab.train.compile import compile_module, graphs, static
from normlab.train.fit import MemberEnd, fit
from normlab.train.head_loss import fused_pays
from normlab.train.loop import DTYPES, PROBE_SEED
from normlab.train.schedule import lr_at
from normlab.train.stacked.batches import StackedBatches
from normlab.train.stacked.head import StackedHead
from normlab.train.stacked.model import StackedModel
from normlab.train.stacked.optim import BLOCK, StackedAdamW
from normlab.train.stacked.probe import (
    StackedInstruments,
    StackedProbe,
    forward_values,
    probed_features,
)

log = logging.getLogger("normlab")


def _features(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model.features(x)


def _ablation(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    def loss(hidden: torch.Tensor) -> torch.Tensor:
        logits = model.head(hidden).float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    return losses_with_each_block_skipped(model, x, loss)


def grad_norm_keys(n_layers: int, per_layer: bool) -> list[str]:
    """normlab.metrics.grad_norms.GradNorms.keys: global, per block, per (block, part)."""
    keys = [names.GRAD_NORM]
    if per_layer:
        keys += [names.grad_norm_layer(i) for i in range(n_layers)]
        keys += [names.grad_norm_sublayer(i, s) for i in range(n_layers) for s in names.SUBLAYERS]
    return keys


class StackedTrainer:
    """Trains `models` (one GPT per member, each built and loaded as its run alone builds it) with their
    resolved run configs `cfgs`. The loop's knobs (train.*, metrics.*) are the first member's: the stacked
    launcher groups only runs that agree on them (normlab.sweeps.stacked). `reports_dirs[m]` is where
    member m's monitor writes spike and divergence reports; `histograms[m]` whether it computes gradient
    histograms (W&B); `fused_head` the head's path (None: the device's, as for a run alone)."""

    def __init__(
        self,
        models: Sequence[nn.Module],
        cfgs: Sequence[Mapping[str, Any]],
        train_tokens: np.ndarray,
        val_tokens: np.ndarray,
        device: torch.device,
        *,
        reports_dirs: Sequence[Path | None] | None = None,
        histograms: Sequence[bool] | None = None,
        fused_head: bool | None = None,
    ) -> None:
        size = len(models)
        self.size, self.device = size, device
        self.train_tokens, self.val_tokens = train_tokens, val_tokens
        self.cfgs = list(cfgs)
        self.train = TrainConfig.of(cfgs[0]["train"])
        self.trains = [TrainConfig.of(c["train"]) for c in cfgs]
        self.optims = [OptimConfig.of(c["optim"]) for c in cfgs]
        self.schedules = [c["schedule"]["name"] for c in cfgs]
        self.warmups = [int(c["warmup_steps"]) for c in cfgs]
        if self.train.precision not in DTYPES or self.train.precision == "fp16":
            raise ValueError(f"train.precision={self.train.precision} cannot be stacked; use fp32 or bf16.")
        self.amp_dtype = DTYPES[self.train.precision]
        shell = models[0]
        self.n_layers = shell.n_layers
        self.model = StackedModel(models, device, first=StackedAdamW.decayed_names(shell, self.optims))
        self.optimizer = StackedAdamW(
            self.model, self.optims, self.lr, list(zip(self.warmups, self.schedules, strict=True))
        )
        self.batches = RankBatches(self.train.batch_size, self.train.seq_len, SINGLE, device)
        fused = fused_pays(device, self.amp_dtype) if fused_head is None else fused_head
        self.head = StackedHead([o.z_loss for o in self.optims], fused, device)
        self.data_rngs = [torch.Generator().manual_seed(int(c["seed"])) for c in cfgs]
        # every member's windows a block of steps ahead; kept while a pending row may ask where they came from
        self.windows = StackedBatches(
            train_tokens,
            self.data_rngs,
            self.batches,
            self.train.grad_accum,
            block=BLOCK,
            keep_steps=2 * max(1, self.train.flush_every),
        )
        self.step = 0
        self.tokens_per_step = self.train.batch_size * self.train.seq_len * self.train.grad_accum
        self.flops_per_token = flops.flops_per_token(
            flops.matmul_params(shell), shell.n_layers, self.train.seq_len, shell.d_model
        )
        self.peak_flops = flops.peak_flops(device, self.train.precision, self.train.peak_flops)
        self.cancelled = [(name, rows) for name, _, rows in shell.norm_cancelled_parameters()]
        self.layout = ParamLayout(shell, shell.n_layers)
        metrics = InstrumentConfig.from_config(cfgs[0]["metrics"])
        histograms = list(histograms) if histograms is not None else [False] * size
        metrics = dataclasses.replace(
            metrics,
            model_update=wants_model_update(metrics.model_update, shell.normalises_stream()),
            histogram_every=metrics.histogram_every if any(histograms) else 0,
        )
        self.metrics = metrics
        self.grad_keys = grad_norm_keys(shell.n_layers, metrics.enabled)
        self.layer_ablation = metrics.enabled and metrics.layer_ablation
        self.instruments = self._instruments(metrics, histograms) if metrics.enabled else None
        dirs = list(reports_dirs) if reports_dirs is not None else [None] * size
        self.monitors = [
            Monitor(
                SpikeConfig.from_config(c["spikes"]),
                DivergenceConfig.from_config(c["divergence"]),
                out_dir=dirs[m],
                n_layers=shell.n_layers,
            )
            for m, c in enumerate(cfgs)
        ]
        self.max_norm = torch.tensor([float(t.grad_clip) for t in self.trains], device=device).view(-1, 1)
        self.clipping = self.max_norm > 0
        self.alive = [True] * size  # members still training; the others no longer update
        self.row_keys = [names.LOSS, names.CLIPPED, *self.grad_keys]
        # as HeadLoss for one run: on the plain path the whole step (forward, head, objective, the probe's
        # measurements) is one compiled function, and its backward; on the CPU's fused path the trunk is
        # compiled alone. What follows the backward — the gradient norms, clipping, the optimizer — is compiled
        # too, so that a step is a few compiled graphs (train.compile_mode=reduce-overhead: CUDA graphs).
        compiled, mode = self.train.compile, self.train.compile_mode

        def maybe(fn: Callable[..., Any]) -> Callable[..., Any]:
            return compile_module(fn, device, mode) if compiled else fn

        if compiled and graphs(mode, device):  # buffers updated in place, replayed at one address
            static(self.model.flat, self.model.grad_flat, self.optimizer.exp_avg, self.optimizer.exp_avg_sq)
        if self.head.fused:
            self._trunk = maybe(self._trunk_step)
            self._step: Callable[..., tuple[torch.Tensor, ...]] = self._fused_step
        else:
            self._step = maybe(self._plain_step)
        self._norms = maybe(self._grad_norms)
        self._clip = maybe(self._clip_grads)
        self.optimizer.compile(maybe)

    def fit(
        self,
        callbacks: Sequence[Sequence[Callback]],
        on_member_end: MemberEnd,
        stop: Callable[[], bool] | None = None,
    ) -> list[LoopResult]:
        """Train every member from self.step to train.max_steps: the loop of normlab.train.fit, the one a run
        alone follows; `callbacks[m]` get member m's rows as a run alone's callbacks get its rows. When member
        m's run ends — diverged, failed in its callbacks, or at the end of the loop (completed, or interrupted
        when `stop()` asks for it at a step boundary) — its callbacks' `on_end` run and then
        `on_member_end(m, result, error)`; the others go on."""
        return fit(self, callbacks, on_member_end=on_member_end, stop=stop)

    def _instruments(self, cfg: InstrumentConfig, histograms: list[bool]) -> StackedInstruments:
        probe = None
        if cfg.model_update is True:
            rng = torch.Generator().manual_seed(PROBE_SEED)
            x, _ = sample_windows(self.val_tokens, cfg.probe_batch, self.train.seq_len, rng)
            probe = x.to(self.device)
        return StackedInstruments(self.model, self.layout, cfg, probe, histograms)

    def _trunk_step(self, x: torch.Tensor, probe: bool) -> Any:
        """What every member's head reads (and with `probe` its blocks' measurements)."""
        return self.model.map(probed_features if probe else _features, x)

    def _plain_step(self, x: torch.Tensor, y: torch.Tensor, probe: bool) -> tuple[torch.Tensor, ...]:
        """(objective, cross-entropy[, activation values]) per member through the batched logits."""
        if not probe:
            objective, ce, _ = self.head(self._trunk_step(x, False), self.model.head_weight(), y)
            return objective, ce
        hidden, stream_rms, attn = self._trunk_step(x, True)
        objective, ce, stats = self.head(hidden, self.model.head_weight(), y, stats=True)
        return objective, ce, forward_values(stream_rms, attn, hidden, stats)  # type: ignore[arg-type]

    def _fused_step(self, x: torch.Tensor, y: torch.Tensor, probe: bool) -> tuple[torch.Tensor, ...]:
        """The same through the (compiled) trunk and each member's fused head and loss."""
        if not probe:
            objective, ce, _ = self.head(self._trunk(x, False), self.model.head_weight(), y)
            return objective, ce
        hidden, stream_rms, attn = self._trunk(x, True)
        objective, ce, stats = self.head(hidden, self.model.head_weight(), y, stats=True)
        return objective, ce, forward_values(stream_rms, attn, hidden, stats)  # type: ignore[arg-type]

    # ------------------------------------------------------------------------------------------------
    # per member: learning rate, batches
    # ------------------------------------------------------------------------------------------------

    def lr(self, m: int, step: int) -> float:
        """Member m's learning rate at `step`, as its run alone has it (normlab.train.schedule)."""
        return lr_at(
            step,
            lr=float(self.optims[m].lr),
            min_lr=float(self.optims[m].min_lr),
            warmup_steps=self.warmups[m],
            max_steps=self.train.max_steps,
            schedule=self.schedules[m],
        )

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    # ------------------------------------------------------------------------------------------------
    # one step of every member
    # ------------------------------------------------------------------------------------------------

    def train_step(self, update: bool, probe: StackedProbe | None = None) -> torch.Tensor:
        """Forward / backward of every member over grad_accum micro-batches, each member's norms and clipping,
        and (if `update`) every member's AdamW step — the members that ended stay as they were. Returns,
        without a host sync, (members, keys): [loss, clipped, *grad norms in `grad_keys` order] —
        Trainer.train_step's row, per member. No Python runs per member."""
        model = self.model
        model.train(True)
        accum = self.train.grad_accum
        model.grad_flat.zero_()
        loss_sum = torch.zeros(self.size, device=self.device)
        for i in range(accum):
            x, y = self.windows.draw()
            measured = probe is not None and i == 0
            with self.autocast():
                out = self._step(x, y, measured)
            objective, ce = out[0], out[1]
            if measured:
                probe.record_forward(out[2])  # type: ignore[union-attr]
            (objective.sum() / accum).backward()
            loss_sum += ce.detach()
        with torch.no_grad():
            for name, rows in self.cancelled:
                model.params[name].grad[:, rows].zero_()
            norms = self._norms()
            if probe is not None:
                probe.after_backward({n: p.grad for n, p in model.params.items()})
            clipped = self._clip(norms)
            if update:
                self.optimizer.step(self.step)
        if probe is not None:
            probe.after_update(update)
        return torch.cat([(loss_sum / accum).view(-1, 1), clipped, norms], 1)

    def _clip_grads(self, norms: torch.Tensor) -> torch.Tensor:
        """Scale each member's gradient to its train.grad_clip (0: none) from its global norm (norms[:, 0]);
        (members, 1): 1.0 where clipping fired."""
        total = norms[:, :1]
        coef = torch.where(self.clipping, (self.max_norm / (total + 1e-6)).clamp(max=1.0), 1.0)
        self.model.grad_flat.mul_(coef)
        return (self.clipping & (total > self.max_norm)).float()

    def _grad_norms(self) -> torch.Tensor:
        """(members, grad_keys): each member's global, per-block and per-part gradient norms."""
        sq = self.model.squared_norms(self.model.grad_flat)
        parts = [sq.sum(1, keepdim=True)]
        if len(self.grad_keys) > 1:
            parts += [self.layout.layer_sums(sq), self.layout.part_sums(sq)]
        return torch.cat(parts, 1).sqrt()

    @torch.no_grad()
    def evaluate(self) -> list[dict[str, float]]:
        """Each member's validation loss on the windows every run evaluates on (Trainer.evaluate), and with
        metrics.layer_ablation its losses with each block skipped; one host transfer."""
        model = self.model
        model.train(False)
        rng = torch.Generator().manual_seed(0)
        total = torch.zeros(self.size, device=self.device)
        skipped = torch.zeros(self.size, self.n_layers if self.layer_ablation else 0, device=self.device)
        try:
            for _ in range(self.train.eval_batches):
                x, y = self.batches.draw(self.val_tokens, rng)
                with self.autocast():
                    if self.layer_ablation:
                        full, each = model.map(_ablation, x, y, shared=(True, True))
                        total += full
                        skipped += each
                    else:
                        hidden = model.map(_features, x, shared=(True,))
                        total += self.head(hidden, model.head_weight(), y)[1]
        finally:
            model.train(True)
        means = (torch.cat([total.view(-1, 1), skipped], 1) / self.train.eval_batches).tolist()
        keys = layer_ablation_keys(len(means[0]) - 1)
        return [{names.VAL_LOSS: row[0], **dict(zip(keys, row[1:], strict=True))} for row in means]

    # ------------------------------------------------------------------------------------------------
    # what the loop asks of the members at a flush and at an ending (normlab.train.fit.Members)
    # ------------------------------------------------------------------------------------------------

    def row_lr(self, m: int, step: int) -> float:
        return self.lr(m, step) if step < self.train.max_steps else 0.0

    def batch_starts(self, m: int, step: int) -> BatchStarts | None:
        return self.windows.starts(m, step)

    def stop_member(self, m: int) -> None:
        """Member m's run ended: it no longer updates (its parameters stay as its checkpoint saved them)."""
        self.alive[m] = False
        self.optimizer.freeze(m)

    # ------------------------------------------------------------------------------------------------
    # a member's state, in a single run's checkpoint format
    # ------------------------------------------------------------------------------------------------

    def member_state_dict(self, m: int) -> dict[str, Any]:
        """Member m's `Trainer.state_dict()`: what its run alone would save at this step."""
        return {
            "model": self.model.member_state_dict(m),
            "optimizer": self.optimizer.member_state_dict(m, self.lr(m, max(self.step - 1, 0)), self.step),
            "scaler": torch.amp.GradScaler(self.device.type, enabled=False).state_dict(),
            "step": self.step,
            "data_rng": self.windows.rng_state(m),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "monitor": self.monitors[m].state_dict(),
            "instruments": self.instruments.member_state_dict(m) if self.instruments else None,
        }

    def load_member_states(self, states: Sequence[dict[str, Any] | None]) -> None:
        """Continue from the members' checkpoints (None: a member that starts afresh); their models are loaded
        before stacking (the run loads its checkpoint into its GPT). Every state is at the same step."""
        steps = {int(s["step"]) for s in states if s is not None}
        if len(steps) > 1:
            raise ValueError(f"the members of a stack must resume from one step, not {sorted(steps)}")
        if not steps:
            return
        if any(s is None for s in states):
            raise ValueError("the members of a stack must all resume or all start afresh")
        self.step = steps.pop()
        for m, state in enumerate(states):
            assert state is not None
            self.optimizer.load_member_state_dict(m, state["optimizer"], self.step)
            self.data_rngs[m].set_state(state["data_rng"])
            if state.get("monitor") is not None:
                self.monitors[m].load_state_dict(state["monitor"])
        self.windows.reset(self.step)
        first = states[0]
        assert first is not None
        torch.set_rng_state(first["torch_rng"])
        if first.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(first["cuda_rng"])
        if self.instruments is not None:
            self.instruments.load_member_states([s.get("instruments") for s in states if s is not None])


class MemberView:
    """Member m of a StackedTrainer as a run's lifecycle sees a Trainer: `model` (its GPT, for the sample),
    `monitor`, `device`, `step`, `flops_per_token`, `peak_flops`, `tokens_per_step` and `state_dict()` (its checkpoint)."""

    def __init__(self, trainer: StackedTrainer, m: int) -> None:
        self.trainer, self.m = trainer, m
        self.monitor = trainer.monitors[m]
        self.device = trainer.device
        self.flops_per_token, self.peak_flops = trainer.flops_per_token, trainer.peak_flops
        self.tokens_per_step = trainer.tokens_per_step

    @property
    def step(self) -> int:
        return self.trainer.step

    @property
    def model(self) -> nn.Module:
        return self.trainer.model.member_model(self.m)

    def state_dict(self) -> dict[str, Any]:
        return self.trainer.member_state_dict(self.m)
