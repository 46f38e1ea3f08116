"""Each norm against torch.nn.functional's reference implementation."""

import pytest
import torch
import torch.nn.functional as F

from normlab.model.norms import NORMS, CausalBatchNorm, RMSNorm, build_norm


def randomise_affine(module: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p))


def test_every_registered_norm_builds():
    for name in NORMS:
        build_norm(16, {"name": name})(torch.randn(2, 3, 16))


def test_layernorm_matches_functional():
    torch.manual_seed(0)
    norm = build_norm(32, {"name": "ln", "eps": 1e-5})
    randomise_affine(norm)
    x = torch.randn(4, 7, 32) * 3 + 1
    torch.testing.assert_close(norm(x), F.layer_norm(x, (32,), norm.weight, norm.bias, 1e-5))


def test_layernorm_without_bias():
    norm = build_norm(8, {"name": "ln", "bias": False})
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
    norm = CausalBatchNorm(16, eps=1e-5, momentum=0.1)
    randomise_affine(norm)
    x = torch.randn(8, 5, 16) * 2 + 3
    out = norm.train()(x)
    for t in range(5):
        ref = F.batch_norm(x[:, t], None, None, norm.weight, norm.bias, training=True, eps=1e-5)
        torch.testing.assert_close(out[:, t], ref)


def test_batchnorm_running_stats_and_eval_match_functional():
    torch.manual_seed(0)
    norm = CausalBatchNorm(16, momentum=0.1)
    x = torch.randn(8, 5, 16) * 2 + 3
    norm.train()(x)
    # one update from (0, 1): running = 0.9·old + 0.1·(position-averaged batch mean / unbiased variance)
    mean = x.mean(0).mean(0)
    var = x.var(0, unbiased=True).mean(0)
    torch.testing.assert_close(norm.running_mean, 0.1 * mean)
    torch.testing.assert_close(norm.running_var, 0.9 + 0.1 * var)
    y = torch.randn(3, 4, 16)
    ref = F.batch_norm(
        y.reshape(-1, 16), norm.running_mean, norm.running_var, norm.weight, norm.bias, training=False
    )
    torch.testing.assert_close(norm.eval()(y), ref.view(3, 4, 16))


def test_none_is_identity():
    x = torch.randn(2, 3, 4)
    assert torch.equal(build_norm(4, {"name": "none"})(x), x)
