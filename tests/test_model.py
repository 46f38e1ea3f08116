"""The GPT's variants: formulas, DeepNorm against the paper, init schemes, and causality."""

import math

import pytest
import torch
import torch.nn.functional as F
from formulas import (
    NORM_REFS,
    PLACEMENT_REFS,
    NormRef,
    dyt_ref,
    layer_norm_ref,
    norm_ref_forward,
    rms_norm_ref,
    scalenorm_ref,
)
from torch import nn

from normlab.model import (
    GPT,
    NORMS,
    PLACEMENTS,
    InvalidVariant,
    block_formula,
    check_variant,
)
from normlab.model.norms import DEEPNORM_BASES, RMSNorm, qk_norms

VALID = [(n, p) for n in NORMS for p in PLACEMENTS if NORMS[n].placements is None or p in NORMS[n].placements]
INVALID = [(n, p) for n in NORMS for p in PLACEMENTS if (n, p) not in VALID]


def make(norm="ln", placement="pre", n_layers=2, d_model=32, **kw):
    kw.setdefault("vocab_size", 50)
    kw.setdefault("context_length", 16)
    norm = {"name": norm} if isinstance(norm, str) else norm
    return GPT(d_model=d_model, n_heads=4, n_layers=n_layers, norm=norm, placement=placement, **kw)


def test_every_combination_is_valid_but_where_a_norm_restricts_its_placements():
    """Computed from the registries and the one independent rule (DeepNet is Post-LN only): a new norm or
    placement changes the counts without an edit here."""
    assert set(NORMS) >= {"ln", "rms", "bn", "deepnorm", "none", "dyt", "scalenorm"}
    assert set(PLACEMENTS) >= {"pre", "post", "double", "reordered", "mixln", "lnscale", "resi_dual"}
    restricted = {n: kind.placements for n, kind in NORMS.items() if kind.placements is not None}
    assert restricted["deepnorm"] == ("post",)
    expected_invalid = {(n, p) for n, allowed in restricted.items() for p in PLACEMENTS if p not in allowed}
    assert set(INVALID) == expected_invalid
    assert len(VALID) == len(NORMS) * len(PLACEMENTS) - len(expected_invalid)
    for norm, placement in VALID:
        check_variant(norm, placement)  # raises nothing


@pytest.mark.parametrize(("norm", "placement"), INVALID)
def test_invalid_combination_names_the_valid_choice(norm, placement):
    with pytest.raises(InvalidVariant, match="placement=post"):
        check_variant(norm, placement)
    with pytest.raises(InvalidVariant):
        make(norm, placement)


def test_unknown_names_list_the_choices():
    with pytest.raises(InvalidVariant, match=", ".join(NORMS)):
        check_variant("layernorm", "pre")
    with pytest.raises(InvalidVariant, match=", ".join(PLACEMENTS)):
        check_variant("ln", "sandwich")
    with pytest.raises(InvalidVariant, match="gpt2, xavier"):
        make(init="kaiming")
    assert "bn" not in qk_norms() and "deepnorm" not in qk_norms()  # not norms of one vector
    with pytest.raises(InvalidVariant, match=", ".join(qk_norms())):
        make(qk_norm="l2")
    with pytest.raises(InvalidVariant, match=", ".join(qk_norms())):
        make(qk_norm="bn")  # batch statistics: not a norm of one head's query
    assert "none" not in DEEPNORM_BASES and "deepnorm" not in DEEPNORM_BASES
    with pytest.raises(InvalidVariant, match=", ".join(DEEPNORM_BASES)):
        make({"name": "deepnorm", "base": "none"}, "post")


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
    assert block_formula("dyt", "pre", 2) == "x ← x + Attn(DyT(x)); x ← x + FFN(DyT(x))"
    assert block_formula("scalenorm", "post", 2) == "x ← SN(x + Attn(x)); x ← SN(x + FFN(x))"
    assert block_formula("ln", "pre", 2, qk_norm="scalenorm").endswith("per head: q, k ← SN(q), SN(k)")
    assert block_formula({"name": "deepnorm", "base": "rms"}, "post", 8) == (
        "x ← RMS(2.00·x + Attn(x)); x ← RMS(2.00·x + FFN(x))"
    )


