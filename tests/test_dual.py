"""The dual route and the partial eigensolvers against dense numpy/scipy references.

The dual route solves every method in the n-dimensional row space of X; it must give
the eigenvalues and subspaces of the dense D x D (feature) route, for D > n and D < n,
in memory, on a store and on a LocalCluster. The partial solvers must give the leading
eigenpairs of a full scipy.linalg.eigh.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
from conftest import count_computes, labels_dask, scheduler_graphs, sparse_dask, write_store

from dmlfe.estimators import make_estimator
from dmlfe.fit.plan import DataShape, Limits, plan_fit
from dmlfe.methods import get_method
from dmlfe.methods.template import TraceTemplate
from dmlfe.solvers import dense, dimension, partial
from dmlfe.solvers.dense import solve_dense
from dmlfe.solvers.dual import centre_gram, reduced_data
from dmlfe.solvers.partial import FULL_SPECTRUM_LIMIT, block_krylov_eigh
from dmlfe.stats.gram import gram_matrix, transpose_product
from dmlfe.stats.pass_ import compute_stats

#: (method, parameters, d) for every method with the dual route.
CASES = [
    ("pca", {}, 8), ("lsi", {}, 8), ("mvmd", {"beta": 0.3}, 8), ("cca", {}, 3),
    ("opls", {"gamma_x": 0.5}, 3), ("mddm_f", {"mu": 0.7}, 3),
    ("mddm_f", {"label_kernel": "rbf"}, 3), ("mlsi", {}, 5), ("mlda", {}, 3),
    ("dmlda", {}, 3), ("cca", {}, 7),  # d > q: the reduced form, as the dense route
]


def _data(n: int, D: int, q: int = 4, seed: int = 0, duplicates: int = 0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, D, density=0.08, random_state=seed, format="csr")
    X.data = rng.uniform(0.1, 1.0, X.nnz)
    if duplicates:
        X = sp.vstack([X, X[:duplicates]]).tocsr()
    Y = (rng.uniform(size=(X.shape[0], q)) < 0.35).astype(np.uint8)
    return X, Y


def _fit(method, params, d, X, Y, route, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return make_estimator(method, n_components=d, route=route, **params, **kw).fit(X, Y)


def _principal_cosines(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    qa, _ = np.linalg.qr(A.T)
    qb, _ = np.linalg.qr(B.T)
    return np.linalg.svd(qa.T @ qb, compute_uv=False)


@pytest.mark.parametrize("shape", [(60, 150), (140, 45)], ids=["D>n", "D<n"])
@pytest.mark.parametrize(("method", "params", "d"), CASES,
                         ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(CASES)])
def test_dual_equals_dense_feature_route(method, params, d, shape):
    X, Y = _data(*shape, duplicates=5)  # duplicated documents: a rank-deficient Gram
    ref = _fit(method, params, d, X, Y, "feature", solver="dense")
    dual = _fit(method, params, d, X, Y, "dual")
    assert dual.route_ == "dual" and dual.solver_.startswith("dual-")
    k = min(d, ref.n_genuine_)
    w_ref = ref.eigenvalues_[:k]
    np.testing.assert_allclose(dual.eigenvalues_[:k], w_ref, rtol=1e-8, atol=1e-8 * w_ref[0])
    # the non-zero spectrum is the same (the dual one has no D - n structural zeros)
    g = dual.n_genuine_
    np.testing.assert_allclose(dual.eigenvalues_[:g], ref.eigenvalues_[:g], rtol=1e-7,
                               atol=1e-9 * w_ref[0])
    assert dual.n_components_ == ref.n_components_
    # the same subspace, and the same embedding of the training data (the sign rule
    # fixes each component: they agree one by one where the eigenvalues are distinct)
    cos = _principal_cosines(ref.components_[:k], dual.components_[:k])
    assert cos.min() > 1 - 1e-8
    np.testing.assert_allclose(dual.mean_, ref.mean_, atol=1e-15)
    gaps = np.abs(np.diff(w_ref)) > 1e-6 * w_ref[0]
    if gaps.all():
        np.testing.assert_allclose(dual.transform(X)[:, :k], ref.transform(X)[:, :k],
                                   atol=1e-7 * np.abs(ref.transform(X)[:, :k]).max())


def test_dual_mvmd_deflates_its_label_directions_and_stays_exact(monkeypatch):
    # above FULL_SPECTRUM_LIMIT documents, with the block Krylov branch: MVMD's q label
    # directions are handed to leading_eigh as dominant pairs, and the result is still
    # the dense feature route's
    from dmlfe.solvers import dual as dual_mod

    monkeypatch.setattr(partial, "KRYLOV_MIN_SIZE", 0)
    seen = []
    real = dual_mod.leading_pairs
    starts = []
    monkeypatch.setattr(dual_mod, "leading_pairs",
                        lambda *a, **k: seen.append(k.get("dominant"))
                        or starts.append(k.get("dominant_start")) or real(*a, **k))
    X, Y = _data(FULL_SPECTRUM_LIMIT + 100, 1_300, q=4, seed=6)
    dual = _fit("mvmd", {}, 12, X, Y, "dual")
    assert seen == [4] and dual.solver_ == "dual-identity"
    # the start of the dominant solve: 4 orthonormal centred directions in the n-space
    U = starts[0]
    assert U.shape == (X.shape[0], 4)
    np.testing.assert_allclose(U.T @ U, np.eye(4), atol=1e-10)
    ref = _fit("mvmd", {}, 12, X, Y, "feature", solver="dense")
    np.testing.assert_allclose(dual.eigenvalues_[:12], ref.eigenvalues_[:12], rtol=1e-9)
    assert _principal_cosines(ref.components_, dual.components_).min() > 1 - 1e-9


@pytest.mark.parametrize(("params", "d"), [
    ({}, 6),
    # beta = 1: M = Yc Yc^T + gamma_xy I lifts q = 4 pairs; the rest cluster, so d <= q
    ({"beta": 1.0, "gamma_x": 0.3}, 3),
    ({"beta": 0.2, "gamma_x": 2.0, "gamma_xy": 0.01}, 6)])
def test_dual_mlsi_inverse_constraint_form_is_exact(params, d, monkeypatch):
    # above FULL_SPECTRUM_LIMIT documents with block Krylov: MLSI's B = Xc^T M^{-1} Xc +
    # gamma_x I solved as the n x n operator a Gc T^{-1} M (form 3), duplicated documents
    # included (a singular Gram), against the dense feature route
    monkeypatch.setattr(partial, "KRYLOV_MIN_SIZE", 0)
    monkeypatch.setattr(dense, "OPERATOR_BUDGET", 1.0)
    X, Y = _data(FULL_SPECTRUM_LIMIT + 100, 1_300, q=4, seed=7, duplicates=20)
    dual = _fit("mlsi", params, d, X, Y, "dual")
    assert dual.solver_ == "dual-inverse"
    ref = _fit("mlsi", params, d, X, Y, "feature", solver="dense")
    np.testing.assert_allclose(dual.eigenvalues_[:d], ref.eigenvalues_[:d], rtol=1e-9)
    assert _principal_cosines(ref.components_, dual.components_).min() > 1 - 1e-9
    Z, Zr = dual.transform(X[:40]), ref.transform(X[:40])
    # Krylov vectors: relative residuals below KRYLOV_TOL, not LAPACK's round-off
    np.testing.assert_allclose(Z, Zr, atol=1e-4 * abs(Zr).max())


@pytest.mark.parametrize("unlabelled,empty_label", [(0, False), (12, False), (0, True)])
@pytest.mark.parametrize("d", [2, 6])
def test_dual_mlda_weighted_form_with_unlabelled_documents(d, unlabelled, empty_label):
    # MLDA's B = X^T (diag(w) - V V^T) X + gamma I through one Cholesky factor: documents
    # with no label (w_i = 0) included, and d = 6 above rank(S_b) <= q - 1 = 3 completed
    # with B-orthonormal null vectors; against the dense feature route's template
    from test_threshold import captured_fit

    X, Y = _data(90, 200, q=4, seed=9)
    Y[np.arange(90), np.arange(90) % 4] = 1  # every document labelled
    Y[:unlabelled] = 0
    if empty_label:  # a label no training document carries (medical has 7)
        Y = np.hstack([Y, np.zeros((90, 1), dtype=Y.dtype)])
    dual = _fit("mlda", {}, d, X, Y, "dual")
    assert dual.solver_ == "dual-lowrank"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ref, seen = captured_fit("mlda", X, Y, n_components=d, route="feature", solver="dense")
    template = seen[0][0]
    g = ref.n_genuine_
    assert g <= 3 and dual.n_genuine_ == g
    w_ref = ref.eigenvalues_[:d]
    np.testing.assert_allclose(dual.eigenvalues_[:d], w_ref, rtol=1e-8, atol=1e-9 * w_ref[0])
    cos = _principal_cosines(ref.components_[:min(d, g)], dual.components_[:min(d, g)])
    assert cos.min() > 1 - 1e-8
    P = dual.components_.T
    np.testing.assert_allclose(P.T @ template.B @ P, np.eye(d), atol=1e-8)
    np.testing.assert_allclose(P.T @ template.A @ P, np.diag(dual.eigenvalues_[:d]),
                               atol=1e-8 * w_ref[0])


def test_dual_threshold_matches_dense():
    X, Y = _data(50, 120)
    ref = _fit("pca", {}, 0.9, X, Y, "feature", solver="dense")
    dual = _fit("pca", {}, 0.9, X, Y, "dual")
    assert dual.n_components_ == ref.n_components_
    np.testing.assert_allclose(dual.eigenvalues_[:dual.n_components_],
                               ref.eigenvalues_[:ref.n_components_], rtol=1e-9)


@pytest.mark.parametrize(("method", "params"), [("cca", {}), ("mddm_f", {"mu": 0.7}),
                                               ("opls", {"gamma_x": 0.5})])
def test_dual_lowrank_completes_d_above_q_with_null_vectors(method, params):
    # q = 4 labels, so at most 4 non-zero eigenvalues; d = 9 takes 5 null-space vectors
    X, Y = _data(60, 150, duplicates=5)
    d = 9
    with pytest.warns(RuntimeWarning, match="null space"):
        dual = make_estimator(method, n_components=d, route="dual", **params).fit(X, Y)
    assert dual.solver_ == "dual-lowrank" and dual.n_components_ == d
    g = dual.n_genuine_
    assert g <= Y.shape[1]
    # every component is a generalised eigenvector of the dense template's (A, B),
    # B-orthonormal (B with the ridge the fit reports), eigenvalue 0 past the g genuine
    stats = compute_stats(X, Y, need_xtx=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        t = get_method(method).build(stats, **params)
    A = np.asarray(t.A)
    B = np.asarray(t.B) + dual.regularization_ * np.eye(A.shape[0])
    P = dual.components_.T
    w = dual.eigenvalues_[:d]
    assert np.all(w[g:] <= 1e-10 * w[0])
    scale = np.abs(A).max()
    np.testing.assert_allclose(P.T @ B @ P, np.eye(d), atol=1e-8)
    np.testing.assert_allclose(A @ P, B @ P * w, atol=1e-8 * scale)
    ref = _fit(method, params, d, X, Y, "feature", solver="dense")
    np.testing.assert_allclose(w[:g], ref.eigenvalues_[:g], rtol=1e-8)
    assert _principal_cosines(ref.components_[:g], dual.components_[:g]).min() > 1 - 1e-8
    # seeded: the same null vectors again
    with pytest.warns(RuntimeWarning, match="null space"):
        again = make_estimator(method, n_components=d, route="dual", **params).fit(X, Y)
    np.testing.assert_array_equal(again.components_, dual.components_)


def test_dual_identity_warns_once_when_d_reaches_past_the_rank():
    # 12 distinct rows duplicated 3 times: the centred Gram has rank <= 11 < d = 15
    X, Y = _data(12, 150)
    X = sp.vstack([X, X, X]).tocsr()
    Y = np.vstack([Y, Y, Y])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dual = make_estimator("pca", n_components=15, route="dual").fit(X, Y)
    null = [w for w in caught if "null space" in str(w.message)]
    assert len(null) == 1 and "only 11 eigenvalues" in str(null[0].message)
    assert dual.n_genuine_ == 11 and dual.n_components_ == 15
    # no warning when d stays inside the rank
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        make_estimator("pca", n_components=11, route="dual").fit(X, Y)


def test_dual_lowrank_says_when_the_row_space_is_too_small():
    X, Y = _data(20, 150)
    with pytest.raises(ValueError, match="n - 1 = 19"):
        make_estimator("cca", n_components=20, route="dual", gamma_x=0.5).fit(X, Y)


def test_dual_small_k_of_a_mid_sized_problem_is_a_subset_and_exact():
    # n = 300 lies between SUBSET_MIN and FULL_SPECTRUM_LIMIT: 6 of 300 pairs come from
    # LAPACK's subset solver
    X, Y = _data(300, 700, seed=4)
    dual = _fit("pca", {}, 6, X, Y, "dual")
    assert dual.eigenvalues_.size == 6
    Xc = X.toarray() - X.toarray().mean(axis=0)
    full = np.linalg.eigvalsh(Xc @ Xc.T)[::-1]
    np.testing.assert_allclose(dual.eigenvalues_, full[:6], rtol=1e-10)
    ref = _fit("pca", {}, 6, X, Y, "feature", solver="dense")
    assert _principal_cosines(ref.components_, dual.components_).min() > 1 - 1e-10
    # a threshold takes its denominator from the trace when the spectrum is partial
    t = 0.2
    thr = _fit("pca", {}, t, X, Y, "dual", max_components=50)
    d = int(np.searchsorted(np.cumsum(full), t * full.sum()) + 1)
    assert thr.n_components_ == d
    # only the first round's pairs were needed (d <= THRESHOLD_FIRST)
    assert d <= dimension.THRESHOLD_FIRST and thr.eigenvalues_.size == dimension.THRESHOLD_FIRST
    np.testing.assert_allclose(thr.eigenvalues_, full[:thr.eigenvalues_.size], rtol=1e-10)


def test_auto_picks_dual_and_says_why():
    spec = get_method("mvmd")
    params = make_estimator("mvmd").get_params()
    plan = plan_fit(spec, params, DataShape(5_000, 2**20, 10), Limits(max_dual_samples=12_000))
    assert plan.route == "dual" and plan.solver == "dual"
    assert "max_dual_samples" in plan.route_reason and "Gram" in plan.route_reason
    assert not plan.stats.need_xtx
    # too many documents: MVMD goes matrix-free on X, CCA to the relation route
    big = DataShape(50_000, 2**20, 10)
    plan = plan_fit(spec, params, big, Limits(max_dual_samples=12_000))
    assert (plan.route, plan.solver) == ("feature", "randomized")
    cca = make_estimator("cca").get_params() | {"n_prototypes": 2000}
    plan = plan_fit(get_method("cca"), cca, big, Limits(max_dual_samples=12_000))
    assert plan.route == "relation"
    # D within the dense limit: the feature route as before
    small = plan_fit(spec, params, DataShape(5_000, 3_000, 10))
    assert small.route == "feature" and small.solver == "dense"


def test_dual_route_refuses_too_many_documents():
    params = make_estimator("pca").get_params() | {"route": "dual"}
    with pytest.raises(ValueError, match="max_dual_samples"):
        plan_fit(get_method("pca"), params, DataShape(20_000, 10**6, 0),
                 Limits(max_dual_samples=10_000))


def test_auto_route_fit_at_large_d_is_dual_and_exact():
    X, Y = _data(80, 3_000)
    auto = _fit("cca", {}, 3, X, Y, "auto", max_dense_features=1_000)
    assert auto.route_ == "dual"
    ref = _fit("cca", {}, 3, X, Y, "feature", solver="dense", max_dense_features=5_000)
    np.testing.assert_allclose(auto.eigenvalues_[:3], ref.eigenvalues_[:3], rtol=1e-8)


@pytest.mark.parametrize("how", ["passes", "gathered", "cluster-wider", "too-big"])
def test_dual_on_store_and_cluster_equals_in_memory(tmp_path, cluster_client, monkeypatch,
                                                    how):
    X, Y = _data(90, 200)
    splits = ["train"] * X.shape[0]
    store = tmp_path / "s.zarr"
    write_store(store, X, Y, splits, chunk_rows=17)
    mem = _fit("mvmd", {}, 6, X, Y, "dual")
    # the cluster has 2 threads: the driver reads X itself when it has as many
    # and X's 12 bytes per value (+ 8 per row) fit in max_gather_bytes
    monkeypatch.setenv("DMLFE_DRIVER_THREADS", "1" if how == "cluster-wider" else "2")
    limit = {"passes": 0, "too-big": 12 * X.nnz + 8 * 91 - 1}.get(how, 2**30)
    graphs = scheduler_graphs(cluster_client)
    local = _local_computes(monkeypatch)
    on_store = _fit("mvmd", {}, 6, str(store), None, "dual", client=cluster_client,
                    cache=False, max_gather_bytes=limit)
    graphs = scheduler_graphs(cluster_client) - graphs
    np.testing.assert_allclose(on_store.eigenvalues_[:6], mem.eigenvalues_[:6], rtol=1e-12)
    np.testing.assert_allclose(on_store.components_, mem.components_, atol=1e-12)
    gathered = "read by the driver" in on_store.route_reason_
    assert gathered == (how == "gathered")
    if gathered:  # the driver reads X and Y in one pass of its own threads; statistics,
        # Gram and map back in memory: nothing reaches the cluster
        assert graphs == 0 and local == ["threads"] and on_store.n_passes_ == 4
    else:  # statistics, Gram, map back (and the labels), all on the cluster
        assert 3 <= graphs <= 4 and local == [] and on_store.n_passes_ == 3


def _local_computes(monkeypatch) -> list:
    """The scheduler argument of every dask.compute made from now on (a list that grows)."""
    import dask

    calls, real = [], dask.compute

    def counting(*args, **kwargs):
        calls.append(kwargs.get("scheduler"))
        return real(*args, **kwargs)

    monkeypatch.setattr(dask, "compute", counting)
    return calls


def test_dual_read_to_the_driver_fills_and_reuses_the_statistics_cache(
        tmp_path, cluster_client, monkeypatch):
    X, Y = _data(90, 200)
    store = tmp_path / "s.zarr"
    write_store(store, X, Y, ["train"] * X.shape[0], chunk_rows=17)
    monkeypatch.setenv("DMLFE_DRIVER_THREADS", "2")  # as many as the cluster's
    fits = []
    local = _local_computes(monkeypatch)
    for i in range(2):
        graphs = scheduler_graphs(cluster_client)
        fits.append(_fit("pca", {}, 4, str(store), None, "dual", client=cluster_client))
        # the one read of X and Y: the statistics come from that copy, then the cache
        assert scheduler_graphs(cluster_client) - graphs == 0
        assert local == ["threads"] * (i + 1)
        assert "read by the driver" in fits[-1].route_reason_
    assert [f.stats_from_cache_ for f in fits] == [False, True]
    mem = _fit("pca", {}, 4, X, Y, "dual")
    for f in fits:
        np.testing.assert_allclose(f.eigenvalues_[:4], mem.eigenvalues_[:4], rtol=1e-12)
        np.testing.assert_allclose(f.mean_, mem.mean_, rtol=1e-12, atol=1e-15)
    # the cache the dual fit wrote holds X^T Y too: MDDMp (the thin SVD of Xc^T Yc,
    # the same statistics request) reuses it
    mddm = _fit("mddm_p", {}, 3, str(store), None, "auto", client=cluster_client)
    assert mddm.stats_from_cache_
    ref = _fit("mddm_p", {}, 3, X, Y, "auto")
    np.testing.assert_allclose(mddm.eigenvalues_[:3], ref.eigenvalues_[:3], rtol=1e-10)


def test_dual_statistics_leave_out_x_transpose_y(monkeypatch):
    import dmlfe.fit.run as run

    asked = []

    def recording(*args, **kw):
        asked.append(kw.get("need_xty", True))
        return compute_stats(*args, **kw)

    monkeypatch.setattr(run, "compute_stats", recording)
    X, Y = _data(60, 400)
    for method, params, d in CASES:
        asked.clear()
        dual = _fit(method, params, d, X, Y, "dual")
        feature = _fit(method, params, d, X, Y, "feature", solver="dense")
        # the dual pass (first) does without X^T Y; form 3's reduced statistics and the
        # feature route's pass compute it
        assert asked[0] is False and asked[-1] is True, (method, asked)
        np.testing.assert_allclose(dual.eigenvalues_[:d], feature.eigenvalues_[:d],
                                   rtol=1e-8, atol=1e-10 * feature.eigenvalues_[0])


def test_dual_passes_are_one_compute_each():
    X, Y = _data(70, 150)
    Xd, Yd = sparse_dask(X, 13), labels_dask(Y, 13)
    est, computes = count_computes(lambda: _fit("pca", {}, 4, Xd, Yd, "dual"))
    # labels, statistics, Gram, map back
    assert computes <= 4 and est.n_passes_ == 3


@pytest.mark.parametrize("kernel", [True, False], ids=["scipy-kernel", "public-product"])
@pytest.mark.parametrize("rows", [7, 64])
@pytest.mark.parametrize("threads", ["1", "3"])
def test_gram_and_map_back_blockwise(rows, kernel, threads, monkeypatch):
    # the driver's sparse kernels in 1 or 3 threads (each writing its own rows)
    monkeypatch.setenv("DMLFE_DRIVER_THREADS", threads)
    if not kernel:
        import dmlfe.stats.gram as gram

        monkeypatch.setattr(gram, "_csr_matvecs", None)
    X, _ = _data(45, 80)
    Xd = sparse_dask(X, rows)
    G = gram_matrix(Xd)
    np.testing.assert_allclose(G, (X @ X.T).toarray(), atol=1e-13)
    np.testing.assert_array_equal(G, G.T)
    alpha = np.random.default_rng(1).normal(size=(45, 20))
    ref = X.T @ alpha
    for P in (transpose_product(Xd, alpha), transpose_product(X, alpha)):
        np.testing.assert_allclose(P, ref, atol=1e-12)
        assert P.shape == (80, 20) and P.flags.c_contiguous
    np.testing.assert_allclose(gram_matrix(X, block_rows=10), G, atol=1e-13)


def test_driver_threads_setting(monkeypatch):
    from dmlfe.compute import DRIVER_THREADS_MAX, driver_threads

    monkeypatch.delenv("DMLFE_DRIVER_THREADS", raising=False)
    assert 1 <= driver_threads() <= DRIVER_THREADS_MAX
    monkeypatch.setenv("DMLFE_DRIVER_THREADS", "5")
    assert driver_threads() == 5
    monkeypatch.setenv("DMLFE_DRIVER_THREADS", "two")
    with pytest.raises(ValueError, match="DMLFE_DRIVER_THREADS must be a positive integer"):
        driver_threads()


def test_reduced_data_reproduces_the_gram():
    X, _ = _data(40, 30, duplicates=6)  # rank <= 30 < n = 46
    G = (X @ X.T).toarray()
    Z, piv, L11 = reduced_data(G)
    assert Z.shape[1] == np.linalg.matrix_rank(X.toarray())
    np.testing.assert_allclose(Z @ Z.T, G[np.ix_(piv, piv)], atol=1e-12)
    np.testing.assert_allclose(L11, np.tril(L11))
    assert sorted(piv) == list(range(46))
    Gc = centre_gram(G.copy())
    H = np.eye(46) - 1 / 46
    np.testing.assert_allclose(Gc, H @ G @ H, atol=1e-12)


# ------------------------------------------------------------- partial eigensolvers
def _psd(m: int, rank: int, decay: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    F = rng.normal(size=(m, rank)) * decay ** np.arange(rank)
    return F @ F.T


def test_block_krylov_matches_eigh():
    A = _psd(600, 300, 0.98)
    w_ref, V_ref = sla.eigh(A)
    w_ref, V_ref = w_ref[::-1], V_ref[:, ::-1]
    w, V, info = block_krylov_eigh(lambda M: A @ M, 600, 25, tol=1e-10)
    assert info["converged"]
    np.testing.assert_allclose(w, w_ref[:25], rtol=1e-10)
    assert _principal_cosines(V.T, V_ref[:, :25].T).min() > 1 - 1e-10
    # an operator of rank below the block: the Krylov space becomes invariant
    B = _psd(300, 4, 0.9)
    w, V, info = block_krylov_eigh(lambda M: B @ M, 300, 4)
    np.testing.assert_allclose(w, sla.eigvalsh(B)[::-1][:4], rtol=1e-10)
    # rank 30: the space is invariant after a few blocks of 20, part-way through the
    # first restart, so its Rayleigh-Ritz matrix is made of the steps' own coefficients
    C = _psd(300, 30, 0.9)
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
    Q = partial.orthonormalize(W)
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
    Qn = partial.orthonormalize(near)
    np.testing.assert_allclose(Qn.T @ Qn, np.eye(Qn.shape[1]), atol=1e-12)
    assert Qn.shape[1] in (12, 13)


def test_orthonormalize_with_the_callers_gram_and_buffers():
    # subspace iteration hands over W^T W (made for its residuals) and two spare blocks:
    # the basis is the one made without them, written into W's own memory
    rng = np.random.default_rng(5)
    W = rng.standard_normal((400, 9)) * np.geomspace(1.0, 1e-3, 9)
    ref = partial.orthonormalize(W.copy())
    gram = W.T @ W
    mine, work = W.copy(), np.empty_like(W)
    Q = partial.orthonormalize(mine, gram=gram, overwrite=True, work=work)
    assert np.shares_memory(Q, mine)
    np.testing.assert_allclose(Q, ref, atol=1e-12)
    np.testing.assert_allclose(Q.T @ Q, np.eye(9), atol=1e-13)
    # the columns are scaled in the small factor, not in W: the caller's W is untouched
    kept = W.copy()
    np.testing.assert_allclose(partial.orthonormalize(kept, gram=gram), ref, atol=1e-12)
    np.testing.assert_array_equal(kept, W)
    # a dropped (zero) column: the result is narrower and cannot take W's memory
    Z = np.hstack([W, np.zeros((400, 1))])
    Qz = partial.orthonormalize(Z, gram=Z.T @ Z, overwrite=True, work=np.empty_like(Z))
    assert Qz.shape == (400, 9) and not np.shares_memory(Qz, Z)
    np.testing.assert_allclose(Qz, ref, atol=1e-12)


def test_block_krylov_float32_basis():
    A = _psd(600, 300, 0.98)
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
    monkeypatch.setattr(partial, "KRYLOV_MIN_SIZE", 0)
    dtypes = []
    real = partial.block_krylov_eigh
    monkeypatch.setattr(partial, "block_krylov_eigh",
                        lambda *a, **k: dtypes.append(k.get("dtype", np.float64))
                        or real(*a, **k))
    m = FULL_SPECTRUM_LIMIT + 200
    A = _psd(m, 600, 0.995, seed=2)
    w_ref, V_ref = sla.eigh(A, subset_by_index=[m - 20, m - 1])
    w_ref, V_ref = w_ref[::-1], V_ref[:, ::-1]
    w, V, info = partial.leading_eigh(A, 20, tol=1e-10)
    assert dtypes == [np.float32, np.float64]
    assert info["converged"] and info["max_residual"] <= 1e-10
    assert info["float32_products"] > 0
    np.testing.assert_allclose(w, w_ref, rtol=1e-13)
    assert V.dtype == np.float64
    np.testing.assert_allclose(V.T @ V, np.eye(20), atol=1e-12)
    assert _principal_cosines(V.T, V_ref.T).min() > 1 - 1e-12


def _template(A, B=None, lowrank=None, constraint=None):
    return TraceTemplate(method="test", params={}, centred=False, n_features=A.shape[0], A=A,
                         B=B, lowrank=lowrank, operator_form=lowrank is not None,
                         constraint=constraint)


@pytest.mark.parametrize("krylov_min", [None, 0], ids=["lapack-subset", "block-krylov"])
def test_solve_dense_above_the_full_spectrum_limit_is_partial_and_exact(krylov_min,
                                                                       monkeypatch):
    if krylov_min is not None:  # the Krylov branch, at a size CI can afford
        monkeypatch.setattr(partial, "KRYLOV_MIN_SIZE", krylov_min)
    calls = []
    real = partial.block_krylov_eigh
    monkeypatch.setattr(partial, "block_krylov_eigh",
                        lambda *a, **k: calls.append(k["depth"]) or real(*a, **k))
    checks = []
    real_check = partial.rayleigh_ritz
    monkeypatch.setattr(partial, "rayleigh_ritz",
                        lambda *a, **k: checks.append(a[2]) or real_check(*a, **k))
    m = FULL_SPECTRUM_LIMIT + 200
    A = _psd(m, 400, 0.99, seed=1)
    res = solve_dense(_template(A), 12)
    assert res.solver == "eigh-partial" and res.eigenvalues.size == 12
    # LAPACK's subset in float32 makes one float64 Rayleigh-Ritz check; Krylov goes deeper
    if krylov_min is None:
        assert checks == [12] and calls == []
    else:
        assert checks == [] and partial.DENSE_KRYLOV_DEPTH in calls
    w_ref = sla.eigh(A, subset_by_index=[m - 12, m - 1], eigvals_only=True)[::-1]
    np.testing.assert_allclose(res.eigenvalues, w_ref, rtol=1e-10)
    # a threshold: d from the computed values and the trace
    res_t = solve_dense(_template(A), 0.5, max_components=200)
    full = np.clip(np.linalg.eigvalsh(A)[::-1], 0, None)
    d_ref = int(np.searchsorted(np.cumsum(full), 0.5 * np.trace(A)) + 1)
    assert res_t.n_components == d_ref and res_t.trace == pytest.approx(np.trace(A))


@pytest.mark.parametrize(("tol", "method"), [(partial.KRYLOV_TOL, "lapack-subset-float32"),
                                             (1e-13, "lapack-subset")])
def test_leading_eigh_float32_subset_is_checked_in_float64(tol, method):
    # float32 vectors reach a float64 residual near 1e-7 of the largest eigenvalue: enough
    # for the default tolerance; a stricter one falls back to LAPACK in float64
    m, k = FULL_SPECTRUM_LIMIT + 150, 15
    A = _psd(m, 500, 0.98, seed=5)
    w, V, info = partial.leading_eigh(A, k, tol=tol)
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
        monkeypatch.setattr(partial, "KRYLOV_MIN_SIZE", krylov_min)
    m, k = FULL_SPECTRUM_LIMIT + 200, 30
    Q = np.linalg.qr(np.random.default_rng(7).normal(size=(m, m)))[0]
    lam = np.concatenate([[3e6, 1e6, 4e5], np.geomspace(2.5, 1e-3, m - 3)])
    A = (Q * lam) @ Q.T
    w, V, info = partial.leading_eigh(A, k, dominant=dominant)
    if krylov_min is not None:
        assert info["dominant"] == dominant and info["float32_products"] > 0
    else:  # float32 resolves the tail only once the three large pairs are deflated
        assert info["method"] == ("lapack-subset-float32" if dominant else "lapack-subset")
    ref = np.sort(lam)[::-1][:k]
    np.testing.assert_allclose(w, ref, rtol=1e-9)
    r = np.linalg.norm(A @ V - V * w, axis=0)
    assert np.all(r <= partial.KRYLOV_TOL * w * (1 + 1e-9))


@pytest.mark.parametrize("start", ["near", "wrong", "narrow"])
def test_dominant_start_is_used_and_cannot_spoil_the_result(start, monkeypatch):
    # a start block close to the dominant eigenvectors saves products against the random
    # one; a wrong or too narrow start costs products but the pairs stay exact
    monkeypatch.setattr(partial, "KRYLOV_MIN_SIZE", 0)
    m, k = FULL_SPECTRUM_LIMIT + 200, 30
    rng = np.random.default_rng(8)
    Q = np.linalg.qr(rng.normal(size=(m, m)))[0]
    lam = np.concatenate([[3e6, 1e6, 4e5], np.geomspace(2.5, 1e-3, m - 3)])
    A = (Q * lam) @ Q.T
    block = {"near": Q[:, :3] + 1e-3 * rng.normal(size=(m, 3)),
             "wrong": Q[:, 3:6], "narrow": Q[:, :1]}[start]
    w, V, info = partial.leading_eigh(A, k, dominant=3, dominant_start=block)
    _, _, random_info = partial.leading_eigh(A, k, dominant=3)
    np.testing.assert_allclose(w, np.sort(lam)[::-1][:k], rtol=1e-9)
    r = np.linalg.norm(A @ V - V * w, axis=0)
    assert np.all(r <= partial.KRYLOV_TOL * w * (1 + 1e-9))
    if start == "near":
        assert info["products"] < random_info["products"]


def _spd(m: int, smallest: float, seed: int = 0) -> np.ndarray:
    """A symmetric positive definite m x m matrix with eigenvalues 1 ... smallest."""
    Q = np.linalg.qr(np.random.default_rng(seed).normal(size=(m, m)))[0]
    return (Q * np.geomspace(1.0, smallest, m)) @ Q.T


def test_large_constraint_is_checked_without_its_whole_spectrum(monkeypatch):
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
    low = _psd(m, m // 2, 0.999, seed=2)
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


def test_leading_eigh_says_when_block_krylov_did_not_converge(monkeypatch):
    monkeypatch.setattr(partial, "KRYLOV_MIN_SIZE", 0)
    monkeypatch.setattr(partial, "FULL_SPECTRUM_LIMIT", 100)  # Krylov at a small size
    monkeypatch.setattr(partial, "KRYLOV_BASIS_FRACTION", float("inf"))
    A = _psd(300, 200, 0.99, seed=4)
    with pytest.warns(RuntimeWarning, match="stopped after 60 restarts"):
        w, V, info = partial.leading_eigh(A, 5, tol=1e-30)
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
        w, V, info = partial.leading_eigh_threshold(A, t, total, cap, complete=False)
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
    monkeypatch.setattr(partial, "KRYLOV_MIN_SIZE", 0)
    m = FULL_SPECTRUM_LIMIT + 200
    A = _psd(m, 900, 0.995, seed=5)
    ref = sla.eigvalsh(A)[::-1]
    limit = partial.KRYLOV_BASIS_FRACTION * m / partial.DENSE_KRYLOV_DEPTH
    small = int(limit) - partial.KRYLOV_OVERSAMPLING - 5  # basis below 2/3 of m
    big = int(limit) - partial.KRYLOV_OVERSAMPLING + 5  # above it
    for k, method in ((small, "block-krylov"), (big, "lapack-subset-float32")):
        w, V, info = partial.leading_eigh(A, k)
        assert info["method"] == method
        np.testing.assert_allclose(w, ref[:k], rtol=1e-9)
