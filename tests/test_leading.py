"""The leading-eigenpair solvers (:mod:`dmlfe.solvers.leading`) against a full
scipy.linalg.eigh: block Krylov, the float32 exploration finished in float64, LAPACK's
subset solver, the threshold's rounds and the low-rank generalised reduction.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.linalg as sla
from helpers import low_rank_psd, principal_cosines

from dmlfe.methods.template import TraceTemplate
from dmlfe.solvers import dimension, leading
from dmlfe.solvers.dense import solve_dense
from dmlfe.solvers.leading import FULL_SPECTRUM_LIMIT, block_krylov_eigh


def test_block_krylov_matches_eigh():
    A = low_rank_psd(600, 300, 0.98)
    w_ref, V_ref = sla.eigh(A)
    w_ref, V_ref = w_ref[::-1], V_ref[:, ::-1]
    w, V, info = block_krylov_eigh(lambda M: A @ M, 600, 25, tol=1e-10)
    assert info["converged"]
    np.testing.assert_allclose(w, w_ref[:25], rtol=1e-10)
    assert principal_cosines(V.T, V_ref[:, :25].T).min() > 1 - 1e-10
    # an operator of rank below the block: the Krylov space becomes invariant
    B = low_rank_psd(300, 4, 0.9)
    w, V, info = block_krylov_eigh(lambda M: B @ M, 300, 4)
    np.testing.assert_allclose(w, sla.eigvalsh(B)[::-1][:4], rtol=1e-10)
    # rank 30: the space is invariant after a few blocks of 20, part-way through the
    # first restart, so its Rayleigh-Ritz matrix is made of the steps' own coefficients
    C = low_rank_psd(300, 30, 0.9)
    w, V, info = block_krylov_eigh(lambda M: C @ M, 300, 8, depth=6, tol=1e-12)
    assert info["converged"] and info["restarts"] == 1 and info["products"] < 6 * 24
    np.testing.assert_allclose(w, sla.eigvalsh(C)[::-1][:8], rtol=1e-11)
    np.testing.assert_allclose(C @ V, V * w, atol=1e-9 * w[0])


@pytest.mark.parametrize("dtype, atol", [(np.float64, 1e-13), (np.float32, 1e-5)])
def test_orthonormalize_spans_the_block_and_drops_round_off(dtype, atol):
    rng = np.random.default_rng(3)
    base = rng.standard_normal((500, 12))
    # three exact copies (dependent: dropped), one column 1e-4 of the others (kept:
    # a small remainder is as informative as a large one) and one zero column
    W = np.hstack([base, base[:, :3] @ rng.standard_normal((3, 3)),
                   1e-4 * rng.standard_normal((500, 1)), np.zeros((500, 1))]).astype(dtype)
    Q = leading.orthonormalize(W)
    # float32 rounds the copies apart by about its precision; directions at that level
    # may stay (unit columns of noise, harmless to a Krylov space), float64 drops them
    assert Q.dtype == dtype and (Q.shape[1] == 13 if dtype == np.float64
                                 else 13 <= Q.shape[1] <= 15)
    np.testing.assert_allclose(Q.T.astype(np.float64) @ Q, np.eye(Q.shape[1]), atol=atol)
    # the same span as the independent columns: projecting them on Q changes nothing
    ref = W[:, [*range(12), 15]].astype(np.float64)
    ref /= np.linalg.norm(ref, axis=0)
    Q64 = Q.astype(np.float64)
    assert np.abs(ref - Q64 @ (Q64.T @ ref)).max() < 50 * atol
    # nearly dependent (Cholesky's pivots below 1e-7): the eigen-decomposition path
    near = np.hstack([base, base[:, :1] + 1e-9 * rng.standard_normal((500, 1))])
    Qn = leading.orthonormalize(near)
    np.testing.assert_allclose(Qn.T @ Qn, np.eye(Qn.shape[1]), atol=1e-12)
    assert Qn.shape[1] in (12, 13)


def test_orthonormalize_with_the_callers_gram_and_buffers():
    # subspace iteration hands over W^T W (made for its residuals) and two spare blocks:
    # the basis is the one made without them, written into W's own memory
    rng = np.random.default_rng(5)
    W = rng.standard_normal((400, 9)) * np.geomspace(1.0, 1e-3, 9)
    ref = leading.orthonormalize(W.copy())
    gram = W.T @ W
    mine, work = W.copy(), np.empty_like(W)
    Q = leading.orthonormalize(mine, gram=gram, overwrite=True, work=work)
    assert np.shares_memory(Q, mine)
    np.testing.assert_allclose(Q, ref, atol=1e-12)
    np.testing.assert_allclose(Q.T @ Q, np.eye(9), atol=1e-13)
    # the columns are scaled in the small factor, not in W: the caller's W is untouched
    kept = W.copy()
    np.testing.assert_allclose(leading.orthonormalize(kept, gram=gram), ref, atol=1e-12)
    np.testing.assert_array_equal(kept, W)
    # a dropped (zero) column: the result is narrower and cannot take W's memory
    Z = np.hstack([W, np.zeros((400, 1))])
    Qz = leading.orthonormalize(Z, gram=Z.T @ Z, overwrite=True, work=np.empty_like(Z))
    assert Qz.shape == (400, 9) and not np.shares_memory(Qz, Z)
    np.testing.assert_allclose(Qz, ref, atol=1e-12)


def test_block_krylov_float32_basis():
    A = low_rank_psd(600, 300, 0.98)
    w_ref = sla.eigvalsh(A)[::-1][:25]
    A32 = A.astype(np.float32)
    w, V, info = block_krylov_eigh(lambda M: A32 @ M, 600, 25, dtype=np.float32, tol=1e-5)
    assert V.dtype == np.float32 and info["ritz"].dtype == np.float32 and info["converged"]
    np.testing.assert_allclose(w, w_ref, rtol=1e-6)
    # a float64 run started from that Ritz block: one product to check it (first_depth 1)
    w2, V2, info2 = block_krylov_eigh(lambda M: A @ M, 600, 25, tol=1e-5,
                                      v0=info["ritz"].astype(np.float64), first_depth=1)
    assert info2["products"] == info["ritz"].shape[1] and info2["restarts"] == 1
    np.testing.assert_allclose(w2, w_ref, rtol=1e-9)


def test_leading_eigh_mixed_precision_is_finished_in_float64(monkeypatch):
    """The float32 exploration stops at FLOAT32_TOL; a tighter tol is reached in float64."""
    monkeypatch.setattr(leading, "KRYLOV_MIN_SIZE", 0)
    dtypes = []
    real = leading.block_krylov_eigh
    monkeypatch.setattr(leading, "block_krylov_eigh",
                        lambda *a, **k: dtypes.append(k.get("dtype", np.float64))
                        or real(*a, **k))
    m = FULL_SPECTRUM_LIMIT + 200
    A = low_rank_psd(m, 600, 0.995, seed=2)
    w_ref, V_ref = sla.eigh(A, subset_by_index=[m - 20, m - 1])
    w_ref, V_ref = w_ref[::-1], V_ref[:, ::-1]
    w, V, info = leading.leading_eigh(A, 20, tol=1e-10)
    assert dtypes == [np.float32, np.float64]
    assert info["converged"] and info["max_residual"] <= 1e-10
    assert info["float32_products"] > 0
    np.testing.assert_allclose(w, w_ref, rtol=1e-13)
    assert V.dtype == np.float64
    np.testing.assert_allclose(V.T @ V, np.eye(20), atol=1e-12)
    assert principal_cosines(V.T, V_ref.T).min() > 1 - 1e-12


def _template(A, B=None, lowrank=None, constraint=None):
    return TraceTemplate(method="test", params={}, centred=False, n_features=A.shape[0], A=A,
                         B=B, lowrank=lowrank, operator_form=lowrank is not None,
                         constraint=constraint)


@pytest.mark.parametrize("krylov_min", [None, 0], ids=["lapack-subset", "block-krylov"])
def test_solve_dense_above_the_full_spectrum_limit_is_partial_and_exact(krylov_min,
                                                                       monkeypatch):
    if krylov_min is not None:  # the Krylov branch, at a size CI can afford
        monkeypatch.setattr(leading, "KRYLOV_MIN_SIZE", krylov_min)
    calls = []
    real = leading.block_krylov_eigh
    monkeypatch.setattr(leading, "block_krylov_eigh",
                        lambda *a, **k: calls.append(k["depth"]) or real(*a, **k))
    checks = []
    real_check = leading.rayleigh_ritz
    monkeypatch.setattr(leading, "rayleigh_ritz",
                        lambda *a, **k: checks.append(a[2]) or real_check(*a, **k))
    m = FULL_SPECTRUM_LIMIT + 200
    A = low_rank_psd(m, 400, 0.99, seed=1)
    res = solve_dense(_template(A), 12)
    assert res.solver == "eigh-partial" and res.eigenvalues.size == 12
    # LAPACK's subset in float32 makes one float64 Rayleigh-Ritz check; Krylov goes deeper
    if krylov_min is None:
        assert checks == [12] and calls == []
    else:
        assert checks == [] and leading.DENSE_KRYLOV_DEPTH in calls
    w_ref = sla.eigh(A, subset_by_index=[m - 12, m - 1], eigvals_only=True)[::-1]
    np.testing.assert_allclose(res.eigenvalues, w_ref, rtol=1e-10)
    # a threshold: d from the computed values and the trace
    res_t = solve_dense(_template(A), 0.5, max_components=200)
    full = np.clip(np.linalg.eigvalsh(A)[::-1], 0, None)
    d_ref = int(np.searchsorted(np.cumsum(full), 0.5 * np.trace(A)) + 1)
    assert res_t.n_components == d_ref and res_t.trace == pytest.approx(np.trace(A))


@pytest.mark.parametrize(("tol", "method"), [(leading.KRYLOV_TOL, "lapack-subset-float32"),
                                             (1e-13, "lapack-subset")])
def test_leading_eigh_float32_subset_is_checked_in_float64(tol, method):
    # float32 vectors reach a float64 residual near 1e-7 of the largest eigenvalue: enough
    # for the default tolerance; a stricter one falls back to LAPACK in float64
    m, k = FULL_SPECTRUM_LIMIT + 150, 15
    A = low_rank_psd(m, 500, 0.98, seed=5)
    w, V, info = leading.leading_eigh(A, k, tol=tol)
    assert info["method"] == method
    w_ref = sla.eigh(A, subset_by_index=[m - k, m - 1], eigvals_only=True)[::-1]
    np.testing.assert_allclose(w, w_ref, rtol=1e-10)
    np.testing.assert_allclose(V.T @ V, np.eye(k), atol=1e-12)
    assert np.linalg.norm(A @ V - V * w, axis=0).max() <= max(tol, 1e-12) * w[0]


def test_lowrank_generalised_reduction_matches_eigh():
    m = FULL_SPECTRUM_LIMIT + 100
    rng = np.random.default_rng(3)
    F = rng.normal(size=(m, 5))
    W = rng.normal(size=(m, m // 2))
    B = W @ W.T / m + 0.5 * np.eye(m)
    res = solve_dense(_template(F @ F.T, B, lowrank=F), 5)
    assert res.solver == "lowrank-generalized"
    w_ref = sla.eigh(F @ F.T, B, subset_by_index=[m - 5, m - 1], eigvals_only=True)[::-1]
    np.testing.assert_allclose(res.eigenvalues[:5], w_ref, rtol=1e-9)
    P = res.components
    np.testing.assert_allclose(P.T @ B @ P, np.eye(5), atol=1e-9)
    np.testing.assert_allclose(F @ (F.T @ P), B @ P * res.eigenvalues[:5], atol=1e-8)


@pytest.mark.parametrize(("krylov_min", "dominant"),
                         [(None, 0), (None, 3), (0, 0), (0, 3), (0, 1), (0, 8)],
                         ids=["lapack-subset", "float32-subset-deflated", "block-krylov",
                              "block-krylov-deflated", "deflated-too-few",
                              "deflated-too-many"])
def test_leading_eigh_tail_exact_under_a_huge_leading_eigenvalue(krylov_min, dominant,
                                                                monkeypatch):
    # MVMD's label part puts its first eigenvalues 10^5-10^7 above the rest: every pair's
    # residual is measured against its own eigenvalue, so the tail is exact too -- also
    # when those pairs are deflated from the float32 exploration (``dominant``), and when
    # that guess is wrong (the float64 refinement decides)
    if krylov_min is not None:
        monkeypatch.setattr(leading, "KRYLOV_MIN_SIZE", krylov_min)
    m, k = FULL_SPECTRUM_LIMIT + 200, 30
    Q = np.linalg.qr(np.random.default_rng(7).normal(size=(m, m)))[0]
    lam = np.concatenate([[3e6, 1e6, 4e5], np.geomspace(2.5, 1e-3, m - 3)])
    A = (Q * lam) @ Q.T
    w, V, info = leading.leading_eigh(A, k, dominant=dominant)
    if krylov_min is not None:
        assert info["dominant"] == dominant and info["float32_products"] > 0
    else:  # float32 resolves the tail only once the three large pairs are deflated
        assert info["method"] == ("lapack-subset-float32" if dominant else "lapack-subset")
    ref = np.sort(lam)[::-1][:k]
    np.testing.assert_allclose(w, ref, rtol=1e-9)
    r = np.linalg.norm(A @ V - V * w, axis=0)
    assert np.all(r <= leading.KRYLOV_TOL * w * (1 + 1e-9))


@pytest.mark.parametrize("start", ["near", "wrong", "narrow"])
def test_dominant_start_is_used_and_cannot_spoil_the_result(start, monkeypatch):
    # a start block close to the dominant eigenvectors saves products against the random
    # one; a wrong or too narrow start costs products but the pairs stay exact
    monkeypatch.setattr(leading, "KRYLOV_MIN_SIZE", 0)
    m, k = FULL_SPECTRUM_LIMIT + 200, 30
    rng = np.random.default_rng(8)
    Q = np.linalg.qr(rng.normal(size=(m, m)))[0]
    lam = np.concatenate([[3e6, 1e6, 4e5], np.geomspace(2.5, 1e-3, m - 3)])
    A = (Q * lam) @ Q.T
    block = {"near": Q[:, :3] + 1e-3 * rng.normal(size=(m, 3)),
             "wrong": Q[:, 3:6], "narrow": Q[:, :1]}[start]
    w, V, info = leading.leading_eigh(A, k, dominant=3, dominant_start=block)
    _, _, random_info = leading.leading_eigh(A, k, dominant=3)
    np.testing.assert_allclose(w, np.sort(lam)[::-1][:k], rtol=1e-9)
    r = np.linalg.norm(A @ V - V * w, axis=0)
    assert np.all(r <= leading.KRYLOV_TOL * w * (1 + 1e-9))
    if start == "near":
        assert info["products"] < random_info["products"]


def test_leading_eigh_says_when_block_krylov_did_not_converge(monkeypatch):
    monkeypatch.setattr(leading, "KRYLOV_MIN_SIZE", 0)
    monkeypatch.setattr(leading, "FULL_SPECTRUM_LIMIT", 100)  # Krylov at a small size
    monkeypatch.setattr(leading, "KRYLOV_BASIS_FRACTION", float("inf"))
    A = low_rank_psd(300, 200, 0.99, seed=4)
    with pytest.warns(RuntimeWarning, match="stopped after 60 restarts"):
        w, V, info = leading.leading_eigh(A, 5, tol=1e-30)
    assert not info["converged"] and info["max_residual"] > 1e-30
    # still the leading pairs, to what float64 can resolve
    np.testing.assert_allclose(w, sla.eigvalsh(A)[::-1][:5], rtol=1e-10)


def _spectrum_matrix(lam: np.ndarray, seed: int = 0) -> np.ndarray:
    Q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(lam.size, lam.size)))
    return (Q * lam) @ Q.T


@pytest.mark.parametrize("t", [0.15, 0.3, 0.6, 0.9])
def test_threshold_computes_only_the_rounds_it_needs(t):
    """A threshold asks for THRESHOLD_FIRST pairs, then at least THRESHOLD_GROWTH x as
    many (the cap once past half of it), stops at the first round that reaches t of the
    trace, and d equals the full spectrum's choice."""
    from dmlfe.solvers.dimension import choose_dimension

    m, cap = FULL_SPECTRUM_LIMIT + 300, 400
    lam = 1.0 / (1.0 + np.arange(m)) ** 0.6  # slowly decaying, as text
    A = _spectrum_matrix(lam, seed=3)
    total = float(np.trace(A))
    expect = choose_dimension(lam, t)  # d over the whole spectrum
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w, V, info = leading.leading_eigh_threshold(A, t, total, cap, complete=False)
        d = choose_dimension(w, t, total=total)
    rounds = info["rounds"]
    assert rounds[0] == dimension.THRESHOLD_FIRST and w.size == rounds[-1]
    for a, b in zip(rounds, rounds[1:], strict=False):
        assert b == cap if 2 * dimension.THRESHOLD_GROWTH * a > cap \
            else b >= dimension.THRESHOLD_GROWTH * a
    # every round but the last fell short of t: the last one is the first that could do
    assert all(lam[:k].sum() < t * total for k in rounds[:-1])
    np.testing.assert_allclose(w, lam[:w.size], rtol=1e-9)
    if expect <= cap:
        assert d == expect and not caught
        assert expect <= rounds[-1] and (len(rounds) == 1 or expect > rounds[-2])
    else:  # the cap: every one of its pairs, and the warning that t was not reached
        assert d == cap and rounds[-1] == cap
        assert any("below the threshold" in str(c.message) for c in caught)
    np.testing.assert_allclose(A @ V[:, :d], V[:, :d] * w[:d], atol=1e-5 * w[0])


def test_a_krylov_basis_filling_most_of_the_space_goes_to_lapack(monkeypatch):
    monkeypatch.setattr(leading, "KRYLOV_MIN_SIZE", 0)
    m = FULL_SPECTRUM_LIMIT + 200
    A = low_rank_psd(m, 900, 0.995, seed=5)
    ref = sla.eigvalsh(A)[::-1]
    limit = leading.KRYLOV_BASIS_FRACTION * m / leading.DENSE_KRYLOV_DEPTH
    small = int(limit) - leading.KRYLOV_OVERSAMPLING - 5  # basis below 2/3 of m
    big = int(limit) - leading.KRYLOV_OVERSAMPLING + 5  # above it
    for k, method in ((small, "block-krylov"), (big, "lapack-subset-float32")):
        w, V, info = leading.leading_eigh(A, k)
        assert info["method"] == method
        np.testing.assert_allclose(w, ref[:k], rtol=1e-9)