@pytest.mark.parametrize(("norm", "placement"), VALID)
def test_the_model_states_the_formula_it_was_built_with(norm, placement):
    """GPT.formula() reads the model's own per-layer slots; it writes what block_formula (checked by hand above)
    writes from the config, at a depth where mixln and lnscale vary by block."""
    model = make(norm, placement, n_layers=4, qk_norm="rms")
    assert model.formula() == block_formula(norm, placement, 4, qk_norm="rms")


def test_block_formulas_of_the_new_placements_per_layer_where_they_vary():
    assert block_formula("rms", "reordered", 4) == "x ← x + RMS(Attn(x)); x ← x + RMS(FFN(x))"
    # Mix-LN, ρ = 0.25 of 8 blocks: the first 2 Post-LN, the other 6 Pre-LN
    assert block_formula("ln", "mixln", 8) == (
        "blocks 0–1: x ← LN(x + Attn(x)); x ← LN(x + FFN(x)) | "
        "blocks 2–7: x ← x + Attn(LN(x)); x ← x + FFN(LN(x))"
    )
    assert block_formula("ln", {"name": "mixln", "post_fraction": 0.5}, 3).startswith("block 0: x ← LN(")
    assert block_formula("ln", {"name": "mixln", "post_fraction": 0.0}, 4) == block_formula("ln", "pre", 4)
    # LayerNorm Scaling: block l (from 1) scales its norms' outputs by 1/√l: 1, 0.71, 0.58
    assert block_formula("ln", "lnscale", 3) == (
        "block 0: x ← x + Attn(LN(x)); x ← x + FFN(LN(x)) | "
        "block 1: x ← x + Attn(0.71·LN(x)); x ← x + FFN(0.71·LN(x)) | "
        "block 2: x ← x + Attn(0.58·LN(x)); x ← x + FFN(0.58·LN(x))"
    )
    assert block_formula("ln", "resi_dual", 2) == (
        "x, d ← LN(x + Attn(x)), d + Attn(x); x, d ← LN(x + FFN(x)), d + FFN(x); head reads x + LN(d)"
    )


def test_final_norm_only_where_the_placement_has_one():
    assert not PLACEMENTS["post"].final_norm  # the original Transformer: none
    assert all(
        PLACEMENTS[p].final_norm for p in ("pre", "double", "reordered", "mixln", "lnscale", "resi_dual")
    )
    for placement, where in PLACEMENTS.items():
        final = make(placement=placement).final_norm
        assert isinstance(final, nn.LayerNorm if where.final_norm else nn.Identity), placement


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


def test_a_learned_embedding_scale_starts_at_its_value_and_trains():
    """model.learn_embed_scale: the DyT authors' LLaMA recipe multiplies the embedding by a learnable scalar
    initialised to √d; it is a parameter the loss reaches, and the forward equals the fixed-scale model's."""
    torch.manual_seed(0)
    d = 64
    learned = make(d_model=d, embed_scale="sqrt_d", learn_embed_scale=True)
    torch.manual_seed(0)
    fixed = make(d_model=d, embed_scale="sqrt_d")
    assert isinstance(learned.embed_scale, nn.Parameter)
    assert learned.embed_scale.item() == pytest.approx(math.sqrt(d))
    x = torch.randint(0, 50, (2, 8))
    torch.testing.assert_close(learned(x), fixed(x))
    learned(x).logsumexp(-1).mean().backward()
    assert learned.embed_scale.grad is not None and learned.embed_scale.grad.abs().item() > 0
    names = [n for n, _ in learned.named_parameters()]
    assert "embed_scale" in names and "embed_scale" not in [n for n, _ in fixed.named_parameters()]


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
        qi = norm(q[..., sl], attn.q_norm)
        ki = norm(k[..., sl], attn.k_norm)
        scores = qi @ ki.transpose(-2, -1) / math.sqrt(dh)
        scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
        outs.append(torch.softmax(scores, -1) @ v[..., sl])
    return torch.nn.functional.linear(torch.cat(outs, -1), attn.out.weight, attn.out.bias)


