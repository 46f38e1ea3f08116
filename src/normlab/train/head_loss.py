"""The LM head and the training objective behind one interface, `HeadLoss`: token ids and targets in,
(objective, cross-entropy) out, and on instrumented steps the head's measurements handed to the probe.

The objective is the cross-entropy plus the optional z-loss (Chowdhery et al. 2022, PaLM; Wortsman et al.
2023 use coefficient 1e-4), which pulls the log of the output softmax's normaliser towards 0:

    objective = CE + c · mean over positions of (log Z)²,   log Z = logsumexp over the vocabulary of the logits

so the logits cannot drift together to large magnitudes (softmax is blind to a shared shift, the gradient
of z-loss is not). log Z is computed in float32. The `loss` normlab logs stays the plain cross-entropy, so
runs with and without z-loss compare on the same number.

Two ways compute it, chosen inside `HeadLoss` so that the trainer, evaluation and the probes see one thing:

- fused (`normlab.train.fused_head`), on the CPU in float32: the head and its loss in one chunked pass,
  the full logits never written, which is most of the head's cost there;
- plain, under autocast or on a GPU (where that memory traffic is cheap): logits = head(hidden), then
  `objective` on them.

Either way the logits' statistics (`logits/*`) and what the head reads (`act_rms/head_input`) come from
here, on the forward they describe (`StepProbe.head`), so a metric does not depend on device or precision.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from normlab.metrics.activations import LogitStats
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

    `model` is a normlab GPT: `features` (token ids → what the head reads) and `head` (an nn.Linear without
    bias). Calling it runs one micro-batch: through `step_forward` (`model.features` fused, `model` plain;
    torch.compile'd when `compiled`), or eagerly with a probe's hooks on an instrumented step.
    """

    def __init__(
        self, model: nn.Module, *, z_loss: float, fused: bool, compiled: bool, device: torch.device
    ) -> None:
        self.model, self.z_loss, self.fused = model, float(z_loss), fused
        trunk = model.features if fused else model
        # instrumented steps, whose hooks would change the graph, and evaluation run the model eagerly
        self.step_forward: Callable[[torch.Tensor], torch.Tensor] = (
            compile_module(trunk, device) if compiled else trunk
        )

    def __call__(
        self, x: torch.Tensor, y: torch.Tensor, probe: StepProbe | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(objective, cross-entropy) of one micro-batch of token ids `x` and targets `y`; on an
        instrumented step `probe` measures the forward and the head."""
        if probe is None:
            out = self.step_forward(x)
            if self.fused:
                return fused_objective(out, self.model.head.weight, y, self.z_loss)[:2]
            return objective(out, y, self.z_loss)
        with probe.forward():
            hidden = self.model.features(x)
        total, ce, stats = self.head(hidden, y, stats=True)
        probe.head(hidden, stats)
        return total, ce

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
