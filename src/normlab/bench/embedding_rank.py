"""The cost of `embed/effective_rank` (one SVD of the token embedding per instrumented step) against a
training step of the same model, for the model presets' shapes.

    python scripts/bench_embedding_rank.py --threads 2
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import torch
from torch import nn

from normlab.metrics.embedding import effective_rank


def _median_seconds(fn: Callable[[], None], repeats: int) -> float:
    fn()  # warm-up
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return sorted(samples)[len(samples) // 2]


def _train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> None:
    logits = model(x)
    nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), x.view(-1)).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def main(argv: list[str] | None = None) -> None:
    """Time effective_rank against a training step of the same model, for the model presets' shapes."""
    import argparse

    from normlab.model import GPT

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--presets", default="tiny,small", help="comma-separated: tiny, small, base")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    # (preset, vocab, d_model, heads, context, batch): the presets at docs/data.md's data settings, depth 6
    shapes = [
        ("tiny", 1024, 64, 4, 64, 16),
        ("small", 4096, 128, 4, 128, 32),
        ("base", 4096, 256, 8, 256, 32),
    ]
    for name, vocab, d, heads, ctx, batch in (s for s in shapes if s[0] in args.presets.split(",")):
        torch.manual_seed(0)
        model = GPT(vocab, ctx, d, heads, 6, {"name": "ln"}, "pre")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randint(0, vocab, (batch, ctx))
        step = _median_seconds(functools.partial(_train_step, model, opt, x), args.repeats)
        rank = _median_seconds(lambda m=model: effective_rank(m.tok_emb.weight).item(), args.repeats)
        print(
            f"{name}: embedding {vocab}×{d}; training step (depth 6, batch {batch}×{ctx}) {step * 1e3:.1f} ms; "
            f"effective rank {rank * 1e3:.2f} ms = {rank / step:.2%} of a step, {rank / step / 10:.3%} "
            f"of training time at metrics.every=10 (medians of {args.repeats}, {torch.get_num_threads()} threads)"
        )
