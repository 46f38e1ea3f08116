"""Fused gradient norms against torch.linalg.vector_norm over the named parameters."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from normlab.metrics import names
from normlab.metrics.grad_norms import GradNorms, clip_


def backward(model, seed: int = 1) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 97, (3, 12), generator=g)
    logits = model(x)
    F.cross_entropy(logits.view(-1, logits.size(-1)), x.roll(-1, 1).view(-1)).backward()


def reference_norm(model, keep) -> torch.Tensor:
    grads = [p.grad.flatten() for name, p in model.named_parameters() if keep(name)]
    return torch.linalg.vector_norm(torch.cat(grads))


def part_of(name: str) -> str:
    # independent of the implementation: the norm slots are the modules called norm_in / norm_out / norm_add
    if any(f".{slot}." in name for slot in ("norm_in", "norm_out", "norm_add")):
        return "norm"
    return name.split(".")[2]  # blocks.i.attn.… or blocks.i.ffn.…


@pytest.mark.parametrize("placement", ["pre", "post", "double"])
def test_global_per_layer_and_per_sublayer_norms(make_gpt, placement):
    model = make_gpt("rms", placement, n_layers=3)
    backward(model)
    gn = GradNorms(model, 3)
    row = dict(zip(gn.keys, gn.compute(gn.grads()).tolist(), strict=True))
    assert row[names.GRAD_NORM] == pytest.approx(reference_norm(model, lambda n: True).item(), rel=1e-5)
    for i in range(3):
        prefix = f"blocks.{i}."
        ref = reference_norm(model, lambda n, prefix=prefix: n.startswith(prefix))
        assert row[names.grad_norm_layer(i)] == pytest.approx(ref.item(), rel=1e-5)
        for part in names.SUBLAYERS:
            ref = reference_norm(
                model, lambda n, prefix=prefix, part=part: n.startswith(prefix) and part_of(n) == part
            )
            assert row[names.grad_norm_sublayer(i, part)] == pytest.approx(ref.item(), rel=1e-5)


def test_tied_head_counted_once(make_gpt):
    model = make_gpt()
    backward(model)
    gn = GradNorms(model, 2)
    assert sum(p is model.tok_emb.weight for p in gn.params) == 1


def test_metrics_off_computes_only_the_global_norm(make_gpt):
    model = make_gpt()
    backward(model)
    gn = GradNorms(model, 2, per_layer=False)
    assert gn.keys == [names.GRAD_NORM]
    (value,) = gn.compute(gn.grads()).tolist()
    assert value == pytest.approx(reference_norm(model, lambda n: True).item(), rel=1e-5)


def test_clipping_reuses_the_norm_and_reports_whether_it_fired(make_gpt):
    model = make_gpt()
    backward(model)
    gn = GradNorms(model, 2)
    grads = gn.grads()
    total = gn.compute(grads)[0]
    assert clip_(grads, total, max_norm=total.item() * 2).item() == 0.0  # below the limit: untouched
    assert reference_norm(model, lambda n: True).item() == pytest.approx(total.item(), rel=1e-5)
    limit = total.item() / 4
    assert clip_(grads, total, max_norm=limit).item() == 1.0
    assert reference_norm(model, lambda n: True).item() == pytest.approx(limit, rel=1e-4)


@pytest.mark.parametrize("qk_norm", ["none", "rms"])
def test_declared_roles_group_as_the_parameter_names_did(qk_norm):
    """GPT.parameter_parts (roles declared where modules are built) gives every block parameter the
    (block, part) its name gives under the name rule (`parameter_part`), for every norm × slot placement
    (a placement with a block of its own may hold norms the name rule misses: the reason roles are declared)."""
    from normlab.metrics.layout import parameter_part
    from normlab.model import GPT, NORMS, PLACEMENTS
    from normlab.model.blocks import Block

    for norm in NORMS:
        for placement in [p for p in NORMS[norm].placements or PLACEMENTS if PLACEMENTS[p].block is Block]:
            model = GPT(50, 8, 16, 2, 3, norm=norm, placement=placement, qk_norm=qk_norm)
            declared = model.parameter_parts()
            by_name = {n: parameter_part(n) for n, _ in model.named_parameters() if n.startswith("blocks.")}
            assert declared == by_name, (norm, placement)
