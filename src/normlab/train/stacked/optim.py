"""`StackedAdamW`: torch's AdamW, each member with its own learning rate, betas, eps and weight decay, on
the (members × parameters) buffers of a `StackedModel`.

Each member's step is torch.optim.AdamW(fused=True)'s own kernel (`torch._fused_adamw_`, which AdamW's
fused path calls) on that member's row of the buffers — the parameters, gradients and moments of a member
are contiguous views into them — once for the parameters weight decay applies to (normlab.train.optim.
decay_split) and once for the rest, with the member's hyperparameters as host numbers: no host sync, the
same arithmetic as a run alone, and one kernel per group instead of a dozen passes over whole matrices
with a column of coefficients per member (measured: those cost a third of a tiny model's stacked step on
the CPU). Only the members still training move; a member that ended keeps the state it ended with.

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
        self.optims = list(optims)
        self.exp_avg = torch.zeros_like(model.flat)
        self.exp_avg_sq = torch.zeros_like(model.flat)
        # one step count per member (the kernel reads a step tensor per parameter: the member's, repeated)
        self.steps = [torch.zeros((), device=model.device) for _ in optims]
        decays = {bool(o.decay_embeddings) for o in optims}
        if len(decays) != 1:
            raise ValueError("the members of a stack must agree on optim.decay_embeddings")
        decayed, _ = decay_split(model.shell, decays.pop())
        decayed_ids = {id(p) for p in decayed}
        shell = dict(model.shell.named_parameters())
        self.decayed = [n for n in model.names if id(shell[n]) in decayed_ids]
        self.plain = [n for n in model.names if id(shell[n]) not in decayed_ids]
        # each member's row as lists of parameter-shaped views: (decayed, plain) × (θ, g, m, v)
        self._rows = [
            [
                [
                    model.member_tensors(t, m, names)
                    for t in (model.flat, model.grad_flat, self.exp_avg, self.exp_avg_sq)
                ]
                for names in (self.decayed, self.plain)
            ]
            for m in range(model.size)
        ]

    @torch.no_grad()
    def step(self, lrs: Sequence[float], alive: Sequence[bool]) -> None:
        """One update of every member still `alive`, member m with learning rate `lrs[m]`."""
        for m, optim in enumerate(self.optims):
            if not alive[m]:
                continue
            self.steps[m] += 1
            for (theta, grad, exp_avg, exp_avg_sq), decay in zip(
                self._rows[m], (float(optim.weight_decay), 0.0), strict=True
            ):
                if not theta:
                    continue
                torch._fused_adamw_(
                    theta,
                    grad,
                    exp_avg,
                    exp_avg_sq,
                    [],
                    [self.steps[m]] * len(theta),
                    amsgrad=False,
                    lr=float(lrs[m]),
                    beta1=float(optim.betas[0]),
                    beta2=float(optim.betas[1]),
                    weight_decay=decay,
                    eps=float(optim.eps),
                    maximize=False,
                )

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
        step = float(self.steps[m])
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
        self.steps[m].fill_(max(steps) if steps else 0.0)
