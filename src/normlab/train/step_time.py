"""How much lighter model=tiny is than a run's model: the hint a slow CPU run gets with its first measured
step time (normlab.train.progress).

A step's cost is its FLOPs, 6·N + 12·L·T·d per token (normlab.train.flops), N from the model config
(normlab.train.memory.parameter_count, position embeddings and an untied token embedding left out) — no model is built and nothing is
timed: the step time itself is measured on the run's first real steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from normlab.model.config import SIZES
from normlab.train import flops
from normlab.train.memory import parameter_count

TINY = "tiny"  # the size preset meant for CPUs (model=tiny: normlab.model.config.SIZES)


def tiny_settings(
    model_cfg: Mapping[str, Any], train_cfg: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's model and train settings with the tiny preset's size (model=tiny) instead:
    its width, heads and context, and a sequence length that fits that context."""
    tiny = dict(SIZES[TINY][1])  # what model=tiny changes: its width, heads and context
    context = int(tiny["context_length"])
    seq_len = int(train_cfg["seq_len"])
    same = seq_len == int(model_cfg["context_length"])  # train.seq_len follows model.context_length
    return {**model_cfg, **tiny}, {**train_cfg, "seq_len": context if same else min(seq_len, context)}


def flops_per_step(model_cfg: Mapping[str, Any], train_cfg: Mapping[str, Any]) -> float:
    """Training FLOPs of one optimizer step of this model and batch (position embeddings left out of N)."""
    d, seq_len = int(model_cfg["d_model"]), int(train_cfg["seq_len"])
    n = parameter_count(model_cfg)
    if model_cfg.get("pos", "learned") == "learned":
        n -= int(model_cfg["context_length"]) * d
    if not model_cfg.get("tie_embeddings", True):  # an untied token embedding is a lookup, not a matmul
        n -= int(model_cfg["vocab_size"]) * d
    tokens = int(train_cfg["batch_size"]) * int(train_cfg.get("grad_accum", 1)) * seq_len
    return flops.flops_per_token(n, int(model_cfg["n_layers"]), seq_len, d) * tokens


def tiny_flops_ratio(cfg: Mapping[str, Any]) -> float | None:
    """This run's FLOPs per step over the same run's with model=tiny; None when the model is the tiny size."""
    model_cfg, train_cfg = cfg["model"], cfg["train"]
    tiny_model, tiny_train = tiny_settings(model_cfg, train_cfg)
    if all(tiny_model[k] == model_cfg[k] for k in ("d_model", "context_length", "n_heads")):
        return None
    return flops_per_step(model_cfg, train_cfg) / flops_per_step(tiny_model, tiny_train)
