"""A decoder-only GPT whose every residual branch takes its norms from the chosen variant."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from normlab.model.norms import NORMS, QK_NORMS, build_norm, build_qk_norm
from normlab.model.placements import PLACEMENTS, Placement
from normlab.model.variant import INITS, POSITIONS, InvalidVariant, check_heads, check_variant


@torch.no_grad()
def max_causal_logit(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The largest q·k/√d_head over batch, heads and causal pairs (key ≤ query), in float32.

    One batched matmul that adds the causal mask as it writes the scores (baddbmm with −inf above the
    diagonal): a third of the time of scores, then a masked copy, then the max.
    """
    t, d = q.shape[-2:]
    mask = torch.full((1, t, t), float("-inf"), dtype=q.dtype, device=q.device).triu_(1)
    scores = torch.baddbmm(mask, q.reshape(-1, t, d), k.reshape(-1, t, d).transpose(1, 2), alpha=d**-0.5)
    return scores.amax().float()


ALL = slice(None)  # every row of a parameter


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention. `qk_norm` (none | ln | rms) normalises each head's queries and
    keys over d_head before the dot product, with one learned gain (ln: and bias) of size d_head shared by
    the heads: qk-layernorm (Dehghani et al. 2023), which Wortsman et al. 2023 use against attention-logit
    growth; per head as OLMo-core's `use_head_qk_norm` (allenai/OLMo-core,
    src/olmo_core/nn/attention/__init__.py). OLMo-core's default (OLMo 2) normalises the whole
    d_model-wide projection instead, before splitting it into heads."""

    def __init__(self, d_model: int, n_heads: int, dropout: float, bias: bool, qk_norm: str = "none") -> None:
        super().__init__()
        check_heads(d_model, n_heads)
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)
        self.q_norm = build_qk_norm(qk_norm, d_model // n_heads)
        self.k_norm = build_qk_norm(qk_norm, d_model // n_heads)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        # unbind, then transpose each: the backward stacks the three gradients straight into the qkv
        # layout (a permute first would add a copy to make it contiguous); values are identical
        q, k, v = (
            z.transpose(1, 2) for z in self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).unbind(2)
        )
        # the queries and keys the scores are made of leave q_norm and k_norm (identities without qk_norm):
        # metrics.activations hooks them there on the steps that log the max attention logit
        q, k = self.q_norm(q), self.k_norm(k)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        return self.out(y.transpose(1, 2).reshape(b, t, d))

    def output_shift_biases(self) -> list[tuple[nn.Parameter, slice]]:
        """The biases (parameter, rows) whose only effect is one vector added to every output: the values'
        third of the qkv bias (each query's attention weights sum to 1, without dropout) and the output bias."""
        d = self.out.in_features
        return [
            (b, rows)
            for b, rows in ((self.qkv.bias, slice(2 * d, 3 * d)), (self.out.bias, ALL))
            if b is not None
        ]


class FeedForward(nn.Module):
    def __init__(self, d_model: int, mult: int, bias: bool) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, mult * d_model, bias=bias)
        self.down = nn.Linear(mult * d_model, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))

    def output_shift_biases(self) -> list[tuple[nn.Parameter, slice]]:
        """The biases (parameter, rows) whose only effect is one vector added to every output."""
        return [(self.down.bias, ALL)] if self.down.bias is not None else []


class ResidualBranch(nn.Module):
    """x → [norm_in] → sublayer → [norm_out] → dropout → α·x + · → [norm_add]; unfilled slots are identities."""

    def __init__(
        self,
        sublayer: nn.Module,
        d_model: int,
        norm: Mapping[str, Any],
        where: Placement,
        alpha: float,
        dropout: float,
        context_length: int,
    ) -> None:
        super().__init__()
        self.sublayer = sublayer

        def slot(filled: bool) -> nn.Module:
            return build_norm(d_model, norm, context_length) if filled else nn.Identity()

        self.norm_in = slot(where.before_sublayer)
        self.norm_out = slot(where.after_sublayer)
        self.norm_add = slot(where.after_add)
        self.alpha = alpha
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(self.norm_out(self.sublayer(self.norm_in(x))))
        return self.norm_add(x * self.alpha + h if self.alpha != 1.0 else x + h)


