"""The rules every solver shares: n_components, the dimension cut, one result type.

References are numpy's dense ``eigh`` of explicitly formed PSD matrices.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import decaying_data, low_rank_psd, sparse_dask
from scipy.linalg import subspace_angles

import dmlfe.solvers.matrix_free as matrix_free
from dmlfe.methods import mvmd, pca
from dmlfe.solvers import (
    EigenResult,
    check_n_components,
    choose_dimension,
    flip_signs,
    flip_signs_inplace,
    n_genuine,
    solve_dense,
    solve_matrix_free,
)
from dmlfe.stats.pass_ import compute_stats

MESSAGE = (
    "n_components must be an int (the number of components d) or a float threshold t in "
    "(0, 1]; got "
)


# ---------------------------------------------------------------- check_n_components


@pytest.mark.parametrize(
    ("value", "expected", "kind"),
    [(3, 3, int), (np.int64(5), 5, int), (0.5, 0.5, float), (np.float32(0.25), 0.25, float),
     (1.0, 1.0, float), (1, 1, int)],
)
def test_check_n_components_accepts(value, expected, kind):
    out = check_n_components(value)
    assert out == expected and type(out) is kind


@pytest.mark.parametrize(
    ("value", "exc"),
    [(True, TypeError), (False, TypeError), (np.bool_(True), TypeError), ("3", TypeError),
     (None, TypeError), ([2], TypeError), (1 + 0j, TypeError),
     (0, ValueError), (-2, ValueError), (np.int32(0), ValueError), (0.0, ValueError),
     (1.5, ValueError), (-0.2, ValueError), (3.0, ValueError), (float("nan"), ValueError)],
)
def test_check_n_components_one_message(value, exc):
    with pytest.raises(exc) as info:
        check_n_components(value)
    assert str(info.value) == MESSAGE + repr(value)


# ------------------------------------------------------------------ choose_dimension


def psd_matrix(D: int = 30, rank: int | None = None, ratio: float = 0.7, seed: int = 0):
    """A PSD matrix with eigenvalues ratio**i (the last D - rank of them zero)."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((D, D)))
    lam = ratio ** np.arange(D)
    if rank is not None:
        lam[rank:] = 0.0
    return (Q * lam) @ Q.T


def dense_spectrum(A: np.ndarray) -> np.ndarray:
    return np.linalg.eigvalsh(A)[::-1]


@pytest.mark.parametrize("rank", [None, 12])
@pytest.mark.parametrize("t", [0.3, 0.5, 0.8, 0.9, 0.99, 0.999, 1.0])
def test_threshold_with_total_equals_full_spectrum_cut(rank, t):
    A = psd_matrix(rank=rank)
    w = dense_spectrum(A)
    d = choose_dimension(w, t)  # the dense rule: sum of the genuine positive eigenvalues
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # the whole spectrum with its trace, and only enough leading eigenvalues with it
        assert choose_dimension(w, t, total=np.trace(A)) == d
        if t < 1.0:
            assert choose_dimension(w[:20], t, total=np.trace(A)) == d
    assert d <= n_genuine(w)


def test_threshold_with_total_not_reached_warns():
    A = psd_matrix(ratio=0.9)
    w = dense_spectrum(A)
    with pytest.warns(RuntimeWarning, match="raise max_components or pass an int n_components") \
            as record:
        d = choose_dimension(w[:5], 0.9, total=np.trace(A))
    assert d == 5
    held = w[:5].sum() / np.trace(A)
    assert f"top 5 computed eigenvalues hold {held:.4f} of the total" in str(record[0].message)
    # capped to the genuine ones: round-off eigenvalues are never kept
    w2 = np.array([4.0, 2.0, 1e-13, -1e-14])
    with pytest.warns(RuntimeWarning, match="below the threshold"):
        assert choose_dimension(w2, 0.999, total=10.0) == 2


