"""The `model` config group: the GPT's knobs (`model.*`), and the size presets `model=tiny|small|base`.

`hydra.utils.instantiate(cfg.model)` builds the GPT from this group (`_target_`); the keys that copy other
groups (`vocab_size`, `n_layers`, `norm`, `placement`) are interpolations, so `data.vocab_size`, `depth`,
`norm=...` and `placement=...` set them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from normlab.knobs import Knobs, knob
from normlab.model.norms import qk_norms
from normlab.model.variant import INITS, POSITIONS


@dataclass(frozen=True)
class ModelConfig(Knobs):
    """A GPT of the small size (its defaults)."""

    GROUP: ClassVar[str] = "model"
    _target_: str = "normlab.model.GPT"
    vocab_size: int = knob(
        "${data.vocab_size}", "the tokenizer's vocabulary must fit: defaults to the data's BPE size", ge=1
    )
    context_length: int = knob(128, "longest sequence the model accepts (learned position table size)", ge=1)
    d_model: int = knob(128, "residual stream width", ge=1)
    n_heads: int = knob(4, "attention heads (must divide d_model)", ge=1)
    n_layers: int = knob("${depth}", "number of blocks: the top-level `depth`", ge=1)
    norm: Any = knob("${norm}", "the chosen norm type (norm=NAME) with its knobs: a copy of the norm group")
    placement: Any = knob(
        "${placement}", "the chosen placement (placement=NAME): a copy of the placement group"
    )
    dropout: float = knob(
        0.0, "dropout on embeddings, attention probabilities and each sublayer output", ge=0, lt=1
    )
    bias: bool = knob(True, "biases in the linear layers")
    pos: str = knob("learned", "positions: learned | sinusoidal (Vaswani et al. 2017)", choices=POSITIONS)
    tie_embeddings: bool = knob(True, "LM head shares the token-embedding matrix")
    init: str = knob(
        "gpt2",
        "gpt2 (N(0, 0.02), residual projections ×1/√(2·depth)) | xavier (Glorot, as Vaswani et al. / Xiong et al.)",
        choices=INITS,
    )
    embed_scale: Any = knob(
        1.0, "multiplies token embeddings: 1.0, or sqrt_d for √d_model", gt=0, also="sqrt_d"
    )
    learn_embed_scale: bool = knob(
        False,
        "learn the embedding multiplier, starting from embed_scale (the DyT authors' LLaMA recipe: a learnable "
        "scalar initialised to √d)",
    )
    ffn_mult: int = knob(4, "feed-forward hidden width = ffn_mult · d_model", ge=1)
    qk_norm: str = knob(
        "none",
        "norm on each attention head's queries and keys before q·k (qk-layernorm, as Wortsman et al. 2023 use): "
        "none, or a norm that acts on one vector at a time over d_head (the choices listed), with its "
        "default settings and one set of learned parameters shared by the heads",
        choices=qk_norms,
    )
    _convert_: str = "all"


# model=NAME: what each size preset changes from ModelConfig's defaults, and what --help says of it
SIZES: dict[str, tuple[str, dict[str, Any]]] = {
    "tiny": ("~0.3M parameters: tests and smoke runs.", {"context_length": 64, "d_model": 64, "n_heads": 4}),
    "small": ("~1.7M parameters at depth 6: the default for CPU comparisons.", {}),
    "base": (
        "~7.8M parameters at depth 6 (a GPU-sized run).",
        {"context_length": 256, "d_model": 256, "n_heads": 8},
    ),
}
