"""The scikit-learn estimators against independent dense references, on every input kind.

The references (A, B) of each method are the n x n dense formulas of the papers
written in tests/test_methods.py (``ref_problem``/``ref_solve``), imported here:
they never call dmlfe. Every estimator must reproduce them in memory (numpy and
scipy.sparse input), from a dask array of CSR row blocks on a real 2-worker
LocalCluster with several chunk sizes, and from a store path (fit and
transform), and its transform must equal (X - mean) P computed in numpy.
"""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
from helpers import (
    count_computes,
    data_path,
    decaying_data,
    labels_dask,
    scheduler_graphs,
    sparse_dask,
    write_store,
)
from sklearn.base import clone
from test_methods import ALL, BETA, GAMMA, MU, random_data, ref_problem, ref_solve

from dmlfe.errors import InputError
from dmlfe.estimators import (
    CCA,
    DMLDA,
    LSI,
    MDDM,
    MLDA,
    MLSI,
    MVMD,
    OPLS,
    PCA,
    PLS,
    make_estimator,
)
from dmlfe.model_io import FORMAT_VERSION, load_model

#: Reference name (tests/test_methods.py) -> estimator with the reference's parameters.
FACTORIES = {
    "pca": lambda **kw: PCA(**kw),
    "lsi": lambda **kw: LSI(**kw),
    "mddm_p": lambda **kw: MDDM(variant="p", **kw),
    "mddm_p_rbf": lambda **kw: MDDM(variant="p", label_kernel="rbf", **kw),
    "pls": lambda **kw: PLS(**kw),
    "mddm_f": lambda **kw: MDDM(variant="f", mu=MU, **kw),
    "mvmd": lambda **kw: MVMD(beta=BETA, **kw),
    "cca": lambda **kw: CCA(gamma_x=GAMMA, gamma_y=GAMMA, **kw),
    "opls": lambda **kw: OPLS(gamma_x=0.0, **kw),
    "mlsi": lambda **kw: MLSI(beta=BETA, gamma_x=GAMMA, gamma_xy=GAMMA, **kw),
    "mlda": lambda **kw: MLDA(gamma_xy=GAMMA, **kw),
    "dmlda": lambda **kw: DMLDA(gamma_xy=GAMMA, **kw),
}
#: Methods whose projection is X P (mvmd: LDA-type methods keep X uncentred; mope eq. 2).
UNCENTRED = {"lsi", "mlda", "dmlda"}


def sparse_data(n: int = 60, D: int = 9, q: int = 4, seed: int = 1):
    """random_data with about a third of the entries zeroed: (dense X, CSR X, Y)."""
    X, Y = random_data(n=n, D=D, q=q, seed=seed)
    keep = np.random.default_rng(seed + 100).uniform(size=X.shape) < 0.65
    X = X * keep
    return X, sp.csr_matrix(X), Y


def assert_same_fit(a, b, rtol: float = 1e-10) -> None:
    """Two fits of one method on the same data (e.g. in memory and on the cluster)."""
    assert a.n_components_ == b.n_components_
    scale = np.abs(a.eigenvalues_).max()
    np.testing.assert_allclose(a.eigenvalues_, b.eigenvalues_, rtol=rtol, atol=rtol * scale)
    # deterministic signs: the components agree entry by entry, not only as subspaces
    np.testing.assert_allclose(a.components_, b.components_, rtol=1e-7,
                               atol=1e-7 * np.abs(b.components_).max())
    np.testing.assert_allclose(a.mean_, b.mean_, rtol=1e-12, atol=1e-12)


def numpy_transform(name: str, X: np.ndarray, X_train: np.ndarray, P: np.ndarray) -> np.ndarray:
    """(X - mean_train) P, or X P for the uncentred methods."""
    mean = np.zeros(X.shape[1]) if name in UNCENTRED else X_train.mean(axis=0)
    return (X - mean) @ P


