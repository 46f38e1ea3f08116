"""`StackedAdamW`: torch's AdamW, each member with its own learning rate, betas, eps and weight decay, on
the (members × parameters) buffers of a `StackedModel`.

The update is torch.optim.AdamW's (decoupled weight decay, bias-corrected moments), written on whole
matrices with one column of coefficients per member:

    θ ← θ·(1 − lr·λ·decays)        m ← m + (g − m)·(1 − β₁)        v ← v·β₂ + g²·(1 − β₂)
    θ ← θ − lr/(1 − β₁ᵗ) · m / (√v / √(1 − β₂ᵗ) + ε)

`decays` is 1 on the columns of the parameters weight decay applies to (normlab.train.optim.decay_split)
and 0 elsewhere; only `active` members move (a member that diverged keeps the parameters it ended with). The
step counts are per member and stay on the device, as every coefficient does: no host sync.

A member's state comes and goes in torch.optim.AdamW's own `state_dict` format, so a member's checkpoint
is a run's checkpoint (and a run's checkpoint resumes as a member).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from normlab.config.groups import OptimConfig
from normlab.train.optim import build_optimizer, decay_split
from normlab.train.stacked.model import StackedModel


class StackedAdamW:
    def __init__(self, model: StackedModel, optims: Sequence[OptimConfig]) -> None:
        self.model = model
        dev = model.device
        self.optims = list(optims)
        self.exp_avg = torch.zeros_like(model.flat)
        self.exp_avg_sq = torch.zeros_like(model.flat)
        self.steps = torch.zeros(model.size, 1, device=dev, dtype=torch.float64)

        def column(values: list[float]) -> torch.Tensor:
            return torch.tensor(values, device=dev, dtype=torch.float32).view(-1, 1)

        self.beta1 = column([float(o.betas[0]) for o in optims])
        self.beta2 = column([float(o.betas[1]) for o in optims])
        self.eps = column([float(o.eps) for o in optims])
        self.weight_decay = column([float(o.weight_decay) for o in optims])
        decays = {bool(o.decay_embeddings) for o in optims}
        if len(decays) != 1:
            raise ValueError("the members of a stack must agree on optim.decay_embeddings")
        decayed, _ = decay_split(model.shell, decays.pop())
        decayed_ids = {id(p) for p in decayed}
        mask = torch.zeros(1, model.n_params, device=dev)
        for name, p in model.shell.named_parameters():
            if name in model.params and id(p) in decayed_ids:
                mask[:, model._cols(name)] = 1.0
        self.decay_mask = mask

    @torch.no_grad()
    def step(self, lr: torch.Tensor, active: torch.Tensor) -> None:
        """One update with learning rates `lr` (members × 1, on the device) of the `active` members
        (members × 1, 1.0 or 0.0)."""
        theta, grad = self.model.flat, self.model.grad_flat
        self.steps += active.double()
        steps = self.steps.clamp(min=1)
        bias1 = (1 - self.beta1.double() ** steps).float()
        bias2_sqrt = (1 - self.beta2.double() ** steps).sqrt().float()
        lr = lr * active
        theta.mul_(1 - lr * self.weight_decay * self.decay_mask)
        # an inactive member's moments move on but are never read again: its run has ended
        self.exp_avg.lerp_(grad, 1 - self.beta1)
        self.exp_avg_sq.mul_(self.beta2).add_(grad.square().mul_(1 - self.beta2))
        denom = (self.exp_avg_sq.sqrt() / bias2_sqrt).add_(self.eps)
        theta.sub_(self.exp_avg / denom * (lr / bias1))

    # ------------------------------------------------------------------------------------------------
    # one member's state, in torch.optim.AdamW's format
    # ------------------------------------------------------------------------------------------------

    def _member_optimizer(self, m: int) -> tuple[torch.optim.AdamW, dict[str, torch.nn.Parameter]]:
        shell = self.model.shell
        optimizer = build_optimizer(shell, self.optims[m], self.model.device)
        return optimizer, dict(shell.named_parameters())

    def member_state_dict(self, m: int, lr: float) -> dict[str, Any]:
        """Member m's optimizer state as `torch.optim.AdamW.state_dict()` of its run alone returns it."""
        optimizer, params = self._member_optimizer(m)
        step = float(self.steps[m].item())
        for group in optimizer.param_groups:
            group["lr"] = lr
        if step > 0:
            for name in self.model.names:
                optimizer.state[params[name]] = {
                    "step": torch.tensor(step, dtype=torch.float32, device=self.model.device),
                    "exp_avg": self.model.member_view(self.exp_avg, name)[m].clone(),
                    "exp_avg_sq": self.model.member_view(self.exp_avg_sq, name)[m].clone(),
                }
        return optimizer.state_dict()

    @torch.no_grad()
    def load_member_state_dict(self, m: int, state: dict[str, Any]) -> None:
        """Put a run's (or member's) AdamW state into member m's row."""
        optimizer, params = self._member_optimizer(m)
        optimizer.load_state_dict(state)
        steps = []
        for name in self.model.names:
            own = optimizer.state.get(params[name])
            if not own:
                continue
            self.model.member_view(self.exp_avg, name)[m].copy_(own["exp_avg"])
            self.model.member_view(self.exp_avg_sq, name)[m].copy_(own["exp_avg_sq"])
            steps.append(float(own["step"]))
        self.steps[m] = max(steps) if steps else 0.0
