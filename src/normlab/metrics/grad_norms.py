"""Global, per-block and per-sublayer gradient norms in one fused pass, and clipping without a second pass."""

from __future__ import annotations

import torch
from torch import nn

from normlab.metrics import names

PART_OF_BRANCH = {"attn": "attn", "ffn": "ffn"}


def parameter_part(name: str) -> tuple[int, str] | None:
    """(block index, part) of a parameter name such as `blocks.3.attn.norm_in.weight`; None outside blocks.

    Norm weights in any slot count as the block's `norm` part; the rest of a branch is `attn` or `ffn`.
    """
    parts = name.split(".")
    if parts[0] != "blocks":
        return None
    part = "norm" if any(p.startswith("norm_") for p in parts) else PART_OF_BRANCH[parts[2]]
    return int(parts[1]), part


class GradNorms:
    """Computes all gradient norms of a model with one `torch._foreach_norm` call and no host sync.

    The per-parameter norms are squared and summed into groups with index_add, so the cost does not grow
    with the number of groups.
    """

    def __init__(self, model: nn.Module, n_layers: int) -> None:
        self.params: list[nn.Parameter] = []
        layer_ids: list[int] = []
        part_ids: list[int] = []
        for name, p in model.named_parameters():  # tied weights appear once
            if not p.requires_grad:
                continue
            where = parameter_part(name)
            self.params.append(p)
            layer_ids.append(where[0] if where else n_layers)  # n_layers = "outside the blocks"
            part_ids.append(
                where[0] * len(names.SUBLAYERS) + names.SUBLAYERS.index(where[1]) if where else -1
            )
        self.n_layers = n_layers
        device = self.params[0].device
        self.layer_ids = torch.tensor(layer_ids, device=device)
        keep = torch.tensor([i >= 0 for i in part_ids], device=device)
        self.part_index = keep.nonzero().squeeze(1)
        self.part_ids = torch.tensor([i for i in part_ids if i >= 0], device=device)
        self.keys = ["grad_norm"]
        self.keys += [names.grad_norm_layer(i) for i in range(n_layers)]
        self.keys += [names.grad_norm_sublayer(i, s) for i in range(n_layers) for s in names.SUBLAYERS]

    def grads(self) -> list[torch.Tensor]:
        return [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]

    def compute(self, grads: list[torch.Tensor]) -> torch.Tensor:
        """A 1-D float32 tensor laid out as `self.keys`: global, per block, per (block, part)."""
        sq = torch.stack(torch._foreach_norm(grads)).float().square()
        layer_sq = torch.zeros(self.n_layers + 1, device=sq.device).index_add_(0, self.layer_ids, sq)
        part_sq = torch.zeros(self.n_layers * len(names.SUBLAYERS), device=sq.device)
        part_sq.index_add_(0, self.part_ids, sq[self.part_index])
        return torch.cat([sq.sum().view(1), layer_sq[: self.n_layers], part_sq]).sqrt()


def clip_(grads: list[torch.Tensor], total_norm: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Scale grads in place so their global norm is at most max_norm; returns 1.0 if clipping fired, else 0.0.

    Reuses the already computed norm (torch.nn.utils.clip_grad_norm_ would compute it again).
    """
    coef = (max_norm / (total_norm + 1e-6)).clamp(max=1.0)
    torch._foreach_mul_(grads, coef)
    return (total_norm > max_norm).float()
