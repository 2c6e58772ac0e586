"""Matrix-free eigensolvers against dense numpy eigh of the explicitly formed matrix."""

from __future__ import annotations

import warnings
from contextlib import nullcontext

import dask
import numpy as np
import pytest
import scipy.sparse as sp
from helpers import CountingScheduler, sparse_dask
from scipy.linalg import subspace_angles

from dmlfe.solvers import matrix_free
from dmlfe.solvers.matrix_free import ScatterOperator, matrix_free_eigh
from dmlfe.solvers.result import expand_rows, flip_signs
from dmlfe.stats.pass_ import compute_stats

RANDOMIZED = {"randomized-subspace", "block-krylov"}


def corpus(n: int = 240, D: int = 50, q: int = 4, seed: int = 0):
    """Sparse X whose column scales give a decaying, well separated spectrum."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, D, density=0.3, format="csr", random_state=seed)
    X = sp.csr_matrix(X.multiply(np.geomspace(8.0, 0.2, D)))
    Y = (rng.random((n, q)) < 0.4).astype(np.uint8)
    return X, Y


def dense_top(A: np.ndarray, k: int):
    """Reference: numpy eigh, descending, each vector's largest-|.| entry made positive."""
    w, V = np.linalg.eigh(A)
    w, V = w[::-1][:k], V[:, ::-1][:, :k]
    for j in range(k):
        i = int(np.argmax(np.abs(V[:, j])))
        if V[i, j] < 0:
            V[:, j] = -V[:, j]
    return w, V


def check(result, w, V, k, *, rtol=1e-8, angle=1e-6):
    assert result.components.shape == (V.shape[0], k)
    np.testing.assert_allclose(result.eigenvalues, w, rtol=rtol)
    assert np.max(subspace_angles(result.components, V)) < angle
    # Same sign convention as the dense reference: components agree entrywise.
    np.testing.assert_allclose(result.components, V, atol=angle * 10)
    np.testing.assert_allclose(result.components.T @ result.components, np.eye(k), atol=1e-10)


@pytest.mark.parametrize("solver", ["randomized", "lanczos"])
@pytest.mark.parametrize("rows", [None, 37])
def test_pca_scatter_matches_dense_eigh(solver, rows):
    X, _ = corpus()
    Xd = X.toarray()
    Xc = Xd - Xd.mean(axis=0)
    w, V = dense_top(Xc.T @ Xc, 6)
    src = X if rows is None else sparse_dask(X, rows)
    opts = {"tol": 1e-10} if solver == "randomized" else {}
    res = matrix_free_eigh(src, 6, solver=solver, **opts)
    check(res, w, V, 6)
    assert res.trace == pytest.approx(np.trace(Xc.T @ Xc), rel=1e-12)
    assert res.solver in {"randomized": RANDOMIZED, "lanczos": {"lanczos-arpack"}}[solver]
    assert res.converged


def test_mvmd_operator_with_lowrank_term():
    # MVMD (mvmd paper): G = (1 - beta) Xc^T Xc + beta Xc^T Yc' Yc'^T Xc, labels coded +-1.
    X, Y = corpus(seed=1)
    beta = 0.4
    Xc = X.toarray() - X.toarray().mean(axis=0)
    Ypm = 2.0 * Y - 1.0
    Ypmc = Ypm - Ypm.mean(axis=0)
    G = (1 - beta) * Xc.T @ Xc + beta * Xc.T @ Ypmc @ Ypmc.T @ Xc
    w, V = dense_top(G, 5)
    stats = compute_stats(X, Y)
    lowrank = np.sqrt(beta) * 2.0 * stats.centred_xty()  # Xc^T Y'c = 2 Xc^T Yc
    res = matrix_free_eigh(
        sparse_dask(X, 50), 5, xx_coef=1 - beta, lowrank=lowrank, stats=stats, tol=1e-10
    )
    check(res, w, V, 5)
    assert res.trace == pytest.approx(np.trace(G), rel=1e-12)