def test_threshold_denominator_is_the_total():
    w = np.array([4.0, 3.0, 2.0, 1.0])
    assert choose_dimension(w, 0.5) == 2  # 7 >= 0.5 * 10
    assert choose_dimension(w, 0.5, total=20.0) == 4  # 10 >= 0.5 * 20
    assert choose_dimension(w, 0.3, total=20.0) == 2  # 7 >= 6


def test_choose_dimension_int_and_errors():
    w = np.array([3.0, 2.0, 1.0])
    assert choose_dimension(w, 2, total=100.0) == 2  # an int ignores the total
    with pytest.raises(ValueError, match=r"n_components=4 must lie between 1 and the number "
                                         r"of computed eigenvalues \(3\)"):
        choose_dimension(w, 4)
    for bad, exc in ((0, ValueError), (1.5, ValueError), (True, TypeError), ("2", TypeError)):
        with pytest.raises(exc, match="n_components"):
            choose_dimension(w, bad)
    with pytest.raises(ValueError, match="no genuine positive eigenvalue"):
        choose_dimension(np.zeros(3), 0.9, total=1.0)
    with pytest.raises(ValueError, match="total"):
        choose_dimension(w, 0.9, total=0.0)


# ------------------------------------------------------------------------ flip_signs


def test_flip_signs_returns_a_new_array():
    V = np.array([[1.0, -3.0], [-2.0, 0.5], [0.0, 3.0]])
    before = V.copy()
    out = flip_signs(V)
    np.testing.assert_array_equal(V, before)
    np.testing.assert_array_equal(out, [[-1.0, 3.0], [2.0, -0.5], [0.0, -3.0]])
    empty = np.zeros((4, 0))
    e = flip_signs(empty)
    assert e.shape == (4, 0) and e is not empty


@pytest.mark.parametrize("threads", ["1", "3"])
@pytest.mark.parametrize("rows", [1, 2, 3, 1 << 13])
def test_flip_signs_inplace_slab_by_slab_is_the_sign_rule(rows, threads, monkeypatch):
    # ties of magnitude across slabs and across the threads' row ranges (the first
    # occurrence wins), a zero column, and a column whose largest entry is negative in
    # a later slab
    monkeypatch.setenv("DMLFE_DRIVER_THREADS", threads)
    V = np.array([[0.5, -3.0, 0.0, 1.0], [-2.0, 3.0, 0.0, -1.0], [1.0, 0.5, 0.0, -4.0],
                  [2.0, -3.0, 0.0, 0.25], [-0.5, 1.0, 0.0, 0.0]])
    V = np.vstack([V, np.random.default_rng(0).normal(size=(40, 4))])
    V[:, 2] = 0.0
    V = np.hstack([V, np.random.default_rng(1).uniform(-1, 1, size=(45, 1))])
    V[20, 4], V[40, 4] = -9.0, 9.0  # in the second and third of three ranges
    # the rule written independently: argmax finds the first largest |entry|
    top = V[np.argmax(np.abs(V), axis=0), np.arange(V.shape[1])]
    ref = V * np.where(top < 0, -1.0, 1.0)
    W = V.copy()
    out = flip_signs_inplace(W, rows=rows)
    assert out is W
    np.testing.assert_array_equal(W, ref)
    np.testing.assert_array_equal(flip_signs(V), ref)


# ------------------------------------------------- solve_matrix_free vs solve_dense


def decaying(n: int = 300, D: int = 60, q: int = 3, seed: int = 0):
    """Sparse X whose scatter spectrum decays geometrically down to a noise floor."""
    return decaying_data(n, D, q, seed, zero_fraction=0.05)


def assert_same_solution(free: EigenResult, dense: EigenResult, angle: float = 5e-5):
    d = dense.n_components
    assert free.n_components == d and free.components.shape == dense.components.shape
    k = free.eigenvalues.size
    np.testing.assert_allclose(free.eigenvalues[:d], dense.eigenvalues[:d], rtol=1e-8)
    # every computed pair, to the solver's tolerance relative to the largest eigenvalue
    np.testing.assert_allclose(free.eigenvalues, dense.eigenvalues[:k], rtol=0,
                               atol=1e-8 * dense.eigenvalues[0])
    assert np.max(subspace_angles(free.components, dense.components)) < angle
    np.testing.assert_allclose(free.components, dense.components, atol=10 * angle)


