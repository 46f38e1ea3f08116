"""The LM head and the training objective behind one interface, `HeadLoss`: token ids and targets in,
(objective, cross-entropy) out, and on instrumented steps the head's measurements handed to the probe.

The objective is the cross-entropy plus the optional z-loss (Chowdhery et al. 2022, PaLM; Wortsman et al.
2023 use coefficient 1e-4), which pulls the log of the output softmax's normaliser towards 0:

    objective = CE + c · mean over positions of (log Z)²,   log Z = logsumexp over the vocabulary of the logits

so the logits cannot drift together to large magnitudes (softmax is blind to a shared shift, the gradient
of z-loss is not). log Z is computed in float32. The `loss` normlab logs stays the plain cross-entropy, so
runs with and without z-loss compare on the same number.

Two ways compute it, chosen inside `HeadLoss` so that the trainer, evaluation and the probes see one thing:

- plain, under autocast or on a GPU: logits = head(hidden), then `objective` on them. With
  `train.compile` the whole step — forward, head, objective (z-loss included) — is one torch.compile'd
  function, so Inductor fuses the cross-entropy into kernels that read the low-precision logits once and
  never write a float32 copy of them (eagerly, `.float()` would write 4 bytes a logit);
- fused (`normlab.train.fused_head`), on the CPU in float32: the head and its loss in one chunked pass,
  the full logits never written, which is most of the head's cost there; the trunk is compiled alone.

An instrumented step runs the same function with `probe=True`: the model's forward returns its blocks'
measurements (`GPT.features(idx, probe=True)`), and the logits' statistics (`logits/*`) and what the head
reads (`act_rms/head_input`) are computed beside the loss — one graph, no hooks, no second forward.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from normlab.metrics.activations import LogitStats, activation_values
from normlab.metrics.instruments import StepProbe
from normlab.train.compile import compile_module
from normlab.train.fused_head import fused_objective


def objective(
    logits: torch.Tensor, targets: torch.Tensor, z_loss: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(what to differentiate, the cross-entropy) for logits (..., vocab) and integer targets (...)."""
    flat = logits.float().view(-1, logits.size(-1))
    ce = F.cross_entropy(flat, targets.reshape(-1))
    if not z_loss:
        return ce, ce
    return ce + z_loss * torch.logsumexp(flat, dim=-1).square().mean(), ce


def fused_pays(device: torch.device, amp_dtype: torch.dtype | None) -> bool:
    """Whether the fused head runs: on the CPU in float32, where writing the full logits costs most."""
    return device.type == "cpu" and amp_dtype is None


class HeadLoss:
    """`model`'s LM head and the objective (z-loss coefficient `z_loss`), fused or plain (`fused`).

    `model` is a normlab GPT: `features` (token ids → what the head reads; with probe=True also its
    blocks' measurements) and `head` (an nn.Linear without bias). Calling it runs one micro-batch through
    `step` — torch.compile'd when `compiled`: the whole plain step, or the trunk of the fused one.
    """

    def __init__(
        self, model: nn.Module, *, z_loss: float, fused: bool, compiled: bool, device: torch.device
    ) -> None:
        self.model, self.z_loss, self.fused = model, float(z_loss), fused
        if fused:
            self.trunk = compile_module(model.features, device) if compiled else model.features
            self.step: Callable[..., tuple[torch.Tensor, ...]] = self._fused_step
        else:
            self.step = compile_module(self._plain_step, device) if compiled else self._plain_step

    def __call__(
        self, x: torch.Tensor, y: torch.Tensor, probe: StepProbe | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(objective, cross-entropy) of one micro-batch of token ids `x` and targets `y`; on an
        instrumented step `probe` gets the measurements of its first micro-batch's forward."""
        if probe is None or not probe.wants_forward():
            return self.step(x, y, False)
        total, ce, measured = self.step(x, y, True)
        probe.record_forward(measured)
        return total, ce

    def _plain_step(self, x: torch.Tensor, y: torch.Tensor, probe: bool) -> tuple[torch.Tensor, ...]:
        """(objective, cross-entropy[, the activation values]) through materialised logits."""
        if not probe:
            total, ce, _ = self.head(self.model.features(x), y)
            return total, ce
        hidden, taps = self.model.features(x, probe=True)
        total, ce, stats = self.head(hidden, y, stats=True)
        return total, ce, activation_values(taps, hidden, stats)

    def _fused_step(self, x: torch.Tensor, y: torch.Tensor, probe: bool) -> tuple[torch.Tensor, ...]:
        """The same through the (compiled) trunk and the fused head and loss."""
        if not probe:
            return fused_objective(self.trunk(x), self.model.head.weight, y, self.z_loss)[:2]
        hidden, taps = self.trunk(x, True)
        total, ce, stats = self.head(hidden, y, stats=True)
        return total, ce, activation_values(taps, hidden, stats)

    def head(
        self, hidden: torch.Tensor, y: torch.Tensor, *, stats: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, LogitStats | None]:
        """(objective, cross-entropy, the logits' statistics if `stats`) of `hidden`, what the head reads."""
        if self.fused:
            return fused_objective(hidden, self.model.head.weight, y, self.z_loss, stats=stats)
        logits = self.model.head(hidden)
        total, ce = objective(logits, y, self.z_loss)
        return total, ce, LogitStats.of(logits) if stats else None

    def cross_entropy(self, hidden: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The cross-entropy against `y` of `hidden`, what the head reads (evaluation, layer ablation)."""
        return self.head(hidden, y)[1]
