"""The relation-feature route (mope section 3.5) and kernel MDDM (mddm eq. 13 / 20).

References are written here from the papers' formulas with dense numpy/scipy:
the similarities of mope eq. 7-9, the generalised eigenproblems of mddm eq. 13 and
eq. 20, and the linear-kernel identities that tie the relation route to the feature
route (worked out in the docstrings below).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
from helpers import labels_dask, scheduler_graphs, sparse_dask, write_store

from dmlfe.cli import main
from dmlfe.estimators import CCA, MDDM, MVMD, OPLS, PCA, KernelMDDM, make_estimator
from dmlfe.model_io import load_model
from dmlfe.relation import RelationMap, build_relation_map, gather_rows, select_prototypes, ship
from dmlfe.solvers.leading import FULL_SPECTRUM_LIMIT
from dmlfe.stats.pass_ import compute_stats


def _data(n=80, D=12, q=3, seed=0, density=0.5):
    rng = np.random.default_rng(seed)
    X = sp.random(n, D, density=density, random_state=seed + 1, format="csr",
                  data_rvs=lambda k: rng.uniform(0.1, 1.0, k))
    Y = (rng.uniform(size=(n, q)) < 0.4).astype(np.uint8)
    Y[np.arange(n), rng.integers(0, q, n)] = 1  # every document has a label
    return X, Y


def _sq_dist(A, B):
    A, B = np.asarray(A), np.asarray(B)
    return ((A[:, None, :] - B[None, :, :]) ** 2).sum(axis=2)


def _same_up_to_signs(Z_rel, Z_feat, rtol=1e-6):
    """Z_rel = Z_feat S for the least-squares d x d S; S must be diag(+-1)."""
    S, *_ = np.linalg.lstsq(Z_feat, Z_rel, rcond=None)
    np.testing.assert_allclose(np.abs(S), np.eye(S.shape[0]), atol=rtol * 10)
    np.testing.assert_allclose(Z_rel, Z_feat @ np.round(S), atol=rtol * np.abs(Z_feat).max())


# --------------------------------------------------------------------------- similarities
def test_similarities_match_mope_eq_7_to_9():
    X, _ = _data(n=30, D=8, seed=3)
    X = sp.vstack([X, sp.csr_matrix((1, 8))]).tocsr()  # an empty document
    P = X[[0, 4, 7, 9, 12, 20, 25]]
    Xd, Pd = X.toarray(), P.toarray()
    d2 = _sq_dist(Xd, Pd)
    nx, npr = np.linalg.norm(Xd, axis=1), np.linalg.norm(Pd, axis=1)
    G = Xd @ Pd.T
    with np.errstate(invalid="ignore", divide="ignore"):
        cosine = np.nan_to_num(G / np.outer(nx, npr))
        ratio = np.nan_to_num(d2 / (nx[:, None] ** 2 + npr[None, :] ** 2))
    # local scaling, eq. 8 with K = 3: the K-th smallest non-zero distance to the prototypes
    def kth(row, k=3):
        pos = np.sort(np.sqrt(row[row > 1e-12]))
        return pos[k - 1] if pos.size >= k else (pos[-1] if pos.size else 1.0)
    sx = np.array([kth(r) for r in d2])
    sp_ = np.array([kth(r) for r in _sq_dist(Pd, Pd)])
    expected = {
        "linear": G,
        "cosine": cosine,
        "gaussian": np.exp(-d2 / 0.7),
        "local_scaling": np.exp(-d2 / np.outer(sx, sp_)),
        "eq9": 1.0 / (0.3 + ratio),
    }
    for name, ref in expected.items():
        tau = {"gaussian": 0.7, "eq9": 0.3}.get(name)
        R = RelationMap(P, name, tau=tau, n_neighbors=3).transform(X)
        np.testing.assert_allclose(R, ref, rtol=1e-10, atol=1e-12, err_msg=name)
    # the median heuristic: median squared distance over distinct prototype pairs
    rmap, idx = build_relation_map(X, similarity_name="gaussian", n_prototypes=7,
                                   selection="random", random_state=4)
    Pd = X[idx].toarray()
    iu = np.triu_indices(7, k=1)
    assert rmap.tau == pytest.approx(np.median(_sq_dist(Pd, Pd)[iu]), rel=1e-12)
    with pytest.raises(ValueError, match="similarity='gauss'"):
        RelationMap(P, "gauss")


# --------------------------------------------------------------------------- prototypes
def test_prototypes_independent_of_chunks_and_workers(cluster_client):
    X, _ = _data(n=200, D=40, q=3, seed=5, density=0.2)
    # label sets with known strata: 100 x {0}, 60 x {1}, 40 x {0, 2}
    Y = np.zeros((200, 3), dtype=np.uint8)
    Y[:100, 0] = 1
    Y[100:160, 1] = 1
    Y[160:, [0, 2]] = 1
    perm = np.random.default_rng(0).permutation(200)
    Y = Y[perm]
    for sel in ("random", "stratified", "kmeans++"):
        ref = select_prototypes(X, Y, n_prototypes=20, selection=sel, random_state=11)
        assert ref.shape == (20,) and np.all(np.diff(ref) > 0)
        for rows, client in ((17, None), (64, cluster_client)):
            got = select_prototypes(sparse_dask(X, rows), labels_dask(Y, rows),
                                    n_prototypes=20, selection=sel, random_state=11,
                                    client=client)
            np.testing.assert_array_equal(got, ref, err_msg=f"{sel}, {rows} rows")
        if sel == "random":
            expect = np.sort(np.random.default_rng(11).choice(200, size=20, replace=False))
            np.testing.assert_array_equal(ref, expect)
        if sel == "stratified":  # 20 * (100, 60, 40) / 200 per label set
            keys = [tuple(r) for r in Y[ref]]
            assert sorted(keys.count(k) for k in set(keys)) == [4, 6, 10]
    np.testing.assert_array_equal(select_prototypes(X, n_prototypes=None), np.arange(200))
    # the gathered rows and the whole map (median tau included) agree as well
    idx = select_prototypes(X, n_prototypes=30, selection="random", random_state=2)
    got = gather_rows(sparse_dask(X, 23), idx[::-1], cluster_client)
    assert (got != X[idx[::-1]]).nnz == 0
    maps = [build_relation_map(Xs, similarity_name="gaussian", n_prototypes=30,
                               selection="kmeans++", random_state=2, client=c)[0]
            for Xs, c in ((X, None), (sparse_dask(X, 23), cluster_client))]
    assert maps[0].sha256 == maps[1].sha256 and maps[0].tau == maps[1].tau
    with pytest.raises(ValueError, match="n_prototypes=30"):
        select_prototypes(X, n_prototypes=30, selection="all")


def test_kmeanspp_seeding_draws_as_scikit_learn_does():
    """The rows of sklearn's kmeans_plusplus (one trial per step, same seed), for sparse
    and dense rows, and a pool with duplicate rows still gives p distinct prototypes."""
    from sklearn.cluster import kmeans_plusplus

    from dmlfe.relation.prototypes import kmeanspp_seeding

    for seed in range(4):
        A = sp.random(120, 30, density=0.25, random_state=seed, format="csr")
        for X in (A, A.toarray()):
            want = kmeans_plusplus(X, 25, random_state=seed, n_local_trials=1)[1]
            np.testing.assert_array_equal(kmeanspp_seeding(X, 25, seed), want)
    # 6 distinct rows, each 5 times: after 6 picks every distance is 0 and rows repeat
    base = sp.random(6, 10, density=0.5, random_state=1, format="csr")
    X = sp.vstack([base] * 5, format="csr")
    first = kmeanspp_seeding(X, 8, 3)
    assert len({tuple(X[i].toarray().ravel()) for i in first[:6]}) == 6
    got = select_prototypes(X, n_prototypes=8, selection="kmeans++", random_state=3)
    assert got.shape == (8,) and np.all(np.diff(got) > 0)


def test_relation_statistics_on_the_cluster(cluster_client):
    """R^T R, R^T Y and the sums from the chunk-wise pass equal dense numpy on R."""
    X, Y = _data(n=150, D=30, seed=8, density=0.3)
    rmap, _ = build_relation_map(X, similarity_name="cosine", n_prototypes=40,
                                 selection="random", random_state=1)
    R = rmap.transform(X)
    for rows in (23, 150):
        Xd = sparse_dask(X, rows)
        st = compute_stats(Xd, labels_dask(Y, rows), need_xtx=True, block_fn=ship(rmap, Xd),
                           client=cluster_client)
        np.testing.assert_allclose(st.xtx, R.T @ R, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(st.xty, R.T @ Y, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(st.sum_x, R.sum(axis=0), rtol=1e-12)
        assert st.n == 150


# --------------------------------------------------------------------------- linear kernel
@pytest.mark.parametrize("make", [lambda **k: CCA(gamma_x=0.0, **k),
                                  lambda **k: OPLS(gamma_x=0.0, **k),
                                  lambda **k: MDDM(variant="f", mu=1.0, **k)],
                         ids=["cca", "opls", "mddm_f"])
def test_linear_relation_equals_feature_route_for_scatter_constraints(make):
    """Linear kernel, all training documents as prototypes: R = X X^T, so a relation
    coefficient matrix Gamma is the feature projection P = X^T Gamma (the known map) and
    Z_rel = (R - mean_R) Gamma = (X - mean_X) X^T Gamma. When the constraint is the data
    scatter (B = Xc^T Xc: CCA and OPLS with gamma_x = 0, MDDMf with mu = 1) the two
    problems are the same problem in P (D <= n, X of full column rank): equal
    eigenvalues, P_rel = P_feat and Z_rel = Z_feat up to the signs of the columns."""
    X, Y = _data()
    feat = make(n_components=3).fit(X, Y)
    with warnings.catch_warnings():
        # B_Gamma = X Xc^T Xc X^T has rank D < n: the solver adds a tiny ridge, and says so
        warnings.simplefilter("ignore", RuntimeWarning)
        rel = make(n_components=3, route="relation").fit(X, Y)
    assert rel.route_ == "relation" and rel.components_.shape == (3, 80)
    np.testing.assert_allclose(rel.eigenvalues_[:3], feat.eigenvalues_[:3], rtol=1e-6)
    P_rel = X.T @ rel.components_.T
    _same_up_to_signs(P_rel, feat.components_.T)
    _same_up_to_signs(rel.transform(X), feat.transform(X))
    X_new, _ = _data(n=25, seed=9)  # out of sample: against the stored prototypes
    _same_up_to_signs(rel.transform(X_new), feat.transform(X_new))


def test_linear_relation_pca_is_a_generalised_feature_problem():
    """Relation PCA, linear kernel, all training documents: max tr(G^T Rc^T Rc G) s.t.
    G^T G = I with Rc = Xc X^T. Its eigenvectors lie in range(X), G = X (X^T X)^{-1} P,
    so in P = X^T G it is max tr(P^T C P) s.t. P^T (X^T X)^{-1} P = I (C = Xc^T Xc):
    C p = lambda (X^T X)^{-1} p. With d = D both routes' embeddings span the column
    space of Xc: Z_rel = Z_feat M, M = P_feat^T X^T G invertible (D x D)."""
    X, Y = _data()
    D = X.shape[1]
    Xd = X.toarray()
    Xc = Xd - Xd.mean(axis=0)
    w_ref = sla.eigh(Xc.T @ Xc, np.linalg.inv(Xd.T @ Xd), eigvals_only=True)[::-1]
    feat = PCA(n_components=D).fit(X, Y)
    rel = PCA(n_components=D, route="relation").fit(X, Y)
    np.testing.assert_allclose(rel.eigenvalues_[:D], w_ref, rtol=1e-9)
    assert np.all(np.abs(rel.eigenvalues_[D:]) < 1e-9 * w_ref[0])  # rank D
    P = X.T @ rel.components_.T  # the relation directions in feature space
    np.testing.assert_allclose(P.T @ np.linalg.solve(Xd.T @ Xd, P), np.eye(D), atol=1e-9)
    M = feat.components_ @ P
    assert np.linalg.cond(M) < 1e6
    Z_rel, Z_feat = rel.transform(X), feat.transform(X)
    np.testing.assert_allclose(Z_rel, Z_feat @ M, atol=1e-9 * np.abs(Z_rel).max())
    # with fewer components the subspaces differ in general: not the same method
    top = PCA(n_components=2, route="relation").fit(X, Y).transform(X)
    assert np.max(sla.subspace_angles(top, feat.transform(X)[:, :2])) > 1e-3


# --------------------------------------------------------------------------- kernel MDDM
def _kernel_reference(X, Y, P_rows, tau, mu=None):
    """Dense eq. 13 (mu None) / eq. 20 of mddm with R = K(X, prototypes), Q = K(P, P)."""
    Xd = X.toarray()
    R = np.exp(-_sq_dist(Xd, Xd[P_rows]) / tau)
    Q = np.exp(-_sq_dist(Xd[P_rows], Xd[P_rows]) / tau)
    n = Xd.shape[0]
    H = np.eye(n) - 1.0 / n
    L = Y @ Y.T
    A = R.T @ H @ L @ H @ R
    B = Q if mu is None else mu * R.T @ H @ R + (1 - mu) * Q
    w, C = sla.eigh(A, B)
    return w[::-1], C[:, ::-1], H @ R @ C[:, ::-1]


@pytest.mark.parametrize("mu", [None, 0.5, 0.9], ids=["eq13", "eq20-mu0.5", "eq20-mu0.9"])
def test_kernel_mddm_equals_dense_equations(mu):
    X, Y = _data(n=60, D=15, seed=4)
    Y = Y.astype(float)
    tau = 1.5
    variant = {"variant": "p"} if mu is None else {"variant": "f", "mu": mu}
    est = KernelMDDM(n_components=3, similarity="gaussian", tau=tau, **variant).fit(X, Y)
    w, _, Z = _kernel_reference(X, Y, np.arange(60), tau, mu)
    assert est.route_ == "relation" and est.regularization_ == 0.0
    np.testing.assert_allclose(est.eigenvalues_, w, rtol=1e-8, atol=1e-10 * w[0])
    _same_up_to_signs(est.transform(X), Z[:, :3])
    # on a dask array, chunked: the same model
    dz = KernelMDDM(n_components=3, similarity="gaussian", tau=tau, **variant).fit(
        sparse_dask(X, 13), labels_dask(Y, 13))
    np.testing.assert_allclose(dz.eigenvalues_, est.eigenvalues_, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("variant", [{"variant": "p"}, {"variant": "f", "mu": 0.5}])
def test_kernel_mddm_above_the_full_spectrum_limit_is_the_q_by_q_reduction(variant):
    # p = n > FULL_SPECTRUM_LIMIT prototypes: A = F F^T (rank q) is solved through K's (or
    # B's) Cholesky factor and a q x q problem, against scipy.linalg.eigh of the dense
    # pencil of mddm eq. 13 / 20 written out here
    n, tau = FULL_SPECTRUM_LIMIT + 60, 1.0
    X, Y = _data(n=n, D=2000, q=4, seed=8, density=0.01)
    Y = Y.astype(float)
    est = KernelMDDM(n_components=3, similarity="gaussian", tau=tau, **variant).fit(X, Y)
    assert est.solver_ == "lowrank-generalized"
    Xd = X.toarray()
    sq = (Xd * Xd).sum(axis=1)
    Q = np.exp(-np.clip(sq[:, None] + sq[None, :] - 2 * Xd @ Xd.T, 0, None) / tau)
    H = np.eye(n) - 1.0 / n
    HQ = H @ Q
    A = HQ.T @ (Y @ Y.T) @ HQ
    mu = variant.get("mu")
    B = Q if mu is None else mu * HQ.T @ HQ + (1 - mu) * Q
    B = B + est.regularization_ * np.eye(n)
    w = sla.eigh(A, B, eigvals_only=True, subset_by_index=[n - 3, n - 1])[::-1]
    np.testing.assert_allclose(est.eigenvalues_[:3], w, rtol=1e-8, atol=1e-10 * w[0])


def test_kernel_mddm_with_fewer_prototypes_and_the_centred_reading():
    X, Y = _data(n=60, D=15, seed=6)
    est = KernelMDDM(n_components=2, variant="f", mu=0.5, similarity="gaussian", tau=2.0,
                     n_prototypes=25, prototype_selection="random", random_state=3).fit(X, Y)
    rows = select_prototypes(X, n_prototypes=25, selection="random", random_state=3)
    np.testing.assert_array_equal(est.prototype_indices_, rows)
    w, _, Z = _kernel_reference(X, Y.astype(float), rows, 2.0, 0.5)
    np.testing.assert_allclose(est.eigenvalues_, w, rtol=1e-8, atol=1e-10 * w[0])
    _same_up_to_signs(est.transform(X), Z[:, :2])
    # eq. 20 assumes Q centred (Q~ = H Q H); on coefficients with 1^T c = 0 the paper's
    # matrices and ours give the same quadratic forms
    Xd = X.toarray()
    Q = np.exp(-_sq_dist(Xd, Xd) / 2.0)
    H = np.eye(60) - 1.0 / 60
    Qt, L = H @ Q @ H, Y @ Y.T
    c = H @ np.random.default_rng(0).normal(size=(60, 4))
    np.testing.assert_allclose(c.T @ (0.5 * Qt @ Qt + 0.5 * Qt) @ c,
                               c.T @ (0.5 * Q @ H @ Q + 0.5 * Q) @ c, rtol=1e-10)
    np.testing.assert_allclose(c.T @ Qt @ H @ L @ H @ Qt @ c, c.T @ Q @ H @ L @ H @ Q @ c,
                               rtol=1e-10)
    with pytest.raises(ValueError, match="positive semi-definite kernel"):
        KernelMDDM(similarity="eq9").fit(X, Y)
    with pytest.raises(ValueError, match="needs route='relation'"):
        KernelMDDM(route="feature").fit(X, Y)


# --------------------------------------------------------------------------- route, models
def test_auto_route_and_saved_model(tmp_path):
    X, Y = _data(n=50, D=400, seed=2, density=0.05)
    auto = CCA(n_components=2, route="auto", max_dense_features=200, max_dual_samples=40)
    auto = auto.fit(X, Y)  # n = 50: too many documents for the dual route
    assert auto.route_ == "relation" and "needs X^T X" in auto.route_reason_
    # D fits: the dense feature route, except in memory with n <= D/2 (an n x n problem)
    assert PCA(n_components=2, route="auto").fit(X, Y).route_ == "dual"
    assert PCA(n_components=2, route="auto").fit(X[:, :90], Y).route_ == "feature"
    low = MDDM(n_components=2, route="auto", max_dense_features=200).fit(X, Y)
    assert low.route_ == "feature" and "any D" in low.route_reason_
    free = MVMD(n_components=2, route="auto", max_dense_features=200, solver="randomized")
    assert free.fit(X, Y).route_ == "feature"  # matrix-free on X was asked for
    big_p = CCA(n_components=2, route="auto", max_dense_features=40,
                max_dual_samples=40).fit  # p = 50 > 40
    with pytest.raises(ValueError, match="max_dense_features=40 .*route='relation'"):
        big_p(X, Y)
    # save / load: prototypes as CSR parts, similarity parameters in JSON
    est = make_estimator("mvmd", n_components=3, route="relation", similarity="local_scaling",
                         n_neighbors=4, n_prototypes=20, prototype_selection="stratified",
                         random_state=5).fit(X, Y)
    est.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    assert meta["fitted"]["route_"] == "relation"
    assert meta["fitted"]["relation_"]["similarity"] == "local_scaling"
    assert meta["fitted"]["relation_"]["n_neighbors"] == 4
    with np.load(tmp_path / "m" / "arrays.npz", allow_pickle=False) as z:
        assert {"relation.prototypes.data", "relation.prototypes.indices",
                "relation.prototypes.indptr", "relation.prototype_scales"} <= set(z.files)
        assert z["relation.prototypes.indptr"].shape == (21,)
    back = load_model(tmp_path / "m")
    X_new, _ = _data(n=10, D=400, seed=3, density=0.05)
    np.testing.assert_allclose(back.transform(X_new), est.transform(X_new), rtol=1e-12)
    np.testing.assert_array_equal(back.prototype_indices_, est.prototype_indices_)


def test_cli_relation_route(tmp_path, cluster_client, capsys):
    address = cluster_client.scheduler.address
    store = tmp_path / "syn.zarr"
    assert main(["ingest", "--format", "synthetic", "--out", str(store), "--n-docs", "200",
                 "--vocab-size", "120", "--n-labels", "4", "--seed", "1", "--chunk-rows",
                 "64", "--scheduler", address, "--quiet"]) == 0
    capsys.readouterr()
    model_dir = tmp_path / "model"
    assert main(["fit", str(store), "--method", "kmddm", "--variant", "f", "--dim", "3",
                 "--prototypes", "50", "--similarity", "cosine", "--split", "train",
                 "--out", str(model_dir), "--scheduler", address]) == 0
    out = capsys.readouterr().out
    assert "route: relation (kmddm_f is a kernel method" in out
    # --prototypes alone: the default selection for p < n (issue 33), as in Python
    assert "p = 50 prototypes (stratified), similarity cosine" in out
    model = load_model(model_dir)
    ref = KernelMDDM(n_components=3, variant="f", n_prototypes=50,
                     prototype_selection="stratified", similarity="cosine", split="train",
                     cache=False).fit(store)
    np.testing.assert_allclose(model.eigenvalues_, ref.eigenvalues_, rtol=1e-9)
    emb = tmp_path / "emb.zarr"
    assert main(["transform", str(model_dir), str(store), "--out", str(emb), "--scheduler",
                 address, "--quiet"]) == 0
    from dmlfe.projection import read_embeddings

    Z = read_embeddings(emb)
    from dmlfe.store import open_store

    s = open_store(store)
    X_all = sp.vstack([b for b in (s.X.blocks[i].compute(scheduler="sync")
                                   for i in range(s.X.numblocks[0]))]).tocsr()
    np.testing.assert_allclose(Z, ref.transform(X_all), rtol=1e-8, atol=1e-10)


# --------------------------------------------------------------------------- store fits
def _relation_fit(method, X, Y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return make_estimator(method, n_components=3, route="relation", n_prototypes=30,
                              prototype_selection="random", random_state=4, **kw).fit(X, Y)


@pytest.mark.parametrize("how", ["passes", "gathered", "cluster-wider", "too-big",
                                 "matrix-free"])
@pytest.mark.parametrize("method", ["cca", "pca", "mope"])
def test_relation_on_store_and_cluster_equals_in_memory(tmp_path, cluster_client, monkeypatch,
                                                        how, method):
    X, Y = _data(n=90, D=300, seed=6, density=0.05)
    store = tmp_path / "s.zarr"
    write_store(store, X, Y, ["train"] * X.shape[0], chunk_rows=17)
    kw = {"max_dense_features": 20, "solver": "randomized", "n_iter": 6} \
        if how == "matrix-free" else {}
    if how == "matrix-free" and method != "pca":
        pytest.skip(f"{method} has no matrix-free solver")
    if method == "mope":  # a graph method: the K-NN graph of a store is searched there
        if how in ("cluster-wider", "too-big"):
            pytest.skip("the passes case covers it")
        kw |= {"similarity": "gaussian", "n_neighbors": 5}
    mem = _relation_fit(method, X, Y, **kw)
    # the cluster has 2 threads: the driver reads X itself when it has as many, X's 12
    # bytes per value (+ 8 per row) fit in max_gather_bytes and the p x p solve is dense
    monkeypatch.setenv("DMLFE_DRIVER_THREADS", "1" if how == "cluster-wider" else "2")
    limit = {"passes": 0, "too-big": 12 * X.nnz + 8 * 91 - 1}.get(how, 2**30)
    graphs = scheduler_graphs(cluster_client)
    on_store = _relation_fit(method, str(store), None, client=cluster_client, cache=False,
                             max_gather_bytes=limit, **kw)
    graphs = scheduler_graphs(cluster_client) - graphs
    np.testing.assert_array_equal(on_store.prototype_indices_, mem.prototype_indices_)
    np.testing.assert_allclose(on_store.eigenvalues_[:3], mem.eigenvalues_[:3], rtol=1e-10)
    np.testing.assert_allclose(on_store.components_, mem.components_, atol=1e-10)
    assert on_store.solver_.startswith("randomized") == (how == "matrix-free")
    gathered = "read by the driver" in on_store.route_reason_
    assert gathered == (how == "gathered")
    if gathered:  # X and Y read once by the driver's threads; nothing else reaches the
        # cluster but a graph method's K-NN search of the store (cached beside it)
        assert graphs == (method == "mope")
        assert "30 x 30 partial per row block" in on_store.route_reason_
        # the read and the statistics (in memory), and the K-NN search
        assert on_store.n_passes_ == 2 + (method == "mope")
    else:  # the prototypes' rows, the statistics (and the solver's passes) on the cluster
        assert graphs >= 2


def test_relation_read_to_the_driver_shares_the_statistics_cache(tmp_path, cluster_client,
                                                                 monkeypatch):
    X, Y = _data(n=90, D=300, seed=6, density=0.05)
    store = tmp_path / "s.zarr"
    write_store(store, X, Y, ["train"] * X.shape[0], chunk_rows=17)
    monkeypatch.setenv("DMLFE_DRIVER_THREADS", "2")
    # the same prototypes (global row indices), so the same cache key either way
    first = _relation_fit("cca", str(store), None, client=cluster_client)
    again = _relation_fit("cca", str(store), None, client=cluster_client, max_gather_bytes=0)
    assert "read by the driver" in first.route_reason_
    assert "read by the driver" not in again.route_reason_
    assert [first.stats_from_cache_, again.stats_from_cache_] == [False, True]
    np.testing.assert_allclose(again.eigenvalues_[:3], first.eigenvalues_[:3], rtol=1e-12)
