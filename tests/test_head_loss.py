"""The LM head and its loss: the fused path against torch's cross-entropy on materialised logits (values and
gradients), and the trainer's rows through the fused and the plain path."""

import pytest
import torch
import torch.nn.functional as F

from normlab.train import fused_head
from normlab.train.fused_head import chunk_rows, fused_objective
from normlab.train.head_loss import HeadLoss


def head_objective(hidden, weight, targets, z_loss=0.0):
    objective, ce, _ = fused_objective(hidden, weight, targets, z_loss)
    return objective, ce


def reference(hidden, weight, targets, z_loss):
    logits = (hidden @ weight.t()).reshape(-1, weight.shape[0])
    ce = F.cross_entropy(logits, targets.reshape(-1))
    return ce + z_loss * torch.logsumexp(logits, -1).square().mean(), ce


@pytest.mark.parametrize("chunk_elements", [1 << 22, 5000])  # one chunk; many, the last one partial
@pytest.mark.parametrize("z_loss", [0.0, 1e-2])
@pytest.mark.parametrize(("shape", "vocab"), [((3, 5, 8), 50), ((2, 700, 16), 3001), ((4, 16), 7)])
def test_matches_cross_entropy_and_its_gradients(shape, vocab, z_loss, chunk_elements, monkeypatch):
    monkeypatch.setattr(fused_head, "CHUNK_ELEMENTS", chunk_elements)
    torch.manual_seed(0)
    hidden = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    weight = (torch.randn(vocab, shape[-1], dtype=torch.float64) * 0.5).requires_grad_()
    targets = torch.randint(vocab, shape[:-1])
    upstream = 2.5  # e.g. a GradScaler's scale / grad_accum
    obj, ce = reference(hidden, weight, targets, z_loss)
    ref_grads = torch.autograd.grad(obj * upstream, (hidden, weight))
    obj2, ce2 = head_objective(hidden, weight, targets, z_loss)
    grads = torch.autograd.grad(obj2 * upstream, (hidden, weight))
    torch.testing.assert_close(obj2, obj)
    torch.testing.assert_close(ce2, ce)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want)
    assert not ce2.requires_grad  # the logged cross-entropy is not part of the graph


def test_several_chunks_are_used_for_a_large_vocabulary():
    assert chunk_rows(50_000, 4096) < 4096 / 8  # the chunk loop really runs, so the test above covers it
    assert chunk_rows(10, 4) == 4


def test_float32_agrees_to_rounding():
    torch.manual_seed(1)
    hidden = torch.randn(4, 64, 32, requires_grad=True)
    weight = (torch.randn(4096, 32) * 0.2).requires_grad_()
    targets = torch.randint(4096, (4, 64))
    obj, _ = reference(hidden, weight, targets, 0.0)
    obj2, _ = head_objective(hidden, weight, targets)
    assert abs(obj.item() - obj2.item()) < 1e-5


def test_no_gradient_work_without_autograd():
    hidden = torch.randn(2, 3, 4, requires_grad=True)
    weight = torch.randn(10, 4, requires_grad=True)
    with torch.no_grad():
        obj, ce = head_objective(hidden, weight, torch.randint(10, (2, 3)))
    assert not obj.requires_grad and torch.equal(obj, ce)


def test_tied_weight_receives_both_gradients():
    torch.manual_seed(2)
    emb = torch.nn.Embedding(20, 6)
    ids, targets = torch.randint(20, (2, 5)), torch.randint(20, (2, 5))
    head_objective(emb(ids), emb.weight, targets)[0].backward()
    fused = emb.weight.grad.clone()
    emb.weight.grad = None
    reference(emb(ids), emb.weight, targets, 0.0)[0].backward()
    torch.testing.assert_close(fused, emb.weight.grad)


def test_logit_statistics_match_the_materialised_logits():
    torch.manual_seed(3)
    hidden = torch.randn(3, 40, 16)
    weight = torch.randn(3000, 16) * 0.3
    targets = torch.randint(3000, (3, 40))
    _, _, stats = fused_objective(hidden, weight, targets, stats=True)
    logits = hidden @ weight.t()
    torch.testing.assert_close(stats.max, logits.amax())
    torch.testing.assert_close(stats.mean, logits.mean(), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(stats.mean_log_z, torch.logsumexp(logits, -1).mean())


def test_the_fused_head_gives_the_reference_path_rows(make_cfg, tmp_path):
    """Instrumented (step 0) and plain rows of the training loop: fused head vs logits → cross-entropy."""
    import numpy as np
    from hydra.utils import instantiate
    from omegaconf import OmegaConf
    from trainers import RowCollector as Rows

    from normlab.train.loop import Trainer

    cfg = make_cfg("train.batch_size=4", "train.seq_len=16", "metrics.dense_until=0")
    c = OmegaConf.to_container(cfg, resolve=True)
    tokens = np.random.default_rng(0).integers(0, c["model"]["vocab_size"], 5000).astype(np.uint16)
    rows = {}
    for fused in (True, False):
        torch.manual_seed(0)
        model = instantiate(cfg.model)
        train = {**c["train"], "max_steps": 3, "eval_every": 0}
        trainer = Trainer.from_config(
            {**c, "warmup_steps": 2}, model, tokens, tokens, torch.device("cpu"), train=train
        )
        assert trainer.head_loss.fused  # the CPU in float32
        if not fused:
            trainer.head_loss = HeadLoss(
                model, z_loss=0.0, fused=False, compiled=False, device=torch.device("cpu")
            )
        got = Rows()
        trainer.fit([got])
        rows[fused] = got.rows
    assert len(rows[True]) == 3 and "logits/max" in rows[True][0] and "logits/max" not in rows[True][1]
    for a, b in zip(rows[True], rows[False], strict=True):
        assert a.keys() == b.keys()
        for key in a.keys() - {"tokens_per_s"}:
            if isinstance(a[key], float | int):  # (gradient histograms are objects)
                assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
