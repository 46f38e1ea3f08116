"""The effective rank of the token-embedding matrix (Roy & Vetterli 2007), on instrumented steps.

For a matrix with singular values σ_1 … σ_n, let p_i = σ_i / Σ_j σ_j; the effective rank is

    erank = exp(H(p)),   H(p) = −Σ_i p_i ln p_i   (0 · ln 0 = 0)

a number between 1 (one direction carries everything) and n = min(vocab, d_model) (all singular values
equal). It measures how many directions the embedding uses: a tied embedding that collapses towards a
few directions (the unigram plateau of tied Post-LN runs) shows it as a falling effective rank.

Cost: one `torch.linalg.svdvals` of a vocab × d_model matrix per instrumented step (`metrics.every`);
`python -m normlab.metrics.embedding` measures it against a training step.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import torch
from torch import nn


def effective_rank(matrix: torch.Tensor) -> torch.Tensor:
    """exp of the entropy of the L1-normalised singular values of a 2-D matrix (a 0-d float32 tensor); NaN
    when the matrix holds a non-finite value (a diverging run), which the SVD itself would reject."""
    m = matrix.detach().float()
    finite = torch.isfinite(m).all()  # decided on the device: no host sync
    s = torch.linalg.svdvals(torch.where(torch.isfinite(m), m, 0.0))
    p = s / s.sum()
    return torch.where(finite, torch.special.entr(p).sum().exp(), torch.nan)


def token_embedding(model: nn.Module) -> torch.Tensor | None:
    """The token-embedding matrix (vocab × d_model) of a normlab GPT, None for models without one."""
    emb = getattr(model, "tok_emb", None)
    return emb.weight if isinstance(emb, nn.Embedding) else None


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


def main() -> None:
    """Time effective_rank against a training step of the same model, for the model presets' shapes."""
    import argparse

    from normlab.model import GPT

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--presets", default="tiny,small", help="comma-separated: tiny, small, base")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    # (preset, vocab, d_model, heads, context, batch): the presets at the README's data settings, depth 6
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


if __name__ == "__main__":
    main()
