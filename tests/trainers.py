"""Trainers built the way a run builds them (Trainer.from_config on the composed default config), with the
keys a test varies replaced: no test spells out a whole train or optim group."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf
from torch import nn

from normlab.config.compose import compose_config
from normlab.train.callbacks import Callback
from normlab.train.loop import Trainer


@cache
def _default_config() -> dict[str, Any]:
    return OmegaConf.to_container(compose_config(["logger=none"]), resolve=True)


def default_config() -> dict[str, Any]:
    """The composed default config as plain containers (a fresh copy)."""
    return copy.deepcopy(_default_config())


def config_trainer(
    model: nn.Module,
    train_tokens: np.ndarray,
    val_tokens: np.ndarray | None = None,
    *,
    train: dict[str, Any] | None = None,
    optim: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
    fused_head: bool | None = None,
    **top: Any,
) -> Trainer:
    """A CPU Trainer for `model` (a normlab GPT) from the default config with these train / optim / metrics
    keys changed and the model's norm and placement;
    `top` replaces top-level values (schedule={"name": "constant"}, warmup_steps=0, seed=1, ...);
    `fused_head` the head's path (None: the CPU's fused head; False: the GPU's plain one)."""
    cfg = default_config()
    # the model's own variant, which metrics.model_update=auto asks about
    cfg["norm"]["name"], cfg["placement"]["name"] = model.norm_name, model.placement
    for group, changes in (("train", train), ("optim", optim), ("metrics", metrics)):
        cfg[group].update(changes or {})
    cfg.update(top)
    val = train_tokens if val_tokens is None else val_tokens
    return Trainer.from_config(cfg, model, train_tokens, val, torch.device("cpu"), fused_head=fused_head)


class RowCollector(Callback):
    """Keeps the training rows `fit` reports (`rows`) and its final evaluation row (`evals`)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.evals: list[dict[str, Any]] = []

    def on_step(self, row: dict[str, Any]) -> None:
        self.rows.append(row)

    def on_eval(self, row: dict[str, Any]) -> None:
        self.evals.append(row)
