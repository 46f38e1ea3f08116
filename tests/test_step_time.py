"""The expected step time a CPU run states first: the arithmetic of the estimate against hand-computed
values, a real measurement that leaves the model and the global RNG as they were, and the pointer to
model=tiny only where a step is slow (its place in the log: tests/lifecycle/test_first_lines.py)."""

from __future__ import annotations

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from normlab.train import flops, step_time


def plain(cfg) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)


def test_estimate_is_overhead_plus_time_per_sequence(make_cfg, monkeypatch):
    cfg = plain(make_cfg("train.batch_size=32", "train.grad_accum=2"))
    model = instantiate(cfg["model"])
    # 1 sequence: 0.3 s, 8 sequences: 1.0 s → 0.1 s a sequence and 0.2 s of overhead per call
    # and one optimizer step: 0.05 s
    monkeypatch.setattr(step_time, "measure", lambda *a, **k: step_time.Timings({1: 0.3, 8: 1.0}, 0.05))
    est = step_time.estimate(model, cfg["model"], cfg["train"], cfg["optim"])
    assert est.seconds == pytest.approx(2 * (0.2 + 32 * 0.1) + 0.05)
    seq = cfg["train"]["seq_len"]
    per_token = flops.flops_per_token(flops.matmul_params(model), 2, seq, cfg["model"]["d_model"])
    assert est.flops_per_step == pytest.approx(per_token * seq * 64)
    assert est.flops_per_s == pytest.approx(per_token * seq / 0.1)


def test_measuring_leaves_the_model_and_the_rng_alone(make_cfg):
    cfg = plain(make_cfg())
    model = instantiate(cfg["model"])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    timings = step_time.measure(
        model, cfg["model"]["vocab_size"], cfg["train"]["seq_len"], (1, 4), cfg["optim"]
    )
    assert timings.passes[1] > 0 and timings.passes[4] > 0 and timings.optimizer > 0
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize(
    ("seconds", "points_at_tiny"), [({1: 0.02, 8: 0.09}, False), ({1: 0.2, 8: 0.9}, True)]
)
def test_a_slow_step_points_at_model_tiny(make_cfg, monkeypatch, seconds, points_at_tiny):
    cfg = plain(make_cfg("model=small", "train.batch_size=32", "train.max_steps=600"))
    monkeypatch.setattr(step_time, "measure", lambda *a, **k: step_time.Timings(seconds, 0.01))
    lines = step_time.cpu_lines(instantiate(cfg["model"]), cfg)
    per_seq = (seconds[8] - seconds[1]) / 7
    expected = 32 * per_seq + seconds[1] - per_seq + 0.01
    assert lines[0].startswith(
        f"expected step time on this CPU: about {expected:.2f} s (d_model 128 × 2 blocks"
    )
    assert f"600 steps take about {step_time.fmt_duration(600 * expected)}" in lines[0]
    assert (len(lines) == 2 and "add model=tiny" in lines[1]) is points_at_tiny


def test_the_tiny_preset_is_not_pointed_at_itself(make_cfg, monkeypatch):
    cfg = plain(make_cfg("model=tiny"))
    monkeypatch.setattr(step_time, "measure", lambda *a, **k: step_time.Timings({1: 1.0, 8: 8.0}, 0.0))
    lines = step_time.cpu_lines(instantiate(cfg["model"]), cfg)
    assert len(lines) == 1 and "model=tiny" not in lines[0]


def test_tiny_settings_follow_the_preset(make_cfg):
    cfg = plain(make_cfg("model=small", "train.seq_len=128"))
    model_cfg, train_cfg = step_time.tiny_settings(cfg["model"], cfg["train"])
    tiny = plain(make_cfg("model=tiny", "train.seq_len=64"))
    assert {k: model_cfg[k] for k in ("d_model", "n_heads", "context_length")} == {
        k: tiny["model"][k] for k in ("d_model", "n_heads", "context_length")
    }
    assert train_cfg["seq_len"] == 64  # seq_len followed the context: it follows the tiny one