@pytest.mark.parametrize("build", [pca, lambda s, dense=True: mvmd(s, beta=0.3, dense=dense)])
@pytest.mark.parametrize("n_components", [4, 0.5, 0.75])
@pytest.mark.parametrize("rows", [None, 64])
def test_solve_matrix_free_matches_solve_dense(build, n_components, rows):
    X, Y = decaying()
    stats = compute_stats(X, Y, need_xtx=True)
    dense = solve_dense(build(stats), n_components)
    template = build(stats, dense=False)
    src = X if rows is None else sparse_dask(X, rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        free = solve_matrix_free(template, src, n_components, max_components=20, stats=stats)
    assert isinstance(free, EigenResult)
    assert free.solver in ("randomized-subspace", "block-krylov")
    assert free.converged and free.n_passes >= 1
    assert free.eigenvalues.size == (n_components if isinstance(n_components, int) else 20)
    assert free.n_genuine == n_genuine(free.eigenvalues)
    assert free.trace == pytest.approx(np.trace(build(stats).A), rel=1e-10)
    assert dense.n_passes == 0 and dense.converged
    assert_same_solution(free, dense)
    if not isinstance(n_components, int):
        assert 1 < dense.n_components < 20
        if build is pca:  # the denominator is tr(A), not the sum of the 20 computed
            assert choose_dimension(free.eigenvalues, n_components) < free.n_components


def test_solve_matrix_free_lanczos_and_whole_spectrum():
    X, Y = decaying(D=12, seed=3)
    stats = compute_stats(X, Y, need_xtx=True)
    dense = solve_dense(pca(stats), 0.95)
    # k = D: the randomized block is the whole space, exact after one pass
    whole = solve_matrix_free(pca(stats, dense=False), X, 0.95)
    assert whole.n_passes == 1 and whole.eigenvalues.size == 12
    assert_same_solution(whole, dense, angle=1e-8)
    lanczos = solve_matrix_free(pca(stats, dense=False), X, 3, solver="lanczos")
    assert lanczos.solver == "lanczos-arpack" and lanczos.n_components == 3
    assert_same_solution(lanczos, solve_dense(pca(stats), 3), angle=1e-8)


def test_solve_matrix_free_warnings_and_refusals(monkeypatch):
    X, Y = decaying()
    stats = compute_stats(X, Y)
    template = pca(stats, dense=False)
    # the threshold is not reached by the max_components computed pairs
    with pytest.warns(RuntimeWarning, match="raise max_components"):
        res = solve_matrix_free(template, X, 0.999, max_components=3)
    assert res.n_components == 3 and res.components.shape == (60, 3)
    # a solver that stops early says so
    real = matrix_free.matrix_free_eigh

    def one_pass(*args, **kwargs):
        return real(*args, max_passes=1, n_oversamples=0, tol=1e-14, **kwargs)

    monkeypatch.setattr(matrix_free, "matrix_free_eigh", one_pass)
    with pytest.warns(RuntimeWarning, match=r"pca: the randomized-subspace solver stopped "
                                            r"after 1 passes .*approximate \(see converged_\)"):
        res = solve_matrix_free(template, X, 2)
    assert not res.converged and res.n_passes == 1
    monkeypatch.undo()
    # only the operator form with B = I can be solved without the matrix
    from dmlfe.methods import cca

    with pytest.raises(ValueError, match="operator form"):
        solve_matrix_free(cca(compute_stats(X, Y, need_xtx=True)), X, 2)
    with pytest.raises(ValueError, match="n_components"):
        solve_matrix_free(template, X, 0)


@pytest.mark.parametrize("m", [1, 7, 300])
def test_cholesky_reduce_is_the_standard_form_of_the_pencil(m):
    """C = L^-1 A L^-T against numpy's solves; exactly symmetric; the pencil's eigenvalues;
    A untouched unless overwrite_a, which reduces in A's memory."""
    import scipy.linalg as sla

    from dmlfe.solvers.leading import cholesky_reduce

    rng = np.random.default_rng(m)
    X = rng.standard_normal((m, m + 3))
    A = X @ X.T - 0.5 * np.eye(m)  # indefinite
    A = 0.5 * (A + A.T)
    W = rng.standard_normal((m, 2 * m))
    B = W @ W.T / m + 0.1 * np.eye(m)
    A0 = A.copy()
    C, L = cholesky_reduce(A, B)
    np.testing.assert_array_equal(A, A0)
    np.testing.assert_allclose(L @ L.T, B, rtol=1e-12, atol=1e-12)
    Li = np.linalg.inv(L)
    np.testing.assert_allclose(C, Li @ A0 @ Li.T, rtol=1e-10, atol=1e-10 * np.abs(A0).max())
    np.testing.assert_array_equal(C, C.T)
    assert C.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.eigvalsh(C), sla.eigh(A0, B, eigvals_only=True),
                               rtol=1e-9, atol=1e-9 * np.abs(A0).max())
    C2, _ = cholesky_reduce(A, B, L, overwrite_a=True)
    assert np.shares_memory(C2, A)
    np.testing.assert_array_equal(C2, C)