@pytest.mark.parametrize(("options", "loose"), [({"n_iter": 1}, True), ({"tol": 1e-9}, False)])
def test_estimator_reports_the_largest_relative_residual(options, loose, monkeypatch):
    # max_residual_ is max ||A p_i - lambda_i p_i|| / lambda_i over the d components, the
    # a-posteriori measure of a matrix-free fit (its tol is relative to lambda_1); here
    # by subspace iteration, the solver at 2^20
    from dmlfe.estimators import make_estimator

    monkeypatch.setattr(matrix_free, "KRYLOV_MEMORY", 0)
    X, Y = corpus(n=400, D=120, seed=1)
    beta = 0.4
    Xc = X.toarray() - X.toarray().mean(axis=0)
    Ypmc = 2.0 * Y - 1.0
    Ypmc -= Ypmc.mean(axis=0)
    G = (1 - beta) * Xc.T @ Xc + beta * Xc.T @ Ypmc @ Ypmc.T @ Xc
    est = make_estimator("mvmd", n_components=6, beta=beta, route="feature",
                         solver="randomized", n_oversamples=2, max_passes=500, **options)
    with pytest.warns(RuntimeWarning, match="approximate") if loose else nullcontext():
        est.fit(X, Y)
    assert est.solver_ == "randomized-subspace" and est.converged_ != loose
    P, lam = est.components_.T, est.eigenvalues_[:6]
    ref = np.max(np.linalg.norm(G @ P - P * lam, axis=0) / lam)
    assert est.max_residual_ == pytest.approx(ref, rel=1e-3, abs=1e-9)
    assert (est.max_residual_ > 1e-3) == loose
    dense = make_estimator("mvmd", n_components=6, beta=beta, route="feature",
                           solver="dense").fit(X, Y)
    assert dense.max_residual_ is None


@pytest.mark.parametrize("tol", [1e-3, 1e-12])
def test_converged_with_a_loose_tail_warns(tol, monkeypatch):
    # MVMD's label part puts theta_1 far above the pairs after it: a tol relative to
    # theta_1 is met while those pairs are still loose against their own eigenvalue,
    # and the fit says so rather than let converged_ alone stand
    import warnings

    from dmlfe.estimators import make_estimator

    monkeypatch.setattr(matrix_free, "KRYLOV_MEMORY", 0)
    X, Y = corpus(n=400, D=120, seed=1)
    est = make_estimator("mvmd", n_components=8, beta=0.99, route="feature",
                         solver="randomized", n_oversamples=2, max_passes=2000, tol=tol)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, Y)
    loose = [w for w in caught if "of their own eigenvalues" in str(w.message)]
    assert est.converged_
    assert (est.max_residual_ > matrix_free.LOOSE_RESIDUAL) == (tol == 1e-3)
    assert len(loose) == (tol == 1e-3)
    if loose:
        assert f"reach {est.max_residual_:.2g} of" in str(loose[0].message)
        assert "tol = 0.001" in str(loose[0].message)


def test_uncentred_scatter_for_lsi():
    X, _ = corpus(seed=2)
    A = (X.T @ X).toarray()
    w, V = dense_top(A, 4)
    res = matrix_free_eigh(X, 4, centre=False, tol=1e-10)
    check(res, w, V, 4)


def test_each_pass_is_one_compute_and_is_recorded():
    X, _ = corpus()
    for solver, opts in (("randomized", {"tol": 1e-9}), ("lanczos", {})):
        counter = CountingScheduler()
        with dask.config.set(scheduler=counter):
            res = matrix_free_eigh(sparse_dask(X, 60), 3, solver=solver, **opts)
        assert res.n_passes == counter.count >= 1
    # A full-width block is solved exactly by one Rayleigh-Ritz step: one pass.
    res = matrix_free_eigh(X, 5, n_oversamples=X.shape[1])
    assert res.n_passes == 1


def test_subspace_iteration_when_the_krylov_space_does_not_fit(monkeypatch):
    # at D = 2^20 a Krylov space of several D x w blocks would not fit: subspace iteration
    X, _ = corpus()
    Xc = X.toarray() - X.toarray().mean(axis=0)
    w, V = dense_top(Xc.T @ Xc, 4)
    monkeypatch.setattr(matrix_free, "KRYLOV_MEMORY", 0)
    res = matrix_free_eigh(X, 4, tol=1e-9, n_oversamples=6)
    assert res.solver == "randomized-subspace" and res.converged
    check(res, w, V, 4, angle=1e-6)
    fixed = matrix_free_eigh(X, 4, n_iter=3)  # scikit-learn's fixed count, any memory
    assert fixed.solver == "randomized-subspace" and fixed.n_passes == 3