def check_against_reference(name: str, est, X: np.ndarray, Y: np.ndarray) -> None:
    """``est`` fitted with n_components=0.999 on (X, Y) equals the dense paper reference."""
    A, B = ref_problem(name, X, Y)
    w_ref, V_ref = ref_solve(A, B)
    k_ref = int(np.sum(w_ref > 1e-10 * w_ref[0]))
    assert est.n_genuine_ == k_ref
    np.testing.assert_allclose(est.eigenvalues_[:k_ref], w_ref[:k_ref], rtol=1e-8,
                               atol=1e-12 * w_ref[0])
    c = np.cumsum(w_ref[:k_ref])
    d_ref = int(np.argmax(c >= 0.999 * c[-1])) + 1
    assert est.n_components_ == d_ref
    assert est.components_.shape == (d_ref, X.shape[1])
    P = est.components_.T
    checked = 0
    for k in range(1, min(d_ref, 8) + 1):
        gap = (w_ref[k - 1] - w_ref[k]) / w_ref[0] if k < w_ref.size else 1.0
        if gap < 1e-4:
            continue
        assert np.max(sla.subspace_angles(P[:, :k], V_ref[:, :k])) < 1e-6
        checked += 1
    assert checked >= 1
    expected_mean = np.zeros(X.shape[1]) if name in UNCENTRED else X.mean(axis=0)
    np.testing.assert_allclose(est.mean_, expected_mean, rtol=1e-12, atol=1e-12)
    Z = est.transform(X)
    Z_ref = numpy_transform(name, X, X, P)
    np.testing.assert_allclose(Z, Z_ref, rtol=1e-10, atol=1e-10 * np.abs(Z_ref).max())


# --------------------------------------------------------------------------- in memory


@pytest.mark.parametrize("name", ALL)
def test_in_memory_numpy_and_sparse_match_reference(name):
    X, Xs, Y = sparse_data()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none of these problems needs regularising
        dense = FACTORIES[name](n_components=0.999).fit(X, Y)
        sparse = FACTORIES[name](n_components=0.999).fit(Xs, Y.astype(np.uint8))
    check_against_reference(name, dense, X, Y)
    check_against_reference(name, sparse, X, Y)
    assert_same_fit(dense, sparse)
    np.testing.assert_allclose(sparse.transform(Xs), dense.transform(X), rtol=1e-10, atol=1e-10)
    assert dense.n_passes_ == 1 and dense.regularization_ == 0.0
    assert dense.n_samples_ == 60 and dense.n_features_in_ == 9
    assert dense.centred_ == (name not in UNCENTRED)


