"""Instrumented-step measurements against explicit computations on a tiny model."""

from __future__ import annotations

import math

import pytest
import torch

from normlab.metrics import names
from normlab.metrics.activations import activation_keys
from normlab.metrics.histograms import Histogram
from normlab.metrics.instruments import wants_model_update
from normlab.train.head_loss import HeadLoss


def residual_stream(model, x: torch.Tensor) -> list[torch.Tensor]:
    """Embedding output, then the residual stream after each block, by calling the modules in order."""
    h = model.tok_emb(x) * model.embed_scale + model.pos_emb[: x.shape[1]]
    states = [h]
    for block in model.blocks:
        h = block(h)
        states.append(h)
    return states


def explicit_max_logit(attn_branch, h: torch.Tensor) -> float:
    """max over batch, heads and query ≥ key of q·k/√d_head, from the qkv weights."""
    attn = attn_branch.sublayer
    z = attn_branch.norm_in(h)
    b, t, d = z.shape
    nh = attn.n_heads
    q, k, _ = torch.nn.functional.linear(z, attn.qkv.weight, attn.qkv.bias).split(d, dim=-1)
    best = -math.inf
    for head in range(nh):
        sl = slice(head * d // nh, (head + 1) * d // nh)
        for i in range(t):
            for j in range(i + 1):
                dots = (q[:, i, sl] * k[:, j, sl]).sum(-1) / math.sqrt(d // nh)
                best = max(best, dots.max().item())
    return best


class Recorder:
    """Stands in for a StepProbe: keeps what the head and its loss hand over."""

    def __init__(self) -> None:
        self.values = None
        self.asked = 0

    def wants_forward(self) -> bool:
        self.asked += 1
        return self.asked == 1

    def record_forward(self, values: torch.Tensor) -> None:
        self.values = values


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("placement", ["pre", "post", "double"])
def test_probed_forward_matches_an_explicit_forward(make_gpt, placement, fused):
    """The probed forward's taps and the head's measurements, as one step of the head and its loss hands
    them over (the fused CPU path and the plain logits path alike), against a forward written out by
    hand; the step's loss is the plain step's."""
    model = make_gpt("ln", placement, n_layers=2)
    head = HeadLoss(model, z_loss=0.0, fused=fused, compiled=False, device=torch.device("cpu"))
    with torch.no_grad():
        x = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(3))
        y = torch.zeros_like(x)
        recorder = Recorder()
        total, ce = head(x, y, recorder)
        plain_total, plain_ce = head(x, y)
        assert total.item() == plain_total.item() and ce.item() == plain_ce.item()
        got = dict(zip(activation_keys(2), recorder.values.tolist(), strict=True))
        states = residual_stream(model, x)
        for i in range(2):
            rms = torch.sqrt(torch.mean(states[i + 1] ** 2)).item()
            assert got[names.act_rms_layer(i)] == pytest.approx(rms, rel=1e-5)
            assert got[names.attn_max_logit_layer(i)] == pytest.approx(
                explicit_max_logit(model.blocks[i].attn, states[i]), rel=1e-4, abs=1e-6
            )
        head_in = model.final_norm(states[-1])
        logits = head_in @ model.head.weight.t()
        assert got[names.ACT_RMS_HEAD] == pytest.approx(torch.sqrt(torch.mean(head_in**2)).item(), rel=1e-5)
        assert got[names.LOGIT_MEAN] == pytest.approx(logits.mean().item(), rel=1e-4, abs=1e-7)
        assert got[names.LOGIT_MAX] == pytest.approx(logits.max().item(), rel=1e-5)
        # log Z by hand in float64: log of the sum of exp(logit − max), plus max, per position
        l64 = logits.double()
        top = l64.amax(-1, keepdim=True)
        log_z = (torch.log(torch.exp(l64 - top).sum(-1, keepdim=True)) + top).mean().item()
        assert got[names.LOGIT_LOG_Z] == pytest.approx(log_z, rel=1e-5)


def test_a_probed_forward_is_the_plain_forward(make_gpt):
    """Measuring changes nothing the head reads (the taps are computed beside the stream, not from it),
    and installs nothing on the model."""
    model = make_gpt("rms", "double", n_layers=3)
    x = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hidden, taps = model.features(x, probe=True)
        assert torch.equal(hidden, model.features(x))
    assert taps.stream_rms.shape == taps.attn_max_logit.shape == (3,)
    hooked = [m for m in model.modules() if m._forward_hooks or m._forward_pre_hooks]
    assert hooked == []


def block_params(model, i: int) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if n.startswith(f"blocks.{i}.")}


def test_update_ratio_and_param_norm_against_parameters_before_and_after(make_gpt, make_trainer):
    model = make_gpt("rms", "pre")
    trainer = make_trainer(model)
    before = [block_params(model, i) for i in range(2)]
    all_before = {n: p.detach().clone() for n, p in model.named_parameters()}
    probe = trainer.instruments.begin(0)
    trainer.train_step(update=True, probe=probe)
    row = probe.row()
    for i in range(2):
        after = block_params(model, i)
        theta = torch.cat([p.flatten() for p in before[i].values()])
        delta = torch.cat([(after[n] - before[i][n]).flatten() for n in after])
        assert row[names.param_norm_layer(i)] == pytest.approx(
            torch.linalg.vector_norm(theta).item(), rel=1e-5
        )
        expected = (torch.linalg.vector_norm(delta) / torch.linalg.vector_norm(theta)).item()
        assert expected > 0
        assert row[names.update_ratio_layer(i)] == pytest.approx(expected, rel=1e-4)
    theta = torch.cat([p.flatten() for p in all_before.values()])
    delta = torch.cat([(p.detach() - all_before[n]).flatten() for n, p in model.named_parameters()])
    assert row[names.UPDATE_RATIO] == pytest.approx((delta.norm() / theta.norm()).item(), rel=1e-4)


