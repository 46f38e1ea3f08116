"""Where the norm goes in a residual block, registered by the name users type (`placement=pre`).

A residual branch is `x → [norm_in] → F → [norm_out] → merge with x → [norm_add]`; a block is an attention
branch then a feed-forward branch, and both take the same `Slots`. A placement gives each block its slots
(one `Slots` for every block, or a function of the block index, the depth and the placement's config group
for placements that vary with depth), says whether a final norm sits before the LM head, and whether the
blocks carry a second residual stream (ResiDual).

Adding a slot-shaped placement is one entry in PLACEMENTS (its slots, final norm and the sentence `--help`
shows); one that varies by layer is one entry whose function reads its knob from the group, declared in a
PlacementConfig subclass (MixLNConfig); one with a block of its own (a norm inside a sublayer) is one entry
naming its block class (`block`, built from `BlockParts`) and how a formula writes its sublayer (`sublayer`).

The blocks are below this module (model/blocks.py: `Slots`, `BlockParts`, `Block`), which never reads a
placement: an entry names the block class it is built with, and the GPT builds `entry.block(parts)`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from torch import nn

from normlab.knobs import Knobs, knob
from normlab.model.blocks import Block, BlockParts, Slots


@dataclass(frozen=True)
class PlacementConfig(Knobs):
    """The `placement` config group: the placement's name, and the knobs of one that has some."""

    GROUP: ClassVar[str] = "placement"
    name: str = knob("pre", "the placement (placement=NAME)", choices=lambda: tuple(PLACEMENTS))


@dataclass(frozen=True)
class MixLNConfig(PlacementConfig):
    """Mix-LN's knob."""

    name: str = knob("mixln", "the placement (placement=NAME)", choices=lambda: tuple(PLACEMENTS))
    post_fraction: float = knob(
        0.25,
        "ρ: the fraction of blocks, from the embedding, that are Post-LN (0 = Pre-LN, 1 = Post-LN with a "
        "final norm)",
        ge=0,
        le=1,
    )


PRE = Slots(norm_in=True, norm_out=False, norm_add=False)
POST = Slots(norm_in=False, norm_out=False, norm_add=True)
DOUBLE = Slots(norm_in=True, norm_out=True, norm_add=False)
REORDERED = Slots(norm_in=False, norm_out=True, norm_add=False)

LayerSlots = Callable[[int, int, Mapping[str, Any]], Slots]  # (block index from 0, depth, group) -> Slots
# a sublayer in a formula: (its name, its input, the norm's symbol) -> text; `Attn(x)` for a plain one
SublayerText = Callable[[str, str, str], str]


def plain_sublayer(name: str, arg: str, norm_symbol: str) -> str:
    return f"{name}({arg})"