def test_new_documents_use_the_training_mean():
    X, Xs, Y = sparse_data()
    est = MVMD(n_components=3).fit(X[:40], Y[:40])
    Z = est.transform(Xs[40:])
    np.testing.assert_allclose(Z, (X[40:] - X[:40].mean(axis=0)) @ est.components_.T,
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(est.fit_transform(X[:40], Y[:40]), est.transform(X[:40]))


# --------------------------------------------------------------------------- cluster


@pytest.mark.parametrize("name", ALL)
def test_dask_on_cluster_equals_in_memory(name, cluster_client):
    X, Xs, Y = sparse_data()
    ref = FACTORIES[name](n_components=0.999).fit(Xs, Y)
    for rows in (7, 25, 60):
        Xd = sparse_dask(Xs, rows)
        Yd = labels_dask(Y.astype(np.uint8), rows) if rows != 25 else Y  # both kinds of Y
        est = FACTORIES[name](n_components=0.999, client=cluster_client).fit(Xd, Yd)
        assert_same_fit(est, ref)
        if rows == 7:
            Z = cluster_client.compute(est.transform(Xd)).result()
            Z_ref = numpy_transform(name, X, X, est.components_.T)
            np.testing.assert_allclose(Z, Z_ref, rtol=1e-10, atol=1e-10 * np.abs(Z_ref).max())


def test_one_graph_per_fit_on_the_cluster(cluster_client):
    _, Xs, Y = sparse_data(n=80)
    before = scheduler_graphs(cluster_client)
    est = CCA(n_components=2, client=cluster_client).fit(sparse_dask(Xs, 16), Y)
    assert scheduler_graphs(cluster_client) - before == 1
    assert est.n_passes_ == 1


# --------------------------------------------------------------------------- computes



@pytest.mark.parametrize("name", ALL)
def test_fit_from_dask_is_one_compute(name):
    _, Xs, Y = sparse_data()
    Xd, Yd = sparse_dask(Xs, 16), labels_dask(Y.astype(np.uint8), 16)
    est, n = count_computes(lambda: FACTORIES[name](n_components=2).fit(Xd, Yd))
    # MLDA first needs Y^T Y for its label-correlation weights (mvmd eq. 43-44): a
    # separate small pass over the labels only, then the one statistics pass
    assert n == (2 if name == "mlda" else 1)
    assert est.n_passes_ == 1
    assert_same_fit(est, FACTORIES[name](n_components=2).fit(Xs, Y))


# --------------------------------------------------------------------------- store


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    X, Xs, Y = sparse_data(n=90)
    splits = np.where(np.arange(90) % 3 == 0, "test", "train")
    path = write_store(tmp_path_factory.mktemp("store") / "small.zarr", Xs, Y, splits)
    return path, X, Y, splits


@pytest.mark.parametrize("name", ["pca", "lsi", "mddm_p", "mvmd", "cca", "mlda", "dmlda"])
def test_store_path_fit_and_transform(name, small_store, cluster_client):
    from dmlfe.store import open_store

    path, X, Y, splits = small_store
    train, test = splits == "train", splits == "test"
    est = FACTORIES[name](n_components=0.999, split="train", client=cluster_client).fit(path)
    ref = FACTORIES[name](n_components=0.999).fit(X[train], Y[train])
    check_against_reference(name, ref, X[train], Y[train])
    assert_same_fit(est, ref)
    P = est.components_.T
    Z_train = cluster_client.compute(est.transform(path)).result()  # the fitted split
    Z_ref = numpy_transform(name, X[train], X[train], P)
    np.testing.assert_allclose(Z_train, Z_ref, rtol=1e-10, atol=1e-10 * np.abs(Z_ref).max())
    Z_test = cluster_client.compute(est.transform(open_store(path).subset("test").X)).result()
    Z_ref = numpy_transform(name, X[test], X[train], P)
    np.testing.assert_allclose(Z_test, Z_ref, rtol=1e-10, atol=1e-10 * np.abs(Z_ref).max())
    prov = est.training_store_
    assert prov["split"] == "train" and prov["n_docs"] == 90 and prov["features"] == "names"
    assert prov["label_names"] == ["L0", "L1", "L2", "L3"]


@pytest.mark.parametrize("name", ["pca", "mddm_p", "cca"])
def test_an_opened_store_or_its_subset_fits_as_its_path(name, small_store):
    from dmlfe.store import open_store

    path, X, Y, splits = small_store
    train, test = splits == "train", splits == "test"
    store = open_store(path)
    by_path = FACTORIES[name](n_components=2, split="train").fit(path)
    for est in (FACTORIES[name](n_components=2, split="train").fit(store),
                FACTORIES[name](n_components=2).fit(store.subset("train"))):
        assert_same_fit(est, by_path)
        # a Store is embedded as given: its subset's rows, not the fit's split
        Z = est.transform(store.subset("test")).compute()
        np.testing.assert_allclose(Z, by_path.transform(X[test]), rtol=1e-10, atol=1e-12)
        assert Z.shape[0] == int(test.sum())
    reference = FACTORIES[name](n_components=2).fit(X[train], Y[train])
    assert_same_fit(by_path, reference)
    with pytest.raises(ValueError, match="Y must not be given with a store"):
        FACTORIES[name](n_components=2).fit(store, Y)
    with pytest.raises(InputError, match="partial_fit takes in-memory blocks"):
        FACTORIES[name](n_components=2).partial_fit(store)


def test_second_method_reuses_the_statistics(tmp_path):
    X, Xs, Y = sparse_data(n=75)
    splits = np.where(np.arange(75) % 4 == 0, "test", "train")
    path = write_store(tmp_path / "c.zarr", Xs, Y, splits)
    train = splits == "train"
    pca, n1 = count_computes(lambda: PCA(n_components=3, split="train").fit(path))
    assert n1 == 1
    assert not pca.stats_from_cache_ and pca.n_passes_ == 1
    for make in (lambda: CCA(n_components=2, split="train"),
                 lambda: MVMD(n_components=3, beta=0.2, split="train"),
                 lambda: MDDM(variant="f", n_components=2, split="train"),
                 lambda: MDDM(n_components=2, split="train"),
                 lambda: MLSI(n_components=2, split="train")):
        est, n = count_computes(lambda make=make: make().fit(path))
        assert n == 0, type(est).__name__  # no new statistics pass
        assert est.stats_from_cache_ and est.n_passes_ == 0
        assert_same_fit(est, clone(est).set_params(split=None).fit(X[train], Y[train]))
    # another split, no cache, or a statistic the entry lacks (X^T W X): a new pass
    _, n = count_computes(lambda: PCA(n_components=3, split="test").fit(path))
    assert n == 1
    _, n = count_computes(lambda: PCA(n_components=3, split="train", cache=False).fit(path))
    assert n == 1
    _, n = count_computes(lambda: DMLDA(n_components=3, split="train").fit(path))
    assert n == 1
    again, n = count_computes(lambda: DMLDA(n_components=3, split="train").fit(path))
    assert n == 0
    assert_same_fit(again, DMLDA(n_components=3).fit(X[train], Y[train]))
    assert_same_fit(pca, PCA(n_components=3).fit(X[train], Y[train]))


# --------------------------------------------------------------------------- matrix-free


@pytest.mark.parametrize("cls", [PCA, MVMD])
def test_matrix_free_equals_dense_top_k(cls):
    Xs, Y = decaying_data()
    dense = cls(n_components=4).fit(Xs, Y)
    assert dense.solver_ == "eigh"
    explicit = cls(n_components=4, solver="randomized", tol=1e-7).fit(Xs, Y)
    lanczos = cls(n_components=4, solver="lanczos").fit(Xs, Y)
    # the automatic switch: D = 40 > max_dense_features and n = 150 > max_dual_samples,
    # from a dask array
    auto = cls(n_components=4, max_dense_features=20, max_dual_samples=100,
               tol=1e-7).fit(sparse_dask(Xs, 32), Y)
    randomized = {"randomized-subspace", "block-krylov"}
    for est, solvers in ((explicit, randomized), (lanczos, {"lanczos-arpack"}),
                         (auto, randomized)):
        assert est.solver_ in solvers and est.converged_
        assert est.n_passes_ > 1  # the statistics pass plus the solver's passes
        np.testing.assert_allclose(est.eigenvalues_[:4], dense.eigenvalues_[:4], rtol=1e-8)
        assert np.max(sla.subspace_angles(est.components_.T, dense.components_.T)) < 1e-5
        np.testing.assert_allclose(est.components_, dense.components_, atol=1e-5)
        np.testing.assert_allclose(est.mean_, dense.mean_, rtol=1e-12, atol=1e-12)
    Z = auto.transform(sparse_dask(Xs, 32)).compute()
    np.testing.assert_allclose(Z, dense.transform(Xs), rtol=1e-5, atol=1e-5 * np.abs(Z).max())


def test_matrix_free_threshold_picks_the_dense_d():
    Xs, Y = decaying_data()
    dense = PCA(n_components=0.9).fit(Xs, Y)
    free = PCA(n_components=0.9, max_dense_features=20, max_components=25,
               max_dual_samples=100).fit(Xs, Y)
    assert free.solver_ in ("randomized-subspace", "block-krylov")
    assert free.n_components_ == dense.n_components_
    assert 1 < dense.n_components_ < 25


def test_mddm_p_at_large_D_never_forms_D_by_D():
    n, D, q = 300, 300_000, 4
    rng = np.random.default_rng(7)
    nnz = 9000  # sp.random would draw from all n * D positions: slow at this D
    X = sp.csr_matrix((rng.uniform(0.1, 1.0, nnz), (rng.integers(0, n, nnz),
                                                    rng.integers(0, D, nnz))), shape=(n, D))
    Y = (rng.uniform(size=(n, q)) < 0.4).astype(np.uint8)
    # a D x D float64 matrix would be 720 GB: forming one cannot go unnoticed
    est = MDDM(n_components=3, max_dense_features=1000).fit(X, Y)
    assert est.solver_ == "thin_svd" and est.components_.shape == (3, D)
    explicit = MDDM(n_components=3, max_dense_features=1000, solver="dense").fit(X, Y)
    assert explicit.solver_ == "thin_svd"
    from_dask = MDDM(n_components=3, max_dense_features=1000).fit(sparse_dask(X, 100), Y)
    # reference: the thin SVD of Xc^T Yc (mddm eq. 6 with L = Y Y^T), from numpy/scipy
    Yc = Y - Y.mean(axis=0)
    F = np.asarray(X.T @ Yc)
    U, s, _ = np.linalg.svd(F, full_matrices=False)
    for fit in (est, explicit, from_dask):
        np.testing.assert_allclose(fit.eigenvalues_[:3], s[:3] ** 2, rtol=1e-8)
        assert np.max(sla.subspace_angles(fit.components_.T, U[:, :3])) < 1e-8
    np.testing.assert_allclose(from_dask.components_, est.components_, atol=1e-10)
    # CCA needs D x D on the feature route: refused there with the memory figure ...
    with pytest.raises(ValueError, match="max_dense_features"):
        CCA(max_dense_features=1000, route="feature").fit(X, Y)
    # ... while the default route="auto" solves it exactly in the n-dimensional row space
    auto = CCA(n_components=2, max_dense_features=1000).fit(X, Y)
    assert auto.route_ == "dual" and "max_dual_samples" in auto.route_reason_
    assert auto.transform(X[:5]).shape == (5, 2)
    # ... or, with more documents than max_dual_samples, on n x n relation features
    rel = CCA(n_components=2, max_dense_features=1000, max_dual_samples=100).fit(X, Y)
    assert rel.route_ == "relation" and "max_dense_features" in rel.route_reason_


# --------------------------------------------------------------------------- parameters


def test_n_components_int_and_threshold():
    X, _, Y = sparse_data()
    est = MVMD(n_components=3).fit(X, Y)
    assert est.n_components_ == 3 and est.components_.shape == (3, 9)
    assert est.eigenvalues_.shape == (9,) and np.all(np.diff(est.eigenvalues_) <= 0)
    full = MVMD(n_components=1.0).fit(X, Y)
    assert full.n_components_ == full.n_genuine_ == 9
    w = full.eigenvalues_
    t = 0.9
    expected = int(np.argmax(np.cumsum(w) >= t * w.sum())) + 1
    assert MVMD(n_components=t).fit(X, Y).n_components_ == expected < 9
    np.testing.assert_array_equal(est.components_, full.components_[:3])


@pytest.mark.parametrize(("bad", "exc"), [(0, ValueError), (-2, ValueError), (1.5, ValueError),
                                          (0.0, ValueError), (True, TypeError),
                                          ("3", TypeError), (10, ValueError)])
def test_bad_n_components(bad, exc):
    X, _, Y = sparse_data()
    with pytest.raises(exc, match="n_components|d ="):
        PCA(n_components=bad).fit(X, Y)


def test_errors_name_what_is_wrong():
    X, Xs, Y = sparse_data()
    with pytest.raises(ValueError, match="unknown method 'nmf'"):
        make_estimator("nmf")
    with pytest.raises(ValueError, match="needs Y"):
        MDDM().fit(X)
    with pytest.raises(ValueError, match=r"max_dense_features=5 .*raise max_dense_features"):
        CCA(max_dense_features=5, max_dual_samples=5).fit(Xs, Y)
    with pytest.raises(ValueError, match="max_dense_features"):
        PCA(solver="dense", max_dense_features=5).fit(Xs, Y)
    with pytest.raises(ValueError, match="needs the dense solver"):
        MLSI(solver="randomized").fit(Xs, Y)
    with pytest.raises(ValueError, match=r"Y\[0, 0\] = 2\.0$"):
        PCA().fit(X, np.where(np.arange(60)[:, None] == 0, 2, Y))
    with pytest.raises(ValueError, match="solver='qr'"):
        PCA(solver="qr").fit(X, Y)
    with pytest.raises(ValueError, match="MDDM variant must be 'p' or 'f'"):
        MDDM(variant="x").fit(X, Y)
    with pytest.raises(ValueError, match="split= applies only"):
        PCA(split="train").fit(X, Y)
    fitted = PCA(n_components=2).fit(X, Y)
    with pytest.raises(ValueError, match="X has 8 features, but PCA is expecting 9 features"):
        fitted.transform(X[:, :8])
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        PCA().transform(X)


def test_make_estimator_names():
    assert isinstance(make_estimator("mddm"), MDDM) and make_estimator("mddm").variant == "p"
    assert make_estimator("MDDM-f").variant == "f"
    assert make_estimator("mvmd", beta=0.2).beta == 0.2
    for name in ("pca", "lsi", "mddm_p", "mddm_f", "mvmd", "cca", "pls", "opls", "mlsi",
                 "mlda", "dmlda"):
        assert make_estimator(name)._method == name


def test_sklearn_conventions():
    X, _, Y = sparse_data()
    est = MLSI(n_components=3, beta=0.3)
    params = est.get_params()
    assert params["beta"] == 0.3 and params["n_components"] == 3 and params["client"] is None
    twin = clone(est)
    assert twin is not est and twin.get_params() == params
    assert est.set_params(beta=0.7) is est and est.beta == 0.7
    a = est.fit(X, Y)
    b = clone(est).fit(X, Y)
    assert a.components_.shape == (a.n_components_, a.n_features_in_) == (3, 9)
    np.testing.assert_array_equal(a.components_, b.components_)  # deterministic signs
    np.testing.assert_array_equal(a.eigenvalues_, b.eigenvalues_)
    # the sign convention: the largest-magnitude entry of each component is positive
    idx = np.argmax(np.abs(a.components_), axis=1)
    assert np.all(a.components_[np.arange(3), idx] > 0)
    other = MLSI(n_components=3, beta=0.3).fit(X, Y)
    assert not np.allclose(other.eigenvalues_, a.eigenvalues_)
    assert list(a.get_feature_names_out()) == ["mlsi0", "mlsi1", "mlsi2"]
    assert a.method_params_ == {"beta": 0.7, "gamma_x": 0.1, "gamma_xy": 0.1}
    np.testing.assert_allclose(clone(est).fit_transform(X, Y), a.transform(X))


# --------------------------------------------------------------------------- save / load


@pytest.mark.parametrize("make", [
    lambda: PCA(n_components=3),
    lambda: MDDM(n_components=2, label_kernel=np.array(
        [[1.0, 0.5, 0.0, 0.0], [0.5, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.2], [0.0, 0.0, 0.2, 1.0]])),
    lambda: MDDM(variant="f", n_components=0.9, mu=0.3),
    lambda: MLDA(n_components=2),
    lambda: LSI(n_components=2, solver="randomized"),
], ids=["pca", "mddm_kernel", "mddm_f", "mlda", "lsi_randomized"])
def test_save_load_round_trip(make, tmp_path):
    X, Xs, Y = sparse_data()
    est = make().fit(Xs, Y)
    out = est.save(tmp_path / "model")
    assert sorted(p.name for p in out.iterdir()) == ["arrays.npz", "model.json"]
    with np.load(out / "arrays.npz", allow_pickle=False) as z:  # no object arrays inside
        assert set(z.files) >= {"components_", "eigenvalues_", "mean_"}
    meta = json.loads((out / "model.json").read_text())
    assert meta["format_version"] == FORMAT_VERSION and meta["estimator"] == type(est).__name__
    assert meta["method"] == est._method and "client" not in meta["params"]
    back = load_model(out)
    assert type(back) is type(est)
    np.testing.assert_array_equal(back.transform(Xs), est.transform(Xs))
    np.testing.assert_array_equal(back.transform(X), est.transform(X))
    for key in ("components_", "eigenvalues_", "mean_"):
        np.testing.assert_array_equal(getattr(back, key), getattr(est, key))
    for key in ("n_components_", "solver_", "n_passes_", "regularization_", "centred_",
                "n_features_in_", "n_samples_", "n_genuine_", "method_params_", "converged_"):
        assert getattr(back, key) == getattr(est, key), key
    p1, p2 = est.get_params(), back.get_params()
    assert p1.keys() == p2.keys()
    for key in p1:
        np.testing.assert_array_equal(p1[key], p2[key])
    assert back.training_store_ is None


def test_save_refuses_overwrite_and_foreign_folders(tmp_path):
    X, _, Y = sparse_data()
    est = PCA(n_components=2).fit(X, Y)
    est.save(tmp_path / "m")
    with pytest.raises(FileExistsError, match="overwrite"):
        est.save(tmp_path / "m")
    est2 = PCA(n_components=3).fit(X, Y)
    est2.save(tmp_path / "m", overwrite=True)
    assert load_model(tmp_path / "m").n_components_ == 3
    assert [p.name for p in tmp_path.iterdir()] == ["m"]  # no temporary left behind
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError, match="not a dmlfe model"):
        est.save(tmp_path / "data", overwrite=True)
    assert (tmp_path / "data" / "keep.txt").exists()
    with pytest.raises(ValueError, match="not fitted"):
        PCA().save(tmp_path / "unfitted")


