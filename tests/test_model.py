"""The GPT's variants: formulas, DeepNorm against the paper, init schemes, and causality."""

import math

import pytest
import torch
from torch import nn

from normlab.model import (
    GPT,
    NORMS,
    PLACEMENTS,
    InvalidVariant,
    block_formula,
    check_variant,
)

VALID = [(n, p) for n in NORMS for p in PLACEMENTS if NORMS[n].placements is None or p in NORMS[n].placements]
INVALID = [(n, p) for n in NORMS for p in PLACEMENTS if (n, p) not in VALID]


def make(norm="ln", placement="pre", n_layers=2, d_model=32, **kw):
    kw.setdefault("vocab_size", 50)
    kw.setdefault("context_length", 16)
    return GPT(d_model=d_model, n_heads=4, n_layers=n_layers, norm={"name": norm}, placement=placement, **kw)


def test_thirteen_valid_and_two_invalid_combinations():
    assert len(VALID) == 13
    # 5 norms × 3 placements; deepnorm is defined for post only
    assert sorted(INVALID) == [("deepnorm", "double"), ("deepnorm", "pre")]


@pytest.mark.parametrize(("norm", "placement"), INVALID)
def test_invalid_combination_names_the_valid_choice(norm, placement):
    with pytest.raises(InvalidVariant, match="placement=post"):
        check_variant(norm, placement)
    with pytest.raises(InvalidVariant):
        make(norm, placement)


def test_unknown_names_list_the_choices():
    with pytest.raises(InvalidVariant, match="ln, rms, bn, deepnorm, none"):
        check_variant("layernorm", "pre")
    with pytest.raises(InvalidVariant, match="pre, post, double"):
        check_variant("ln", "sandwich")
    with pytest.raises(InvalidVariant, match="gpt2, xavier"):
        make(init="kaiming")
    with pytest.raises(InvalidVariant, match="none, ln, rms"):
        make(qk_norm="l2")


def test_block_formulas():
    assert block_formula("ln", "pre", 6) == "x ← x + Attn(LN(x)); x ← x + FFN(LN(x))"
    assert block_formula("rms", "post", 6) == "x ← RMS(x + Attn(x)); x ← RMS(x + FFN(x))"
    assert block_formula("bn", "double", 6) == "x ← x + BN(Attn(BN(x))); x ← x + BN(FFN(BN(x)))"
    assert block_formula("none", "pre", 6) == "x ← x + Attn(x); x ← x + FFN(x)"
    # DeepNet decoder-only, N = 18: α = (2·18)^¼ = 6^½ ≈ 2.45; N = 8: α = 16^¼ = 2
    assert block_formula("deepnorm", "post", 18) == "x ← LN(2.45·x + Attn(x)); x ← LN(2.45·x + FFN(x))"
    assert block_formula("deepnorm", "post", 8) == "x ← LN(2.00·x + Attn(x)); x ← LN(2.00·x + FFN(x))"
    assert block_formula("ln", "pre", 6, qk_norm="rms") == (
        "x ← x + Attn(LN(x)); x ← x + FFN(LN(x)); per head: q, k ← RMS(q), RMS(k)"
    )
    assert block_formula("ln", "pre", 6, qk_norm="none") == block_formula("ln", "pre", 6)


def test_final_norm_only_where_the_placement_has_one():
    assert isinstance(make(placement="post").final_norm, nn.Identity)
    assert isinstance(make(placement="pre").final_norm, nn.LayerNorm)
    assert isinstance(make(placement="double").final_norm, nn.LayerNorm)


# DeepNet (Wang et al. 2022), Fig. 2, decoder-only with N layers: α = (2N)^¼, β = (8N)^-¼, worked out by
# hand: N=1: 2^¼ = 1.18921, 8^-¼ = 0.59460; N=6: 12^¼ = 1.86121, 48^-¼ = 0.37992; N=24: 48^¼ = 2.63215,
# 192^-¼ = 0.26864.
@pytest.mark.parametrize(
    ("n_layers", "alpha", "beta"), [(1, 1.18921, 0.59460), (6, 1.86121, 0.37992), (24, 2.63215, 0.26864)]
)
def test_deepnorm_alpha_and_beta_follow_the_paper(n_layers, alpha, beta):
    kind = NORMS["deepnorm"]
    assert kind.residual_scale(n_layers) == pytest.approx(alpha, abs=1e-5)
    assert kind.init_gain(n_layers) == pytest.approx(beta, abs=1e-5)


def test_deepnorm_scales_the_skip_path_by_alpha():
    torch.manual_seed(0)
    model = make("deepnorm", "post", n_layers=6)
    branch = model.blocks[0].attn
    branch.norm_add = nn.Identity()  # look at what enters the norm
    with torch.no_grad():
        branch.sublayer.out.weight.zero_()
        branch.sublayer.out.bias.zero_()
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(branch(x), (2 * 6) ** 0.25 * x)