def test_generalized_leading_pairs_by_the_operator(monkeypatch):
    """A fixed d of a large generalised problem: block Krylov on L^-1 A L^-T applied by
    triangular solves (no dsygst), against scipy.linalg.eigh of the pencil; B-orthonormal
    components; a threshold still reduces the pencil (its denominator is tr(C))."""
    import scipy.linalg as sla

    import dmlfe.solvers.dense as dense
    import dmlfe.solvers.leading as leading
    from dmlfe.methods.template import TraceTemplate

    monkeypatch.setattr(dense, "FULL_SPECTRUM_LIMIT", 50)
    monkeypatch.setattr(leading, "KRYLOV_MIN_SIZE", 50)
    m, k = 700, 6
    rng = np.random.default_rng(3)
    F = rng.standard_normal((m, 40)) * np.geomspace(10.0, 0.1, 40)
    A = F @ F.T - 0.3 * np.eye(m)  # indefinite, a clear gap after the leading pairs
    W = rng.standard_normal((m, 2 * m))
    B = W @ W.T / m + 0.1 * np.eye(m)
    t = TraceTemplate(method="test", params={}, centred=False, n_features=m, A=A, B=B)
    reduced = []
    monkeypatch.setattr(dense, "cholesky_reduce",
                        lambda *a, **kw: reduced.append(1) or leading.cholesky_reduce(*a, **kw))
    res = dense.solve_dense(t, k)
    assert res.solver == "eigh-generalized-operator" and reduced == []
    w_ref, V_ref = sla.eigh(A, B, subset_by_index=[m - k, m - 1])
    np.testing.assert_allclose(res.eigenvalues[:k], w_ref[::-1], rtol=1e-8)
    P = res.components
    np.testing.assert_allclose(P.T @ B @ P, np.eye(k), atol=1e-8)
    assert np.max(subspace_angles(P, V_ref)) < 1e-5
    assert dense.solve_dense(t, 0.5).solver != "eigh-generalized-operator" and reduced
    # pairs not converged within the operator's budget: the pencil is reduced after all
    monkeypatch.setattr(dense, "KRYLOV_TOL", 1e-30)
    reduced.clear()
    slow = dense.solve_dense(t, k)
    assert slow.solver == "eigh-generalized-partial" and reduced
    np.testing.assert_allclose(slow.eigenvalues[:k], w_ref[::-1], rtol=1e-8)


def _spd(m: int, smallest: float, seed: int = 0) -> np.ndarray:
    """A symmetric positive definite m x m matrix with eigenvalues 1 ... smallest."""
    Q = np.linalg.qr(np.random.default_rng(seed).normal(size=(m, m)))[0]
    return (Q * np.geomspace(1.0, smallest, m)) @ Q.T


