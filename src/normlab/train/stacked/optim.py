"""`StackedAdamW`: torch's AdamW, each member with its own learning rate, betas, eps and weight decay, on
the (members × parameters) buffers of a `StackedModel` — every member in one pass over the buffers.

A step is a handful of whole-buffer operations with a column of coefficients per member, the arithmetic of
torch.optim.AdamW(fused=True)'s CPU kernel (`torch._fused_adamw_`) element for element:

    θ ← θ · (1 − lr·wd)                       (the columns weight decay applies to: the first block)
    m ← lerp(m, g, 1 − β₁)
    v ← v · β₂ + (1 − β₂) · g · g              (one rounding for the product and the sum: addcmul, as the
                                                kernel's fused multiply-add)
    θ ← θ − (lr / (1 − β₁ᵗ)) · m / (√v / √(1 − β₂ᵗ) + ε)

with each member's coefficients computed in float64 on the host and rounded to float32, as the kernel
rounds them — a member's parameters are its run alone's fused AdamW's to one float32 rounding (measured:
all but about one element in 5,000 bit for bit after a step). The coefficients depend on each member's
learning-rate schedule and step count only, so they are made a block of steps ahead (`BLOCK` steps: the
only per-member Python, once per block) and a step reads its column of that table on the device: no host
work per member, no host sync.

Where every member has the same optimizer settings and schedule (a sweep over seeds, or over settings that
are not the optimizer's) there is nothing per member to tell apart: the step is torch's fused AdamW kernel
itself, once over the whole (members × parameters) buffer — one pass instead of a dozen, and bit for bit
a run alone's update (weight decay applied first to its block of columns, which is what the kernel does
to each element before the rest).

A member whose run ended keeps the parameters it ended with (`freeze`). A member's state comes and goes in
torch.optim.AdamW's own `state_dict` format, so a member's checkpoint is a run's checkpoint (and a run's
checkpoint resumes as a member).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from normlab.config.groups import OptimConfig
from normlab.train.optim import build_optimizer
from normlab.train.stacked.model import StackedModel

BLOCK = 64  # steps of coefficients made at once (per member, on the host)


def _settings(optim: OptimConfig) -> tuple[Any, ...]:
    """What of an optimizer config its updates depend on (with the schedule's knobs)."""
    return (
        float(optim.lr),
        float(optim.min_lr),
        tuple(float(b) for b in optim.betas),
        float(optim.eps),
        float(optim.weight_decay),
    )


# member m's learning rate of the update made at `step` (its run alone's schedule)
LearningRate = Callable[[int, int], float]


class StackedAdamW:
    """AdamW for every member of `model` (built with the decayed parameters as its first block of columns,
    `StackedModel(first=...)`): `optims[m]` member m's hyperparameters, `lr(m, step)` its learning rate,
    `schedules[m]` what decides it besides `optims[m]` (warm-up, schedule; None: nothing more)."""

    def __init__(
        self,
        model: StackedModel,
        optims: Sequence[OptimConfig],
        lr: LearningRate,
        schedules: Sequence[Any] | None = None,
    ) -> None:
        self.model = model
        self.optims = list(optims)
        self.lr = lr
        self.exp_avg = torch.zeros_like(model.flat)
        self.exp_avg_sq = torch.zeros_like(model.flat)
        if len({bool(o.decay_embeddings) for o in optims}) != 1:
            raise ValueError("the members of a stack must agree on optim.decay_embeddings")
        self.n_decayed = model.n_first
        # the step each member's count of updates is measured from: its t-th update is made at step offset + t − 1
        self.offsets = [0] * model.size
        self.frozen: dict[int, torch.Tensor] = {}  # members that ended: their parameters then
        self._frozen_index: torch.Tensor | None = None
        self._frozen_rows: torch.Tensor | None = None

        def column(values: list[float]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.float64).float().view(-1, 1).to(model.device)

        # what does not change from step to step, as float32 columns (members, 1)
        self.lerp_weight = column([1 - float(o.betas[0]) for o in optims])
        self.beta2 = column([float(o.betas[1]) for o in optims])
        self.grad_sq_weight = column([1 - float(o.betas[1]) for o in optims])
        self.eps = column([float(o.eps) for o in optims])
        self._block_start: int | None = None
        self._block: torch.Tensor | None = None  # (steps, 3, members, 1): decay, step size, √(1 − β₂ᵗ)
        # one optimizer for every member: torch's fused kernel over the whole buffer (see above)
        self.shared = len({_settings(o) for o in optims}) == 1 and len(set(schedules or [None])) == 1
        self._decay_column = torch.ones(model.size, 1, device=model.device)
        self._count = torch.zeros((), device=model.device)  # the fused kernel's step count (shared case)

    @classmethod
    def decayed_names(cls, model: torch.nn.Module, optims: Sequence[OptimConfig]) -> set[str]:
        """The parameters weight decay applies to (normlab.train.optim.decay_split), by name."""
        from normlab.train.optim import decay_split

        decayed, _ = decay_split(model, bool(optims[0].decay_embeddings))
        ids = {id(p) for p in decayed}
        return {n for n, p in model.named_parameters() if id(p) in ids}

    # ------------------------------------------------------------------------------------------------
    # a step
    # ------------------------------------------------------------------------------------------------

    def coefficients(self, step: int) -> torch.Tensor:
        """(3, members, 1) float32 on the device: each member's 1 − lr·wd, lr / (1 − β₁ᵗ) and √(1 − β₂ᵗ) for
        the update made at `step`, from a table made BLOCK steps at a time."""
        start = self._block_start
        if start is None or not start <= step < start + BLOCK:
            self._block = self._make_block(step)
            self._block_start = start = step
        assert self._block is not None
        return self._block[step - start]

    def _make_block(self, first: int) -> torch.Tensor:
        """The coefficients of steps first … first + BLOCK − 1 (float64 on the host, as the fused kernel
        computes them, then float32)."""
        table = []
        for step in range(first, first + BLOCK):
            decay, size, bias2 = [], [], []
            for m, optim in enumerate(self.optims):
                lr, t = self.lr(m, step), step - self.offsets[m] + 1
                beta1, beta2 = float(optim.betas[0]), float(optim.betas[1])
                decay.append(1 - lr * float(optim.weight_decay))
                size.append(lr / (1 - math.pow(beta1, t)))
                bias2.append(math.sqrt(1 - math.pow(beta2, t)))
            table.append([decay, size, bias2])
        block = torch.tensor(table, dtype=torch.float64).float().unsqueeze(-1)
        return block.to(self.model.device)

    @torch.no_grad()
    def step(self, step: int) -> None:
        """One update of every member, the one made at trainer step `step`; the members that ended stay."""
        theta, grad = self.model.flat, self.model.grad_flat
        if self.shared:
            self._fused_step(step)
        else:
            self._columns(theta, grad, self.exp_avg, self.exp_avg_sq, *self.coefficients(step))
        if self._frozen_index is not None:
            theta.index_copy_(0, self._frozen_index, self._frozen_rows)

    def compile(self, compiled: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        """Use `compiled(fn)` (torch.compile, as train.compile says) for the per-member-coefficients update."""
        self._columns = compiled(self._columns)

    def _columns(
        self,
        theta: torch.Tensor,
        grad: torch.Tensor,
        exp_avg: torch.Tensor,
        exp_avg_sq: torch.Tensor,
        decay: torch.Tensor,
        size: torch.Tensor,
        bias2: torch.Tensor,
    ) -> None:
        """The update with each member's coefficients as columns (the module docstring's arithmetic)."""
        if self.n_decayed:
            theta[:, : self.n_decayed].mul_(decay)
        exp_avg.lerp_(grad, self.lerp_weight)
        exp_avg_sq.mul_(self.beta2).addcmul_(grad * self.grad_sq_weight, grad)
        denom = exp_avg_sq.sqrt().div_(bias2).add_(self.eps)
        theta.sub_((exp_avg * size).div_(denom))

    def _fused_step(self, step: int) -> None:
        """Every member has member 0's settings: torch's fused kernel once over the whole buffer."""
        optim = self.optims[0]
        lr = self.lr(0, step)
        count = step - self.offsets[0] + 1
        if self.n_decayed and float(optim.weight_decay):
            self._decay_column.fill_(
                1 - lr * float(optim.weight_decay)
            )  # float64, then float32, as the kernel
            self.model.flat[:, : self.n_decayed].mul_(self._decay_column)
        self._count.fill_(count)
        torch._fused_adamw_(
            [self.model.flat],
            [self.model.grad_flat],
            [self.exp_avg],
            [self.exp_avg_sq],
            [],
            [self._count],
            amsgrad=False,
            lr=lr,
            beta1=float(optim.betas[0]),
            beta2=float(optim.betas[1]),
            weight_decay=0.0,
            eps=float(optim.eps),
            maximize=False,
        )

    def freeze(self, m: int) -> None:
        """Member m's run ended: its parameters stay as they are now (its checkpoint holds them)."""
        self.frozen[m] = self.model.flat[m].detach().clone()
        members = sorted(self.frozen)
        self._frozen_index = torch.tensor(members, device=self.model.device)
        self._frozen_rows = torch.stack([self.frozen[k] for k in members])

    def updates_made(self, m: int, step: int) -> int:
        """Member m's count of updates once the trainer has made `step` steps."""
        return step - self.offsets[m]

    # ------------------------------------------------------------------------------------------------
    # one member's state, in torch.optim.AdamW's format
    # ------------------------------------------------------------------------------------------------

    def _member_optimizer(self, m: int) -> tuple[torch.optim.AdamW, dict[str, torch.nn.Parameter]]:
        shell = self.model.shell
        optimizer = build_optimizer(shell, self.optims[m], self.model.device)
        return optimizer, dict(shell.named_parameters())

    def member_state_dict(self, m: int, lr: float, step: int) -> dict[str, Any]:
        """Member m's optimizer state, once the trainer has made `step` steps, as
        `torch.optim.AdamW.state_dict()` of its run alone returns it."""
        optimizer, params = self._member_optimizer(m)
        count = float(self.updates_made(m, step))
        for group in optimizer.param_groups:
            group["lr"] = lr
        if count > 0:
            for name in self.model.names:
                optimizer.state[params[name]] = {
                    "step": torch.tensor(count, dtype=torch.float32, device=self.model.device),
                    "exp_avg": self.model.member_view(self.exp_avg, name)[m].clone(),
                    "exp_avg_sq": self.model.member_view(self.exp_avg_sq, name)[m].clone(),
                }
        return optimizer.state_dict()

    @torch.no_grad()
    def load_member_state_dict(self, m: int, state: dict[str, Any], step: int) -> None:
        """Put a run's (or member's) AdamW state into member m's row; the trainer resumes at `step`."""
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
        self.offsets[m] = step - int(max(steps) if steps else 0)
        self._block_start = None  # the counts changed: the coefficients are made again
        if len(set(self.offsets)) > 1:  # members whose counts differ: each its own coefficients
            self.shared = False
