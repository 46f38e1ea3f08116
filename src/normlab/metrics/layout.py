"""Which block, and which part of it, each trainable parameter belongs to: the grouping behind every per-layer metric."""

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


class ParamLayout:
    """The trainable parameters of a model (tied weights once) with their block and (block, part) indices.

    `layer_ids[j]` is the block of parameter j, or n_layers for parameters outside the blocks (embeddings,
    final norm, untied head); `part_ids` holds the (block, part) index of the parameters listed in
    `part_index` (those inside a block). Per-group sums are then one index_add, whatever the group count.
    """

    def __init__(self, model: nn.Module, n_layers: int) -> None:
        self.params: list[nn.Parameter] = []
        layer_ids: list[int] = []
        part_ids: list[int] = []
        # the roles the model declares (GPT.parameter_parts), else read from the parameters' names
        declared = model.parameter_parts() if hasattr(model, "parameter_parts") else None
        for name, p in model.named_parameters():  # named_parameters yields a tied weight once
            if not p.requires_grad:
                continue
            where = declared.get(name) if declared is not None else parameter_part(name)
            self.params.append(p)
            layer_ids.append(where[0] if where else n_layers)
            part_ids.append(
                where[0] * len(names.SUBLAYERS) + names.SUBLAYERS.index(where[1]) if where else -1
            )
        self.n_layers = n_layers
        self.layer_of: list[int] = layer_ids  # the same on the host, to group without a device sync
        device = self.params[0].device
        self.layer_ids = torch.tensor(layer_ids, device=device)
        self.part_index = torch.tensor([j for j, i in enumerate(part_ids) if i >= 0], device=device)
        self.part_ids = torch.tensor([i for i in part_ids if i >= 0], device=device)

    def layer_sums(self, per_param: torch.Tensor) -> torch.Tensor:
        """Sum a per-parameter vector into (n_layers,) per-block totals (parameters outside blocks dropped);
        over the last dimension, so a stack of runs' vectors (members, parameters) sums row by row."""
        lead = per_param.shape[:-1]
        out = torch.zeros(*lead, self.n_layers + 1, device=per_param.device, dtype=per_param.dtype)
        return out.index_add_(-1, self.layer_ids, per_param)[..., : self.n_layers]

    def part_sums(self, per_param: torch.Tensor) -> torch.Tensor:
        """Sum a per-parameter vector into (n_layers · len(SUBLAYERS),) per-(block, part) totals (over the
        last dimension, as `layer_sums`)."""
        lead = per_param.shape[:-1]
        out = torch.zeros(
            *lead, self.n_layers * len(names.SUBLAYERS), device=per_param.device, dtype=per_param.dtype
        )
        return out.index_add_(-1, self.part_ids, per_param[..., self.part_index])


def squared_norms(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Squared L2 norm of each tensor, in float32, from one fused `torch._foreach_norm` call."""
    # private but stable (torch.nn.utils.clip_grad_norm_ is built on it): the only per-tensor fused norm;
    # tests/test_private_apis.py fails loudly if it changes
    return torch.stack(torch._foreach_norm(tensors)).float().square()
