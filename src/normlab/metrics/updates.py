"""Parameter norms and update-to-parameter ratios, per block, over one optimizer step.

A snapshot of the parameters is taken before the step (a copy of the model, on instrumented steps
only); afterwards ‖θ_after − θ_before‖ / ‖θ_before‖ is computed per block with two fused
`torch._foreach_norm` calls and index_add grouping, without a host sync.
"""

from __future__ import annotations

import torch

from normlab.metrics import names
from normlab.metrics.layout import ParamLayout, squared_norms


def param_norm_keys(n_layers: int) -> list[str]:
    return [names.PARAM_NORM, *(names.param_norm_layer(i) for i in range(n_layers))]


def update_ratio_keys(n_layers: int) -> list[str]:
    return [names.UPDATE_RATIO, *(names.update_ratio_layer(i) for i in range(n_layers))]


class UpdateRatio:
    """`before()` snapshots θ; `param_norms()` gives ‖θ‖ (global, per block); `ratios()` gives ‖Δθ‖/‖θ‖.

    Both use θ before the step: the row of step t describes the parameters the step started from and
    the update the step made. "Global" covers every trainable parameter (embeddings included).
    """

    def __init__(self, layout: ParamLayout) -> None:
        self.layout = layout
        self._before: list[torch.Tensor] | None = None
        self._before_sq: torch.Tensor | None = None

    def before(self) -> None:
        self._before = [p.detach().clone() for p in self.layout.params]
        self._before_sq = squared_norms(self._before)

    def param_norms(self) -> torch.Tensor:
        """Float32 tensor laid out as `param_norm_keys`."""
        sq = self._before_sq
        return torch.cat([sq.sum().view(1), self.layout.layer_sums(sq)]).sqrt()

    def ratios(self) -> torch.Tensor:
        """Float32 tensor laid out as `update_ratio_keys`; call after the optimizer step."""
        after = [p.detach() for p in self.layout.params]
        # fused per-tensor difference (private, as clip_grad_norm_'s foreach ops; tests/test_private_apis.py)
        diff_sq = squared_norms(torch._foreach_sub(after, self._before))
        num = torch.cat([diff_sq.sum().view(1), self.layout.layer_sums(diff_sq)]).sqrt()
        self._before = None  # free the copy as soon as possible
        return num / self.param_norms().clamp_min(1e-12)