def test_large_constraint_is_checked_without_its_whole_spectrum(monkeypatch):
    import scipy.linalg as sla

    import dmlfe.solvers.dense as dense
    from dmlfe.solvers.leading import FULL_SPECTRUM_LIMIT

    # above FULL_SPECTRUM_LIMIT the constraint's conditioning is estimated by LAPACK's
    # dpocon; its whole spectrum is not computed when B is clearly fine
    m = FULL_SPECTRUM_LIMIT + 100
    B = _spd(m, 1e-3)
    ev = sla.eigvalsh(B)
    rc = dense.reciprocal_condition(B, sla.cholesky(B, lower=True))
    exact_1norm = 1.0 / np.linalg.cond(B, 1)
    # the estimate of ||B^-1||_1 is a lower bound, so rc is at least the exact 1-norm
    # reciprocal condition, which is at most the eigenvalue ratio
    assert exact_1norm * (1 - 1e-9) <= rc <= 3 * exact_1norm
    assert exact_1norm <= ev[0] / ev[-1] * (1 + 1e-9)
    calls = []
    real = dense.sla.eigvalsh
    monkeypatch.setattr(dense.sla, "eigvalsh", lambda *a, **k: calls.append(1) or real(*a, **k))
    Breg, r, L = dense.constraint_factor(B)
    # (Q w) Q^T is symmetric only to round-off: the symmetrised copy is factorised
    assert not np.array_equal(B, B.T)
    assert r == 0.0 and calls == [] and Breg is not B
    np.testing.assert_array_equal(Breg, 0.5 * (B + B.T))
    np.testing.assert_allclose(L @ L.T, B, atol=1e-12)
    # an exactly symmetric B (as the builders give) is used as it is, without a copy
    Bs = 0.5 * (B + B.T)
    Breg_s, r_s, L_s = dense.constraint_factor(Bs)
    assert Breg_s is Bs and r_s == 0.0
    np.testing.assert_array_equal(L_s, L)
    # the 1-norm is read in place from a C-ordered B; any other layout gives the same
    assert dense.reciprocal_condition(np.asfortranarray(Bs), L_s) == \
        pytest.approx(dense.reciprocal_condition(Bs, L_s), rel=1e-12)
    assert dense.reciprocal_condition(Bs, L_s) == pytest.approx(rc, rel=1e-9)
    # a ratio within ESTIMATE_MARGIN of cond_rtol: the extreme eigenvalues decide (still
    # no ridge), computed without the spectrum
    near = _spd(m, 1e-9, seed=1)
    lo = dense.smallest_eigenvalue(sla.cholesky(near, lower=True))
    hi = dense.largest_eigenvalue(lambda V: near @ V, m)
    ev = sla.eigvalsh(near)
    assert lo == pytest.approx(ev[0], rel=1e-4) and hi == pytest.approx(ev[-1], rel=1e-4)
    calls.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Breg, r, L = dense.constraint_factor(near)
    assert r == 0.0 and calls == []
    # near-singular (no Cholesky factor of B itself): the rule's warning and ridge, as
    # the exact check gives them, and the factor of B + r I
    low = low_rank_psd(m, m // 2, 0.999, seed=2)
    with pytest.warns(RuntimeWarning, match="near-singular"):
        ref, r_ref = dense.regularize_constraint(low)
    calls.clear()
    with pytest.warns(RuntimeWarning, match="near-singular"):
        Breg, r, L = dense.constraint_factor(low)
    assert calls == [] and r == pytest.approx(r_ref, rel=1e-6) and r > 0
    np.testing.assert_allclose(Breg, ref, rtol=1e-12, atol=1e-6 * r)
    np.testing.assert_allclose(L @ L.T, Breg, atol=1e-10 * np.abs(ref).max())
    # not positive semi-definite: the exact check's error
    with pytest.raises(ValueError, match="indefinite"):
        dense.constraint_factor(B - 0.5 * np.eye(m))
