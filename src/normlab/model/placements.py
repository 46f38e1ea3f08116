"""Where the norm goes in a residual block, registered by the name users type (`placement=pre`).

A residual branch is `x → [slot A] → F → [slot B] → merge with x → [slot C]`; a block is an attention
branch then a feed-forward branch, and both take the same `Slots`. A placement gives each block its slots
(one `Slots` for every block, or a function of the block index, the depth and the placement's config group
for placements that vary with depth), says whether a final norm sits before the LM head, and whether the
blocks carry a second residual stream (ResiDual).

Adding a slot-shaped placement is one entry in PLACEMENTS and a two-line YAML; one that varies by layer is
one entry whose function reads its knob from the group (configs/placement/NAME.yaml).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from normlab.configs import group_defaults


@dataclass(frozen=True)
class Slots:
    """What the norm slots of one block's two branches hold."""

    before_sublayer: bool  # slot A: N(x) feeds the sublayer
    after_sublayer: bool  # slot B: the sublayer's output is normalised before the add
    after_add: bool  # slot C: the sum is normalised (the residual stream itself passes through N)
    input_scale: float = 1.0  # multiplies slot A's output (LayerNorm Scaling's 1/√l)


PRE = Slots(before_sublayer=True, after_sublayer=False, after_add=False)
POST = Slots(before_sublayer=False, after_sublayer=False, after_add=True)
DOUBLE = Slots(before_sublayer=True, after_sublayer=True, after_add=False)
REORDERED = Slots(before_sublayer=False, after_sublayer=True, after_add=False)

LayerSlots = Callable[[int, int, Mapping[str, Any]], Slots]  # (block index from 0, depth, group) -> Slots


@dataclass(frozen=True)
class Placement:
    """One placement: each block's slots, the final norm, and whether a second stream runs beside x.

    With `dual_stream` (ResiDual) every branch also adds its raw output F(·) to a second stream d, which
    starts as the embedding, and the LM head reads x + N(d), N being the final norm.
    """

    layers: Slots | LayerSlots
    final_norm: bool  # a norm between the last block and the LM head (on d with dual_stream)
    dual_stream: bool = False

    def slots(self, index: int, depth: int, spec: Mapping[str, Any]) -> Slots:
        """The slots of block `index` (0 = closest to the embedding) in a stack of `depth` blocks."""
        return self.layers if isinstance(self.layers, Slots) else self.layers(index, depth, spec)

    def per_layer(self, depth: int, spec: Mapping[str, Any] | str) -> list[Slots]:
        """Every block's slots, the placement's knobs taken from `spec` (its config group, or a name)."""
        spec = placement_spec(spec)
        return [self.slots(i, depth, spec) for i in range(depth)]


def post_blocks(depth: int, post_fraction: float) -> int:
    """Mix-LN's number of Post-LN blocks, ⌊ρ·L⌋ (the 1e-9 keeps 0.3·10 from flooring to 2)."""
    return math.floor(post_fraction * depth + 1e-9)


def _mixln(index: int, depth: int, spec: Mapping[str, Any]) -> Slots:
    return POST if index < post_blocks(depth, spec["post_fraction"]) else PRE


def _lnscale(index: int, depth: int, spec: Mapping[str, Any]) -> Slots:
    return replace(PRE, input_scale=1.0 / math.sqrt(index + 1))  # l = index + 1: the first block is l = 1


PLACEMENTS: dict[str, Placement] = {
    "pre": Placement(PRE, final_norm=True),
    "post": Placement(POST, final_norm=False),
    "double": Placement(DOUBLE, final_norm=True),
    # OLMo 2 (OLMo-core ReorderedNormTransformerBlock): x ← x + N(F(x)), the LM head's own norm kept
    "reordered": Placement(REORDERED, final_norm=True),
    # Mix-LN (Li et al. 2024): Post-LN in the first ⌊ρ·L⌋ blocks, Pre-LN after; the final norm kept
    "mixln": Placement(_mixln, final_norm=True),
    # LayerNorm Scaling (Sun et al. 2025): Pre-LN with both of block l's norm outputs × 1/√l, l from 1
    "lnscale": Placement(_lnscale, final_norm=True),
    # ResiDual (Xie et al. 2023): a Post-LN stream x and a stream d of raw sublayer outputs; head: x + N(d)
    "resi_dual": Placement(POST, final_norm=True, dual_stream=True),
}


def placement_spec(spec: Mapping[str, Any] | str) -> dict[str, Any]:
    """A placement's config group with every knob: a name alone (`"mixln"`) or a partial group, completed
    from configs/placement/NAME.yaml. The name must be in PLACEMENTS (checked before, where the choices
    are listed)."""
    spec = {"name": spec} if isinstance(spec, str) else dict(spec)
    return {**group_defaults("placement", spec["name"]), **spec}


def normalises_stream(spec: Mapping[str, Any] | str, depth: int) -> bool:
    """Whether some block of this placement normalises the residual stream itself (slot C, Post-LN's)."""
    spec = placement_spec(spec)
    return any(slots.after_add for slots in PLACEMENTS[spec["name"]].per_layer(depth, spec))


def branch_formula(
    slots: Slots, norm_symbol: str, sublayer: str, residual_scale: float = 1.0, dual_stream: bool = False
) -> str:
    """The update of one residual branch as a formula, e.g. `x ← LN(2.21·x + Attn(x))`; with a second
    stream, `x, d ← LN(x + Attn(x)), d + Attn(x)`."""

    def n(arg: str, filled: bool) -> str:
        return f"{norm_symbol}({arg})" if filled and norm_symbol else arg

    skip = "x" if residual_scale == 1.0 else f"{residual_scale:.2f}·x"
    normed = n("x", slots.before_sublayer)
    if slots.input_scale != 1.0:
        normed = f"{slots.input_scale:.2f}·{normed}"
    branch = n(f"{sublayer}({normed})", slots.after_sublayer)
    update = n(f"{skip} + {branch}", slots.after_add)
    if dual_stream:
        return f"x, d ← {update}, d + {branch}"
    return f"x ← {update}"
