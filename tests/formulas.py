"""Each norm's and each placement's equations from their papers (or the authors' code, where that is what we
follow), written out by hand with plain tensor ops: the independent references tests/test_model.py checks
the GPT against. `NORM_REFS` and `PLACEMENT_REFS` hold one per entry of NORMS and PLACEMENTS, and the tests
fail for an entry without one: a new norm or placement adds its formula here."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from normlab.model import PLACEMENTS

# Each norm's formula, written from its paper (or the authors' code, where that is what we follow) with
# plain tensor ops; `norm` is the module only as the holder of the learned parameters and eps. NORM_REFS
# below uses them inside a model, tests/test_model.py's qk-norm test inside attention.


def layer_norm_ref(z, norm):
    # Ba et al. 2016, Layer Normalization: μ and σ over the H features of one case (their eq. 3, as
    # shortscience.org quotes it), then gain g and bias b; eps inside the root and the biased variance as
    # torch's nn.LayerNorm documents it (docs.pytorch.org, torch.nn.LayerNorm)
    mean = z.mean(-1, keepdim=True)
    var = ((z - mean) ** 2).mean(-1, keepdim=True)
    return (z - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def rms_norm_ref(z, norm):
    # Zhang & Sennrich 2019: ā_i = a_i / RMS(a) · g_i, RMS(a) = √(1/n Σ a_i²) (bzhangGo/rmsnorm, README.md);
    # eps inside the root, as that README's LayerNormLayer for Nematus: x · rsqrt(mean(x²) + eps)
    return z / torch.sqrt((z**2).mean(-1, keepdim=True) + norm.eps) * norm.weight


def batch_norm_ref(z, norm):
    # Ioffe & Szegedy 2015: (x − E[x]) / √(Var[x] + eps) · γ + β with the mini-batch's mean and biased
    # variance in training (torch's nn.BatchNorm1d documents it so, docs.pytorch.org); here per position
    # over the batch (dim 0) only, the causal choice docs/model.md explains
    mean = z.mean(0, keepdim=True)
    var = ((z - mean) ** 2).mean(0, keepdim=True)
    return (z - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def dyt_ref(z, norm):  # Zhu et al. 2025: γ·tanh(α·z) + β (jiachenzhu/DyT, dynamic_tanh.py)
    return norm.weight * torch.tanh(norm.alpha * z) + norm.bias


def scalenorm_ref(z, norm):
    # Nguyen & Salazar 2019: g·z/‖z‖, ‖z‖ clamped below at eps (tnq177/transformers_without_tears, layers.py)
    return norm.scale * z / torch.sqrt((z**2).sum(-1, keepdim=True)).clamp(min=norm.eps)


def no_norm_ref(z, norm):  # the control: no normalization, z itself
    return z


# ------------------------------------------------------------------------------------------------------
# Each placement's forward as its paper's equations write it, for a model of a few blocks. The reference
# calls only the sublayers (attention and feed-forward) and the norms' parameters, applying LayerNorm by
# hand where the equation puts it (the test randomises the norms' affine parameters, so that a norm applied
# in the wrong slot, or the wrong norm, shows).


def ln(z, norm):
    return F.layer_norm(z, z.shape[-1:], norm.weight, norm.bias, norm.eps)


def the_norm(branch):
    """The one norm of a branch whose placement fills one slot (which slot the model put it in does not
    matter to the reference: it applies it where the paper says)."""
    filled = [m for m in (branch.norm_in, branch.norm_out, branch.norm_add) if not isinstance(m, nn.Identity)]
    assert len(filled) == 1
    return filled[0]


def branches(block):
    return (block.attn, block.ffn)


def pre_ref(model, x):  # Pre-LN (Xiong et al. 2020): x ← x + F(N(x)); head reads N_final(x)
    for block in model.blocks:
        for b in branches(block):
            x = x + b.sublayer(ln(x, the_norm(b)))
    return ln(x, model.final_norm)


def post_ref(model, x):  # Post-LN (Vaswani et al. 2017): x ← N(x + F(x)); no final norm
    for block in model.blocks:
        for b in branches(block):
            x = ln(x + b.sublayer(x), the_norm(b))
    return x


def double_ref(model, x):  # Peri-LN (Kim et al. 2025): x ← x + N₂(F(N₁(x))); final norm
    for block in model.blocks:
        for b in branches(block):
            x = x + ln(b.sublayer(ln(x, b.norm_in)), b.norm_out)
    return ln(x, model.final_norm)


def reordered_ref(model, x):  # OLMo 2: h = x + N(Attn(x)); x ← h + N(FFN(h)); final norm
    for block in model.blocks:
        for b in branches(block):
            x = x + ln(b.sublayer(x), the_norm(b))
    return ln(x, model.final_norm)


def mixln_ref(model, x, post_blocks):  # Mix-LN (Li et al. 2024): Post-LN in the first blocks, then Pre-LN
    for i, block in enumerate(model.blocks):
        for b in branches(block):
            post = i < post_blocks
            x = ln(x + b.sublayer(x), the_norm(b)) if post else x + b.sublayer(ln(x, the_norm(b)))
    return ln(x, model.final_norm)


def lnscale_ref(model, x):  # LayerNorm Scaling (Sun et al. 2025): x ← x + F(N(x)/√l), l = 1, 2, …
    for i, block in enumerate(model.blocks):
        for b in branches(block):
            x = x + b.sublayer(ln(x, the_norm(b)) / math.sqrt(i + 1))
    return ln(x, model.final_norm)


def resi_dual_ref(model, x):  # ResiDual (Xie et al. 2023): x_a ← N(x_a + F(x_a)), x_d ← x_d + F(x_a)
    a, d = x, x
    for block in model.blocks:
        for b in branches(block):
            f = b.sublayer(a)
            a, d = ln(a + f, the_norm(b)), d + f
    return a + ln(d, model.final_norm)


PLACEMENT_REFS = {
    "pre": (pre_ref, {}),
    "post": (post_ref, {}),
    "double": (double_ref, {}),
    "reordered": (reordered_ref, {}),
    # ρ = 0.5 of 3 blocks: ⌊1.5⌋ = 1 Post-LN block, then 2 Pre-LN blocks
    "mixln": (lambda m, x: mixln_ref(m, x, post_blocks=1), {"post_fraction": 0.5}),
    "lnscale": (lnscale_ref, {}),
    "resi_dual": (resi_dual_ref, {}),
}


# ------------------------------------------------------------------------------------------------------
# Each norm inside a model as its paper writes it: the reference walks the blocks as its placement's
# equation says, applying the norm's formula (above) by hand in every filled slot and before the head.


class NormRef(NamedTuple):
    formula: Callable  # (z, the module holding the parameters) -> N(z)
    placement: str = "pre"  # where the paper puts it: Pre-LN x ← x + F(N(x)), final N; or Post-LN
    alpha: Callable[[int], float] = lambda n_layers: 1.0  # the skip path's scale


NORM_REFS = {
    "ln": NormRef(layer_norm_ref),
    "rms": NormRef(rms_norm_ref),
    "bn": NormRef(batch_norm_ref),
    # Wang et al. 2022 (DeepNet), decoder-only with N blocks: x ← LN(α·x + G(x)), α = (2N)^¼, Post-LN
    # (microsoft/torchscale, architecture/decoder.py: residual_connection = residual·α + x, then the norm)
    "deepnorm": NormRef(layer_norm_ref, "post", alpha=lambda n_layers: (2 * n_layers) ** 0.25),
    "none": NormRef(no_norm_ref),
    "dyt": NormRef(dyt_ref),
    "scalenorm": NormRef(scalenorm_ref),
}


def norm_ref_forward(model, x, ref: NormRef):
    """A model's features as `ref` says: the norm's formula in each branch's one filled slot (Pre-LN before
    the sublayer, Post-LN after the scaled add) and before the head where the placement has a final norm."""

    def slot(branch):
        filled = [
            m for m in (branch.norm_in, branch.norm_out, branch.norm_add) if not isinstance(m, nn.Identity)
        ]
        return filled[0] if filled else None  # none: no module to hold parameters

    alpha = ref.alpha(len(model.blocks))
    for block in model.blocks:
        for b in branches(block):
            if ref.placement == "pre":
                x = x + b.sublayer(ref.formula(x, slot(b)))
            else:
                x = ref.formula(alpha * x + b.sublayer(x), slot(b))
    return ref.formula(x, model.final_norm) if PLACEMENTS[ref.placement].final_norm else x
