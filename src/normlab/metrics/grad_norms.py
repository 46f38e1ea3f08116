"""Global, per-block and per-sublayer gradient norms in one fused pass, and clipping without a second pass."""

from __future__ import annotations

import torch
from torch import nn

from normlab.metrics import names
from normlab.metrics.layout import ParamLayout, parameter_part, squared_norms

__all__ = ["GradNorms", "clip_", "parameter_part"]


class GradNorms:
    """Computes all gradient norms of a model with one `torch._foreach_norm` call and no host sync.

    The per-parameter norms are squared and summed into groups with index_add, so the cost does not grow
    with the number of groups. With `per_layer=False` only the global norm is computed (what clipping
    needs anyway): the "metrics off" baseline of scripts/bench_overhead.py.
    """

    def __init__(self, model: nn.Module, n_layers: int, per_layer: bool = True) -> None:
        self.layout = ParamLayout(model, n_layers)
        self.params = self.layout.params
        self.per_layer = per_layer
        self.keys = [names.GRAD_NORM]
        if per_layer:
            self.keys += [names.grad_norm_layer(i) for i in range(n_layers)]
            self.keys += [names.grad_norm_sublayer(i, s) for i in range(n_layers) for s in names.SUBLAYERS]

    def grads(self) -> list[torch.Tensor]:
        return [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]

    def compute(self, grads: list[torch.Tensor]) -> torch.Tensor:
        """A 1-D float32 tensor laid out as `self.keys`: global, per block, per (block, part)."""
        sq = squared_norms(grads)
        if not self.per_layer:
            return sq.sum().sqrt().view(1)
        return torch.cat([sq.sum().view(1), self.layout.layer_sums(sq), self.layout.part_sums(sq)]).sqrt()


def clip_(grads: list[torch.Tensor], total_norm: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Scale grads in place so their global norm is at most max_norm; returns 1.0 if clipping fired, else 0.0.

    Reuses the already computed norm (torch.nn.utils.clip_grad_norm_ would compute it again).
    """
    coef = (max_norm / (total_norm + 1e-6)).clamp(max=1.0)
    # what clip_grad_norm_ itself calls, without its host sync (tests/test_private_apis.py)
    torch._foreach_mul_(grads, coef)
    return (total_norm > max_norm).float()
