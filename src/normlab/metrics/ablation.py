"""Layer importance: the validation loss with one block skipped, for every block (`metrics.layer_ablation`).

Skipping block l replaces it by the identity: the stream that entered block l goes on to block l + 1 (with
ResiDual both of its streams do). How much the loss rises is how much the trained network relies on that
block — the probe Mix-LN (Li et al. 2024) and LayerNorm Scaling (Sun et al. 2025) use to argue that
Pre-LN's deep layers contribute little.

One pass computes the stream entering every block; each ablation then reruns only the blocks after the
skipped one from there: L(L − 1)/2 block forwards and L heads per batch on top of the plain evaluation,
on the evaluation's own batches.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from normlab.metrics import names


def layer_ablation_keys(n_layers: int) -> list[str]:
    return [names.layer_ablation(i) for i in range(n_layers)]


@torch.no_grad()
def losses_with_each_block_skipped(
    model: nn.Module, idx: torch.Tensor, loss: Callable[[torch.Tensor], torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss of the whole model, (n_layers,) losses with block l skipped) on one batch of token ids.

    `model` has `embed`, `blocks` and `readout` (normlab.model.GPT); `loss` maps what the head reads,
    (batch, time, d_model), to a 0-d loss. The whole model's loss comes from the same operations as
    `model.features`, so it equals the plain evaluation's.
    """
    stream = model.embed(idx)
    entering = []
    for block in model.blocks:
        entering.append(stream)
        stream = block(stream)
    full = loss(model.readout(stream))
    skipped = []
    for skip, start in enumerate(entering):
        stream = start
        for block in model.blocks[skip + 1 :]:
            stream = block(stream)
        skipped.append(loss(model.readout(stream)))
    return full, torch.stack(skipped)
