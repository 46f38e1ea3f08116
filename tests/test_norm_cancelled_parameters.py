"""Parameters whose every effect BatchNorm subtracts are held at their initial values.

BatchNorm in training subtracts the batch mean of each position and feature, so a vector added to every
sequence of the batch is gone after the next BN. The learned position embedding (pre, double) and the
biases that end a sublayer add nothing else: their true gradient is zero, autograd returns rounding, and
AdamW turned that into lr-sized random steps. The running means lagged behind that walk, so a 2-rank
run's val_loss differed from a 1-rank run's by 1.8e-4 relative (tests/test_distributed.py). The reference
here is the definition, not our list: perturbing a listed parameter must leave the training-mode loss as
it is, and perturbing any other bias or embedding row must change it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from trainers import config_trainer

from normlab.model import GPT, PLACEMENTS

VOCAB, SEQ, D = 50, 16, 32


def make(placement: str, norm: str = "bn", **kw) -> GPT:
    torch.manual_seed(0)
    return GPT(VOCAB, SEQ, D, 4, 2, {"name": norm}, placement, **kw)


def train_loss(model: GPT, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return F.cross_entropy(model.train()(x).view(-1, VOCAB), y.reshape(-1)).item()


def perturbed(model: GPT, param: torch.nn.Parameter, rows: slice, x, y) -> float:
    """The training-mode loss with N(0, 1) added to these rows, then restored."""
    saved = param.detach().clone()
    with torch.no_grad():
        param[rows] += torch.randn_like(param[rows])
    try:
        return train_loss(model, x, y)
    finally:
        with torch.no_grad():
            param.copy_(saved)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randint(VOCAB, (8, SEQ), generator=g), torch.randint(VOCAB, (8, SEQ), generator=g)


def away_from_init(model: GPT) -> GPT:
    """N(0, 1) added to every parameter: the cancellation holds for any weights, and away from the init
    (where attention is nearly uniform) every other bias changes the loss clearly."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g))
    return model


@pytest.mark.parametrize("placement", list(PLACEMENTS))
def test_listed_parameters_do_not_change_the_training_loss_and_the_others_do(placement):
    # in float64, so that "cancelled" means exactly, whatever a placement's rounding in float32 amounts to
    model, (x, y) = away_from_init(make(placement)).double(), batch()
    base = train_loss(model, x, y)
    # listed: float64 rounding (below 1e-15·loss when measured); the others change the loss clearly
    rounding, effect = 1e-12 * base, 2e-5 * base
    cancelled = model.norm_cancelled_parameters()
    assert cancelled  # every placement has sublayer biases that a BN removes
    for name, param, rows in cancelled:
        assert abs(perturbed(model, param, rows, x, y) - base) < rounding, name
    listed = {(id(p), r.start) for _, p, r in cancelled}
    for name, param in model.named_parameters():
        if not (name.endswith("bias") or name.endswith("pos_emb")):
            continue
        # the key bias adds the same amount to every score of a query: softmax ignores it, whatever the norm
        parts = [slice(0, D), slice(2 * D, 3 * D)] if name.endswith("qkv.bias") else [slice(None)]
        for rows in parts:
            if (id(param), rows.start) not in listed:
                assert abs(perturbed(model, param, rows, x, y) - base) > effect, (name, rows)


def test_nothing_is_cancelled_without_batchnorm_or_with_dropout():
    assert make("pre", norm="ln").norm_cancelled_parameters() == []
    assert make("pre", dropout=0.1).norm_cancelled_parameters() == []
    names = [n for n, _, _ in make("post").norm_cancelled_parameters()]
    assert "pos_emb" not in names  # post: the first attention reads the embedding unnormalised


def held_after_training(zero_cancelled: bool) -> tuple[float, float]:
    """(largest change of a cancelled parameter, smallest change of a BN-read weight) after 10 AdamW steps."""
    model = make("pre")
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    tokens = np.random.default_rng(0).integers(0, VOCAB, 5000)
    train = {"batch_size": 8, "seq_len": SEQ, "max_steps": 10, "eval_every": 0, "ckpt_every": 0}
    trainer = config_trainer(
        model, tokens, train=train, optim={"lr": 3e-3}, metrics={"enabled": False}, warmup_steps=0
    )
    if not zero_cancelled:
        trainer.cancelled_grads = []
    trainer.fit()
    params = dict(model.named_parameters())
    moved = max(
        (params[n][rows] - start[n][rows]).abs().max().item()
        for n, _, rows in model.norm_cancelled_parameters()
    )
    weight = (params["blocks.0.attn.sublayer.qkv.weight"] - start["blocks.0.attn.sublayer.qkv.weight"]).abs()
    return moved, weight.max().item()


def test_the_trainer_holds_them_where_adam_would_walk_them_on_rounding():
    walked, _ = held_after_training(zero_cancelled=False)
    assert walked > 3e-3  # the defect: rounding-sized gradients, steps of about lr each
    held, trained = held_after_training(zero_cancelled=True)
    assert held == 0.0 and trained > 3e-3
