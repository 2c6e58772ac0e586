"""Thick-restart block Lanczos (dmlfe.linalg.krylov) against numpy's eigh."""

from __future__ import annotations

import numpy as np
import pytest

from dmlfe.linalg.krylov import (
    FLOOR,
    ArraySpace,
    ThickRestartLanczos,
    pair_scales,
    tsqr_mix,
    unit_factor,
)


def spd(n: int, spectrum: np.ndarray, seed: int = 0) -> np.ndarray:
    Q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((n, n)))
    return (Q * spectrum) @ Q.T


def reference(A: np.ndarray, k: int) -> np.ndarray:
    return np.linalg.eigvalsh(A)[::-1][:k]


def solve(A: np.ndarray, k: int, **kw):
    space = ArraySpace(lambda V: A @ V, A.shape[0])
    res = ThickRestartLanczos(space, **kw).solve(k)
    return res, space.vectors(res.coefficients)


def true_relative_residuals(A, U, w):
    return np.linalg.norm(A @ U - U * w, axis=0) / pair_scales(w, FLOOR)


@pytest.mark.parametrize("block", [1, 4, 16])
def test_decaying_spectrum_to_a_relative_residual_of_each_pair(block):
    n, k = 400, 30
    A = spd(n, 20.0 / (1.0 + np.arange(n)) ** 0.8)
    res, U = solve(A, k, block=block, tol=1e-8)
    assert res.converged
    np.testing.assert_allclose(res.eigenvalues, reference(A, k), rtol=1e-10)
    true = true_relative_residuals(A, U, res.eigenvalues)
    assert true.max() <= 1.5e-8
    # the estimate from the small matrices is the true residual (to round-off)
    np.testing.assert_allclose(res.residuals / pair_scales(res.eigenvalues, FLOOR), true,
                               rtol=0.05, atol=1e-12)
    np.testing.assert_allclose(U.T @ U, np.eye(k), atol=1e-12)


def test_a_head_ten_million_times_the_tail():
    # MVMD's label directions: the small pairs stay accurate relative to themselves
    n, k = 600, 40
    head = 1e7 * (1.0 + np.random.default_rng(1).random(10))
    A = spd(n, np.concatenate([head, 20.0 / (1.0 + np.arange(n - 10)) ** 0.7]), seed=1)
    res, U = solve(A, k, block=16, tol=1e-8)
    assert res.converged
    ref = reference(A, k)
    np.testing.assert_allclose(res.eigenvalues, ref, rtol=1e-9)
    assert true_relative_residuals(A, U, res.eigenvalues).max() <= 1.5e-8
    np.testing.assert_allclose(U.T @ U, np.eye(k), atol=1e-12)


def test_restarts_keep_the_relation():
    n, k = 300, 20
    A = spd(n, 1.0 / (1.0 + np.arange(n)) ** 0.5, seed=2)
    res, U = solve(A, k, block=4, max_basis=k + 12, tol=1e-9)
    assert res.restarts > 3 and res.converged
    np.testing.assert_allclose(res.eigenvalues, reference(A, k), rtol=1e-10)
    assert true_relative_residuals(A, U, res.eigenvalues).max() <= 2e-9


def test_rank_deficient_and_whole_space():
    rng = np.random.default_rng(3)
    F = rng.standard_normal((50, 5))
    A = F @ F.T  # rank 5: the Krylov space is invariant after a step
    res, U = solve(A, 8, block=16)
    assert res.converged
    np.testing.assert_allclose(res.eigenvalues[:5], reference(A, 5), rtol=1e-12)
    assert np.all(np.abs(res.eigenvalues[5:]) < 1e-10 * res.eigenvalues[0])
    res, U = solve(A, 50, block=16)  # every pair of the space
    assert res.converged and res.eigenvalues.size == 50
    np.testing.assert_allclose(res.eigenvalues, reference(A, 50), atol=1e-10)


def test_max_passes_stops_and_says_not_converged():
    A = spd(300, 1.0 / (1.0 + np.arange(300)) ** 0.2, seed=4)
    res, _ = solve(A, 8, block=4, tol=1e-12, max_passes=3)
    assert not res.converged and res.n_passes == 3


def test_a_second_solve_continues_with_more_pairs():
    A = spd(300, 10.0 / (1.0 + np.arange(300)), seed=5)
    space = ArraySpace(lambda V: A @ V, 300)
    solver = ThickRestartLanczos(space, block=8, tol=1e-9)
    first = solver.solve(10)
    passes = first.n_passes
    second = solver.solve(25)
    np.testing.assert_allclose(second.eigenvalues, reference(A, 25), rtol=1e-10)
    assert second.n_passes > passes  # the count goes on from the first solve


def test_deterministic_for_a_seed():
    A = spd(200, 1.0 / (1.0 + np.arange(200)), seed=6)
    a, _ = solve(A, 10, seed=3)
    b, _ = solve(A, 10, seed=3)
    np.testing.assert_array_equal(a.eigenvalues, b.eigenvalues)
    np.testing.assert_array_equal(a.coefficients, b.coefficients)


def test_tsqr_of_shards_is_a_qr_of_the_whole():
    rng = np.random.default_rng(7)
    W = rng.standard_normal((90, 6)) * np.geomspace(1e6, 1e-3, 6)
    shards = [W[:30], W[30:31], W[31:]]  # a shard with fewer rows than columns
    qs, rs = zip(*(np.linalg.qr(s) for s in shards), strict=True)
    mix, R = tsqr_mix(list(rs), float(np.linalg.norm(W, axis=0).max()))
    Q = np.vstack([q @ m for q, m in zip(qs, mix, strict=True)])
    np.testing.assert_allclose(Q.T @ Q, np.eye(6), atol=1e-14)
    np.testing.assert_allclose(Q @ R, W, rtol=0, atol=1e-14 * np.abs(W).max())
    # a dependent column is round-off: dropped, and Q R still gives W
    W[:, 5] = W[:, 0] - 2 * W[:, 1]
    qs, rs = zip(*(np.linalg.qr(s) for s in (W[:45], W[45:])), strict=True)
    mix, R = tsqr_mix(list(rs), float(np.linalg.norm(W, axis=0).max()))
    Q = np.vstack([q @ m for q, m in zip(qs, mix, strict=True)])
    assert Q.shape[1] == 5 and R.shape == (5, 6)
    np.testing.assert_allclose(Q @ R, W, rtol=0, atol=1e-14 * np.abs(W).max())


def test_unit_factor():
    G = np.eye(4) + 1e-3 * np.ones((4, 4))
    X, R = unit_factor(G)
    np.testing.assert_allclose(R.T @ R, G, atol=1e-14)
    np.testing.assert_allclose(X.T @ G @ X, np.eye(4), atol=1e-12)
    G = np.eye(3)
    G[2, 2] = 1e-9  # a direction that lies in V: dropped
    X, R = unit_factor(G)
    assert X.shape == (3, 2)


def test_bad_arguments():
    A = spd(20, np.ones(20))
    with pytest.raises(ValueError, match="tol"):
        ThickRestartLanczos(ArraySpace(lambda V: A @ V, 20), tol=0)
    with pytest.raises(ValueError, match="between 1"):
        ThickRestartLanczos(ArraySpace(lambda V: A @ V, 20)).solve(21)