@pytest.mark.parametrize(
    ("qk_norm", "ref"),
    [("ln", layer_norm_ref), ("rms", rms_norm_ref), ("dyt", dyt_ref), ("scalenorm", scalenorm_ref)],
)
def test_qk_norm_normalises_each_heads_queries_and_keys(qk_norm, ref):
    torch.manual_seed(0)
    model = make(qk_norm=qk_norm, d_model=32)
    attn = model.blocks[0].attn.sublayer
    # d_head-sized parameters shared by the 4 heads (ScaleNorm: one scalar, √d_head at init)
    if qk_norm == "scalenorm":
        assert attn.q_norm.scale.item() == pytest.approx(math.sqrt(8))
    else:
        assert attn.q_norm.weight.shape == attn.k_norm.weight.shape == (8,)
    with torch.no_grad():
        for p in (*attn.q_norm.parameters(), *attn.k_norm.parameters()):
            p.copy_(torch.randn_like(p))
        x = torch.randn(2, 7, 32)
        torch.testing.assert_close(attn(x), explicit_attention(attn, x, ref), rtol=1e-4, atol=1e-5)


def test_qk_norm_bounds_attention_logits():
    # With unit gains, RMS-normalised q and k have norm √d_head, so |q·k|/√d_head ≤ √d_head (Cauchy–Schwarz)
    # however large the weights grow; without the norm the same weights give logits far above that.
    d_head = 8
    x = torch.randint(0, 50, (2, 16))
    logits = {}
    for qk_norm in ("none", "rms"):
        torch.manual_seed(0)
        model = make(qk_norm=qk_norm, d_model=32)
        with torch.no_grad():
            model.blocks[0].attn.sublayer.qkv.weight.mul_(50.0)
            _, taps = model.features(x, probe=True)
        logits[qk_norm] = taps.attn_max_logit[0].item()
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


# ------------------------------------------------------------------------------------------------------
# Each placement's and each norm's forward against its paper's equations (tests/formulas.py), for a
# 3-block model; every entry of PLACEMENTS and NORMS must have its reference there.


@pytest.mark.parametrize("placement", list(PLACEMENT_REFS))
def test_each_placement_computes_its_papers_equations(placement):
    assert set(PLACEMENT_REFS) == set(PLACEMENTS)
    ref, knobs = PLACEMENT_REFS[placement]
    torch.manual_seed(0)
    model = make("ln", {"name": placement, **knobs}, n_layers=3).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(1 + 0.5 * torch.randn_like(m.weight))
                m.bias.copy_(0.5 * torch.randn_like(m.bias))
        idx = torch.randint(0, 50, (2, 16))
        x = model.tok_emb(idx) * model.embed_scale + model.pos_emb[:16]
        torch.testing.assert_close(model.features(idx), ref(model, x), rtol=1e-5, atol=1e-5)


def model_with_moved_norms(norm, placement):
    """A 3-block model whose norms' learned parameters are moved away from their init, so that a wrong
    formula shows."""
    torch.manual_seed(0)
    model = make(norm, placement, n_layers=3, dropout=0.0).train()  # bn: the batch's statistics
    with torch.no_grad():
        for name, m in model.named_modules():
            if name.endswith(("norm_in", "norm_out", "norm_add", "final_norm")):
                for p in m.parameters():
                    p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("norm", list(NORMS))
