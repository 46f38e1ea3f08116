"""The effective rank of the token-embedding matrix (Roy & Vetterli 2007), on instrumented steps.

For a matrix with singular values σ_1 … σ_n, let p_i = σ_i / Σ_j σ_j; the effective rank is

    erank = exp(H(p)),   H(p) = −Σ_i p_i ln p_i   (0 · ln 0 = 0)

a number between 1 (one direction carries everything) and n = min(vocab, d_model) (all singular values
equal). It measures how many directions the embedding uses: a tied embedding that collapses towards a
few directions (the unigram plateau of tied Post-LN runs) shows it as a falling effective rank.

Cost: one `torch.linalg.svdvals` of a vocab × d_model matrix per instrumented step (`metrics.every`);
`python scripts/bench_embedding_rank.py` (normlab.bench.embedding_rank) measures it against a training step.
"""

from __future__ import annotations

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
