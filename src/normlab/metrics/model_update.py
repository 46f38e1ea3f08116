"""DeepNet's "model update": how far the model's function has moved from its initialisation.

Wang et al. 2022 (DeepNet, §3) track ‖F(x, θ_t) − F(x, θ_0)‖ and show that Post-LN's early updates are
large and unstable, which DeepNorm bounds. We measure it on a fixed probe batch with F = the output
logits in eval mode (no dropout; BatchNorm uses its running statistics, which are part of θ):

    model_update = mean over the probe's positions of ‖logits(x, θ_t) − logits(x, θ_0)‖₂ (over the vocabulary)

so the number does not depend on the probe batch's size. One probe serves a run alone and a stack of runs
(normlab.train.stacked): it measures every member at once, each against its own θ_0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

# the probe batch (batch, time) → every member's logits, (members, batch, time, vocab), in evaluation mode
Outputs = Callable[[torch.Tensor], torch.Tensor]


def module_outputs(model: nn.Module) -> Outputs:
    """A single GPT's `Outputs`: its logits in eval mode, as a stack of one."""

    @torch.no_grad()
    def outputs(x: torch.Tensor) -> torch.Tensor:
        was_training = model.training
        model.eval()
        try:
            return model(x).float().unsqueeze(0)
        finally:
            model.train(was_training)

    return outputs


class ModelUpdateProbe:
    """The model update of every member of `outputs` (one for a run alone) on the fixed batch `probe`."""

    def __init__(self, outputs: Outputs, probe: torch.Tensor) -> None:
        self.outputs = outputs
        self.probe = probe
        self.reference: torch.Tensor | None = None  # every member's F(x, θ_0), set by the first measurement

    @torch.no_grad()
    def measure(self) -> torch.Tensor:
        """Each member's model update now, (members,), without a host sync; the first call fixes θ_0 and
        returns 0."""
        out = self.outputs(self.probe)
        if self.reference is None:
            self.reference = out
        return (out - self.reference).norm(dim=-1).mean((1, 2))

    def member_state_dict(self, m: int) -> dict[str, Any]:
        """Member m's state as its run alone saves it: the probe batch and its θ_0 outputs."""
        reference = None if self.reference is None else self.reference[m].clone()
        return {"probe": self.probe, "reference": reference}

    def load_member_states(self, states: Sequence[dict[str, Any] | None]) -> None:
        """Every member's saved state (None: a checkpoint from before instrumentation): a resumed run keeps
        the θ_0 outputs of the original start, not of the resume point."""
        found = [(s or {}).get("reference") for s in states]
        if found and all(r is not None for r in found):
            self.reference = torch.stack([r.to(self.probe.device) for r in found])
        saved = (states[0] or {}).get("probe") if states else None
        if saved is not None:
            self.probe = saved.to(self.probe.device)

    def state_dict(self) -> dict[str, Any]:
        """A run alone's state (member 0)."""
        return self.member_state_dict(0)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_member_states([state])
