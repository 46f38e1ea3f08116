"""A decoder-only GPT whose every residual branch takes its norms from the chosen variant: the embedding, the
stack of blocks (`model/blocks.py`) and the readout, its init, and what it reports of itself (its formula,
per-part parameter roles, the parameters a batch norm cancels)."""

from __future__ import annotations

import math

import torch
from torch import nn

from normlab.model.blocks import BlockParts, ForwardTaps, Stream, stream_rms
from normlab.model.config import ModelConfig
from normlab.model.norms import NORMS, build_norm, norm_spec, norm_symbol, slot_spec
from normlab.model.placements import PLACEMENTS, placement_spec
from normlab.model.roles import ALL, ROLE, bias_rows, removes_shift
from normlab.model.stackable import Linear
from normlab.model.variant import (
    INITS,
    POSITIONS,
    InvalidVariant,
    Spec,
    check_heads,
    check_variant,
    layers_formula,
)


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

    `norm` and `placement` are the resolved `norm` and `placement` config groups (mappings with at least
    `name`; a bare name, or a group without some knobs, takes the rest from its config's defaults). Each
    block gets its slots from the placement (`PLACEMENTS[name].slots(i, n_layers, placement)`).
    `embed_scale` multiplies token embeddings: a number, or "sqrt_d" for √d_model (a learned scalar from
    that value with `learn_embed_scale`). `qk_norm` (none, or a
    per-vector norm of NORMS) normalises each attention head's queries and keys (CausalSelfAttention).
    """

    def __init__(
        self,
        vocab_size: int,
        context_length: int,
        d_model: int,
        n_heads: int,
        n_layers: int,
        norm: Spec,
        placement: Spec,
        dropout: float = ModelConfig.dropout,
        bias: bool = ModelConfig.bias,
        pos: str = ModelConfig.pos,
        tie_embeddings: bool = ModelConfig.tie_embeddings,
        init: str = ModelConfig.init,
        embed_scale: float | str = ModelConfig.embed_scale,
        ffn_mult: int = ModelConfig.ffn_mult,
        qk_norm: str = ModelConfig.qk_norm,
        learn_embed_scale: bool = ModelConfig.learn_embed_scale,
    ) -> None:
        super().__init__()
        check_variant(norm, placement, qk_norm)
        if init not in INITS:
            raise InvalidVariant(f"model.init={init} is unknown; choose one of {', '.join(INITS)}.")
        if pos not in POSITIONS:
            raise InvalidVariant(f"model.pos={pos} is unknown; choose one of {', '.join(POSITIONS)}.")
        if n_layers < 1:
            raise InvalidVariant(f"depth={n_layers} must be at least 1.")
        check_heads(d_model, n_heads)
        norm, placement = norm_spec(norm), placement_spec(placement)
        kind, where = NORMS[norm["name"]], PLACEMENTS[placement["name"]]
        self.norm_name, self.placement, self.n_layers, self.qk_norm = (
            norm["name"],
            placement["name"],
            n_layers,
            qk_norm,
        )
        self.norm_spec = norm
        # each block's slots: the one place the placement is read (formula, normalises_stream, the blocks)
        self.layer_slots = where.per_layer(n_layers, placement)
        self.dual_stream = where.dual_stream
        self.residual_scale = kind.residual_scale(n_layers)
        self.context_length, self.d_model = context_length, d_model
        scale = math.sqrt(d_model) if embed_scale == "sqrt_d" else float(embed_scale)
        # a learnable scalar starting at that value: the DyT authors' LLaMA recipe (√d, learned)
        self.embed_scale = nn.Parameter(torch.tensor(scale)) if learn_embed_scale else scale

        self.tok_emb = nn.Embedding(vocab_size, d_model)
        if pos == "learned":
            self.pos_emb = nn.Parameter(torch.zeros(context_length, d_model))
        else:
            self.register_buffer("pos_table", sinusoidal_positions(context_length, d_model), persistent=False)
            self.pos_emb = None
        self.drop = nn.Dropout(dropout)
        alpha = self.residual_scale
        self.blocks = nn.ModuleList(
            where.block(
                BlockParts(
                    d_model,
                    n_heads,
                    norm,
                    slots,
                    alpha,
                    dropout,
                    bias,
                    ffn_mult,
                    context_length,
                    qk_norm,
                    where.dual_stream,
                )
            )
            for slots in self.layer_slots
        )
        final = slot_spec(norm, "final")
        self.final_norm = build_norm(d_model, final, context_length) if where.final_norm else nn.Identity()
        self.head = Linear(d_model, vocab_size, bias=False)
        if tie_embeddings:
            self.head.weight = self.tok_emb.weight
        beta = kind.init_gain(n_layers) if kind.init_gain is not None else None
        self._init_weights(init, beta)

    def normalises_stream(self, block: int | None = None) -> bool:
        """Whether block `block` (None: some block) normalises the residual stream itself (Post-LN's norm_add)."""
        slots = self.layer_slots if block is None else [self.layer_slots[block]]
        return any(s.norm_add for s in slots)

    def formula(self) -> str:
        """What the blocks compute, as `block_formula` writes it (e.g. `x ← x + Attn(LN(x)); x ← x + FFN(LN(x))`),
        from the slots this model was built with."""
        qk = norm_symbol(self.qk_norm) if self.qk_norm != "none" else ""
        sublayer = PLACEMENTS[self.placement].sublayer
        return layers_formula(
            self.layer_slots, norm_symbol(self.norm_spec), self.residual_scale, self.dual_stream, qk, sublayer
        )

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

    def features(
        self, idx: torch.Tensor, probe: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, ForwardTaps]:
        """What the LM head reads, (batch, time, d_model): the trainer fuses the head with its loss.

        With `probe` (the trainer's instrumented steps), `(what the head reads, ForwardTaps)`: the same
        computation, plus each block's measurements, returned rather than hooked so that a compiled
        instrumented step is one graph too.
        """
        stream = self.embed(idx)
        if not probe:
            for block in self.blocks:
                stream = block(stream)
            return self.readout(stream)
        max_logits: list[torch.Tensor] = []
        rms: list[torch.Tensor] = []
        for block in self.blocks:
            stream = block(stream, max_logits)
            rms.append(stream_rms(stream))
        return self.readout(stream), ForwardTaps(torch.stack(rms), torch.stack(max_logits).float())

    def embed(self, idx: torch.Tensor) -> Stream:
        """The stream the first block reads: token embedding × embed_scale + positions (dropped out); with
        ResiDual's second stream, (x, d) both starting there."""
        t = idx.shape[1]
        if t > self.context_length:
            raise ValueError(f"sequence of {t} tokens exceeds model.context_length={self.context_length}")
        pos = self.pos_emb[:t] if self.pos_emb is not None else self.pos_table[:t]
        x = self.drop(self.tok_emb(idx) * self.embed_scale + pos)
        return (x, x) if self.dual_stream else x

    def readout(self, stream: Stream) -> torch.Tensor:
        """What the head reads from the last block's stream: the final norm of x (an identity where the
        placement has none), or with ResiDual x + N(d)."""
        if self.dual_stream:
            x, d = stream
            return x + self.final_norm(d)
        return self.final_norm(stream)

    def norm_cancelled_parameters(self) -> list[tuple[str, nn.Parameter, slice]]:
        """The parameters (name, parameter, rows) whose effect on the training loss the norm subtracts exactly.

        A norm that subtracts the batch mean of each position and feature (BatchNorm in training: a norm
        module with `removes_batch_shift`) removes a vector added to every sequence of the batch, wherever
        it is normalised before anything else reads it. Followed block by block, per layer (placements
        may differ by layer): the learned position embedding, when every branch reads the stream through
        norm_in until a norm_add or the head's final norm normalises it (pre, double); the biases that end
        each sublayer (FeedForward's and CausalSelfAttention's `output_shift_biases`), when norm_out, or the
        stream after the branch, removes them; norm_out's and norm_add's own biases likewise; with ResiDual,
        what also enters the second stream d must be removed by the head's N(d). The true gradient of
        these is zero and autograd returns float rounding (~1e-9), which Adam's per-coordinate
        normalisation would turn into steps of about the learning rate in random directions: a walk the
        training loss never sees, but the running means BatchNorm evaluates with lag behind it, so the
        validation loss would depend on rounding (on the number of ranks or threads). The Trainer zeroes
        these gradients, so they keep their initial values, which the norm subtracts in eval as in
        training. With dropout the vector is rescaled per sample, and nothing is cancelled exactly.
        """
        if self.drop.p > 0:
            return []
        branches = [branch for block in self.blocks for branch in (block.attn, block.ffn)]
        head = removes_shift(self.final_norm)
        into_d_removed = not self.dual_stream or head  # what enters d meets the head's N(d) alone

        def stream_removed(start: int) -> bool:
            """Whether a vector added to the stream x before branch `start` is subtracted before any read."""
            for branch in branches[start:]:
                if not removes_shift(branch.norm_in):
                    return False
                if removes_shift(branch.norm_add):
                    return True
            return head and not self.dual_stream  # the head reads N(x); with ResiDual, x + N(d)

        found: list[tuple[nn.Parameter, slice]] = []
        if self.pos_emb is not None and stream_removed(0) and into_d_removed:
            found.append((self.pos_emb, ALL))
        for k, branch in enumerate(branches):
            found += branch.sublayer.cancelled_inside()
            after = stream_removed(k + 1)
            # a vector added to the branch output h: in x's sum at this branch and, with ResiDual, in d
            h_removed = (removes_shift(branch.norm_add) or after) and into_d_removed
            if removes_shift(branch.norm_out) or h_removed:
                found += branch.sublayer.output_shift_biases()
            if h_removed:
                found += bias_rows(branch.norm_out)
            if after:
                found += bias_rows(branch.norm_add)
        names = {id(p): name for name, p in self.named_parameters()}
        return [(names[id(p)], p, rows) for p, rows in found]

    def parameter_parts(self) -> dict[str, tuple[int, str]]:
        """Each block parameter's (block index, role), by its name in `named_parameters`: the role declared on
        the innermost module that has one (`declare`), so a norm anywhere in a block counts as NORM."""
        parts: dict[str, tuple[int, str]] = {}
        for i, block in enumerate(self.blocks):
            for path, module in block.named_modules():  # parents before children: the innermost wins
                role = getattr(module, ROLE, None)
                if role is None:
                    continue
                prefix = f"blocks.{i}.{path}." if path else f"blocks.{i}."
                for name, _ in module.named_parameters():
                    parts[prefix + name] = (i, role)
        return parts

    def n_params(self) -> int:
        """Trainable parameters, the tied head counted once."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)
