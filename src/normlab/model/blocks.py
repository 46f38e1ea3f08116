"""The blocks a GPT stacks: causal self-attention, the feed-forward, the residual branch that wraps either in
its norm slots (`Slots`: which are filled), `BlockParts` (what one block is built from) and `Block`; and what
a probed forward measures inside them (`ForwardTaps`). Apart from the GPT (`model/gpt.py`), which only embeds,
stacks these and reads out, and below the placements (`model/placements.py`), which name the block class each
is built with (`Placement.block`): a placement with a block of its own builds it from `BlockParts` without
reading the GPT, and nothing here reads a placement.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from normlab.model.norms import build_norm, build_qk_norm, slot_spec
from normlab.model.roles import ALL, ATTN, FFN, NORM, bias_rows, declare, removes_shift
from normlab.model.stackable import Linear, causal_attention


@dataclass(frozen=True)
class Slots:
    """What the norm slots of one block's two branches hold: each slot is named as the module that fills it
    (`ResidualBranch.norm_in`, `norm_out`, `norm_add`: the names in checkpoints and in gradient grouping)."""

    norm_in: bool  # N(x) feeds the sublayer
    norm_out: bool  # the sublayer's output is normalised before the add
    norm_add: bool  # the sum is normalised (the residual stream itself passes through N)
    input_scale: float = 1.0  # multiplies norm_in's output (LayerNorm Scaling's 1/√l)


# What flows from block to block: the residual stream x, or (x, d) with ResiDual's second stream d.
Stream = torch.Tensor | tuple[torch.Tensor, torch.Tensor]


MAX_LOGIT_ROWS = 128  # queries per score block of max_causal_logit


@torch.no_grad()
def max_causal_logit(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The largest q·k/√d_head over batch, heads and causal pairs (key ≤ query), in float32.

    One batched matmul per block of MAX_LOGIT_ROWS queries that adds the causal mask as it writes the
    scores (baddbmm with −inf above the diagonal), faster than scores, then a masked copy, then the max
    (docs/performance.md, "The attention-logit measurement"); a block reads only the keys its queries may
    see, so a long context computes about half the score matrix, one block at a time (on a GPU, a block that
    stays in its cache instead of the whole matrix through its memory: the biggest part of an instrumented
    step there). A context of at most MAX_LOGIT_ROWS is one block, as it always was.
    """
    t, d = q.shape[-2:]
    q, k = q.reshape(-1, t, d), k.reshape(-1, t, d)
    best: torch.Tensor | None = None
    for start in range(0, t, MAX_LOGIT_ROWS):
        end = min(t, start + MAX_LOGIT_ROWS)
        mask = torch.full((1, end - start, end), float("-inf"), dtype=q.dtype, device=q.device).triu_(
            start + 1
        )
        scores = torch.baddbmm(mask, q[:, start:end], k[:, :end].transpose(1, 2), alpha=d**-0.5)
        block = scores.amax()
        best = block if best is None else torch.maximum(best, block)
    assert best is not None
    return best.float()


def stream_rms(stream: Stream) -> torch.Tensor:
    """RMS over every element of the residual stream x, in float32 (with ResiDual's (x, d): of x)."""
    x = stream[0] if isinstance(stream, tuple) else stream
    return x.detach().float().square().mean().sqrt()