def test_load_errors(tmp_path):
    X, _, Y = sparse_data()
    out = PCA(n_components=2).fit(X, Y).save(tmp_path / "m")
    meta = json.loads((out / "model.json").read_text())
    meta["format_version"] = FORMAT_VERSION + 1
    meta["dmlfe_version"] = "99.0"
    (out / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=rf"format version {FORMAT_VERSION + 1} \(written by "
                       r"dmlfe 99.0\).*upgrade dmlfe"):
        load_model(out)
    with pytest.raises(FileNotFoundError, match="no model"):
        load_model(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="model.json is missing"):
        load_model(tmp_path / "empty")
    meta["format_version"] = FORMAT_VERSION
    meta["estimator"] = "Pickled"
    (out / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="estimator 'Pickled' is not one of"):
        load_model(out)


def test_store_model_keeps_its_provenance(small_store, tmp_path):
    path, X, Y, splits = small_store
    est = MVMD(n_components=2, split="train").fit(path)
    back = load_model(est.save(tmp_path / "m"))
    assert back.training_store_ == est.training_store_
    assert back.training_store_["path"] == str(path.resolve())
    assert back.split == "train"
    np.testing.assert_array_equal(back.transform(X), est.transform(X))


# --------------------------------------------------------------------------- float32 components
#: float32 fits of the brief: (estimator factory, its name in numpy_transform).
FLOAT32_FITS = {"pca": lambda **kw: PCA(n_components=4, **kw),
                "mvmd": lambda **kw: MVMD(n_components=4, beta=BETA, **kw)}


