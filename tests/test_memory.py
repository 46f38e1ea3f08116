"""The memory check before a run allocates anything: the parameter count against the built model's, and the
refusal sentence for a run that cannot fit."""

from __future__ import annotations

import pytest
import torch
from hydra.utils import instantiate

from normlab.config import checked
from normlab.train import memory


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["model=small", "depth=6"],
        ["model.tie_embeddings=false", "model.pos=sinusoidal"],
        ["model.bias=false", "model.ffn_mult=2", "norm=rms"],
        ["norm=none", "placement=post"],
    ],
)
def test_parameter_count_is_the_models(make_cfg, overrides):
    cfg = checked(make_cfg(*overrides))
    built = instantiate(cfg["model"]).n_params()
    estimate = memory.parameter_count(cfg["model"])
    assert abs(estimate - built) <= 0.01 * built, (estimate, built)  # norm gains and biases aside


def test_the_estimate_counts_state_activations_and_windows(make_cfg):
    cfg = checked(make_cfg("train.batch_size=4", "train.seq_len=16"))
    est = memory.estimate(cfg)
    assert est.model_state == 16 * est.params  # fp32 weight, gradient, AdamW's two moments
    d, layers = cfg["model"]["d_model"], cfg["model"]["n_layers"]
    assert est.activations == 4 * 16 * layers * (8 + 2 * cfg["model"]["ffn_mult"]) * d * 4
    assert est.windows == 4 * 17 * 16
    assert memory.estimate(cfg, world_size=2).windows == 2 * est.windows  # every rank draws the global batch


def test_a_batch_too_big_is_refused_naming_the_batch(make_cfg):
    cfg = checked(make_cfg("train.batch_size=100000000"))
    problem = memory.refusal(cfg, memory.estimate(cfg), host=16 * memory.GIB, device=None)
    assert problem is not None and problem.key == "train.batch_size"
    text = str(problem)
    assert text.startswith("train.batch_size=100000000 (with train.seq_len=32) needs at least ")
    assert "but this machine has 16.0 GiB available; lower train.batch_size" in text


def test_a_model_too_big_is_refused_naming_its_width(make_cfg):
    cfg = checked(make_cfg("model.d_model=4194304", "model.n_heads=4"))
    problem = memory.refusal(cfg, memory.estimate(cfg), host=64 * memory.GIB, device=None)
    assert problem is not None and problem.key == "model.d_model"
    assert str(problem).startswith("model.d_model=4194304 (with depth=2) needs at least ")


def test_on_a_gpu_the_windows_count_against_the_host(make_cfg):
    cfg = checked(make_cfg("train.batch_size=1000000"))
    est = memory.estimate(cfg)
    assert (
        memory.refusal(cfg, est, host=10 * est.windows, device=10 * (est.model_state + est.activations))
        is None
    )
    problem = memory.refusal(cfg, est, host=est.windows // 2, device=10 * est.total)
    assert problem is not None and "this machine has" in str(problem) and "token windows" in str(problem)
    problem = memory.refusal(cfg, est, host=10 * est.total, device=est.activations // 2)
    assert problem is not None and "the GPU has" in str(problem)


def test_nothing_known_nothing_refused(make_cfg):
    cfg = checked(make_cfg("train.batch_size=100000000"))
    assert memory.refusal(cfg, memory.estimate(cfg), host=None, device=None) is None


def test_a_tiny_run_fits_here(make_cfg):
    memory.check_fits(checked(make_cfg()), torch.device("cpu"))  # does not raise
    assert memory.host_available() is None or memory.host_available() > 0


def test_allocation_failures_are_recognised_through_wrappers():
    try:
        try:
            raise MemoryError("Unable to allocate 48.4 GiB")
        except MemoryError as e:
            raise RuntimeError("Error in call to target 'normlab.model.GPT'") from e
    except RuntimeError as wrapped:
        assert memory.out_of_memory(wrapped)
    assert memory.out_of_memory(RuntimeError("[enforce fail] DefaultCPUAllocator: not enough memory"))
    assert not memory.out_of_memory(RuntimeError("shape mismatch"))


def test_a_model_too_deep_for_any_batch_is_refused_naming_the_depth(make_cfg):
    """The issue's `depth=100000` with its tiny settings (d_model 32, batch 4, window 32): activations are
    most of what is needed, but even train.batch_size=1 does not fit, so "lower train.batch_size" (what main
    said) only led to a second refusal naming the depth (issue 39, point 10)."""
    overrides = ("depth=100000", "model.d_model=32", "model.n_heads=2", "train.batch_size=4")
    cfg = checked(make_cfg(*overrides))
    est = memory.estimate(cfg)
    host = est.model_state + est.activations // 8  # more than the model, less than it with one sequence
    assert est.activations > est.model_state and est.model_state * 2 < est.total
    problem = memory.refusal(cfg, est, host=host, device=None)
    assert problem is not None and problem.key == "depth", str(problem)
    assert str(problem).endswith("; lower depth or model.d_model.")
    # where one sequence does fit, the batch is still the one to lower
    problem = memory.refusal(cfg, est, host=est.model_state + est.activations // 2, device=None)
    assert problem is not None and problem.key == "train.batch_size"
