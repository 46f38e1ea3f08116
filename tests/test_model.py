"""The GPT's variants: formulas, DeepNorm against the paper, init schemes, and causality."""

import math

import pytest
import torch
from torch import nn

from normlab.model import GPT, NORMS, PLACEMENTS, InvalidVariant, block_formula, check_variant

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


def test_block_formulas():
    assert block_formula("ln", "pre", 6) == "x ← x + Attn(LN(x)); x ← x + FFN(LN(x))"
    assert block_formula("rms", "post", 6) == "x ← RMS(x + Attn(x)); x ← RMS(x + FFN(x))"
    assert block_formula("bn", "double", 6) == "x ← x + BN(Attn(BN(x))); x ← x + BN(FFN(BN(x)))"
    assert block_formula("none", "pre", 6) == "x ← x + Attn(x); x ← x + FFN(x)"
    # DeepNet decoder-only, N = 18: α = (2·18)^¼ = 6^½ ≈ 2.45
    assert block_formula("deepnorm", "post", 18) == "x ← LN(2.45·x + Attn(x)); x ← LN(2.45·x + FFN(x))"


def test_final_norm_only_where_the_placement_has_one():
    assert isinstance(make(placement="post").final_norm, nn.Identity)
    assert isinstance(make(placement="pre").final_norm, nn.LayerNorm)
    assert isinstance(make(placement="double").final_norm, nn.LayerNorm)


@pytest.mark.parametrize("n_layers", [1, 6, 24])
def test_deepnorm_alpha_and_beta_follow_the_paper(n_layers):
    kind = NORMS["deepnorm"]
    assert kind.residual_scale(n_layers) == pytest.approx((2 * n_layers) ** 0.25)
    assert kind.init_gain(n_layers) == pytest.approx((8 * n_layers) ** -0.25)


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


@pytest.mark.parametrize("init", ["gpt2", "xavier"])
def test_deepnorm_beta_scales_value_out_and_ffn_but_not_query_key(init):
    n_layers, d = 8, 256
    beta = (8 * n_layers) ** -0.25
    torch.manual_seed(0)
    deep = make("deepnorm", "post", n_layers=n_layers, d_model=d, init=init)
    torch.manual_seed(0)
    plain = make("ln", "post", n_layers=n_layers, d_model=d, init=init)
    attn_d, attn_p = deep.blocks[3].attn.sublayer, plain.blocks[3].attn.sublayer
    q_d, k_d, v_d = attn_d.qkv.weight.split(d)
    q_p, k_p, v_p = attn_p.qkv.weight.split(d)
    assert q_d.std().item() == pytest.approx(q_p.std().item(), rel=0.02)
    assert k_d.std().item() == pytest.approx(k_p.std().item(), rel=0.02)

    # against the unscaled reference std of each scheme: gpt2 N(0, 0.02); xavier U(±√(6/(fan_in+fan_out)))
    def ref_std(w):
        return 0.02 if init == "gpt2" else math.sqrt(2.0 / sum(w.shape))

    ffn = deep.blocks[3].ffn.sublayer
    for w in (v_d, attn_d.out.weight, ffn.up.weight, ffn.down.weight):
        assert w.std().item() == pytest.approx(beta * ref_std(w), rel=0.03)


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
