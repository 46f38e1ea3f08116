"""DeepNet's "model update": how far the model's function has moved from its initialisation.

Wang et al. 2022 (DeepNet, §3) track ‖F(x, θ_t) − F(x, θ_0)‖ and show that Post-LN's early updates are
large and unstable, which DeepNorm bounds. We measure it on a fixed probe batch with F = the output
logits in eval mode (no dropout; BatchNorm uses its running statistics, which are part of θ):

    model_update = mean over the probe's positions of ‖logits(x, θ_t) − logits(x, θ_0)‖₂ (over the vocabulary)

so the number does not depend on the probe batch's size.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class ModelUpdateProbe:
    def __init__(self, model: nn.Module, probe: torch.Tensor) -> None:
        self.model = model
        self.probe = probe
        self.reference: torch.Tensor | None = None  # F(x, θ_0), set by the first measurement

    @torch.no_grad()
    def outputs(self) -> torch.Tensor:
        was_training = self.model.training
        self.model.eval()
        try:
            return self.model(self.probe).float()
        finally:
            self.model.train(was_training)

    def measure(self) -> torch.Tensor:
        """The model update now (a 0-d tensor, no host sync); the first call fixes θ_0 and returns 0."""
        out = self.outputs()
        if self.reference is None:
            self.reference = out
        return (out - self.reference).norm(dim=-1).mean()

    def state_dict(self) -> dict[str, Any]:
        return {"probe": self.probe, "reference": self.reference}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # a resumed run keeps the θ_0 outputs of the original start, not of the resume point
        self.probe = state["probe"].to(self.probe.device)
        ref = state["reference"]
        self.reference = None if ref is None else ref.to(self.probe.device)
