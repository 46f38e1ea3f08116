"""A norm × placement variant: whether it is defined, and what its block computes."""

from __future__ import annotations

from normlab.model.norms import NORMS
from normlab.model.placements import PLACEMENTS, branch_formula

INITS = ("gpt2", "xavier")
POSITIONS = ("learned", "sinusoidal")


class InvalidVariant(ValueError):
    """A norm × placement (or other model knob) combination that is not defined."""


def check_variant(norm: str, placement: str) -> None:
    """Raise InvalidVariant, in one sentence naming the valid choices, if this combination is undefined."""
    if norm not in NORMS:
        raise InvalidVariant(f"norm={norm} is unknown; choose one of {', '.join(NORMS)}.")
    if placement not in PLACEMENTS:
        raise InvalidVariant(f"placement={placement} is unknown; choose one of {', '.join(PLACEMENTS)}.")
    allowed = NORMS[norm].placements
    if allowed is not None and placement not in allowed:
        raise InvalidVariant(
            f"norm={norm} is defined only for placement={'|'.join(allowed)}, not placement={placement}; "
            f"use placement={allowed[0]} or another norm."
        )


def check_heads(d_model: int, n_heads: int) -> None:
    """Raise InvalidVariant, in one sentence naming the valid head counts, if n_heads does not divide d_model."""
    if d_model % n_heads:
        divisors = [h for h in range(1, min(d_model, 64) + 1) if d_model % h == 0]
        raise InvalidVariant(
            f"model.d_model={d_model} is not divisible by model.n_heads={n_heads}; "
            f"pick model.n_heads from {', '.join(map(str, divisors))}."
        )


QK_SYMBOLS = {"ln": "LN", "rms": "RMS"}


def block_formula(norm: str, placement: str, n_layers: int, qk_norm: str = "none") -> str:
    """Both residual branches of a block, e.g. `x ← LN(2.21·x + Attn(x)); x ← LN(2.21·x + FFN(x))`, and,
    with model.qk_norm, what attention does to its queries and keys (`…; per head: q, k ← RMS(q), RMS(k)`)."""
    check_variant(norm, placement)
    kind, where = NORMS[norm], PLACEMENTS[placement]
    alpha = kind.residual_scale(n_layers)
    formula = "; ".join(branch_formula(where, kind.symbol, f, alpha) for f in ("Attn", "FFN"))
    if qk_norm in QK_SYMBOLS:
        sym = QK_SYMBOLS[qk_norm]
        formula += f"; per head: q, k ← {sym}(q), {sym}(k)"
    return formula
