"""A norm × placement variant: whether it is defined, and what its blocks compute."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from normlab.model.blocks import Slots
from normlab.model.norms import DEEPNORM_BASES, NORMS, norm_spec, norm_symbol, qk_norms
from normlab.model.placements import PLACEMENTS, SublayerText, branch_formula, placement_spec, plain_sublayer

INITS = ("gpt2", "xavier")
POSITIONS = ("learned", "sinusoidal")

Spec = Mapping[str, Any] | str  # a config group (with at least `name`), or just the name


class InvalidVariant(ValueError):
    """A norm × placement (or other model knob) combination that is not defined."""


def _name(spec: Spec) -> str:
    return spec if isinstance(spec, str) else spec["name"]


def check_variant(norm: Spec, placement: Spec, qk_norm: str = "none") -> None:
    """Raise InvalidVariant, in one sentence naming the valid choices, if this combination is undefined."""
    norm_name, placement_name = _name(norm), _name(placement)
    if norm_name not in NORMS:
        raise InvalidVariant(f"norm={norm_name} is unknown; choose one of {', '.join(NORMS)}.")
    if placement_name not in PLACEMENTS:
        raise InvalidVariant(f"placement={placement_name} is unknown; choose one of {', '.join(PLACEMENTS)}.")
    allowed = NORMS[norm_name].placements
    if allowed is not None and placement_name not in allowed:
        raise InvalidVariant(
            f"norm={norm_name} is defined only for placement={'|'.join(allowed)}, not "
            f"placement={placement_name}; use placement={allowed[0]} or another norm."
        )
    if norm_name == "deepnorm":
        base = norm_spec(norm)["base"]
        if base not in DEEPNORM_BASES:
            raise InvalidVariant(
                f"norm.base={base} is not a norm DeepNorm can wrap; choose one of {', '.join(DEEPNORM_BASES)}."
            )
    if qk_norm not in qk_norms():
        raise InvalidVariant(
            f"model.qk_norm={qk_norm} is not a norm of each head's queries and keys; choose one of "
            f"{', '.join(qk_norms())}."
        )


def check_heads(d_model: int, n_heads: int) -> None:
    """Raise InvalidVariant, in one sentence naming the valid head counts, if n_heads does not divide d_model."""
    if d_model % n_heads:
        divisors = [h for h in range(1, min(d_model, 64) + 1) if d_model % h == 0]
        raise InvalidVariant(
            f"model.d_model={d_model} is not divisible by model.n_heads={n_heads}; "
            f"pick model.n_heads from {', '.join(map(str, divisors))}."
        )


def _block_ranges(indices: list[int]) -> str:
    """'block 3' or 'blocks 0–2' for a run of consecutive block indices."""
    first, last = indices[0], indices[-1]
    return f"block {first}" if first == last else f"blocks {first}–{last}"


def block_formula(norm: Spec, placement: Spec, n_layers: int, qk_norm: str = "none") -> str:
    """Both residual branches of a block, e.g. `x ← LN(2.21·x + Attn(x)); x ← LN(2.21·x + FFN(x))`.

    Where the placement differs by layer, one formula per run of identical blocks, indexed from 0 as the
    per-layer metrics are: `blocks 0–1: x ← LN(x + Attn(x)); … | blocks 2–7: x ← x + Attn(LN(x)); …`.
    With a second residual stream (ResiDual), what the head reads follows (`…; head reads x + LN(d)`);
    with model.qk_norm, what attention does to its queries and keys (`…; per head: q, k ← RMS(q), RMS(k)`).
    """
    check_variant(norm, placement, qk_norm)
    where = PLACEMENTS[_name(placement)]
    return layers_formula(
        where.per_layer(n_layers, placement_spec(placement)),
        norm_symbol(norm),
        NORMS[_name(norm)].residual_scale(n_layers),
        where.dual_stream,
        norm_symbol(qk_norm) if qk_norm != "none" else "",
        where.sublayer,
    )


def layers_formula(
    per_layer: list[Slots],
    symbol: str,
    alpha: float = 1.0,
    dual_stream: bool = False,
    qk_symbol: str = "",
    sublayer: SublayerText = plain_sublayer,
) -> str:
    """`block_formula` of given per-layer slots: `symbol` names the norm (`LN`; empty: none), `alpha` scales the
    skip path, `qk_symbol` names the norm of each head's queries and keys (empty: none)."""
    groups: list[tuple[list[int], str]] = []
    for i, slots in enumerate(per_layer):
        text = "; ".join(
            branch_formula(slots, symbol, f, alpha, dual_stream, sublayer) for f in ("Attn", "FFN")
        )
        if groups and groups[-1][1] == text:
            groups[-1][0].append(i)
        else:
            groups.append(([i], text))
    if len(groups) == 1:
        formula = groups[0][1]
    else:
        formula = " | ".join(f"{_block_ranges(idx)}: {text}" for idx, text in groups)
    if dual_stream:
        formula += f"; head reads x + {symbol}(d)" if symbol else "; head reads x + d"
    if qk_symbol:
        formula += f"; per head: q, k ← {qk_symbol}(q), {qk_symbol}(k)"
    return formula