@pytest.mark.parametrize("rows", [None, 70])
@pytest.mark.parametrize("centre, with_lowrank", [(True, True), (False, False)])
def test_matmat_into_a_given_block(rows, centre, with_lowrank):
    # the operator against the explicitly formed matrix, written into the caller's block
    X, Y = corpus(seed=4)
    Xd = X.toarray()
    Xs = Xd - Xd.mean(axis=0) if centre else Xd
    L = np.random.default_rng(1).standard_normal((X.shape[1], 3)) if with_lowrank else None
    A = 0.7 * Xs.T @ Xs + (0 if L is None else L @ L.T)
    op = ScatterOperator(X if rows is None else sparse_dask(X, rows), xx_coef=0.7,
                         lowrank=L, centre=centre)
    V = np.random.default_rng(2).standard_normal((X.shape[1], 6))
    out = np.full_like(V, np.nan)
    got = op.matmat(V, out=out)
    assert got is out
    np.testing.assert_allclose(out, A @ V, rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(op.matmat(V), A @ V, rtol=1e-12, atol=1e-10)
    # a block that is V itself, or of the wrong shape, is not written to
    W = V.copy()
    np.testing.assert_allclose(op.matmat(W, out=W), A @ V, rtol=1e-12, atol=1e-10)
    np.testing.assert_array_equal(W, V)
    assert op.matmat(V, out=np.empty((3, 3))).shape == V.shape
    assert op.n_passes == 4


def test_subspace_iteration_in_memory_and_in_blocks_agree(monkeypatch):
    # the in-memory operator holds X ready (columns narrowed, transpose made once) and
    # the solver reuses its blocks; the dask path does neither: the same iterations
    X, _ = corpus(n=300, D=60, seed=5)
    Xc = X.toarray() - X.toarray().mean(axis=0)
    w, V = dense_top(Xc.T @ Xc, 5)
    monkeypatch.setattr(matrix_free, "KRYLOV_MEMORY", 0)
    a = matrix_free_eigh(X, 5, tol=1e-10, n_oversamples=8, max_passes=200)
    b = matrix_free_eigh(sparse_dask(X, 70), 5, tol=1e-10, n_oversamples=8, max_passes=200)
    assert a.solver == b.solver == "randomized-subspace" and a.converged and b.converged
    assert a.n_passes == b.n_passes
    np.testing.assert_allclose(a.components, b.components, atol=1e-10)
    check(a, w, V, 5, angle=1e-6)


def test_passes_stop_at_max_passes_and_report_not_converged():
    X, _ = corpus()
    res = matrix_free_eigh(X, 5, n_oversamples=0, max_passes=2, tol=1e-14)
    assert res.n_passes == 2 and not res.converged
    assert res.residuals is not None and res.residuals.shape == (5,)


def test_deterministic_for_a_seed():
    X, _ = corpus()
    a = matrix_free_eigh(X, 3, max_passes=3, random_state=7)
    b = matrix_free_eigh(sparse_dask(X, 25), 3, max_passes=3, random_state=7)
    np.testing.assert_allclose(a.components, b.components, atol=1e-12)
    np.testing.assert_allclose(a.eigenvalues, b.eigenvalues, rtol=1e-12)


def test_on_the_cluster(cluster_client):
    X, _ = corpus(seed=3)
    Xc = X.toarray() - X.toarray().mean(axis=0)
    w, V = dense_top(Xc.T @ Xc, 4)
    res = matrix_free_eigh(sparse_dask(X, 40), 4, client=cluster_client, tol=1e-8, n_oversamples=20)
    check(res, w, V, 4, angle=1e-6)
    local = matrix_free_eigh(X, 4, tol=1e-8, n_oversamples=20)
    assert res.n_passes == local.n_passes
    np.testing.assert_allclose(res.components, local.components, atol=1e-10)


def test_large_products_are_folded_on_the_driver(cluster_client, monkeypatch):
    # above FOLD_BYTES each block's partial is added into the result on the driver, at
    # most FOLD_WINDOW per worker thread in flight, instead of a tree on the workers
    X, _ = corpus(n=200, D=70, seed=6)
    X = X.tolil()
    X[:, 5] = 0  # a column no block uses
    X = X.tocsr()
    Xd = X.toarray()
    Xc = Xd - Xd.mean(axis=0)
    L = np.random.default_rng(3).standard_normal((X.shape[1], 2))
    A = 0.5 * Xc.T @ Xc + L @ L.T
    V = np.random.default_rng(4).standard_normal((X.shape[1], 7))
    folds = []
    real = matrix_free.run
    monkeypatch.setattr(matrix_free, "run",
                        lambda *a, **k: folds.append(k["window"]) or real(*a, **k))
    monkeypatch.setattr(matrix_free, "FOLD_BYTES", 0)
    op = ScatterOperator(sparse_dask(X, 45), xx_coef=0.5, lowrank=L, client=cluster_client)
    out = np.full_like(V, np.nan)
    assert op.matmat(V, out=out) is out
    np.testing.assert_allclose(out, A @ V, rtol=1e-12, atol=1e-10)
    threads = sum(cluster_client.nthreads().values())
    assert folds == [matrix_free.FOLD_WINDOW * threads]
    assert op.n == 200 and op.trace() == pytest.approx(np.trace(A), rel=1e-12)
    # a whole solve: the same as in memory
    w, Vref = dense_top(Xc.T @ Xc, 4)
    res = matrix_free_eigh(sparse_dask(X, 45), 4, client=cluster_client, tol=1e-8,
                           n_oversamples=20)
    check(res, w, Vref, 4, angle=1e-6)
    assert len(folds) == 1 + res.n_passes


def test_flip_signs_and_argument_errors():
    M = np.array([[1.0, -3.0], [-2.0, 0.5], [0.0, 3.0]])
    # column 0: largest |.| is -2 -> flipped; column 1: tie -3 / 3, first wins -> flipped.
    np.testing.assert_array_equal(flip_signs(M), np.array([[-1.0, 3.0], [2.0, -0.5], [0.0, -3.0]]))
    X, _ = corpus()
    with pytest.raises(ValueError, match="negative"):
        ScatterOperator(X, xx_coef=-1.0)
    with pytest.raises(ValueError, match="lowrank has 3 rows"):
        ScatterOperator(X, lowrank=np.ones((3, 2)))
    with pytest.raises(ValueError, match="solver"):
        matrix_free_eigh(X, 2, solver="nope")


@pytest.mark.parametrize("method", ["pca", "mvmd"])
@pytest.mark.parametrize("route", ["n-space", "store"])
def test_empty_columns_are_left_out_exactly(method, route, monkeypatch):
    # Hashed text: most of the D columns are empty. The solver works on the used ones
    # (statistics' sumsq_x > 0, or the tiles' own) and gives the dense solution of the
    # full D x D problem. n < D here, so the n-space route takes it unless refused.
    from dmlfe.methods import get_method
    from dmlfe.solvers import nspace

    X, Y = corpus(n=200, D=40, seed=3)
    D = 400
    cols = np.sort(np.random.default_rng(0).choice(D, 40, replace=False))
    Xw = sp.csr_matrix((X.data, cols[X.indices], X.indptr), shape=(200, D))
    stats = compute_stats(Xw, Y, need_xtx=True)
    template = get_method(method).build(stats)
    w, V = dense_top(template.A, 5)
    seen = []
    real = matrix_free.matrix_free_eigh
    monkeypatch.setattr(matrix_free, "matrix_free_eigh",
                        lambda *a, **kw: seen.append(kw["n_features"]) or real(*a, **kw))
    if route == "store":
        monkeypatch.setattr(nspace, "unavailable", lambda *a, **kw: "refused by the test")
    lean = compute_stats(Xw, Y)
    res = matrix_free.solve_matrix_free(get_method(method).build(lean, dense=False),
                                        sparse_dask(Xw, 45), 5,
                                        stats=lean, tol=1e-10, Y=Y, compact=True)
    np.testing.assert_array_equal(res.columns, cols)
    res.components = expand_rows(res.components, res.columns, D)
    check(res, w, V, 5)
    assert not np.any(res.components[np.setdiff1d(np.arange(D), cols)])
    # statistics without column sums of squares (an older cache): every column, same answer
    lean.sumsq_x = None
    again = matrix_free.solve_matrix_free(get_method(method).build(lean, dense=False), Xw, 5,
                                          stats=lean, tol=1e-10, Y=Y)
    check(again, w, V, 5)
    if route == "store":
        assert seen == [40, D]
    else:  # the tiles keep only the used columns themselves
        assert seen == [] and res.info["route"] == again.info["route"] == "n-space"


@pytest.mark.parametrize(("t", "rounds"), [(0.5, [32]), (0.99, [32, 70])])
def test_threshold_rounds_of_passes(t, rounds, monkeypatch):
    """A threshold runs the solver for 32 pairs first, and again for more only when
    their eigenvalues fall short of t tr(A); n_passes counts every round's passes and d
    is the dense spectrum's choice."""
    from dmlfe.methods import get_method
    from dmlfe.solvers.dimension import choose_dimension

    X, Y = corpus(n=300, D=70, seed=4)
    Xd = X.toarray()
    Xc = Xd - Xd.mean(axis=0)
    lam = np.linalg.eigvalsh(Xc.T @ Xc)[::-1]
    asked, passes = [], []
    real = matrix_free.matrix_free_eigh

    def counting(*a, **kw):
        asked.append(a[1])
        r = real(*a, **kw)
        passes.append(r.n_passes)
        return r

    monkeypatch.setattr(matrix_free, "matrix_free_eigh", counting)
    stats = compute_stats(X, Y)
    res = matrix_free.solve_matrix_free(get_method("pca").build(stats, dense=False),
                                        sparse_dask(X, 60), t, stats=stats, tol=1e-10,
                                        max_components=70)
    assert asked == rounds and res.info["rounds"] == rounds
    assert res.n_passes == sum(passes)
    assert res.n_components == choose_dimension(lam, t)
    np.testing.assert_allclose(res.eigenvalues, lam[:rounds[-1]], rtol=1e-8)


def test_threshold_rounds_stay_within_their_memory():
    """Rounds never ask for more pairs than ``threshold_memory`` holds, and say so when
    the threshold needed more (only then)."""
    from dmlfe.methods import get_method
    from dmlfe.solvers.dimension import choose_dimension

    X, Y = corpus(n=300, D=70, seed=4)
    stats = compute_stats(X, Y)
    # room for 12 pairs: 8 bytes x (3 x 70 x (k + 10) + 70 k) <= memory
    memory = 8 * (3 * 70 * 22 + 70 * 12) + 7
    assert matrix_free.threshold_memory_cap(70, 70, 10, memory) == 12
    assert matrix_free.threshold_memory_cap(70, 70, 10, memory - 8) == 11
    template = get_method("pca").build(stats, dense=False)
    with pytest.warns(RuntimeWarning, match="top 12 computed .* threshold_memory = "):
        res = matrix_free.solve_matrix_free(template, X, 0.99, stats=stats, tol=1e-10,
                                            threshold_memory=memory)
    assert res.info["rounds"] == [12] and res.eigenvalues.size == 12
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # 12 pairs reach t = 0.5
        low = matrix_free.solve_matrix_free(template, X, 0.5, stats=stats, tol=1e-10,
                                            threshold_memory=memory)
    assert low.n_components == choose_dimension(res.eigenvalues, 0.5, total=res.trace) < 12
    Xd = X.toarray() - X.toarray().mean(axis=0)
    np.testing.assert_allclose(res.eigenvalues, np.linalg.eigvalsh(Xd.T @ Xd)[::-1][:12],
                               rtol=1e-8)


def test_threshold_memory_is_an_estimator_parameter():
    """The estimators' ``threshold_memory`` reaches the matrix-free rounds."""
    import warnings

    from dmlfe.estimators import make_estimator

    X, Y = corpus(n=300, D=70, seed=4)
    memory = 8 * (3 * 70 * 22 + 70 * 12) + 7  # 12 pairs, as above
    kw = {"n_components": 0.99, "route": "feature", "solver": "randomized", "tol": 1e-10}
    with pytest.warns(RuntimeWarning, match="threshold_memory = "):
        small = make_estimator("pca", threshold_memory=memory, **kw).fit(X, Y)
    assert small.eigenvalues_.size == 12 and small.get_params()["threshold_memory"] == memory
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the default holds every pair
        big = make_estimator("pca", **kw).fit(X, Y)
    assert big.eigenvalues_.size > 12
    np.testing.assert_allclose(small.eigenvalues_, big.eigenvalues_[:12], rtol=1e-8)
    with pytest.raises(ValueError, match="threshold_memory"):
        make_estimator("pca", threshold_memory=0, **kw).fit(X, Y)