def product_spy(monkeypatch) -> list[tuple[np.dtype, np.dtype, tuple[int, ...]]]:
    """Records (block dtype, components dtype, components shape) of every product
    ``block @ P`` that dmlfe.projection.project_block makes (in-memory and dask)."""
    import dmlfe.projection as projection

    seen: list[tuple[np.dtype, np.dtype, tuple[int, ...]]] = []
    real = projection.to_float_block

    class Block:
        def __init__(self, block):
            self.block = block

        def __matmul__(self, P):
            seen.append((self.block.dtype, P.dtype, P.shape))
            return self.block @ P

    monkeypatch.setattr(projection, "to_float_block", lambda xb, *a: Block(real(xb, *a)))
    return seen


@pytest.mark.parametrize("name", sorted(FLOAT32_FITS))
def test_float32_components_are_the_float64_ones_rounded(name):
    X, Xs, Y = sparse_data()
    a = FLOAT32_FITS[name]().fit(Xs, Y)
    b = FLOAT32_FITS[name](components_dtype="float32").fit(Xs, Y)
    assert a.components_dtype == "float64" and a.components_.dtype == np.float64
    assert b.components_.dtype == np.float32 and b.components_.shape == a.components_.shape
    # the float64 solve's components, sign rule included, rounded once
    np.testing.assert_array_equal(b.components_, a.components_.astype(np.float32))
    # laid out as a float64 fit: the transpose of a C-ordered (D, d) array
    assert b.components_.T.flags.c_contiguous and a.components_.T.flags.c_contiguous
    for key in ("eigenvalues_", "mean_"):
        assert getattr(b, key).dtype == np.float64
        np.testing.assert_array_equal(getattr(b, key), getattr(a, key))
    assert (b.n_components_, b.solver_, b.route_) == (a.n_components_, a.solver_, a.route_)


