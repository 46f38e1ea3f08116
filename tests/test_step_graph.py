"""The training step as a GPU wants it, checked on the CPU: forward, head and objective trace as ONE graph
(no graph break from token ids to the scalar objective, instrumented or not), and a steady step asks the
device for no value on the host (no host sync)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
import torch._dynamo
from torch.overrides import TorchFunctionMode
from trainers import config_trainer

from normlab.model.gpt import GPT
from normlab.train.head_loss import HeadLoss

# What makes the host wait for the device: a tensor's value read into Python, or a result whose size
# depends on the values (nonzero, masked_select, unique), or a copy to the host.
HOST_READS = {
    "item",
    "tolist",
    "__bool__",
    "__float__",
    "__int__",
    "__index__",
    "numpy",
    "cpu",
    "nonzero",
    "masked_select",
    "unique",
    "_local_scalar_dense",
}


class HostSyncSpy(TorchFunctionMode):
    """Records every torch call that would make the host wait for the device (on a GPU); on the CPU the
    same calls run, so the check needs no GPU. `.to(...)` counts when it moves a tensor to the CPU."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if name in HOST_READS or (name == "to" and _to_cpu(args[1:], kwargs)):
            self.reads.append(name)
        return func(*args, **kwargs)


def _to_cpu(args: tuple, kwargs: dict) -> bool:
    target = kwargs.get("device", args[0] if args else None)
    return isinstance(target, str | torch.device) and torch.device(target).type == "cpu"


def tiny(norm: str = "ln", placement: str = "pre", n_layers: int = 2, **kw) -> GPT:
    torch.manual_seed(0)
    return GPT(97, 16, 32, 4, n_layers, norm, placement, **kw)


def ids(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 97, (2, 16), generator=g), torch.randint(0, 97, (2, 16), generator=g)


@pytest.mark.parametrize("probe", [False, True], ids=["plain step", "instrumented step"])
@pytest.mark.parametrize(
    "variant",
    [("ln", "pre", {}), ("rms", "post", {"qk_norm": "rms"}), ("bn", "double", {}), ("ln", "resi_dual", {})],
    ids=lambda v: f"{v[0]}-{v[1]}",
)
def test_the_step_is_one_graph_from_token_ids_to_the_objective(variant, probe):
    """torch._dynamo.explain traces the plain (GPU) path of HeadLoss — forward, head, objective with
    z-loss — as exactly one graph with no break; the instrumented step too, its measurements included."""
    norm, placement, kw = variant
    model = tiny(norm, placement, **kw)
    head_loss = HeadLoss(model, z_loss=1e-4, fused=False, compiled=False, device=torch.device("cpu"))
    x, y = ids()
    torch._dynamo.reset()
    explained = torch._dynamo.explain(head_loss._plain_step)(x, y, probe)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
    outputs = 3 if probe else 2
    (graph,) = explained.graphs
    assert len(list(graph.graph.find_nodes(op="output"))[0].args[0]) == outputs


def test_the_graph_check_sees_a_break():
    """The check can fail: a step that reads a value into Python breaks the graph, and explain says so."""
    model = tiny()

    def step_with_a_host_read(x, y):
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        return loss * 2 if loss.item() > 0 else loss

    torch._dynamo.reset()
    explained = torch._dynamo.explain(step_with_a_host_read)(*ids())
    assert explained.graph_break_count >= 1


@contextlib.contextmanager
def predrawn_batches(trainer, tokens: np.ndarray):
    """The trainer's batches drawn before the spy watches (the data pipeline reads its host-side window
    offsets by design; on a GPU the batch reaches the device through pinned memory, non-blocking)."""
    x, y = trainer.batches.draw(tokens, torch.Generator().manual_seed(5))
    draw = trainer.batch
    trainer.batch = lambda _tokens, _rng: (x, y)
    try:
        yield
    finally:
        trainer.batch = draw


@pytest.mark.parametrize("metrics_on", [True, False], ids=["instrumentation on", "instrumentation off"])
@pytest.mark.parametrize("fused", [True, False], ids=["fused CPU head", "plain head"])
def test_a_steady_step_reads_nothing_back_from_the_device(metrics_on, fused):
    """A steady (not instrumented) training step — forward, backward, gradient norms per layer, clipping,
    the optimizer step — makes no call that would wait for the device; rows reach the host only at a
    flush, every train.flush_every steps."""
    tokens = np.random.default_rng(0).integers(0, 97, 4000).astype(np.uint16)
    trainer = config_trainer(
        tiny(qk_norm="ln"),
        tokens,
        train={"batch_size": 2, "seq_len": 16, "grad_clip": 0.5},
        optim={"z_loss": 1e-4},
        metrics={"enabled": metrics_on, "every": 10, "dense_until": 0},
    )
    trainer.head_loss.fused = fused
    trainer.head_loss.step = trainer.head_loss._fused_step if fused else trainer.head_loss._plain_step
    if fused:
        trainer.head_loss.trunk = trainer.model.features
    trainer.step = 3  # not instrumented (every 10, no dense start)
    probe = trainer.instruments.begin(3) if trainer.instruments else None
    assert probe is None
    with predrawn_batches(trainer, tokens), HostSyncSpy() as spy:
        trainer.train_step(update=True)
    assert spy.reads == []


def test_the_sync_check_sees_a_host_read():
    """The check can fail: the same step with a loss read into Python each step (nanoGPT's train.py logs
    `loss.item()` every step) is caught."""
    tokens = np.random.default_rng(0).integers(0, 97, 4000).astype(np.uint16)
    trainer = config_trainer(tiny(), tokens, train={"batch_size": 2, "seq_len": 16})
    with predrawn_batches(trainer, tokens), HostSyncSpy() as spy:
        trainer.train_step(update=True).tolist()
        bool(trainer.train_step(update=True)[0] > 0)
    assert spy.reads == ["tolist", "__bool__"]
