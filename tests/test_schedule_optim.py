"""Learning-rate schedules against hand-computed values; weight-decay groups against the rule."""

import math

import pytest
import torch

from normlab.model import GPT
from normlab.train.optim import decay_split
from normlab.train.schedule import lr_at

KW = {"lr": 1.0, "min_lr": 0.1, "warmup_steps": 4, "max_steps": 14}


def test_warmup_rises_linearly_from_zero_to_lr():
    assert [lr_at(s, schedule="cosine", **KW) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]


def test_cosine_reaches_midpoint_and_floor():
    # after warmup, progress p = (s − 4) / 10: p = 0.5 at s = 9 → min + (lr − min)·½
    assert lr_at(9, schedule="cosine", **KW) == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr_at(14, schedule="cosine", **KW) == pytest.approx(0.1)
    assert lr_at(6, schedule="cosine", **KW) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.2)))


def test_linear_and_constant():
    assert lr_at(9, schedule="linear", **KW) == pytest.approx(0.55)
    assert lr_at(13, schedule="constant", **KW) == 1.0


def test_no_warmup_starts_at_peak():
    assert lr_at(0, schedule="cosine", **{**KW, "warmup_steps": 0}) == 1.0


def test_unknown_schedule_names_choices():
    with pytest.raises(ValueError, match="cosine, linear, constant"):
        lr_at(0, schedule="step", **KW)


@pytest.mark.parametrize("norm", ["ln", "rms", "bn"])
def test_weight_decay_only_on_linear_matrices(norm):
    model = GPT(50, 16, 32, 4, 2, {"name": norm}, "pre")
    decayed, plain = decay_split(model, decay_embeddings=False)
    linear = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not model.head}
    assert {id(p) for p in decayed} == linear
    assert id(model.tok_emb.weight) in {id(p) for p in plain}
    assert len(decayed) + len(plain) == len(list(model.parameters()))
    decayed_all, _ = decay_split(model, decay_embeddings=True)
    assert {id(p) for p in decayed_all} == linear | {id(model.tok_emb.weight), id(model.pos_emb)}
