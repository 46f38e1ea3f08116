"""Colours, line styles and markers per variant (the figures read them from RunSet)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# "^" (loss spikes) and "X" (divergence) are left out: they mark events in the figures.
VARIANT_MARKERS = ("o", "s", "D", "v", "P", "*", "h", "<", ">", "p", "d")
# solid, dashed, dotted, dash-dot, dash-dot-dot, long dash: distinct at a glance, also in greyscale
VARIANT_LINESTYLES: tuple[Any, ...] = (
    "-",
    (0, (5, 2)),
    (0, (1, 1.5)),
    (0, (6, 2, 1, 2)),
    (0, (4, 1.5, 1, 1.5, 1, 1.5)),
    (0, (10, 3)),
)


def variant_colors(labels: Sequence[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    n = len(labels)
    if n <= 10:
        colors = colormaps["tab10"].colors
    elif n <= 20:
        # tab20's strong colours first, then its light ones: neighbours in a sweep stay distinct
        pairs = colormaps["tab20"].colors
        colors = list(pairs[0::2]) + list(pairs[1::2])
    else:
        cmap = colormaps["turbo"]
        colors = [cmap(i / max(n - 1, 1)) for i in range(n)]
    return {label: colors[i % len(colors)] for i, label in enumerate(labels)}
