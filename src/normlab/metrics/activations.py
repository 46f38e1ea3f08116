"""Activation statistics of one forward pass: what an instrumented step logs about the activations.

The blocks' measurements come out of the forward itself (`GPT.features(idx, probe=True)` returns them as
`ForwardTaps`), so an instrumented step runs the same compiled graph shape as a plain one, with no hooks.
What the LM head reads and the output logits are measured by the head and its loss
(normlab.train.head_loss), whichever way the logits are computed. `activation_values` lays it all out in
`activation_keys` order, on the device; the caller moves it to the host with the rest of its row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from normlab.metrics import names
from normlab.model.blocks import ForwardTaps, stream_rms


@dataclass(frozen=True)
class LogitStats:
    """The output logits' statistics of an instrumented step (0-d float32 tensors on the device): what
    `logits/max`, `logits/mean` and `logits/log_z` report."""

    max: torch.Tensor  # largest logit over positions and vocabulary
    mean: torch.Tensor  # mean logit over positions and vocabulary
    mean_log_z: torch.Tensor  # mean over positions of log Σ_v exp(logit_v), in float32 (what z-loss squares)

    @classmethod
    def of(cls, logits: torch.Tensor) -> LogitStats:
        """From materialised logits (..., vocab); the fused head computes the same on its way instead."""
        logits = logits.detach().float()
        return cls(max=logits.amax(), mean=logits.mean(), mean_log_z=torch.logsumexp(logits, dim=-1).mean())


def activation_keys(n_layers: int) -> list[str]:
    """What `activation_values` measures, in its order:

    - act_rms/layer_i: RMS of the residual stream x leaving block i (over batch, positions and features;
      with ResiDual, its Post-LN stream x, not the accumulating d);
    - act_rms/head_input: RMS of what the LM head reads (after the final norm, if the placement has one);
    - logits/mean, logits/max: mean and maximum of the output logits over batch, positions and vocabulary;
    - logits/log_z: mean over batch and positions of log Σ_v exp(logit_v), in float32 (what z-loss squares);
    - attn_max_logit/layer_i: the largest causal q·k/√d_head of block i over batch, heads and positions.
    """
    return [
        *(names.act_rms_layer(i) for i in range(n_layers)),
        names.ACT_RMS_HEAD,
        names.LOGIT_MEAN,
        names.LOGIT_MAX,
        names.LOGIT_LOG_Z,
        *(names.attn_max_logit_layer(i) for i in range(n_layers)),
    ]


def activation_values(taps: ForwardTaps, head_input: torch.Tensor, logits: LogitStats) -> torch.Tensor:
    """One float32 tensor in `activation_keys` order, from a probed forward's taps, what the head read and
    the logits' statistics (pure tensor operations: it is part of the compiled instrumented step)."""
    head = torch.stack([stream_rms(head_input), logits.mean, logits.max, logits.mean_log_z]).float()
    return torch.cat([taps.stream_rms.float(), head, taps.attn_max_logit.float()])
