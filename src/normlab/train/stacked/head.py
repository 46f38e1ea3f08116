"""The LM head and the training objective of every member of a stack: (objective, cross-entropy) per member,
and on instrumented steps the logits' statistics per member — what normlab.train.head_loss computes for
one run, with the same two paths:

- fused, on the CPU in float32: the single run's fused chunked head (normlab.train.fused_head) for every
  member in one batched pass, each with its own z-loss coefficient — the same arithmetic as a run alone;
- plain, elsewhere: the members' logits in one batched matrix product (members, tokens, vocabulary), then
  what a run alone's plain head does to its logits: torch's cross-entropy (one fused log-softmax kernel
  over every member's rows, per-token losses averaged per member) and, only where a member has a z-loss
  (or an instrumented step asks for the logits' statistics), the log-sum-exp.

The cross-entropy is not computed as log Z − the target's logit: torch's log-sum-exp is a chain of
whole-logits operations (max, subtract, exp, sum) and its backward three more (subtract, exp, multiply),
with the target's gather and the sum of the two gradients on top — 16 logits-sized reads and writes a
step where the cross-entropy needs 6 (one log-softmax kernel each way). The float32 logits of 32 members
of `model=small` at batch 32 are 2.1 GB (docs/performance.md, "Where a stacked step's arithmetic goes").
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from normlab.train.fused_head import stacked_fused_objective

STATS = 3  # logits/max, logits/mean, logits/log_z (normlab.metrics.activations.LogitStats)


class StackedHead:
    """`z_loss` is each member's z-loss coefficient; `fused` picks the path (normlab.train.head_loss.fused_pays)."""

    def __init__(self, z_loss: Sequence[float], fused: bool, device: torch.device) -> None:
        self.z_list = [float(z) for z in z_loss]  # the fused head's: Python floats, no tensor read per step
        self.z = torch.tensor(self.z_list, dtype=torch.float64).float().to(device)
        self.any_z = any(z != 0.0 for z in self.z_list)
        self.fused = fused

    def __call__(
        self, hidden: torch.Tensor, weight: torch.Tensor, y: torch.Tensor, *, stats: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(objective, cross-entropy, (members, 3) logit statistics or None), each per member, of `hidden`
        (members, batch, time, d_model) under the heads `weight` (members, vocab, d_model) against targets
        `y` ((members, batch, time), or (batch, time) shared by every member)."""
        shared = y.dim() == hidden.dim() - 2
        if self.fused:
            return stacked_fused_objective(hidden, weight, y, self.z_list, stats=stats)
        s = hidden.shape[0]
        flat = hidden.reshape(s, -1, hidden.shape[-1])
        logits = torch.bmm(flat, weight.to(flat.dtype).transpose(1, 2)).float()  # (members, tokens, vocab)
        targets = y.reshape(1, -1).expand(s, -1) if shared else y.reshape(s, -1)
        vocab = logits.shape[-1]
        per_token = F.cross_entropy(logits.view(-1, vocab), targets.reshape(-1), reduction="none")
        ce = per_token.view(s, -1).mean(1)
        log_z = None
        if self.any_z:
            log_z = torch.logsumexp(logits, dim=-1)
            objective = ce + self.z * log_z.square().mean(1)
        else:
            objective = ce
        if not stats:
            return objective, ce, None
        with torch.no_grad():
            logits = logits.detach()
            log_z = torch.logsumexp(logits, dim=-1) if log_z is None else log_z.detach()
            table = torch.stack([logits.amax((1, 2)), logits.mean((1, 2)), log_z.mean(1)], dim=1)
        return objective, ce, table
