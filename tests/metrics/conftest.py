"""Fixtures for the metrics tests: a tiny GPT built directly, random token streams, a tiny Trainer."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from trainers import config_trainer

from normlab.model import GPT
from normlab.train.loop import Trainer

VOCAB = 97
TRAIN_CFG = {
    "batch_size": 4,
    "seq_len": 16,
    "grad_accum": 1,
    "grad_clip": 1.0,
    "max_steps": 3,
    "eval_every": 0,
    "eval_batches": 1,
    "ckpt_every": 0,
    "precision": "fp32",
    "flush_every": 10,
}
OPTIM_CFG = {"lr": 3e-3, "min_lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}


def tiny_gpt(norm: str = "ln", placement: str = "pre", n_layers: int = 2, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    spec = {"name": norm, "eps": 1e-5}
    return GPT(VOCAB, 32, 32, 4, n_layers, spec, placement)


@pytest.fixture
def make_gpt() -> Callable[..., GPT]:
    return tiny_gpt


@pytest.fixture
def tokens() -> np.ndarray:
    return np.random.default_rng(0).integers(0, VOCAB, 5000).astype(np.uint16)


@pytest.fixture
def make_trainer(tokens: np.ndarray) -> Callable[..., Trainer]:
    def make(model: GPT, train: dict | None = None, **kwargs) -> Trainer:
        return config_trainer(
            model,
            tokens,
            train={**TRAIN_CFG, **(train or {})},
            optim=OPTIM_CFG,
            warmup_steps=0,
            seed=0,
            **kwargs,
        )

    return make
