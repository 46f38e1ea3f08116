"""How long a training step will take on a CPU, said before anything slow happens.

    step time ≈ grad_accum × (overhead + batch_size × time per sequence) + one optimizer step

all measured just now on a copy of the model: forward + backward on SMALL_BATCH and on LARGE_BATCH
sequences of random tokens and a step of the run's optimizer (the fastest of several interleaved timings
each, after one untimed pass), with the run's thread count and whatever else loads the machine at that moment. The
difference of the two passes gives the time per sequence, the rest is the per-call overhead (Python,
dispatch) that dominates tiny models; the log reports the time per sequence as a FLOP rate
(`flops.flops_per_token`, 6·N + 12·L·T·d, over it). Gradient clipping and, every `metrics.every` steps,
the instruments are left out; docs/usage.md compares the estimate with measured step times.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from normlab.config.groups import OptimConfig
from normlab.model.config import SIZES
from normlab.train import flops
from normlab.train.optim import build_optimizer

log = logging.getLogger(__name__)

SMALL_BATCH, LARGE_BATCH = 1, 8  # sequences in the two timed forward + backward passes
ROUNDS, MAX_ROUNDS = 2, 10  # rounds of timings (each pass and the optimizer step once per round)
BUDGET_S = 0.3  # ... repeated until this much time is spent; the fastest of each counts
SLOW_STEP_S = 1.0  # above this, a CPU user is pointed at model=tiny
TINY = "tiny"  # the size preset meant for CPUs (model=tiny: normlab.model.config.SIZES)


@dataclass(frozen=True)
class StepEstimate:
    seconds: float  # expected seconds per optimizer step
    flops_per_step: float
    flops_per_s: float  # the model's FLOPs per sequence over the measured time per sequence


@dataclass(frozen=True)
class Timings:
    passes: dict[int, float]  # seconds of one forward + backward, by number of sequences
    optimizer: float  # seconds of one optimizer step (0 where no optimizer settings were given)


def measure(
    model: nn.Module,
    vocab_size: int,
    seq_len: int,
    batches: Sequence[int],
    optim_cfg: dict[str, Any] | None = None,
) -> Timings:
    """Seconds of one forward + backward on each batch size of random sequences, and of one step of the
    run's optimizer (`build_optimizer`), on a copy of `model` (the model, its gradients and the global RNG
    are left untouched). Timed in rounds — every pass and the optimizer step once per round — for at least
    ROUNDS rounds and until BUDGET_S is spent (at most MAX_ROUNDS); each one's fastest time counts: a busy
    machine stalls a process now and then, and interleaving keeps one stall from deciding any of them."""
    probe = copy.deepcopy(model).train()
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, vocab_size, (max(batches), seq_len + 1), generator=gen)

    def timed(fn: Callable[[], Any]) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    def forward_backward(n: int) -> None:
        probe.zero_grad(set_to_none=True)
        logits = probe(x[:n, :-1])
        F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), x[:n, 1:].reshape(-1)).backward()

    with torch.random.fork_rng(devices=[]):
        forward_backward(max(batches))  # first call: allocations, lazy initialisation
        opt = build_optimizer(probe, OptimConfig.of(optim_cfg), torch.device("cpu")) if optim_cfg else None
        if opt is not None:
            opt.step()  # the first step allocates the optimizer's state
        passes: dict[int, list[float]] = {n: [] for n in batches}
        steps: list[float] = []
        start = time.perf_counter()
        rounds = 0
        while rounds < ROUNDS or (time.perf_counter() - start < BUDGET_S and rounds < MAX_ROUNDS):
            for n in batches:
                passes[n].append(timed(lambda n=n: forward_backward(n)))
            if opt is not None:
                steps.append(timed(opt.step))
            rounds += 1
    return Timings({n: min(t) for n, t in passes.items()}, min(steps) if steps else 0.0)


def estimate(
    model: nn.Module,
    model_cfg: dict[str, Any],
    train_cfg: dict[str, Any],
    optim_cfg: dict[str, Any] | None = None,
) -> StepEstimate:
    """The expected seconds per optimizer step of `model` with these model, train and optim settings."""
    seq_len = int(train_cfg["seq_len"])
    per_token = flops.flops_per_token(
        flops.matmul_params(model), int(model_cfg["n_layers"]), seq_len, int(model_cfg["d_model"])
    )
    m = measure(model, int(model_cfg["vocab_size"]), seq_len, (SMALL_BATCH, LARGE_BATCH), optim_cfg)
    log.debug("forward + backward by sequences %s s, optimizer step %.4f s", m.passes, m.optimizer)
    t = m.passes
    per_seq = max(
        (t[LARGE_BATCH] - t[SMALL_BATCH]) / (LARGE_BATCH - SMALL_BATCH), t[LARGE_BATCH] / LARGE_BATCH / 4
    )
    overhead = max(t[SMALL_BATCH] - SMALL_BATCH * per_seq, 0.0)
    batch, accum = int(train_cfg["batch_size"]), int(train_cfg["grad_accum"])
    seconds = accum * (overhead + batch * per_seq) + m.optimizer
    return StepEstimate(seconds, per_token * seq_len * batch * accum, per_token * seq_len / per_seq)


def fmt_step(seconds: float) -> str:
    """'0.29 s', '12 ms' (a tiny test model's step)."""
    return f"{seconds * 1000:.0f} ms" if seconds < 0.1 else f"{seconds:.2f} s"


def fmt_duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def tiny_settings(
    model_cfg: dict[str, Any], train_cfg: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's model and train settings with the tiny preset's size (model=tiny) instead:
    its width, heads and context, and a sequence length that fits that context."""
    tiny = dict(SIZES[TINY][1])  # what model=tiny changes: its width, heads and context
    context = int(tiny["context_length"])
    seq_len = int(train_cfg["seq_len"])
    same = seq_len == int(model_cfg["context_length"])  # train.seq_len follows model.context_length
    return {**model_cfg, **tiny}, {**train_cfg, "seq_len": context if same else min(seq_len, context)}


def cpu_lines(model: nn.Module, cfg: dict[str, Any]) -> list[str]:
    """What to tell a CPU user first: the expected step time of their model and, when it is over
    SLOW_STEP_S, the tiny preset's, measured the same way (the global RNG left as it was)."""
    mcfg = cfg["model"]
    est = estimate(model, mcfg, cfg["train"], cfg.get("optim"))
    max_steps = int(cfg["train"]["max_steps"])
    size = f"d_model {mcfg['d_model']} × {mcfg['n_layers']} blocks, context {cfg['train']['seq_len']}"
    lines = [
        f"expected step time on this CPU: about {fmt_step(est.seconds)} ({size}: {est.flops_per_step / 1e9:.2f} "
        f"GFLOP per step at {est.flops_per_s / 1e9:.1f} GFLOP/s, timed just now on {SMALL_BATCH} and "
        f"{LARGE_BATCH} sequences), so {max_steps} steps take about {fmt_duration(est.seconds * max_steps)}"
    ]
    tiny_model_cfg, tiny_train_cfg = tiny_settings(mcfg, cfg["train"])
    is_tiny = all(tiny_model_cfg[k] == mcfg[k] for k in ("d_model", "context_length", "n_heads"))
    if est.seconds > SLOW_STEP_S and not is_tiny:
        from hydra.utils import instantiate

        with torch.random.fork_rng(devices=[]):
            tiny_model = instantiate(tiny_model_cfg)
        tiny = estimate(tiny_model, tiny_model_cfg, tiny_train_cfg, cfg.get("optim"))
        lines.append(
            f"that is slow for a CPU: model=tiny (d_model {tiny_model_cfg['d_model']}, context "
            f"{tiny_model_cfg['context_length']}) is meant for one — about {fmt_step(tiny.seconds)} a step here, "
            f"{max_steps} steps in {fmt_duration(tiny.seconds * max_steps)}: add model=tiny, or use a GPU"
        )
    return lines
