"""The dual route against the dense feature route.

The dual route solves every method in the n-dimensional row space of X; it must give
the eigenvalues and subspaces of the dense D x D (feature) route, for D > n and D < n,
in memory, on a store and on a LocalCluster. The leading-eigenpair solvers it calls are
tested in ``test_leading.py``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import (
    count_computes,
    labels_dask,
    principal_cosines,
    scheduler_graphs,
    sparse_dask,
    write_store,
)

from dmlfe.estimators import make_estimator
from dmlfe.fit.plan import DataShape, Limits, plan_fit
from dmlfe.methods import get_method
from dmlfe.solvers import dense, dimension, leading
from dmlfe.solvers.dual import centre_gram, reduced_data
from dmlfe.solvers.leading import FULL_SPECTRUM_LIMIT
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
    cos = principal_cosines(ref.components_[:k], dual.components_[:k])
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

    monkeypatch.setattr(leading, "KRYLOV_MIN_SIZE", 0)
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
    assert principal_cosines(ref.components_, dual.components_).min() > 1 - 1e-9


@pytest.mark.parametrize(("params", "d"), [
    ({}, 6),
    # beta = 1: M = Yc Yc^T + gamma_xy I lifts q = 4 pairs; the rest cluster, so d <= q
    ({"beta": 1.0, "gamma_x": 0.3}, 3),
    ({"beta": 0.2, "gamma_x": 2.0, "gamma_xy": 0.01}, 6)])
def test_dual_mlsi_inverse_constraint_form_is_exact(params, d, monkeypatch):
    # above FULL_SPECTRUM_LIMIT documents with block Krylov: MLSI's B = Xc^T M^{-1} Xc +
    # gamma_x I solved as the n x n operator a Gc T^{-1} M (form 3), duplicated documents
    # included (a singular Gram), against the dense feature route
    monkeypatch.setattr(leading, "KRYLOV_MIN_SIZE", 0)
    monkeypatch.setattr(dense, "OPERATOR_BUDGET", 1.0)
    X, Y = _data(FULL_SPECTRUM_LIMIT + 100, 1_300, q=4, seed=7, duplicates=20)
    dual = _fit("mlsi", params, d, X, Y, "dual")
    assert dual.solver_ == "dual-inverse"
    ref = _fit("mlsi", params, d, X, Y, "feature", solver="dense")
    np.testing.assert_allclose(dual.eigenvalues_[:d], ref.eigenvalues_[:d], rtol=1e-9)
    assert principal_cosines(ref.components_, dual.components_).min() > 1 - 1e-9
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
    cos = principal_cosines(ref.components_[:min(d, g)], dual.components_[:min(d, g)])
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
    assert principal_cosines(ref.components_[:g], dual.components_[:g]).min() > 1 - 1e-8
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
    assert principal_cosines(ref.components_, dual.components_).min() > 1 - 1e-10
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
