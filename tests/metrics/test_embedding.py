"""The effective rank of the token embedding (Roy & Vetterli 2007) against hand computations."""

from __future__ import annotations

import math

import pytest
import torch

from normlab.metrics import names
from normlab.metrics.embedding import effective_rank


def with_singular_values(values: list[float], rows: int, seed: int = 0) -> torch.Tensor:
    """A rows × len(values) matrix U diag(values) Vᵀ with random orthonormal U, V."""
    g = torch.Generator().manual_seed(seed)
    n = len(values)
    u, _ = torch.linalg.qr(torch.randn(rows, n, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    return (u * torch.tensor(values, dtype=torch.float64)) @ v.T


def test_two_singular_values_by_hand():
    # σ = (3, 1): p = (3/4, 1/4), H = −(¾ ln ¾ + ¼ ln ¼) = 0.562335, erank = e^H = 1.754765
    m = with_singular_values([3.0, 1.0], rows=10)
    expected = math.exp(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert expected == pytest.approx(1.754765, abs=1e-6)
    assert effective_rank(m).item() == pytest.approx(expected, rel=1e-5)


def test_extremes_one_and_full_rank():
    assert effective_rank(with_singular_values([5.0, 2.0, 1.0, 0.5], rows=50)).item() < 4
    assert effective_rank(with_singular_values([2.0] * 8, rows=50)).item() == pytest.approx(8, rel=1e-5)
    rank_one = torch.outer(torch.randn(30), torch.randn(6))
    assert effective_rank(rank_one).item() == pytest.approx(1.0, abs=1e-3)


def test_scale_and_rotation_do_not_matter():
    m = with_singular_values([4.0, 3.0, 2.0, 1.0], rows=20)
    r = effective_rank(m).item()
    assert effective_rank(7.5 * m).item() == pytest.approx(r, rel=1e-5)
    assert effective_rank(
        with_singular_values([4.0, 3.0, 2.0, 1.0], rows=20, seed=9)
    ).item() == pytest.approx(r, rel=1e-5)


def test_a_non_finite_matrix_has_no_rank_rather_than_an_error():
    m = torch.randn(16, 4)
    m[3, 1] = float("inf")
    assert math.isnan(effective_rank(m).item())
    m[3, 1] = float("nan")
    assert math.isnan(effective_rank(m).item())


def test_instrumented_rows_carry_the_embeddings_effective_rank(make_gpt, make_trainer):
    model = make_gpt()
    trainer = make_trainer(model, metrics={"every": 2})
    expected = effective_rank(model.tok_emb.weight).item()  # measured on the weights the step starts from
    probe = trainer.instruments.begin(0)
    trainer.train_step(update=True, probe=probe)
    assert probe.row()[names.EMBED_EFFECTIVE_RANK] == pytest.approx(expected, rel=1e-5)
    assert 1 < expected <= min(model.tok_emb.weight.shape)
