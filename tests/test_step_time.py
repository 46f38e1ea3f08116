"""model=tiny's FLOPs against a run's (the hint a slow CPU run gets with its measured step time): the
arithmetic against FLOPs counted from the built models (normlab.train.flops.matmul_params), and the tiny
preset never pointed at itself. The step time itself is measured on the first real steps:
tests/test_progress.py and tests/lifecycle/test_first_lines.py."""

from __future__ import annotations

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from normlab.train import flops, step_time


def plain(cfg) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)


@pytest.mark.parametrize("tie", [True, False])
def test_flops_per_step_counts_the_built_model(make_cfg, tie):
    cfg = plain(
        make_cfg("model=small", "train.batch_size=4", "train.grad_accum=3", f"model.tie_embeddings={tie}")
    )
    model = instantiate(cfg["model"])
    seq_len, d = cfg["train"]["seq_len"], cfg["model"]["d_model"]
    per_token = flops.flops_per_token(flops.matmul_params(model), model.n_layers, seq_len, d)
    expected = per_token * seq_len * 4 * 3
    # parameter_count leaves out a few norm gains: within a tenth of a percent
    assert step_time.flops_per_step(cfg["model"], cfg["train"]) == pytest.approx(expected, rel=1e-3)


def test_tiny_ratio_is_the_two_models_flops(make_cfg):
    cfg = plain(make_cfg("model=small", "train.seq_len=128"))
    tiny = plain(make_cfg("model=tiny", "train.seq_len=64"))
    ratio = step_time.tiny_flops_ratio(cfg)
    expected = step_time.flops_per_step(cfg["model"], cfg["train"]) / step_time.flops_per_step(
        tiny["model"], tiny["train"]
    )
    assert ratio == pytest.approx(expected) and ratio > 4


def test_the_tiny_preset_is_not_pointed_at_itself(make_cfg):
    assert step_time.tiny_flops_ratio(plain(make_cfg("model=tiny"))) is None


def test_tiny_settings_follow_the_preset(make_cfg):
    cfg = plain(make_cfg("model=small", "train.seq_len=128"))
    model_cfg, train_cfg = step_time.tiny_settings(cfg["model"], cfg["train"])
    tiny = plain(make_cfg("model=tiny", "train.seq_len=64"))
    assert {k: model_cfg[k] for k in ("d_model", "n_heads", "context_length")} == {
        k: tiny["model"][k] for k in ("d_model", "n_heads", "context_length")
    }
    assert train_cfg["seq_len"] == 64  # seq_len followed the context: it follows the tiny one
