"""Each norm against torch.nn.functional's reference implementation."""

import math

import pytest
import torch
import torch.nn.functional as F

from normlab.model.batch_norm import CausalBatchNorm
from normlab.model.norms import NORMS, RMSNorm, build_norm


def randomise_affine(module: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p))


def test_every_registered_norm_builds_and_keeps_the_shape():
    x = torch.randn(2, 3, 16) * 5 + 2
    for name in NORMS:
        y = build_norm(16, {"name": name}, context_length=8)(x)
        assert y.shape == x.shape and torch.isfinite(y).all(), name
        if name == "none":
            assert torch.equal(y, x)
        elif name == "dyt":  # no statistics: tanh bounds each feature in (−1, 1) instead
            assert y.abs().max().item() < 1.0
        else:  # a normalisation at init brings features to unit scale
            assert y.pow(2).mean().sqrt().item() == pytest.approx(1.0, abs=0.05), name


def test_layernorm_matches_functional():
    torch.manual_seed(0)
    norm = build_norm(32, {"name": "ln", "eps": 1e-5}, 8)
    randomise_affine(norm)
    x = torch.randn(4, 7, 32) * 3 + 1
    torch.testing.assert_close(norm(x), F.layer_norm(x, (32,), norm.weight, norm.bias, 1e-5))


def test_layernorm_without_bias():
    norm = build_norm(8, {"name": "ln", "bias": False}, 8)
    assert norm.bias is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_matches_functional(dtype):
    torch.manual_seed(0)
    norm = RMSNorm(32, eps=1e-6)
    randomise_affine(norm)
    x = (torch.randn(4, 7, 32) * 5).to(dtype)
    expected = F.rms_norm(x.float(), (32,), norm.weight, eps=1e-6).to(dtype)
    out = norm(x)
    assert out.dtype == dtype
    torch.testing.assert_close(out, expected)


def test_rmsnorm_statistics_in_float32_for_bf16():
    # Squaring in bf16 loses precision; the reference computed in fp32 and the naive bf16 one must differ
    # somewhere while ours matches the fp32 one exactly.
    torch.manual_seed(1)
    norm = RMSNorm(256)
    x = (torch.randn(64, 256) * 30 + 7).to(torch.bfloat16)
    fp32_ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
    assert torch.equal(norm(x), fp32_ref)


def test_rmsnorm_gain_initialised_to_one():
    assert torch.equal(RMSNorm(10).weight, torch.ones(10))


def test_batchnorm_train_matches_functional_per_position():
    torch.manual_seed(0)
    norm = CausalBatchNorm(16, context_length=8, eps=1e-5, momentum=0.1)
    randomise_affine(norm)
    x = torch.randn(8, 5, 16) * 2 + 3
    out = norm.train()(x)
    for t in range(5):
        ref = F.batch_norm(x[:, t], None, None, norm.weight, norm.bias, training=True, eps=1e-5)
        torch.testing.assert_close(out[:, t], ref)


def test_batchnorm_over_batch_and_sequence_matches_functional_pooled_statistics():
    """norm.stats=batch_seq: one mean and variance per feature over batch × positions (Shen et al. 2020),
    as F.batch_norm computes them for the (batch·time, features) matrix; evaluation uses the pooled running
    statistics at every position."""
    torch.manual_seed(0)
    norm = build_norm(16, {"name": "bn", "stats": "batch_seq", "momentum": 1.0}, 8)
    randomise_affine(norm)
    x = torch.randn(4, 6, 16) * 2 + 3
    out = norm.train()(x)
    flat = x.reshape(-1, 16)
    ref = F.batch_norm(flat, None, None, norm.weight, norm.bias, training=True, eps=1e-5).view_as(x)
    torch.testing.assert_close(out, ref)
    n = flat.shape[0]  # momentum 1: the running statistics are this batch's (unbiased variance)
    for row in (0, 5, 7):  # every position, seen or not, has the pooled statistics
        torch.testing.assert_close(norm.running_mean[row], flat.mean(0))
        torch.testing.assert_close(norm.running_var[row], flat.var(0, unbiased=False) * n / (n - 1))
    later = x.clone()
    later[:, 3:] += 5  # pooling reaches later positions in training, not in evaluation
    assert not torch.allclose(norm.train()(later)[:, :3], norm.train()(x)[:, :3])
    norm.eval()
    torch.testing.assert_close(norm(later)[:, :3], norm(x)[:, :3])


