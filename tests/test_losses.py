"""The training objective: cross-entropy plus z-loss, against hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from trainers import config_trainer

from normlab.model import GPT
from normlab.train.head_loss import objective
from normlab.train.loop import Trainer

LOGITS = [[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]
TARGETS = [2, 1]


def by_hand(c: float) -> tuple[float, float]:
    log_z = [math.log(math.exp(1) + math.exp(2) + math.exp(3)), math.log(3.0)]  # 3.407606, 1.098612
    ce = ((log_z[0] - 3.0) + (log_z[1] - 0.0)) / 2
    return ce + c * (log_z[0] ** 2 + log_z[1] ** 2) / 2, ce


@pytest.mark.parametrize("c", [0.0, 1e-4, 1e-2])
def test_objective_is_cross_entropy_plus_c_mean_log_z_squared(c):
    total, ce = objective(torch.tensor([LOGITS]), torch.tensor([TARGETS]), c)
    expected_total, expected_ce = by_hand(c)
    assert expected_ce == pytest.approx(0.753109, abs=1e-6)
    assert ce.item() == pytest.approx(expected_ce, rel=1e-6)
    assert total.item() == pytest.approx(expected_total, rel=1e-6)


def test_z_loss_gradient_pulls_log_z_towards_zero():
    # d/dlogit_v of c · mean_i (log Z_i)² is 2c · log Z_i · softmax_i(v) / n for position i
    c, n = 0.1, 2
    logits = torch.tensor([LOGITS], requires_grad=True)
    total, ce = objective(logits, torch.tensor([TARGETS]), c)
    (g_total,) = torch.autograd.grad(total, logits, retain_graph=True)
    (g_ce,) = torch.autograd.grad(ce, logits)
    log_z = torch.logsumexp(logits.detach(), -1, keepdim=True)
    expected = 2 * c * log_z * torch.softmax(logits.detach(), -1) / n
    torch.testing.assert_close(g_total - g_ce, expected)


def test_log_z_in_float32_for_bf16_logits():
    logits = torch.tensor([LOGITS], dtype=torch.bfloat16)
    total, _ = objective(logits, torch.tensor([TARGETS]), 1e-2)
    assert total.dtype == torch.float32


def trainer(z_loss: float) -> Trainer:
    torch.manual_seed(0)
    model = GPT(50, 16, 32, 4, 2, {"name": "ln"}, "pre")
    tokens = np.random.default_rng(0).integers(0, 50, 2000).astype(np.uint16)
    train = {"batch_size": 4, "seq_len": 16, "grad_accum": 1, "grad_clip": 0.0, "max_steps": 2}
    train |= {"eval_every": 0, "eval_batches": 1, "ckpt_every": 0, "precision": "fp32", "flush_every": 10}
    optim = {"lr": 1e-3, "min_lr": 1e-4, "weight_decay": 0.0, "z_loss": z_loss}
    return config_trainer(
        model, tokens, train=train, optim=optim, schedule={"name": "constant"}, warmup_steps=0
    )


def test_logged_loss_stays_the_cross_entropy_while_the_gradient_sees_z_loss():
    plain, with_z = trainer(0.0).train_step(update=False), trainer(0.5).train_step(update=False)
    assert with_z[0].item() == pytest.approx(plain[0].item(), rel=1e-6)  # loss: same model, same batch
    assert abs(with_z[2].item() - plain[2].item()) > 1e-3  # grad_norm: z-loss changes the gradient
