"""Per-block gradient histograms (a W&B-only view: metrics.jsonl keeps scalars)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from normlab.metrics import names
from normlab.metrics.layout import ParamLayout


@dataclass(frozen=True)
class Histogram:
    counts: list[int]
    edges: list[float]  # len(counts) + 1 bin edges


def layer_grad_histograms(layout: ParamLayout, grads: list[torch.Tensor], bins: int) -> dict[str, Histogram]:
    """A histogram of all gradient entries of each block, over that block's own [min, max] range.

    This moves every block's gradients to the host: call it on instrumented steps only.
    """
    ids = layout.layer_ids.tolist()
    out: dict[str, Histogram] = {}
    for i in range(layout.n_layers):
        flat = torch.cat([g.detach().float().flatten() for g, j in zip(grads, ids, strict=True) if j == i])
        if not torch.isfinite(flat).all():
            continue  # a histogram of a diverged step is meaningless; the loop reports the divergence
        counts, edges = np.histogram(flat.cpu().numpy(), bins=bins)  # about twice torch.histogram's speed
        out[names.grad_hist_layer(i)] = Histogram(counts.tolist(), edges.tolist())
    return out