def test_batchnorm_keeps_running_statistics_per_position_and_evaluates_with_them():
    torch.manual_seed(0)
    norm = CausalBatchNorm(16, context_length=8, momentum=0.1)
    assert norm.running_mean.shape == norm.running_var.shape == (8, 16)
    # positions with different statistics: position t has mean t and std 1 + t
    x = torch.randn(32, 5, 16) * (1 + torch.arange(5.0)).view(1, 5, 1) + torch.arange(5.0).view(1, 5, 1)
    norm.train()(x)
    # one update from (0, 1), position by position, like torch's BatchNorm on that position alone
    for t in range(5):
        ref = torch.nn.BatchNorm1d(16, momentum=0.1)
        ref.train()(x[:, t])
        torch.testing.assert_close(norm.running_mean[t], ref.running_mean)
        torch.testing.assert_close(norm.running_var[t], ref.running_var)
    # positions beyond the batch's length keep the initial statistics
    assert torch.equal(norm.running_mean[5:], torch.zeros(3, 16))
    assert torch.equal(norm.running_var[5:], torch.ones(3, 16))
    # eval mode: position t is normalised with position t's running statistics
    randomise_affine(norm)
    y = torch.randn(3, 4, 16)
    out = norm.eval()(y)
    for t in range(4):
        ref = F.batch_norm(
            y[:, t], norm.running_mean[t], norm.running_var[t], norm.weight, norm.bias, training=False
        )
        torch.testing.assert_close(out[:, t], ref)


def test_batchnorm_running_statistics_converge_to_the_per_position_population():
    # fed the same distribution again and again, running mean/var approach each position's own values
    torch.manual_seed(1)
    norm = CausalBatchNorm(4, context_length=3, momentum=0.1).train()
    mean = torch.tensor([[-2.0], [0.0], [3.0]])  # per position
    std = torch.tensor([[0.5], [1.0], [2.0]])
    for _ in range(300):
        norm(torch.randn(256, 3, 4) * std + mean)
    torch.testing.assert_close(norm.running_mean, mean.expand(3, 4), atol=0.15, rtol=0)
    torch.testing.assert_close(norm.running_var, (std**2).expand(3, 4), atol=0.15 * 4, rtol=0.1)


def test_none_is_identity():
    x = torch.randn(2, 3, 4)
    assert torch.equal(build_norm(4, {"name": "none"}, 8)(x), x)


# DyT (Zhu et al. 2025): y = γ·tanh(α·x) + β. Hand-written gradients for an upstream gradient G:
#   ∂L/∂x = G·γ·α·(1 − tanh²(αx)),  ∂L/∂α = Σ G·γ·x·(1 − tanh²(αx)),  ∂L/∂γ = Σ G·tanh(αx),  ∂L/∂β = Σ G.
def test_dyt_matches_the_papers_formula_in_values_and_gradients():
    torch.manual_seed(0)
    norm = build_norm(16, {"name": "dyt", "alpha_init": 0.7}, 8)
    assert norm.alpha.item() == pytest.approx(0.7)
    assert torch.equal(norm.weight, torch.ones(16)) and torch.equal(norm.bias, torch.zeros(16))
    randomise_affine(norm)
    x = (torch.randn(3, 5, 16) * 3).requires_grad_()
    g = torch.randn(3, 5, 16)
    y = norm(x)
    a, gamma, beta = norm.alpha.detach(), norm.weight.detach(), norm.bias.detach()
    t = torch.tanh(a * x.detach())
    torch.testing.assert_close(y, gamma * t + beta)
    (y * g).sum().backward()
    sech2 = 1 - t**2
    torch.testing.assert_close(x.grad, g * gamma * a * sech2)
    torch.testing.assert_close(norm.alpha.grad, (g * gamma * x.detach() * sech2).sum().view(1))
    torch.testing.assert_close(norm.weight.grad, (g * t).sum((0, 1)))
    torch.testing.assert_close(norm.bias.grad, g.sum((0, 1)))


def test_dyt_without_bias_and_squashing_large_inputs():
    norm = build_norm(4, {"name": "dyt", "bias": False}, 8)
    assert norm.bias is None and norm.alpha.item() == 0.5  # the paper's default α₀
    y = norm(torch.tensor([[1e6, -1e6, 0.0, 2.0]]))
    torch.testing.assert_close(y, torch.tensor([[1.0, -1.0, 0.0, math.tanh(1.0)]]))


