"""Per-block gradient histograms (a W&B-only view: metrics.jsonl keeps scalars).

Counted on the device, without a host sync: only the counts and edges (bins + bins + 1 numbers a block)
reach the host, with the rest of the row. Moving every gradient to the host for numpy would cost about
a training step's worth of transfer per histogram on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from normlab.metrics import names
from normlab.metrics.layout import ParamLayout


@dataclass(frozen=True)
class Histogram:
    counts: list[int]
    edges: list[float]  # len(counts) + 1 bin edges


class DeviceHistogram(NamedTuple):
    """A histogram still on the device: counts (bins,), edges (bins + 1,), and whether every entry was
    finite (a 0-d bool; a histogram of a diverged step is meaningless and is dropped on the host)."""

    counts: torch.Tensor
    edges: torch.Tensor
    finite: torch.Tensor


def histogram(values: torch.Tensor, bins: int) -> DeviceHistogram:
    """Equal-width bins over [min, max] of `values`, as numpy.histogram draws them (the last bin includes
    the maximum), counted on the device."""
    flat = values.detach().float().flatten()
    finite = torch.isfinite(flat).all()
    flat = torch.where(torch.isfinite(flat), flat, 0.0)
    lo, hi = torch.aminmax(flat)
    # numpy widens a zero-width range to [lo - 0.5, hi + 0.5]
    zero_width = hi == lo
    lo, hi = torch.where(zero_width, lo - 0.5, lo), torch.where(zero_width, hi + 0.5, hi)
    edges = torch.linspace(0, 1, bins + 1, device=flat.device) * (hi - lo) + lo
    # numpy decides the bin with the edges themselves (edges[i] ≤ x < edges[i + 1], the last bin closed):
    # one binary search against them, in 32-bit indices (the gradients' pass is the histogram's cost)
    index = torch.bucketize(flat, edges, right=True, out_int32=True).sub_(1).clamp_(0, bins - 1)
    counts = torch.zeros(bins, dtype=torch.long, device=flat.device).index_add_(
        0, index, torch.ones_like(index, dtype=torch.long)
    )
    return DeviceHistogram(counts, edges, finite)


def layer_grad_histograms(
    layout: ParamLayout, grads: list[torch.Tensor], bins: int
) -> dict[str, DeviceHistogram]:
    """A histogram of all gradient entries of each block, over that block's own [min, max] range."""
    ids = layout.layer_of
    out: dict[str, DeviceHistogram] = {}
    for i in range(layout.n_layers):
        flat = torch.cat([g.detach().float().flatten() for g, j in zip(grads, ids, strict=True) if j == i])
        out[names.grad_hist_layer(i)] = histogram(flat, bins)
    return out


def to_host(histograms: dict[str, DeviceHistogram]) -> dict[str, Histogram]:
    """The finite histograms as host values (one transfer for all of them)."""
    if not histograms:
        return {}
    keys = list(histograms)
    counts = torch.stack([h.counts for h in histograms.values()]).tolist()
    edges = torch.stack([h.edges for h in histograms.values()]).double().tolist()
    finite = torch.stack([h.finite for h in histograms.values()]).tolist()
    return {key: Histogram(c, e) for key, c, e, ok in zip(keys, counts, edges, finite, strict=True) if ok}
