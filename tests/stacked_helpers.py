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


def build_model(norm: str, placement: str, seed: int, depth: int = 2, d: int = 16, ulp: bool = False) -> GPT:
    """The GPT of `seed`; with `ulp`, every initial weight moved one float32 step up or down (at random,
    seeded): a rounding-sized difference, which training then grows as it grows the stack's."""
    torch.manual_seed(seed)
    model = GPT(VOCAB, 16, d, 2, depth, norm, placement)
    if ulp:
        g = torch.Generator().manual_seed(seed + 12345)
        with torch.no_grad():
            for p in model.parameters():
                way = torch.where(torch.rand(p.shape, generator=g) < 0.5, -torch.inf, torch.inf)
                p.copy_(torch.nextafter(p, way.to(p.dtype)))
    return model


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


def train_alone(
    norm, placement, cfg, train_tokens, val_tokens, depth=2, d=16, threads=None, ulp=False, fused_head=None
):
    """The run alone; on `threads` torch threads (then set back), from initial weights one ulp off (`ulp`);
    `fused_head` its head's path (None: the CPU's)."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _train_alone(norm, placement, cfg, train_tokens, val_tokens, depth, d, ulp, fused_head)
    finally:
        torch.set_num_threads(before)


def _train_alone(norm, placement, cfg, train_tokens, val_tokens, depth, d, ulp, fused_head=None):
    model = build_model(norm, placement, cfg["seed"], depth, d, ulp=ulp)
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
        fused_head=fused_head,
    )
    rows = RowCollector()
    result = trainer.fit([rows])
    return rows, result, trainer


def train_stacked(norm, placement, cfgs, train_tokens, val_tokens, depth=2, d=16, fused_head=None):
    models = [build_model(norm, placement, c["seed"], depth, d) for c in cfgs]
    trainer = StackedTrainer(
        models,
        cfgs,
        train_tokens,
        val_tokens,
        torch.device("cpu"),
        histograms=[True] * len(cfgs),
        fused_head=fused_head,
    )
    collectors = [RowCollector() for _ in cfgs]
    ended: dict[int, Any] = {}

    def end(m: int, result: Any, error: Any) -> None:  # what the member's run sees, and its parameters then
        ended[m] = (result, error, trainer.model.flat[m].clone())

    results = trainer.fit([[c] for c in collectors], end)
    return collectors, results, trainer, ended