class ForwardTaps(NamedTuple):
    """What a probed forward (`GPT.features(idx, probe=True)`) measures inside the blocks, as float32
    tensors of shape (n_layers,): returned by the forward itself, so that the measured forward is the same
    function of the inputs as the plain one (torch.compile traces it as one graph, vmap batches it)."""

    stream_rms: torch.Tensor  # RMS of the residual stream x leaving each block
    attn_max_logit: torch.Tensor  # each block's largest causal q·k/√d_head (max_causal_logit)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention. `qk_norm` (none, or a norm of NORMS that acts on one vector at a
    time: `qk_norms()`) normalises each head's queries and keys over d_head before the dot
    product, with one set of learned parameters of size d_head shared by the heads: qk-layernorm
    (Dehghani et al. 2023), which Wortsman et al. 2023 use against attention-logit growth; per head as
    OLMo-core's `use_head_qk_norm` (allenai/OLMo-core, src/olmo_core/nn/attention/__init__.py).
    OLMo-core's default (OLMo 2) normalises the whole d_model-wide projection instead, before splitting it
    into heads."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float,
        bias: bool,
        qk_norm: str = "none",
        pre_output: nn.Module | None = None,
    ) -> None:
        super().__init__()
        declare(self, ATTN)
        self.n_heads = n_heads
        self.qkv = Linear(d_model, 3 * d_model, bias=bias)
        # what the heads' output passes through before the output projection (Sub-LN: a norm)
        self.pre_output = pre_output if pre_output is not None else nn.Identity()
        self.out = Linear(d_model, d_model, bias=bias)
        self.q_norm = build_qk_norm(qk_norm, d_model // n_heads)
        self.k_norm = build_qk_norm(qk_norm, d_model // n_heads)
        self.dropout = dropout

    def forward(self, x: torch.Tensor, taps: list[torch.Tensor] | None = None) -> torch.Tensor:
        """Attention of x (batch, time, d_model); with a `taps` list (a probed forward), the largest causal
        attention logit is appended to it."""
        b, t, d = x.shape
        # unbind, then transpose each: the backward stacks the three gradients straight into the qkv
        # layout (a permute first would add a copy to make it contiguous); values are identical
        q, k, v = (
            z.transpose(1, 2) for z in self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).unbind(2)
        )
        # the queries and keys the scores are made of leave q_norm and k_norm (identities without qk_norm)
        q, k = self.q_norm(q), self.k_norm(k)
        if taps is not None:
            taps.append(max_causal_logit(q, k))
        y = causal_attention(q, k, v, self.dropout if self.training else 0.0)
        return self.out(self.pre_output(y.transpose(1, 2).reshape(b, t, d)))

    def output_shift_biases(self) -> list[tuple[nn.Parameter, slice]]:
        """The biases (parameter, rows) whose only effect is one vector added to every output: the values'
        third of the qkv bias (each query's attention weights sum to 1, without dropout) and the output bias."""
        d = self.out.in_features
        values = [] if removes_shift(self.pre_output) else [(self.qkv.bias, slice(2 * d, 3 * d))]
        return [
            (b, rows)
            for b, rows in (*values, *bias_rows(self.pre_output), (self.out.bias, ALL))
            if b is not None
        ]

    def cancelled_inside(self) -> list[tuple[nn.Parameter, slice]]:
        """The biases a norm inside the sublayer subtracts whatever follows: the values' third of the qkv bias
        where `pre_output` removes a batch shift."""
        d = self.out.in_features
        removed = removes_shift(self.pre_output) and self.qkv.bias is not None
        return [(self.qkv.bias, slice(2 * d, 3 * d))] if removed else []


class FeedForward(nn.Module):
    def __init__(self, d_model: int, mult: int, bias: bool, pre_output: nn.Module | None = None) -> None:
        super().__init__()
        declare(self, FFN)
        self.up = Linear(d_model, mult * d_model, bias=bias)
        # what the hidden activations pass through before the down projection (Sub-LN: a norm)
        self.pre_output = pre_output if pre_output is not None else nn.Identity()
        self.down = Linear(mult * d_model, d_model, bias=bias)

    def forward(self, x: torch.Tensor, taps: list[torch.Tensor] | None = None) -> torch.Tensor:
        """`taps` is accepted as every sublayer accepts it; the feed-forward measures nothing."""
        return self.down(self.pre_output(F.gelu(self.up(x))))

    def output_shift_biases(self) -> list[tuple[nn.Parameter, slice]]:
        """The biases (parameter, rows) whose only effect is one vector added to every output."""
        return [
            (b, rows) for b, rows in (*bias_rows(self.pre_output), (self.down.bias, ALL)) if b is not None
        ]

    def cancelled_inside(self) -> list[tuple[nn.Parameter, slice]]:
        """Nothing: the GELU before `pre_output` is not linear in the up projection's bias."""
        return []


class ResidualBranch(nn.Module):
    """x → [norm_in] (× input_scale) → sublayer → [norm_out] → dropout → α·x + · → [norm_add]; unfilled
    slots are identities. With a second stream (ResiDual) the branch maps (x, d) to (that, d + the
    dropped-out sublayer output)."""

    def __init__(
        self,
        sublayer: nn.Module,
        d_model: int,
        norm: Mapping[str, Any],
        slots: Slots,
        alpha: float,
        dropout: float,
        context_length: int,
        dual_stream: bool = False,
    ) -> None:
        super().__init__()
        self.sublayer = sublayer

        def slot(filled: bool) -> nn.Module:
            return declare(build_norm(d_model, norm, context_length), NORM) if filled else nn.Identity()

        self.norm_in = slot(slots.norm_in)
        self.norm_out = slot(slots.norm_out)
        self.norm_add = slot(slots.norm_add)
        self.input_scale = slots.input_scale
        self.alpha = alpha
        self.dual_stream = dual_stream
        self.drop = nn.Dropout(dropout)

    def forward(self, stream: Stream, taps: list[torch.Tensor] | None = None) -> Stream:
        x, d = stream if self.dual_stream else (stream, None)
        normed = self.norm_in(x)
        if self.input_scale != 1.0:
            normed = normed * self.input_scale
        h = self.drop(self.norm_out(self.sublayer(normed, taps)))
        out = self.norm_add(x * self.alpha + h if self.alpha != 1.0 else x + h)
        return (out, d + h) if self.dual_stream else out


@dataclass(frozen=True)
class BlockParts:
    """What one block is built from, by name: its width, heads, norm spec and slots, residual scale α,
    dropout, biases, FFN width, context and qk-norm, and whether a second stream runs beside x. A block
    class takes it whole (`Block(parts)`), so a placement with a block of its own (`Placement.block`) is
    built from these parts and the helpers below, never from positional arguments."""

    d_model: int
    n_heads: int
    norm: Mapping[str, Any]
    slots: Slots
    alpha: float
    dropout: float
    bias: bool
    ffn_mult: int
    context_length: int
    qk_norm: str = "none"
    dual_stream: bool = False

    def norm_of(self, branch: str, width: int | None = None) -> nn.Module:
        """A norm of this block's kind for `branch` (attn or ffn: DyT's α per branch) over vectors of `width`
        (None: d_model; a norm inside the feed-forward: its hidden width), declared NORM."""
        spec = slot_spec(self.norm, branch)
        return declare(build_norm(width or self.d_model, spec, self.context_length), NORM)

    def attention(self, pre_output: nn.Module | None = None) -> CausalSelfAttention:
        return CausalSelfAttention(
            self.d_model, self.n_heads, self.dropout, self.bias, self.qk_norm, pre_output
        )

    def feed_forward(self, pre_output: nn.Module | None = None) -> FeedForward:
        return FeedForward(self.d_model, self.ffn_mult, self.bias, pre_output)

    def branch(self, sublayer: nn.Module, kind: str) -> ResidualBranch:
        """`sublayer` in a residual branch with this block's slots (kind: attn or ffn)."""
        return ResidualBranch(
            sublayer,
            self.d_model,
            slot_spec(self.norm, kind),
            self.slots,
            self.alpha,
            self.dropout,
            self.context_length,
            self.dual_stream,
        )


class Block(nn.Module):
    """The block of every slot placement: an attention branch, then a feed-forward branch."""

    def __init__(self, parts: BlockParts) -> None:
        super().__init__()
        self.attn = parts.branch(parts.attention(), "attn")
        self.ffn = parts.branch(parts.feed_forward(), "ffn")

    def forward(self, stream: Stream, taps: list[torch.Tensor] | None = None) -> Stream:
        return self.ffn(self.attn(stream, taps), taps)