@pytest.mark.parametrize("name", sorted(FLOAT32_FITS))
def test_float32_transform_in_memory_and_on_dask(name, monkeypatch):
    X, Xs, Y = sparse_data(n=90)
    a = FLOAT32_FITS[name]().fit(Xs, Y)
    b = FLOAT32_FITS[name](components_dtype="float32").fit(Xs, Y)
    ref = numpy_transform(name, X, X, a.components_.T)  # float64, numpy only
    tol = 1e-5 * np.abs(ref).max()  # float32 round-off of d-term sums of D products
    seen = product_spy(monkeypatch)
    Z_mem = b.transform(Xs)
    assert isinstance(Z_mem, np.ndarray) and Z_mem.dtype == np.float32
    np.testing.assert_allclose(Z_mem, ref, rtol=0, atol=tol)
    np.testing.assert_allclose(b.transform(X), Z_mem, rtol=0, atol=tol)  # dense input
    Zd = b.transform(sparse_dask(Xs, 25))  # 4 chunks
    assert Zd.dtype == np.float32 and len(Zd.chunks[0]) == 4
    Z_dask = Zd.compute(scheduler="sync")
    assert Z_dask.dtype == np.float32
    np.testing.assert_allclose(Z_dask, ref, rtol=0, atol=tol)
    np.testing.assert_allclose(Z_dask, Z_mem, rtol=0, atol=tol)
    # every product multiplied float32 blocks by the float32 components themselves
    assert len(seen) == 2 + 4
    assert all(blk == P == np.float32 and shape == (9, 4) for blk, P, shape in seen), seen
    # the float64 model's products stay float64
    seen.clear()
    assert a.transform(Xs).dtype == np.float64 and a.transform(sparse_dask(Xs, 25)).dtype \
        == np.float64
    assert seen and all(blk == P == np.float64 for blk, P, _ in seen)


