"""The cost of `embed/effective_rank` against a training step of the same model, for the model presets'
shapes: the d_model × d_model Gram route normlab uses against the SVD of the whole vocab × d_model matrix it
replaced (both medians of repeats, each synchronised).

    python scripts/bench_embedding_rank.py --threads 2
    python scripts/bench_embedding_rank.py --device cuda --presets small,gpt2
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable

import torch
from torch import nn

from normlab.metrics.embedding import effective_rank


def _median_seconds(fn: Callable[[], None], repeats: int, device: torch.device) -> float:
    fn()  # warm-up
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        samples.append(time.perf_counter() - t0)
    return sorted(samples)[len(samples) // 2]


def _svd_rank(weight: torch.Tensor) -> torch.Tensor:
    """The route normlab took before: singular values of the whole vocab × d_model matrix (float32)."""
    s = torch.linalg.svdvals(weight.detach().float())
    p = s / s.sum()
    return torch.special.entr(p).sum().exp()


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
    parser.add_argument("--presets", default="tiny,small", help="comma-separated: tiny, small, base, gpt2")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument(
        "--period", type=int, default=100, help="steps between two measurements (every × rank_every)"
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    # (preset, vocab, d_model, heads, context, batch, depth): the presets at docs/data.md's data settings,
    # depth 6; gpt2 is GPT-2 small (the GPU benchmark's shape, bf16 autocast on a GPU)
    shapes = [
        ("tiny", 1024, 64, 4, 64, 16, 6),
        ("small", 4096, 128, 4, 128, 32, 6),
        ("base", 4096, 256, 8, 256, 32, 6),
        ("gpt2", 50304, 768, 12, 1024, 12, 12),
    ]
    for name, vocab, d, heads, ctx, batch, depth in (s for s in shapes if s[0] in args.presets.split(",")):
        torch.manual_seed(0)
        model = GPT(vocab, ctx, d, heads, depth, {"name": "ln"}, "pre").to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randint(0, vocab, (batch, ctx), device=device)
        amp = (
            torch.autocast("cuda", dtype=torch.bfloat16)
            if device.type == "cuda"
            else contextlib.nullcontext()
        )
        with amp:
            step = _median_seconds(functools.partial(_train_step, model, opt, x), args.repeats, device)
        weight = model.tok_emb.weight
        gram = _median_seconds(lambda w=weight: effective_rank(w), args.repeats, device)
        svd = _median_seconds(lambda w=weight: _svd_rank(w), args.repeats, device)
        print(
            f"{name}: embedding {vocab}×{d} on {args.device}; training step (depth {depth}, batch {batch}×{ctx}) "
            f"{step * 1e3:.1f} ms; effective rank by the Gram route {gram * 1e3:.2f} ms = {gram / step:.2%} of a "
            f"step ({gram / step / args.period:.3%} of training time measured every {args.period} steps), by the "
            f"SVD {svd * 1e3:.2f} ms = {svd / step:.2%} of a step (medians of {args.repeats}, "
            f"{torch.get_num_threads()} threads)"
        )