class Block(nn.Module):
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        norm: Mapping[str, Any],
        where: Placement,
        alpha: float,
        dropout: float,
        bias: bool,
        ffn_mult: int,
        context_length: int,
        qk_norm: str = "none",
    ) -> None:
        super().__init__()
        self.attn = ResidualBranch(
            CausalSelfAttention(d_model, n_heads, dropout, bias, qk_norm),
            d_model,
            norm,
            where,
            alpha,
            dropout,
            context_length,
        )
        self.ffn = ResidualBranch(
            FeedForward(d_model, ffn_mult, bias), d_model, norm, where, alpha, dropout, context_length
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ffn(self.attn(x))


def sinusoidal_positions(length: int, d_model: int) -> torch.Tensor:
    """The fixed sin/cos position encodings of Vaswani et al. 2017, shape (length, d_model)."""
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq[: d_model // 2])
    return table


class GPT(nn.Module):
    """Token ids (batch, time) → logits (batch, time, vocab_size).

    `norm` is the resolved `norm` config group (a mapping with at least `name`); `placement` names an
    entry of PLACEMENTS. `embed_scale` multiplies token embeddings: a number, or "sqrt_d" for √d_model.
    `qk_norm` (none | ln | rms) normalises each attention head's queries and keys (CausalSelfAttention).
    """

    def __init__(
        self,
        vocab_size: int,
        context_length: int,
        d_model: int,
        n_heads: int,
        n_layers: int,
        norm: Mapping[str, Any],
        placement: str,
        dropout: float = 0.0,
        bias: bool = True,
        pos: str = "learned",
        tie_embeddings: bool = True,
        init: str = "gpt2",
        embed_scale: float | str = 1.0,
        ffn_mult: int = 4,
        qk_norm: str = "none",
    ) -> None:
        super().__init__()
        norm = dict(norm)
        check_variant(norm["name"], placement)
        if init not in INITS:
            raise InvalidVariant(f"model.init={init} is unknown; choose one of {', '.join(INITS)}.")
        if pos not in POSITIONS:
            raise InvalidVariant(f"model.pos={pos} is unknown; choose one of {', '.join(POSITIONS)}.")
        if qk_norm not in QK_NORMS:
            raise InvalidVariant(f"model.qk_norm={qk_norm} is unknown; choose one of {', '.join(QK_NORMS)}.")
        if n_layers < 1:
            raise InvalidVariant(f"depth={n_layers} must be at least 1.")
        kind, where = NORMS[norm["name"]], PLACEMENTS[placement]
        self.norm_name, self.placement, self.n_layers, self.qk_norm = (
            norm["name"],
            placement,
            n_layers,
            qk_norm,
        )
        self.context_length, self.d_model = context_length, d_model
        self.embed_scale = math.sqrt(d_model) if embed_scale == "sqrt_d" else float(embed_scale)

        self.tok_emb = nn.Embedding(vocab_size, d_model)
        if pos == "learned":
            self.pos_emb = nn.Parameter(torch.zeros(context_length, d_model))
        else:
            self.register_buffer("pos_table", sinusoidal_positions(context_length, d_model), persistent=False)
            self.pos_emb = None
        self.drop = nn.Dropout(dropout)
        alpha = kind.residual_scale(n_layers)
        self.blocks = nn.ModuleList(
            Block(d_model, n_heads, norm, where, alpha, dropout, bias, ffn_mult, context_length, qk_norm)
            for _ in range(n_layers)
        )
        self.final_norm = build_norm(d_model, norm, context_length) if where.final_norm else nn.Identity()
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        if tie_embeddings:
            self.head.weight = self.tok_emb.weight
        beta = kind.init_gain(n_layers) if kind.init_gain is not None else None
        self._init_weights(init, beta)

    @torch.no_grad()
    def _init_weights(self, init: str, beta: float | None) -> None:
        """Embeddings by `model.init`: N(0, 0.02) (`gpt2`) or N(0, d^-½) (`xavier`, as Vaswani et al.).

        Block projections (q, k and v each as its own d×d matrix; biases 0; norm gains 1):
        - `gpt2`: N(0, 0.02), attention-output and feed-forward-down ×1/√(2·depth) (Radford et al. 2019);
        - `xavier`: Glorot-uniform per projection;
        - with a norm that sets an init gain β (DeepNorm), whatever `model.init` says: Xavier-normal with
          gain β on v, out, up and down and gain 1 on q and k — DeepNet's `deepnorm_init` (Wang et al.
          2022, Fig. 2), std = gain·√(2 / (fan_in + fan_out)).
        """
        d = self.d_model
        emb_std = 0.02 if init == "gpt2" else d**-0.5
        nn.init.normal_(self.tok_emb.weight, std=emb_std)
        if self.pos_emb is not None:
            nn.init.normal_(self.pos_emb, std=emb_std)
        if self.head.weight is not self.tok_emb.weight:
            nn.init.normal_(self.head.weight, std=emb_std)
        for block in self.blocks:
            attn, ffn = block.attn.sublayer, block.ffn.sublayer
            q, k, v = attn.qkv.weight.split(d)
            residual = (attn.out.weight, ffn.down.weight)
            for w in (q, k, v, attn.out.weight, ffn.up.weight, ffn.down.weight):
                if beta is not None:
                    nn.init.xavier_normal_(w, gain=1.0 if w is q or w is k else beta)
                elif init == "gpt2":
                    residual_scale = (
                        1 / math.sqrt(2 * self.n_layers) if any(w is r for r in residual) else 1.0
                    )
                    nn.init.normal_(w, std=0.02 * residual_scale)
                else:
                    nn.init.xavier_uniform_(w)
            for lin in (attn.qkv, attn.out, ffn.up, ffn.down):
                if lin.bias is not None:
                    nn.init.zeros_(lin.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(idx))

    def features(self, idx: torch.Tensor) -> torch.Tensor:
        """What the LM head reads, (batch, time, d_model): the trainer fuses the head with its loss."""
        t = idx.shape[1]
        if t > self.context_length:
            raise ValueError(f"sequence of {t} tokens exceeds model.context_length={self.context_length}")
        pos = self.pos_emb[:t] if self.pos_emb is not None else self.pos_table[:t]
        x = self.drop(self.tok_emb(idx) * self.embed_scale + pos)
        for block in self.blocks:
            x = block(x)
        return self.final_norm(x)

    def norm_cancelled_parameters(self) -> list[tuple[str, nn.Parameter, slice]]:
        """The parameters (name, parameter, rows) whose effect on the training loss the norm subtracts exactly.

        A norm that subtracts the batch mean of each position and feature (BatchNorm in training; NormType's
        `removes_batch_shift`) removes a vector added to every sequence of the batch, wherever it is
        normalised before anything else reads it (Placement's `removes_*_shift`): the learned position
        embedding when sublayers and head read the stream only through norms (pre, double); the biases that
        end each sublayer (FeedForward's and CausalSelfAttention's `output_shift_biases`); and slot B's and
        slot C's own biases where their output is normalised again. The true gradient of these is zero and
        autograd returns float rounding (~1e-9), which Adam's per-coordinate normalisation would turn into
        steps of about the learning rate in random directions: a walk the training loss never sees, but the
        running means BatchNorm evaluates with lag behind it, so the validation loss would depend on
        rounding (on the number of ranks or threads). The Trainer zeroes these gradients, so they keep
        their initial values, which the norm subtracts in eval as in training. With dropout the vector is
        rescaled per sample, and nothing is cancelled exactly.
        """
        kind, where = NORMS[self.norm_name], PLACEMENTS[self.placement]
        if not kind.removes_batch_shift or self.drop.p > 0:
            return []
        found: list[tuple[nn.Parameter, slice]] = []
        if where.removes_stream_shift and self.pos_emb is not None:
            found.append((self.pos_emb, ALL))
        for block in self.blocks:
            for branch in (block.attn, block.ffn):
                if where.removes_sublayer_shift:
                    found += branch.sublayer.output_shift_biases()
                if where.after_sublayer and where.removes_merge_shift:
                    found += _norm_bias(branch.norm_out)
                if where.after_add and where.removes_stream_shift:
                    found += _norm_bias(branch.norm_add)
        names = {id(p): name for name, p in self.named_parameters()}
        return [(names[id(p)], p, rows) for p, rows in found]

    def n_params(self) -> int:
        """Trainable parameters, the tied head counted once."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


def _norm_bias(norm: nn.Module) -> list[tuple[nn.Parameter, slice]]:
    bias = getattr(norm, "bias", None)
    return [(bias, ALL)] if isinstance(bias, nn.Parameter) else []