# DeepNet (Wang et al. 2022), decoder-only, N blocks: β = (8N)^-¼; Fig. 2's deepnorm_init is
# xavier_normal_(w, gain=β) on ffn, v_proj, out_proj and gain 1 on q_proj, k_proj; Xavier-normal std is
# gain · √(2 / (fan_in + fan_out)). The expected stds below are worked out by hand from those formulas:
#   N = 8,  d = 256: β = 64^-¼ = 1/(2√2) = 0.353553
#     q, k (256×256): √(2/512) = 0.0625          v, out: 0.0625 · β = 0.0220971
#     up (1024×256), down (256×1024): √(2/1280) = 0.0395285;  · β = 0.0139754
#   N = 24, d = 128: β = 192^-¼ = 0.268642
#     q, k (128×128): √(2/256) = 0.0883883       v, out: 0.0883883 · β = 0.0237447
#     up, down (512×128): √(2/640) = 0.0559017;  · β = 0.0150176
DEEPNET_STDS = {
    (8, 256): {
        "q": 0.0625,
        "k": 0.0625,
        "v": 0.0220971,
        "out": 0.0220971,
        "up": 0.0139754,
        "down": 0.0139754,
    },
    (24, 128): {
        "q": 0.0883883,
        "k": 0.0883883,
        "v": 0.0237447,
        "out": 0.0237447,
        "up": 0.0150176,
        "down": 0.0150176,
    },
}


@pytest.mark.parametrize(("n_layers", "d"), list(DEEPNET_STDS))
@pytest.mark.parametrize("init", ["gpt2", "xavier"])
def test_deepnorm_init_is_the_papers_xavier_normal_with_gain_beta(init, n_layers, d):
    torch.manual_seed(0)
    model = make("deepnorm", "post", n_layers=n_layers, d_model=d, init=init)  # model.init does not matter
    expected = DEEPNET_STDS[(n_layers, d)]
    for block in (model.blocks[0], model.blocks[n_layers - 1]):
        attn, ffn = block.attn.sublayer, block.ffn.sublayer
        q, k, v = attn.qkv.weight.split(d)
        families = {
            "q": q,
            "k": k,
            "v": v,
            "out": attn.out.weight,
            "up": ffn.up.weight,
            "down": ffn.down.weight,
        }
        for name, w in families.items():
            std = w.std().item()
            assert std == pytest.approx(expected[name], rel=0.03), name
            assert w.mean().item() == pytest.approx(0.0, abs=0.05 * std), name
            # normal, not uniform: a uniform init of this std has no value beyond √3 σ; a normal has 8.3 %
            beyond = (w.abs() > 3**0.5 * std).float().mean().item()
            assert beyond == pytest.approx(0.083, abs=0.01), name
        for lin in (attn.qkv, attn.out, ffn.up, ffn.down):
            assert torch.equal(lin.bias, torch.zeros_like(lin.bias))
    # embeddings keep model.init's rule: N(0, 0.02) for gpt2, N(0, d^-½) for xavier
    emb_std = 0.02 if init == "gpt2" else d**-0.5
    assert model.tok_emb.weight.std().item() == pytest.approx(emb_std, rel=0.05)


def test_gpt2_init_scales_residual_projections():
    n_layers = 12
    model = make(n_layers=n_layers, d_model=256)
    std = 0.02 / math.sqrt(2 * n_layers)
    assert model.blocks[0].attn.sublayer.out.weight.std().item() == pytest.approx(std, rel=0.03)
    assert model.blocks[0].ffn.sublayer.down.weight.std().item() == pytest.approx(std, rel=0.03)
    assert model.blocks[0].ffn.sublayer.up.weight.std().item() == pytest.approx(0.02, rel=0.03)


def test_xavier_init_per_projection_and_scaled_embeddings():
    d = 128
    model = make(init="xavier", d_model=d, embed_scale="sqrt_d")
    bound = math.sqrt(6.0 / (d + d))
    for w in model.blocks[0].attn.sublayer.qkv.weight.split(d):
        assert w.abs().max().item() <= bound
        assert w.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.03)
    assert model.tok_emb.weight.std().item() == pytest.approx(d**-0.5, rel=0.05)
    assert model.embed_scale == pytest.approx(math.sqrt(d))


def test_tied_and_untied_head():
    tied = make()
    assert tied.head.weight is tied.tok_emb.weight
    untied = make(tie_embeddings=False)
    assert untied.head.weight is not untied.tok_emb.weight


def test_sinusoidal_positions_match_vaswani():
    model = make(pos="sinusoidal", d_model=32)
    table = model.pos_table
    pos, i = 5, 3
    assert table[pos, 2 * i].item() == pytest.approx(math.sin(pos / 10000 ** (2 * i / 32)), abs=1e-6)
    assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(pos / 10000 ** (2 * i / 32)), abs=1e-6)
    assert not any("pos" in name for name, _ in model.named_parameters())


