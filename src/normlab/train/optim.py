"""AdamW with weight decay on weight matrices only; the `optim` group's checks."""

from __future__ import annotations

import torch
from torch import nn

from normlab.config.groups import OptimConfig


def decay_split(model: nn.Module, decay_embeddings: bool) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(decayed, not decayed): matrices of linear layers decay; norms, biases and (unless asked) embeddings don't."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    embeddings |= {id(p) for name, p in model.named_parameters() if name.endswith("pos_emb")}
    decayed, plain = [], []
    for p in model.parameters():  # tied weights appear once
        if not p.requires_grad:
            continue
        is_embedding = id(p) in embeddings
        (decayed if p.dim() >= 2 and (decay_embeddings or not is_embedding) else plain).append(p)
    return decayed, plain


def build_optimizer(model: nn.Module, optim: OptimConfig, device: torch.device) -> torch.optim.AdamW:
    decayed, plain = decay_split(model, bool(optim.decay_embeddings))
    groups = [
        {"params": decayed, "weight_decay": float(optim.weight_decay)},
        {"params": plain, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        groups,
        lr=float(optim.lr),
        betas=tuple(optim.betas),
        eps=float(optim.eps),
        # one fused kernel per step instead of a dozen ops per parameter, faster on a CPU as well
        # (docs/performance.md, "Fused AdamW on the CPU too")
        fused=device.type in ("cuda", "cpu"),
    )