def test_float32_transform_makes_no_float64_copy_of_the_components():
    """The peak of what transform allocates stays well under a D x d float64 array."""
    import tracemalloc

    rng = np.random.default_rng(3)
    n, D, d = 40, 100_000, 10
    Xs = sp.random(n, D, density=5e-4, format="csr", random_state=rng) + sp.csr_matrix(
        (np.ones(n), (np.arange(n), rng.integers(0, 50, n))), shape=(n, D))
    est = PCA(n_components=d, components_dtype="float32").fit(Xs)
    assert est.components_.dtype == np.float32 and est.centred_
    float64_P = D * d * 8
    X_dask = sparse_dask(Xs, 10)
    for run in (lambda: est.transform(Xs), lambda: est.transform(X_dask).compute(
            scheduler="sync")):
        run()  # the first dask compute imports and sets up ~15 MB of its own: not measured
        tracemalloc.start()
        try:
            Z = run()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert Z.dtype == np.float32 and Z.shape == (n, d)
        assert peak < float64_P / 4, (peak, float64_P)


def test_float32_transform_casts_a_large_float64_x_a_slab_at_a_time(monkeypatch):
    """In-memory float64 X is cast to the float32 components' dtype in slabs of rows: what
    transform allocates stays under a float32 copy of X, and Z is the same."""
    import tracemalloc

    from dmlfe import projection

    rng = np.random.default_rng(4)
    n, D, d = 4_000, 2_000, 3
    Xs = sp.random(n, D, density=0.05, format="csr", random_state=rng)
    est = PCA(n_components=d, components_dtype="float32").fit(Xs)
    whole = est.transform(Xs)  # one slab: the block cast at once
    monkeypatch.setattr(projection, "_CAST_ROWS", 500)
    float32_copy = Xs.data.size * 4 + Xs.indices.nbytes + Xs.indptr.nbytes
    est.transform(Xs)
    tracemalloc.start()
    try:
        Z = est.transform(Xs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert Z.dtype == np.float32
    np.testing.assert_allclose(Z, whole, rtol=0, atol=1e-6 * np.abs(whole).max())
    assert peak < float32_copy / 2, (peak, float32_copy)


def test_components_dtype_is_checked_and_float64_by_default():
    X, Xs, Y = sparse_data()
    assert PCA().components_dtype == "float64"
    default = MVMD(n_components=3).fit(Xs, Y)
    explicit = MVMD(n_components=3, components_dtype="float64").fit(Xs, Y)
    np.testing.assert_array_equal(default.components_, explicit.components_)
    assert default.components_.dtype == np.float64
    assert default.transform(Xs).dtype == np.float64
    for bad in ("float16", "f4", np.float32):
        with pytest.raises(ValueError, match=r"MVMD parameter components_dtype="
                           + re.escape(repr(bad)) + r" is not one of \('float64', 'float32'\)"):
            MVMD(components_dtype=bad).fit(Xs, Y)
    assert "components_dtype : {'float64', 'float32'}, default 'float64'" in PCA.__doc__


# --------------------------------------------------------------------------- scene-train

#: mvmd section 7.4 at t = 0.999; parameters of mvmd section 7.2 (the estimators' defaults
#: except MVMD's and MLSI's beta = 0.5 and MDDMf's mu = 0.5, which are defaults too).
SCENE_COUNTS = {
    "pca": 271, "mlsi": 276, "dmlda": 294, "mddm_p": 5, "mddm_f": 6, "cca": 6, "mlda": 5,
    "mvmd": 47,
}


@pytest.fixture(scope="module")
def scene_store(tmp_path_factory, cluster_client):
    from dmlfe.ingestion import ingest

    arff = data_path("mulan", "scene-train.arff")
    xml = data_path("mulan", "scene.xml")
    out = tmp_path_factory.mktemp("scene") / "scene-train.zarr"
    return ingest(arff, format="mulan", labels=str(xml), out=out, chunk_rows=300,
                  client=cluster_client)


@pytest.mark.parametrize(("name", "expected"), sorted(SCENE_COUNTS.items()))
def test_scene_train_counts_through_the_estimators(name, expected, scene_store, cluster_client):
    params = {"mvmd": {"beta": 0.5}, "mddm_f": {"mu": 0.5}}.get(name, {})
    est = make_estimator(name, n_components=0.999, client=cluster_client, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no regularisation beyond the methods' own
        est.fit(scene_store)
    assert est.n_samples_ == 1211 and est.n_features_in_ == 294
    assert est.n_components_ == expected
    assert est.components_.shape == (expected, 294)
    assert est.regularization_ == 0.0


def test_transform_on_a_client_scatters_large_components(cluster_client):
    # the estimator hands its client to the projection: D x d components of 16.8 MB go
    # to the workers as one future, and the embeddings equal the in-memory transform
    from distributed import Future

    X = sp.random(120, 2**18, density=2e-4, random_state=5, format="csr")
    est = PCA(n_components=8, client=cluster_client).fit(X)
    assert est.components_.nbytes > 2**23
    Z = est.transform(sparse_dask(X, 50))
    tasks = dict(Z.__dask_graph__()).values()
    assert any(isinstance(a, Future) for t in tasks for a in getattr(t, "args", ()))
    ref = est.transform(X)
    np.testing.assert_allclose(cluster_client.compute(Z).result(), ref, rtol=1e-10,
                               atol=1e-10 * np.abs(ref).max())


def test_fitting_every_document_of_a_store_with_a_test_split_warns(tmp_path, capsys):
    import dmlfe
    from dmlfe.cli import main

    X, Y = random_data(n=40, D=12, q=3, seed=1)
    splits = ["train"] * 30 + ["test"] * 10
    path = write_store(tmp_path / "s.zarr", sp.csr_matrix(X), Y, splits)
    with pytest.warns(UserWarning, match=r"all 40 documents of store .*its 10 'test' "
                                         r"documents included.*split='train'"):
        dmlfe.PCA(n_components=2).fit(str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dmlfe.PCA(n_components=2, split="train").fit(str(path))
        dmlfe.PCA(n_components=2).fit(dmlfe.open_store(path).subset(["train", "test"]))
        no_test = write_store(tmp_path / "t.zarr", sp.csr_matrix(X), Y, ["train"] * 40)
        dmlfe.PCA(n_components=2).fit(str(no_test))
    assert main(["fit", str(path), "--method", "pca", "--dim", "2", "--out",
                 str(tmp_path / "m"), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "dmlfe fit: warning:" in err
    assert "(--split 'train')" in err