def test_each_norm_computes_its_papers_formula(norm):
    assert norm in NORM_REFS, (
        f"norm={norm} has no formula reference: add its paper's equation to NORM_REFS (tests/formulas.py)"
    )
    ref = NORM_REFS[norm]
    model = model_with_moved_norms(norm, ref.placement)
    idx = torch.randint(0, 50, (4, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        x = model.tok_emb(idx) * model.embed_scale + model.pos_emb[:16]
        torch.testing.assert_close(model.features(idx), norm_ref_forward(model, x, ref), rtol=1e-5, atol=1e-5)


def test_every_norm_has_a_formula_reference_and_the_references_tell_norms_apart():
    """The rule NORM_REFS enforces, and that the comparison can fail: a model compared with another norm's
    formula, or DeepNorm without its α, does not match."""
    assert set(NORM_REFS) == set(NORMS)
    idx = torch.randint(0, 50, (4, 16), generator=torch.Generator().manual_seed(1))
    for norm, wrong in [
        ("ln", NormRef(rms_norm_ref)),
        ("rms", NormRef(lambda z, n: F.layer_norm(z, z.shape[-1:], n.weight, None, n.eps))),  # centred
        ("scalenorm", NormRef(lambda z, n: n.scale * z / z.square().mean(-1, keepdim=True).sqrt())),  # RMS
        ("bn", NormRef(layer_norm_ref)),
        ("deepnorm", NormRef(layer_norm_ref, "post")),  # α = 1
    ]:
        model = model_with_moved_norms(norm, NORM_REFS[norm].placement)
        with torch.no_grad():
            x = model.tok_emb(idx) * model.embed_scale + model.pos_emb[:16]
            assert not torch.allclose(model.features(idx), norm_ref_forward(model, x, wrong), atol=1e-3), norm


def test_mixln_post_blocks_are_the_floor_of_rho_times_depth():
    def post_blocks(depth, rho):
        slots = make("ln", {"name": "mixln", "post_fraction": rho}, n_layers=depth).layer_slots
        assert all(s.norm_add != s.norm_in for s in slots)  # each block Post-LN or Pre-LN
        n = sum(s.norm_add for s in slots)
        assert all(s.norm_add for s in slots[:n])  # the Post-LN blocks come first
        return n

    # the authors' runs: 3 of 12 and 6 of 24 blocks at ρ = 0.25; ⌊0.3·10⌋ = 3 despite 0.3·10 < 3 in floats
    assert post_blocks(12, 0.25) == 3 and post_blocks(24, 0.25) == 6 and post_blocks(10, 0.3) == 3
    assert post_blocks(3, 0.25) == 0 and post_blocks(4, 1.0) == 4


def test_deepnorm_composes_with_another_norm():
    # norm=deepnorm norm.base=rms: RMSNorm in norm_add with RMSNorm's own eps, the residual × α = (2·8)^¼ = 2, and
    # the paper's Xavier-normal init with gain β (the v rows of a d = 256, N = 8 model: std 0.0220971)
    torch.manual_seed(0)
    model = make({"name": "deepnorm", "base": "rms"}, "post", n_layers=8, d_model=256)
    branch = model.blocks[0].attn
    assert isinstance(branch.norm_add, RMSNorm) and branch.norm_add.eps == 1e-6  # not LayerNorm's 1e-5
    assert branch.alpha == pytest.approx(2.0)
    v = branch.sublayer.qkv.weight.split(256)[2]
    assert v.std().item() == pytest.approx(DEEPNET_STDS[(8, 256)]["v"], rel=0.03)
    assert isinstance(make("deepnorm", "post").blocks[0].attn.norm_add, nn.LayerNorm)  # the paper's default


@pytest.mark.parametrize(("base", "eps"), [("ln", 1e-5), ("rms", 1e-6), ("bn", 1e-5), ("scalenorm", 1e-5)])
def test_deepnorm_takes_its_base_norms_own_defaults_unless_set(base, eps):
    """A norm keeps its own defaults wherever it is used: `norm=deepnorm norm.base=B` has B's eps and bias as
    `norm=B` has them (rms vs deepnorm base=rms then differ in the block only), and a set norm.eps wins."""
    norm_add = make({"name": "deepnorm", "base": base}, "post").blocks[0].attn.norm_add
    alone = make(base, "pre").blocks[0].attn.norm_in
    assert norm_add.eps == eps == alone.eps
    assert (getattr(norm_add, "bias", None) is None) == (getattr(alone, "bias", None) is None)
    set_eps = make({"name": "deepnorm", "base": base, "eps": 1e-3}, "post").blocks[0].attn.norm_add
    assert set_eps.eps == 1e-3
    no_bias = make({"name": "deepnorm", "base": "ln", "bias": False}, "post").blocks[0].attn.norm_add
    assert no_bias.bias is None


class InnerNormBlock(nn.Module):
    """A block that is not a choice of slots, as a placement of its own would write it (Sub-LN's shape): a
    norm inside each sublayer, before its output projection, and Pre-LN slots around it."""

    def __init__(self, parts):
        super().__init__()
        self.attn = parts.branch(parts.attention(parts.norm_of("attn")), "attn")
        hidden = parts.ffn_mult * parts.d_model
        self.ffn = parts.branch(parts.feed_forward(parts.norm_of("ffn", hidden)), "ffn")

    def forward(self, stream, taps=None):
        return self.ffn(self.attn(stream, taps), taps)


def test_a_placement_with_a_block_of_its_own_is_one_entry(monkeypatch):
    """One PLACEMENTS entry naming its block class (Placement.block) is all the GPT needs: the blocks are
    that class, their inner norms count as norms, the formula writes the sublayer as the entry says; every
    other placement keeps the slot block."""
    from normlab.model.blocks import Block
    from normlab.model.placements import PRE, Placement

    assert all(p.block is Block for p in PLACEMENTS.values())
    entry = Placement(
        PRE,
        True,
        "a test placement: a norm inside each sublayer",
        sublayer=lambda name, arg, symbol: f"{name}[{symbol}]({arg})",
        block=InnerNormBlock,
    )
    monkeypatch.setitem(PLACEMENTS, "inner", entry)
    model = make("rms", "inner", n_layers=2)
    assert all(type(b) is InnerNormBlock for b in model.blocks)
    assert isinstance(model.blocks[0].ffn.sublayer.pre_output, RMSNorm)
    assert model.blocks[0].ffn.sublayer.pre_output.weight.shape == (4 * 32,)
    assert model.formula() == "x ← x + Attn[RMS](RMS(x)); x ← x + FFN[RMS](RMS(x))"
    roles = model.parameter_parts()
    assert roles["blocks.1.attn.sublayer.pre_output.weight"] == (1, "norm")
    assert model(torch.randint(0, 50, (2, 16))).shape == (2, 16, 50)


def test_a_norms_config_takes_its_own_name_and_the_group_names_every_norm():
    """A norm's config knows its own name only (no import of the registry that lists it); which names exist
    is answered where the group's options are listed, with every norm of NORMS."""
    from normlab.config.groups import config_class
    from normlab.errors import InvalidConfig
    from normlab.model.batch_norm import BatchNormConfig
    from normlab.model.norms import RMSNormConfig

    assert all(kind.config().name == name for name, kind in NORMS.items())
    with pytest.raises(InvalidConfig, match="norm.name=ln is not allowed; norm.name takes one of rms"):
        RMSNormConfig(name="ln")  # an RMSNorm config labelled LayerNorm
    assert BatchNormConfig(eps=1e-3).name == "bn"
    everything = ", ".join(NORMS)
    for name in ("foo", "dyt_llama"):  # dyt_llama: an option of norm=, not a norm's name
        with pytest.raises(
            InvalidConfig, match=f"norm.name={name} is not allowed; norm.name takes one of {everything}."
        ):
            config_class("norm", {"name": name})
    assert config_class("norm", {"name": "bn"}) is BatchNormConfig


def test_max_causal_logit_is_the_largest_causal_score_in_blocks_of_queries():
    """The attention-logit probe computes the score matrix a block of queries at a time, each block against
    the keys it may see: the same maximum as the full masked matrix (a hand-made reference), across block
    boundaries, with the largest score placed in the last block and just below the diagonal."""
    from normlab.model.blocks import MAX_LOGIT_ROWS, max_causal_logit

    g = torch.Generator().manual_seed(0)
    t, d = 2 * MAX_LOGIT_ROWS + 37, 8
    q = torch.randn(2, 3, t, d, generator=g, dtype=torch.float64)
    k = torch.randn(2, 3, t, d, generator=g, dtype=torch.float64)
    q[1, 2, t - 1] = 5.0
    k[1, 2, t - 2] = 5.0  # key before its query: allowed, and the largest
    k[1, 2, t - 1 :] = 0.0
    scores = (q @ k.transpose(-1, -2)) / d**0.5
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    reference = scores.masked_fill(~causal, float("-inf")).amax()
    assert max_causal_logit(q, k).item() == pytest.approx(reference.item(), rel=1e-6)  # float32 out
    assert reference.item() == pytest.approx(25.0 * d / d**0.5, rel=1e-12)
    k[0, 0, t - 1] = 100.0  # a key only the last query may see, and it looks away: masked for the others
    q[0, 0, t - 1] = 0.0
    assert max_causal_logit(q, k).item() == pytest.approx(reference.item(), rel=1e-6)