@pytest.mark.parametrize(("norm", "placement"), VALID)
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_future_tokens_never_change_past_logits(norm, placement, mode):
    torch.manual_seed(0)
    model = make(norm, placement, n_layers=3)
    if mode == "train":
        model.train()
    else:
        model.train()(torch.randint(0, 50, (4, 16)))  # give bn non-trivial running statistics
        model.eval()
    x = torch.randint(0, 50, (4, 16))
    t = 7
    changed = x.clone()
    changed[:, t + 1 :] = torch.randint(0, 50, (4, 16 - t - 1))
    with torch.no_grad():
        a, b = model(x), model(changed)
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], rtol=0, atol=1e-5)
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :])


def test_the_causality_check_catches_time_pooled_batchnorm():
    # nn.BatchNorm1d over (batch, channels, time) pools statistics over time: the check above must fail.
    torch.manual_seed(0)
    bn = nn.BatchNorm1d(8).train()
    x = torch.randn(4, 8, 16)
    changed = x.clone()
    changed[:, :, 8:] += 5
    assert not torch.allclose(bn(x)[:, :, :8], bn(changed)[:, :, :8])


def test_forward_shape_and_context_limit():
    model = make()
    assert model(torch.randint(0, 50, (3, 16))).shape == (3, 16, 50)
    with pytest.raises(ValueError, match="context_length"):
        model(torch.randint(0, 50, (1, 17)))


def explicit_attention(attn, x: torch.Tensor, norm) -> torch.Tensor:
    """Causal multi-head attention written out head by head, with `norm(z, gain, bias)` on q and k."""
    b, t, d = x.shape
    h = attn.n_heads
    dh = d // h
    q, k, v = torch.nn.functional.linear(x, attn.qkv.weight, attn.qkv.bias).split(d, dim=-1)
    outs = []
    for i in range(h):
        sl = slice(i * dh, (i + 1) * dh)
        qi = norm(q[..., sl], attn.q_norm.weight, getattr(attn.q_norm, "bias", None))
        ki = norm(k[..., sl], attn.k_norm.weight, getattr(attn.k_norm, "bias", None))
        scores = qi @ ki.transpose(-2, -1) / math.sqrt(dh)
        scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
        outs.append(torch.softmax(scores, -1) @ v[..., sl])
    return torch.nn.functional.linear(torch.cat(outs, -1), attn.out.weight, attn.out.bias)


def layer_norm_ref(z, gain, bias):
    mean = z.mean(-1, keepdim=True)
    var = ((z - mean) ** 2).mean(-1, keepdim=True)
    return (z - mean) / torch.sqrt(var + 1e-5) * gain + bias


def rms_norm_ref(z, gain, bias):
    return z / torch.sqrt((z**2).mean(-1, keepdim=True) + 1e-6) * gain


@pytest.mark.parametrize(("qk_norm", "ref"), [("ln", layer_norm_ref), ("rms", rms_norm_ref)])
def test_qk_norm_normalises_each_heads_queries_and_keys(qk_norm, ref):
    torch.manual_seed(0)
    model = make(qk_norm=qk_norm, d_model=32)
    attn = model.blocks[0].attn.sublayer
    assert attn.q_norm.weight.shape == attn.k_norm.weight.shape == (8,)  # d_head, shared by the 4 heads
    with torch.no_grad():
        for p in (*attn.q_norm.parameters(), *attn.k_norm.parameters()):
            p.copy_(torch.randn_like(p))
        x = torch.randn(2, 7, 32)
        torch.testing.assert_close(attn(x), explicit_attention(attn, x, ref), rtol=1e-4, atol=1e-5)


def test_qk_norm_bounds_attention_logits():
    # With unit gains, RMS-normalised q and k have norm √d_head, so |q·k|/√d_head ≤ √d_head (Cauchy–Schwarz)
    # however large the weights grow; without the norm the same weights give logits far above that.
    from normlab.metrics.activations import ActivationCapture

    d_head = 8
    x = torch.randint(0, 50, (2, 16))
    logits = {}
    for qk_norm in ("none", "rms"):
        torch.manual_seed(0)
        model = make(qk_norm=qk_norm, d_model=32)
        with torch.no_grad():
            model.blocks[0].attn.sublayer.qkv.weight.mul_(50.0)
            with ActivationCapture(model) as cap:
                model(x)
        logits[qk_norm] = dict(zip(cap.keys, cap.values().tolist(), strict=True))["attn_max_logit/layer_0"]
    assert logits["rms"] <= math.sqrt(d_head) + 1e-4
    assert logits["none"] > 10 * math.sqrt(d_head)


@pytest.mark.parametrize("qk_norm", ["ln", "rms"])
def test_qk_norm_keeps_causality(qk_norm):
    torch.manual_seed(0)
    model = make("rms", "pre", qk_norm=qk_norm)
    x = torch.randint(0, 50, (2, 16))
    changed = x.clone()
    changed[:, 9:] = torch.randint(0, 50, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(model(x)[:, :9], model(changed)[:, :9], rtol=0, atol=1e-5)
