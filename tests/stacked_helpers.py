"""A stack of members and the same runs trained alone, built the way runs build them, for the stacked tests."""

from __future__ import annotations

from typing import Any

import torch
from trainers import RowCollector, config_trainer, default_config

from normlab.model.gpt import GPT
from normlab.train.stacked.trainer import StackedTrainer

VOCAB = 64


def tokens(n: int = 4000, seed: int = 0) -> Any:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (n,), generator=g).numpy().astype("int64")


def build_model(norm: str, placement: str, seed: int, depth: int = 2, d: int = 16) -> GPT:
    torch.manual_seed(seed)
    return GPT(VOCAB, 16, d, 2, depth, norm, placement)


def member_config(
    norm: str, placement: str, member: dict[str, Any], common: dict[str, Any]
) -> dict[str, Any]:
    """The composed default config with this member's and the common changes (group: {key: value}, or
    a top-level key: value)."""
    cfg = default_config()
    cfg["norm"]["name"], cfg["placement"]["name"] = norm, placement
    for changes in (common, member):
        for key, value in changes.items():
            if isinstance(value, dict):
                cfg[key].update(value)
            else:
                cfg[key] = value
    return cfg


def train_alone(norm, placement, cfg, train_tokens, val_tokens, depth=2, d=16):
    model = build_model(norm, placement, cfg["seed"], depth, d)
    trainer = config_trainer(
        model,
        train_tokens,
        val_tokens,
        train=cfg["train"],
        optim=cfg["optim"],
        metrics=cfg["metrics"],
        schedule=cfg["schedule"],
        warmup_steps=cfg["warmup_steps"],
        seed=cfg["seed"],
        spikes=cfg["spikes"],
        divergence=cfg["divergence"],
    )
    rows = RowCollector()
    result = trainer.fit([rows])
    return rows, result, trainer


def train_stacked(norm, placement, cfgs, train_tokens, val_tokens, depth=2, d=16):
    models = [build_model(norm, placement, c["seed"], depth, d) for c in cfgs]
    trainer = StackedTrainer(
        models, cfgs, train_tokens, val_tokens, torch.device("cpu"), histograms=[True] * len(cfgs)
    )
    collectors = [RowCollector() for _ in cfgs]
    ended: dict[int, Any] = {}

    def end(m: int, result: Any, error: Any) -> None:  # what the member's run sees, and its parameters then
        ended[m] = (result, error, trainer.model.flat[m].clone())

    results = trainer.fit([[c] for c in collectors], end)
    return collectors, results, trainer, ended