@dataclass(frozen=True)
class Placement:
    """One placement: each block's slots, the final norm, and whether a second stream runs beside x.

    With `dual_stream` (ResiDual) every branch also adds its raw output F(·) to a second stream d, which
    starts as the embedding, and the LM head reads x + N(d), N being the final norm. `about` is what
    `--help` says of it; `config` declares its knobs, if it has any. `block` is the class of its blocks,
    built from `BlockParts`: `Block` (an attention branch, then a feed-forward branch, norms in the slots)
    unless the placement is not a choice of slots (a norm inside a sublayer), and then `sublayer` says how
    a formula writes that sublayer.
    """

    layers: Slots | LayerSlots
    final_norm: bool  # a norm between the last block and the LM head (on d with dual_stream)
    about: str
    dual_stream: bool = False
    config: type[PlacementConfig] = PlacementConfig
    sublayer: SublayerText = plain_sublayer  # how a formula writes a sublayer (its block's own parts)
    block: Callable[[BlockParts], nn.Module] = Block  # the block class: Block(parts) for slot placements

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
    "pre": Placement(PRE, True, "Pre-LN: x ← x + F(N(x)), final norm before the head (GPT-2, Llama)"),
    "post": Placement(
        POST, False, "Post-LN: x ← N(x + F(x)), no final norm (the original Transformer, BERT)"
    ),
    "double": Placement(
        DOUBLE, True, "Double / sandwich / Peri-LN: x ← x + N₂(F(N₁(x))), final norm (Gemma 2, Grok)"
    ),
    "reordered": Placement(
        REORDERED,
        True,
        "OLMo 2's reordered norm: x ← x + N(F(x)), a norm on each sublayer's output only and a final norm "
        "before the head (OLMo-core: ReorderedNormTransformerBlock, the block of its olmo2 configs, whose LM "
        "head keeps its norm)",
    ),
    "mixln": Placement(
        _mixln,
        True,
        "Mix-LN (Li et al. 2024): Post-LN x ← N(x + F(x)) in the first ⌊ρ·L⌋ blocks, Pre-LN x ← x + F(N(x)) in "
        "the rest, and the Pre-LN model's final norm before the head, as the authors' code (the `post_pre` "
        "norm type of lmsdss/LayerNorm-Scaling, built on their Mix-LN code: the model's final norm is applied "
        "whatever the blocks' type; their scripts take the number of Post-LN blocks: 3 at 130M, 6 at 250M)",
        config=MixLNConfig,
    ),
    "lnscale": Placement(
        _lnscale,
        True,
        "LayerNorm Scaling (Sun et al. 2025, The Curse of Depth in LLMs): Pre-LN with the output of both of "
        "block l's norms multiplied by 1/√l, l = 1 for the block next to the embedding (the authors' `LNS` "
        "code, lmsdss/LayerNorm-Scaling, and OLMo-core's LayerNormScaledTransformerBlock: "
        "1/sqrt(layer_index + 1)), final norm unscaled",
    ),
    "resi_dual": Placement(
        POST,
        True,
        "ResiDual (Xie et al. 2023): a Post-LN stream x ← N(x + F(x)) and a second stream d ← d + F(x) of the "
        "raw (dropped-out) sublayer outputs, both starting at the embedding; the head reads x + N(d). As the "
        "authors' code (microsoft/ResiDual, resi_dual.py / resi_dual_layers.py: res starts as the input and "
        "the output is x + layer_norm(res)); its final norm uses this run's norm and eps, not their eps 1e-7",
        dual_stream=True,
    ),
}


def placement_spec(spec: Mapping[str, Any] | str) -> dict[str, Any]:
    """A placement's config group with every knob: a name alone (`"mixln"`) or a partial group, completed
    from its config's defaults. The name must be in PLACEMENTS (checked before, where the choices are
    listed)."""
    spec = {"name": spec} if isinstance(spec, str) else dict(spec)
    return {**PLACEMENTS[spec["name"]].config.defaults(), **spec}


def branch_formula(
    slots: Slots,
    norm_symbol: str,
    sublayer: str,
    residual_scale: float = 1.0,
    dual_stream: bool = False,
    sublayer_text: SublayerText = plain_sublayer,
) -> str:
    """The update of one residual branch as a formula, e.g. `x ← LN(2.21·x + Attn(x))`; with a second
    stream, `x, d ← LN(x + Attn(x)), d + Attn(x)`."""

    def n(arg: str, filled: bool) -> str:
        return f"{norm_symbol}({arg})" if filled and norm_symbol else arg

    skip = "x" if residual_scale == 1.0 else f"{residual_scale:.2f}·x"
    normed = n("x", slots.norm_in)
    if slots.input_scale != 1.0:
        normed = f"{slots.input_scale:.2f}·{normed}"
    branch = n(sublayer_text(sublayer, normed, norm_symbol), slots.norm_out)
    update = n(f"{skip} + {branch}", slots.norm_add)
    if dual_stream:
        return f"x, d ← {update}, d + {branch}"
    return f"x ← {update}"