def test_no_update_ratio_without_an_update(make_gpt, make_trainer):
    trainer = make_trainer(make_gpt())
    probe = trainer.instruments.begin(0)
    trainer.train_step(update=False, probe=probe)
    row = probe.row()
    assert names.param_norm_layer(0) in row and names.update_ratio_layer(0) not in row


def test_only_instrumented_steps_get_a_probe(make_gpt, make_trainer):
    def probed(**metrics) -> list[int]:
        trainer = make_trainer(make_gpt(), metrics=metrics)
        return [s for s in range(24) if trainer.instruments.begin(s) is not None]

    assert probed(every=5, dense_until=0) == [0, 5, 10, 15, 20]
    assert probed(every=5, dense_until=3) == [0, 1, 2, 3, 5, 10, 15, 20]  # every step up to 3, then sparse
    assert probed(every=0, dense_until=2) == [0, 1, 2]
    assert probed(every=0, dense_until=0) == [0]
    assert probed(every=10) == list(range(21))  # the default: dense through step 20
    assert make_trainer(make_gpt(), metrics={"enabled": False}).instruments is None


def eval_logits(model, x: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        out = model(x)
    model.train()
    return out


def test_model_update_is_deepnets_measure(make_gpt, make_trainer):
    model = make_gpt("ln", "post")
    trainer = make_trainer(model, metrics={"probe_batch": 2})
    x = trainer.instruments.model_update.probe
    assert x.shape == (2, 16)
    at_init = eval_logits(model, x)
    first = trainer.instruments.begin(0)
    trainer.train_step(update=True, probe=first)
    assert first.row()[names.MODEL_UPDATE] == 0.0
    trainer.train_step(update=True)
    # step 10's row is measured before its update: the function after the two updates so far
    diff = eval_logits(model, x) - at_init
    expected = torch.stack([torch.linalg.vector_norm(diff[b, t]) for b in range(2) for t in range(16)]).mean()
    later = trainer.instruments.begin(10)
    trainer.train_step(update=True, probe=later)
    assert later.row()[names.MODEL_UPDATE] == pytest.approx(expected.item(), rel=1e-5)
    assert expected.item() > 0


def test_model_update_only_where_deepnet_measures_it():
    from normlab.model import GPT

    def auto(placement, depth=2):
        model = GPT(50, 8, 16, 2, depth, norm="ln", placement=placement)
        return wants_model_update("auto", model.normalises_stream())

    assert auto("post") and auto({"name": "resi_dual"})
    assert not auto("pre") and not auto("lnscale")
    # mixln: Post-LN in the first ⌊0.25·L⌋ blocks, so none at depth 3 and one at depth 4 (block 0 only)
    assert not auto("mixln", 3) and auto("mixln", 4)
    mixln = GPT(50, 8, 16, 2, 4, norm="ln", placement="mixln")
    assert [mixln.normalises_stream(i) for i in range(4)] == [True, False, False, False]
    assert wants_model_update(True, False) and not wants_model_update(False, True)


def test_gradient_histograms_cover_every_block_entry(make_gpt, make_trainer):
    model = make_gpt()
    trainer = make_trainer(model, metrics={"every": 2, "histogram_every": 3, "histogram_bins": 16})
    assert trainer.instruments.cfg.histogram(0) and trainer.instruments.cfg.histogram(6)
    assert not trainer.instruments.cfg.histogram(2)
    probe = trainer.instruments.begin(0)
    trainer.train_step(update=True, probe=probe)
    hist = probe.row()[names.grad_hist_layer(1)]
    assert isinstance(hist, Histogram) and len(hist.counts) == 16 and len(hist.edges) == 17
    assert sum(hist.counts) == sum(
        p.numel() for n, p in model.named_parameters() if n.startswith("blocks.1.")
    )


@pytest.mark.parametrize(
    "values",
    [
        torch.randn(10_000, generator=torch.Generator().manual_seed(0)),
        torch.linspace(-1, 1, 1001),  # values exactly on bin edges
        torch.full((50,), 0.25),  # a zero-width range
        torch.tensor([1e-9, 2e-9, 3e-9, 1.0]),  # one far outlier
    ],
    ids=["gaussian", "on the edges", "constant", "outlier"],
)
def test_device_histograms_count_as_numpy_does(values):
    import numpy as np

    from normlab.metrics.histograms import histogram, to_host

    counts, edges = np.histogram(values.numpy(), bins=16)
    (got,) = to_host({"h": histogram(values, 16)}).values()
    assert got.counts == counts.tolist()
    assert got.edges == pytest.approx(edges.tolist(), rel=1e-6, abs=1e-12)


def test_a_histogram_of_non_finite_gradients_is_dropped():
    from normlab.metrics.histograms import histogram, to_host

    values = torch.randn(100)
    values[3] = float("nan")
    assert to_host({"h": histogram(values, 8), "ok": histogram(torch.randn(10), 8)}).keys() == {"ok"}