# ScaleNorm (Nguyen & Salazar 2019): y = g·x/‖x‖, g one scalar, √d at init. Hand-written gradients:
#   ∂L/∂x = (g/‖x‖)·(G − x·(x·G)/‖x‖²),  ∂L/∂g = Σ G·x/‖x‖.
def test_scalenorm_matches_the_papers_formula_in_values_and_gradients():
    torch.manual_seed(0)
    norm = build_norm(16, {"name": "scalenorm"}, 8)
    assert [p.numel() for p in norm.parameters()] == [1]
    assert norm.scale.item() == pytest.approx(4.0)  # √16
    with torch.no_grad():
        norm.scale.fill_(2.5)
    x = (torch.randn(3, 5, 16) * 3 + 1).requires_grad_()
    g = torch.randn(3, 5, 16)
    y = norm(x)
    xd = x.detach()
    length = xd.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(y, 2.5 * xd / length)
    (y * g).sum().backward()
    expected_dx = 2.5 / length * (g - xd * (xd * g).sum(-1, keepdim=True) / length**2)
    torch.testing.assert_close(x.grad, expected_dx)
    torch.testing.assert_close(norm.scale.grad, (g * xd / length).sum())


def test_scalenorm_clamps_a_tiny_norm_at_eps_and_keeps_the_dtype():
    norm = build_norm(4, {"name": "scalenorm", "eps": 1e-5}, 8)
    x = torch.full((1, 4), 1e-9)
    torch.testing.assert_close(norm(x), 2.0 * x / 1e-5)  # g = √4, ‖x‖ = 2e-9 < eps
    assert norm(torch.randn(2, 4, dtype=torch.bfloat16)).dtype == torch.bfloat16


def test_scalenorm_and_batchnorm_keep_float64_as_rmsnorm_does():
    """Computed in at least float32: float64 input is normalised in float64 (hand-written formulas in float64,
    to 1e-12), float32 and bfloat16 in float32."""
    torch.manual_seed(0)
    x = torch.randn(4, 3, 16, dtype=torch.float64) * 3 + 1
    scale = build_norm(16, {"name": "scalenorm"}, 8)
    y = scale(x)
    assert y.dtype == torch.float64
    expected = 4.0 * x / x.norm(dim=-1, keepdim=True)  # g = √16
    torch.testing.assert_close(y, expected, rtol=1e-12, atol=1e-12)
    bn = build_norm(16, {"name": "bn"}, 8)
    y = bn(x)
    assert y.dtype == torch.float64
    mean = x.mean(0)
    var = ((x - mean) ** 2).mean(0)
    torch.testing.assert_close(y, (x - mean) / torch.sqrt(var + 1e-5), rtol=1e-12, atol=1e-12)
    bn.eval()  # the running statistics (float32 buffers) after one step of momentum 0.1, unbiased variance
    torch.testing.assert_close(bn.running_mean[:3].double(), 0.1 * mean, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(bn.running_var[:3].double(), 0.9 + 0.1 * var * 4 / 3, rtol=1e-6, atol=1e-6)
    running_mean, running_var = bn.running_mean[:3].double(), bn.running_var[:3].double()
    expected = (x - running_mean) / torch.sqrt(running_var + 1e-5)
    torch.testing.assert_close(bn(x), expected, rtol=1e-12, atol=1e-12)
    rms = RMSNorm(16)
    assert rms(x).dtype == torch.float64  # the precedent


def test_dyt_alpha_per_slot_follows_the_authors_llama_recipe():
    """norm.alpha_attn / alpha_ffn / alpha_final set α at init in the attention branch's, the FFN branch's
    and the final norm (jiachenzhu/DyT other_tasks/LLaMA: 0.8 / 0.2 / 0.2 at 7B); unset, alpha_init."""
    from normlab.model import GPT

    spec = {
        "name": "dyt",
        "alpha_init": 0.5,
        "alpha_attn": 0.8,
        "alpha_ffn": 0.2,
        "alpha_final": 0.3,
        "bias": False,
    }
    for placement in ("pre", "double"):
        model = GPT(50, 16, 32, 4, 2, norm=spec, placement=placement)
        for block in model.blocks:
            attn = [m for m in (block.attn.norm_in, block.attn.norm_out) if hasattr(m, "alpha")]
            ffn = [m for m in (block.ffn.norm_in, block.ffn.norm_out) if hasattr(m, "alpha")]
            assert attn and ffn
            assert all(m.alpha.item() == pytest.approx(0.8) and m.bias is None for m in attn)
            assert all(m.alpha.item() == pytest.approx(0.2) for m in ffn)
        assert model.final_norm.alpha.item() == pytest.approx(0.3)
    plain = GPT(50, 16, 32, 4, 2, norm={"name": "dyt", "alpha_init": 0.7}, placement="pre")
    alphas = [
        m.alpha.item()
        for m in plain.modules()
        if hasattr(m, "alpha") and isinstance(m.alpha, torch.nn.Parameter)
    ]
    assert alphas == pytest.approx([0.7] * 5)  # 2 blocks × 2 branches + the final norm
