"""The effective rank of the token-embedding matrix (Roy & Vetterli 2007), on instrumented steps.

For a matrix with singular values σ_1 … σ_n, let p_i = σ_i / Σ_j σ_j; the effective rank is

    erank = exp(H(p)),   H(p) = −Σ_i p_i ln p_i   (0 · ln 0 = 0)

a number between 1 (one direction carries everything) and n = min(vocab, d_model) (all singular values
equal). It measures how many directions the embedding uses: a tied embedding that collapses towards a
few directions (the unigram plateau of tied Post-LN runs) shows it as a falling effective rank.

The singular values come from a d_model × d_model computation rather than an SVD of the vocab × d_model
matrix: σ_i² are the eigenvalues of the Gram matrix EᵀE (EEᵀ for a wide matrix), formed in float64 so that
small singular values survive the squaring (float64 Gram eigenvalues carry an absolute error of about
1e-16 · σ_max², so σ to about 1e-8 · σ_max, finer than a float32 SVD). On a GPU the Gram product is one
matrix multiply (the vocab × d SVD took two training steps' time at the GPT-2-small shape) and the
eigenvalues of the small matrix follow; `metrics.rank_every` sets how often. `python
scripts/bench_embedding_rank.py` (normlab.bench.embedding_rank) measures the cost against a training step.
"""

from __future__ import annotations

import torch
from torch import nn


def singular_values(matrix: torch.Tensor) -> torch.Tensor:
    """The singular values of a 2-D matrix (float64, ascending), from the eigenvalues of its smaller Gram
    matrix."""
    m = matrix.double()
    gram = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    return torch.linalg.eigvalsh(gram).clamp_min(0).sqrt()


def effective_rank(matrix: torch.Tensor) -> torch.Tensor:
    """exp of the entropy of the L1-normalised singular values of a 2-D matrix (a 0-d float32 tensor); NaN
    when the matrix holds a non-finite value (a diverging run), which the eigensolver would reject."""
    m = matrix.detach()
    finite = torch.isfinite(m).all()  # decided on the device: no host sync
    s = singular_values(torch.where(torch.isfinite(m), m, 0.0))
    p = s / s.sum()
    return torch.where(finite, torch.special.entr(p).sum().exp(), torch.nan).float()


def token_embedding(model: nn.Module) -> torch.Tensor | None:
    """The token-embedding matrix (vocab × d_model) of a normlab GPT, None for models without one."""
    emb = getattr(model, "tok_emb", None)
    return emb.weight if isinstance(emb, nn.Embedding) else None
