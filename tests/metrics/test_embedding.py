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


def svd_rank(matrix: torch.Tensor) -> float:
    """The definition, from a float64 SVD of the whole matrix (the reference the Gram route must match)."""
    s = torch.linalg.svdvals(matrix.double())
    p = s / s.sum()
    return math.exp(-(p[p > 0] * p[p > 0].log()).sum().item())


def float32_svd_rank(matrix: torch.Tensor) -> float:
    """How normlab computed it before (a float32 SVD of the vocab × d matrix)."""
    s = torch.linalg.svdvals(matrix.float())
    p = s / s.sum()
    return torch.special.entr(p).sum().exp().item()


CRAFTED = {
    "gaussian 4096 x 128 (model=small's embedding shape)": lambda g: torch.randn(4096, 128, generator=g),
    "wide 16 x 64": lambda g: torch.randn(16, 64, generator=g),
    "rank 5 of 64": lambda g: torch.randn(300, 5, generator=g) @ torch.randn(5, 64, generator=g),
    "singular values from 1 to 1e-6": lambda g: with_singular_values(
        torch.logspace(0, -6, 32).tolist(), rows=500, seed=int(torch.randint(100, (1,), generator=g))
    ).float(),
    "one dominant direction": lambda g: (
        100 * torch.outer(torch.randn(256, generator=g), torch.randn(48, generator=g))
        + torch.randn(256, 48, generator=g)
    ),
    "N(0, 0.02) init, vocab 1024 x 64": lambda g: 0.02 * torch.randn(1024, 64, generator=g),
}


@pytest.mark.parametrize("name", list(CRAFTED))
def test_the_gram_route_equals_the_svd(name):
    """The effective rank from the d × d Gram matrix's eigenvalues equals the definition computed by a
    float64 SVD to 1e-6, and the float32 SVD normlab used before to float32's own precision (1e-5 where
    the matrix is well conditioned; the float32 SVD's tiny singular values are themselves noise at about
    1e-7 · σ_max, which moves a rank-deficient matrix's value in the 4th digit)."""
    m = CRAFTED[name](torch.Generator().manual_seed(0))
    got = effective_rank(m).item()
    assert got == pytest.approx(svd_rank(m), rel=1e-6)
    deficient = name.startswith("rank 5") or name.startswith("singular values")
    assert got == pytest.approx(float32_svd_rank(m), rel=1e-3 if deficient else 1e-5)


def test_the_check_tells_a_different_spectrum_apart():
    """The comparison can fail: the Gram route of one matrix against the SVD of another, nearly equal one."""
    g = torch.Generator().manual_seed(1)
    m = torch.randn(400, 32, generator=g)
    other = m.clone()
    other[:, 0] *= 1.5  # one direction 1.5 × longer
    assert effective_rank(m).item() != pytest.approx(svd_rank(other), rel=1e-6)


def test_rank_every_sets_which_instrumented_steps_measure_it():
    from normlab.metrics.instruments import InstrumentConfig

    cfg = InstrumentConfig(every=10, dense_until=20, rank_every=10)
    measured = [s for s in range(0, 401) if cfg.rank(s)]
    assert measured == [*range(0, 21), 100, 200, 300, 400]
    assert [s for s in range(0, 41) if InstrumentConfig(every=10, dense_until=3, rank_every=1).rank(s)] == [
        0,
        1,
        2,
        3,
        10,
        20,
        30,
        40,
    ]
    assert not any(InstrumentConfig(rank_every=0).rank(s) for s in range(100))
