"""Fits with more labels than the dense label statistics allow (issue 47).

Above :data:`dmlfe.stats.sufficient.MAX_DENSE_LABELS` the statistics keep X^T Y and
Y^T Y sparse, MDDMp / MVMD / PLS are solved on the label-operator route, CCA, OPLS,
MLSI, MLDA and DMLDA build their dense templates from the sparse label statistics, and
every other supervised method refuses before any pass. The tests lower the limit so that small
data take those paths, and check them against dense numpy / scipy references written
here.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
from dask.callbacks import Callback

import dmlfe
from dmlfe.errors import InputError
from dmlfe.relation.prototypes import label_set_groups
from dmlfe.stats import sufficient
from dmlfe.stats.pass_ import compute_stats


def _data(n: int = 240, D: int = 300, q: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, D, density=0.04, format="csr", random_state=seed)
    X.data = 1.0 + rng.random(X.nnz)
    Y = (rng.random((n, q)) < 0.08).astype(np.uint8)
    Y[np.arange(n), rng.integers(0, q, n)] = 1  # every document has a label
    return X, Y


@pytest.fixture
def few_dense_labels(monkeypatch):
    """Labels above 5 count as many: the sparse label paths on small data."""
    monkeypatch.setattr(sufficient, "MAX_DENSE_LABELS", 5)


def _reference_pairs(X, Y, c: float, g: float) -> tuple[np.ndarray, np.ndarray]:
    """A = c Xc^T Xc + g Xc^T Yc Yc^T Xc by numpy, its eigenpairs by scipy, descending."""
    Xc = X.toarray() - X.toarray().mean(axis=0)
    Yc = Y - Y.mean(axis=0)
    A = c * Xc.T @ Xc + g * (Xc.T @ Yc) @ (Yc.T @ Xc)
    w, V = sla.eigh(A)
    return w[::-1], V[:, ::-1]


def test_sparse_label_statistics_equal_the_dense_ones():
    X, Y = _data()
    dense = compute_stats(X, Y, sparse_labels=False)
    sparse = compute_stats(X, sp.csr_matrix(Y), sparse_labels=True)
    assert sparse.sparse_labels and not dense.sparse_labels
    assert sp.issparse(sparse.xty) and sp.issparse(sparse.yty)
    np.testing.assert_array_equal(sparse.xty.toarray(), dense.xty)
    np.testing.assert_array_equal(sparse.yty.toarray(), dense.yty)
    np.testing.assert_array_equal(sparse.sum_y, dense.sum_y)
    np.testing.assert_array_equal(sparse.sum_x, dense.sum_x)
    # merged statistics of two halves stay sparse and equal the whole
    halves = compute_stats(X[:100], sp.csr_matrix(Y[:100]), sparse_labels=True) + \
        compute_stats(X[100:], sp.csr_matrix(Y[100:]), sparse_labels=True)
    assert sp.issparse(halves.yty)
    np.testing.assert_allclose(halves.xty.toarray(), dense.xty, rtol=1e-14, atol=1e-12)
    np.testing.assert_allclose(halves.yty.toarray(), dense.yty, rtol=0, atol=0)


def test_dense_label_matrices_are_refused_with_their_size():
    X, Y = _data()
    stats = compute_stats(X, sp.csr_matrix(Y), sparse_labels=True)
    with pytest.raises(ValueError, match=r"MAX_DENSE_LABELS.*GiB"):
        stats.centred_yty()
    with pytest.raises(ValueError, match="Xc\\^T Yc"):
        stats.centred_xty()


def test_sparse_label_pass_on_a_local_cluster(cluster_client):
    X, Y = _data(n=400)
    Xd = da.from_array(X, chunks=(64, X.shape[1]), asarray=False)
    Yd = da.from_array(sp.csr_matrix(Y), chunks=(64, Y.shape[1]), asarray=False)
    got = compute_stats(Xd, Yd, client=cluster_client, sparse_labels=True)
    want = compute_stats(X, Y, sparse_labels=False)
    assert sp.issparse(got.yty)
    # X^T Y stays sparse while that is the smaller form (here the sum is dense enough)
    xty = got.xty.toarray() if sp.issparse(got.xty) else got.xty
    np.testing.assert_allclose(xty, want.xty, rtol=1e-13, atol=1e-12)
    np.testing.assert_array_equal(got.yty.toarray(), want.yty)


@pytest.mark.parametrize("name, kw, c, g", [
    ("MDDM", {}, 0.0, 1.0),
    ("PLS", {}, 0.0, 1.0),
    ("MVMD", {"beta": 0.3}, 0.7, 4 * 0.3),
])
@pytest.mark.parametrize("shape, d", [((240, 300, 40), 6), ((240, 30, 60), 6),
                                      ((240, 300, 40), 21)])
def test_label_operator_route_equals_the_dense_reference(few_dense_labels, name, kw, c, g,
                                                         shape, d):
    # (240, 30, 60): more labels than features, so MDDMp's pairs are found in the
    # feature space; (240, 300, 40): in the stacked space, whose components are made
    # 16 columns at a time (d = 21: two slabs)
    X, Y = _data(*shape)
    model = getattr(dmlfe, name)(n_components=d, tol=1e-12, **kw).fit(X, sp.csr_matrix(Y))
    assert model.solver_ == "label-operator-lanczos"
    assert model.converged_
    w, V = _reference_pairs(X, Y.astype(float), c, g)
    np.testing.assert_allclose(model.eigenvalues_[:d], w[:d], rtol=1e-10)
    P = model.components_.T  # D x d
    # the same subspace, column by column (distinct eigenvalues): |cos| = 1
    np.testing.assert_allclose(np.abs(np.sum(P * V[:, :d], axis=0)), 1.0, atol=1e-8)
    np.testing.assert_allclose(P.T @ P, np.eye(d), atol=1e-10)


def test_label_operator_threshold_matches_the_dense_path(few_dense_labels, monkeypatch):
    X, Y = _data()
    sparse_fit = dmlfe.MVMD(n_components=0.6, tol=1e-12).fit(X, sp.csr_matrix(Y))
    monkeypatch.setattr(sufficient, "MAX_DENSE_LABELS", 2048)
    dense_fit = dmlfe.MVMD(n_components=0.6).fit(X, Y)
    assert sparse_fit.solver_ == "label-operator-lanczos"
    assert sparse_fit.n_components_ == dense_fit.n_components_
    k = dense_fit.n_components_
    np.testing.assert_allclose(sparse_fit.eigenvalues_[:k], dense_fit.eigenvalues_[:k],
                               rtol=1e-10)


def test_cca_with_a_sparse_label_side_equals_the_dense_template(few_dense_labels):
    from dmlfe.methods.cca import cca

    X, Y = _data(D=120)
    sparse_t = cca(compute_stats(X, sp.csr_matrix(Y), need_xtx=True, sparse_labels=True))
    dense_t = cca(compute_stats(X, Y, need_xtx=True, sparse_labels=False))
    # the reference of mvmd eq. 40 written out in numpy
    Xc = X.toarray() - X.toarray().mean(axis=0)
    Yc = Y - Y.mean(axis=0)
    A = Xc.T @ Yc @ np.linalg.inv(Yc.T @ Yc + 0.1 * np.eye(Y.shape[1])) @ Yc.T @ Xc
    np.testing.assert_allclose(sparse_t.A, A, rtol=1e-10, atol=1e-10 * np.abs(A).max())
    np.testing.assert_allclose(sparse_t.A, dense_t.A, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(sparse_t.B, dense_t.B)
    model = dmlfe.CCA(n_components=4).fit(X, sp.csr_matrix(Y))
    w = sla.eigh(A, Xc.T @ Xc + 0.1 * np.eye(X.shape[1]), eigvals_only=True)[::-1]
    np.testing.assert_allclose(model.eigenvalues_[:4], w[:4], rtol=1e-10)


class _CountComputes(Callback):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def _start(self, dsk) -> None:
        self.count += 1


@pytest.mark.parametrize("name, kw", [("MDDM", {"label_kernel": "rbf"}),
                                      ("MDDM", {"variant": "f"}), ("MOPE", {}),
                                      ("HSL", {}), ("KernelMDDM", {})])
def test_methods_without_a_sparse_label_path_refuse_before_any_pass(few_dense_labels, name, kw):
    X, Y = _data()
    Xd = da.from_array(X, chunks=(64, X.shape[1]), asarray=False)
    Yd = da.from_array(Y, chunks=(64, Y.shape[1]))
    counter = _CountComputes()
    with counter, dask.config.set(scheduler="sync"), \
            pytest.raises(InputError, match=r"cannot fit q = 40 labels.*MAX_DENSE_LABELS = 5"
                                            r".*GiB"):
        getattr(dmlfe, name)(n_components=3, **kw).fit(Xd, Yd)
    assert counter.count == 0


def test_label_operator_refuses_another_solver(few_dense_labels):
    X, Y = _data()
    with pytest.raises(InputError, match="label-operator route"):
        dmlfe.MDDM(n_components=3, solver="randomized").fit(X, sp.csr_matrix(Y))


def test_wide_sparse_labels_stay_sparse_and_are_checked(few_dense_labels):
    X, Y = _data()
    bad = sp.csr_matrix(Y).astype(np.float64)
    bad.data[7] = 2.0
    r = int(np.searchsorted(bad.indptr, 7, side="right") - 1)
    with pytest.raises(ValueError, match=rf"Y\[{r}, {int(bad.indices[7])}\] = 2.0"):
        dmlfe.MDDM(n_components=3).fit(X, bad)


def test_label_set_groups_order_is_numpys():
    rng = np.random.default_rng(5)
    for _ in range(10):
        Y = (rng.random((200, 7)) < 0.3).astype(np.uint8)
        _, inverse, counts = np.unique(Y != 0, axis=0, return_inverse=True, return_counts=True)
        got_inverse, got_counts = label_set_groups(sp.csr_matrix(Y))
        np.testing.assert_array_equal(got_inverse, inverse.ravel())
        np.testing.assert_array_equal(got_counts, counts)


def test_pca_ignores_many_labels(few_dense_labels):
    X, Y = _data()
    with_labels = dmlfe.PCA(n_components=4).fit(X, sp.csr_matrix(Y))
    Xc = X.toarray() - X.toarray().mean(axis=0)
    w = np.linalg.eigvalsh(Xc.T @ Xc)[::-1]
    np.testing.assert_allclose(with_labels.eigenvalues_[:4], w[:4], rtol=1e-10)


def test_a_wide_x_t_y_sends_operator_methods_to_the_label_operator(monkeypatch):
    # 40 labels (below MAX_DENSE_LABELS), but a dense D x q X^T Y above the byte limit:
    # MDDMp and MVMD take the label-operator route, the other methods their dense path
    X, Y = _data()
    monkeypatch.setattr(sufficient, "MAX_DENSE_LABEL_BYTES", 8 * X.shape[1] * 39)
    model = dmlfe.MVMD(n_components=4, tol=1e-12).fit(X, Y)
    assert model.solver_ == "label-operator-lanczos"
    assert "MAX_DENSE_LABEL_BYTES" in model.route_reason_
    w, _ = _reference_pairs(X, Y.astype(float), 0.5, 2.0)
    np.testing.assert_allclose(model.eigenvalues_[:4], w[:4], rtol=1e-10)
    assert dmlfe.MLSI(n_components=4).fit(X, Y).solver_ != "label-operator-lanczos"


def test_cca_label_rank_is_cca_on_the_leading_label_directions(few_dense_labels):
    import importlib

    cca_module = importlib.import_module("dmlfe.methods.cca")
    X, Y = _data(D=120)
    t = cca_module.cca(compute_stats(X, sp.csr_matrix(Y), need_xtx=True, sparse_labels=True),
                       label_rank=10)
    # the reference: numpy's eigenpairs of Yc^T Yc, the 10 leading ones
    Xc = X.toarray() - X.toarray().mean(axis=0)
    Yc = Y - Y.mean(axis=0)
    w, V = np.linalg.eigh(Yc.T @ Yc)
    w, V = w[::-1][:10], V[:, ::-1][:, :10]
    T = Xc.T @ Yc @ V
    A = T @ np.diag(1.0 / (w + 0.1)) @ T.T
    np.testing.assert_allclose(t.A, A, rtol=1e-7, atol=1e-7 * np.abs(A).max())
    assert "10 leading principal directions" in t.notes[0]


def test_cca_label_rank_is_an_estimator_parameter(few_dense_labels):
    X, Y = _data(D=120)
    model = dmlfe.CCA(n_components=3, label_rank=10).fit(X, sp.csr_matrix(Y))
    assert model.get_params()["label_rank"] == 10
    assert "its 10 leading principal directions of q = 40" in model.route_reason_
    with pytest.raises(ValueError, match="label_rank=0"):
        dmlfe.CCA(n_components=3, label_rank=0).fit(X, sp.csr_matrix(Y))


@pytest.mark.parametrize("solver", ["dense", "randomized"])
def test_pca_of_a_store_with_many_labels_reads_no_label_column(few_dense_labels, tmp_path,
                                                               cluster_client, solver):
    # an unsupervised fit of a store with many labels computes no X^T Y or Y^T Y (D x q,
    # q x q); its statistics are cached apart from the labelled ones
    from tests.helpers import write_store

    X, Y = _data(n=240, D=300, q=40)
    path = tmp_path / "s.zarr"
    write_store(path, X, sp.csr_matrix(Y), ["train"] * 240, chunk_rows=50)
    ref = dmlfe.PCA(n_components=4, solver="dense").fit(X)
    fits = [dmlfe.PCA(n_components=4, solver=solver, tol=1e-12).fit(str(path))
            for _ in range(2)]
    for model in fits:
        np.testing.assert_allclose(model.eigenvalues_[:4], ref.eigenvalues_[:4], rtol=1e-9)
    assert fits[1].stats_from_cache_
    import json

    records = [json.loads(f.read_text()) for f in (tmp_path / "s.zarr.stats").glob("*.json")]
    assert records and all(r["n_labels"] == 0 for r in records)
    from dmlfe.stats.cache import load_or_compute_stats

    # the store's labelled statistics are not the ones PCA saved
    labelled = load_or_compute_stats(str(path), cache=False)
    assert labelled.n_labels == 40
    mvmd = dmlfe.MVMD(n_components=3, tol=1e-12).fit(str(path))
    w, _ = _reference_pairs(X, Y.astype(float), 0.5, 2.0)
    np.testing.assert_allclose(mvmd.eigenvalues_[:3], w[:3], rtol=1e-10)


@pytest.mark.parametrize("label_rank", [10, 40])
def test_opls_with_a_sparse_label_side_is_opls_on_the_leading_label_directions(
        few_dense_labels, label_rank):
    X, Y = _data(D=120)
    Xc = X.toarray() - X.toarray().mean(axis=0)
    Yc = Y - Y.mean(axis=0)
    w, V = np.linalg.eigh(Yc.T @ Yc)
    V = V[:, ::-1][:, :label_rank]
    # mope section 2.2.2 with Yc replaced by Yc V_r (r = q = 40: V V^T = I, so this is
    # the dense labels' OPLS itself)
    A = Xc.T @ Yc @ V @ V.T @ Yc.T @ Xc
    B = Xc.T @ Xc + 0.1 * np.eye(X.shape[1])
    ref = sla.eigh(A, B, eigvals_only=True)[::-1]
    model = dmlfe.OPLS(n_components=4, gamma_x=0.1, label_rank=label_rank).fit(
        X, sp.csr_matrix(Y))
    np.testing.assert_allclose(model.eigenvalues_[:4], ref[:4], rtol=1e-10)


@pytest.mark.parametrize("label_rank", [10, 40])
def test_mlsi_with_a_sparse_label_side_is_mlsi_on_the_leading_label_directions(
        few_dense_labels, label_rank):
    X, Y = _data(n=90, D=60)
    Xc = X.toarray() - X.toarray().mean(axis=0)
    Yc = Y - Y.mean(axis=0)
    w, V = np.linalg.eigh(Yc.T @ Yc)
    L = Yc @ V[:, ::-1][:, :label_rank]  # r = q = 40: L L^T = Yc Yc^T
    beta, gx, gxy = 0.5, 0.1, 0.1
    # mvmd eq. 39 written out with n x n matrices
    M = (1 - beta) * Xc @ Xc.T + beta * L @ L.T + gxy * np.eye(len(Xc))
    B = Xc.T @ np.linalg.solve(M, Xc) + gx * np.eye(X.shape[1])
    ref = sla.eigh(Xc.T @ Xc, B, eigvals_only=True)[::-1]
    model = dmlfe.MLSI(n_components=4, label_rank=label_rank).fit(X, sp.csr_matrix(Y))
    np.testing.assert_allclose(model.eigenvalues_[:4], ref[:4], rtol=1e-9)
    assert f"its {min(label_rank, 40)} leading principal directions" in model.route_reason_


def test_mlda_label_map_factors_the_weighted_labels():
    from dmlfe.methods.mlda import RowNormalisedLabels, label_correlation, mlda_weighted_labels

    X, Y = _data(q=12)
    Y[:3] = 0  # documents without labels: zero rows of R and Y', weight 0
    yty = (Y.T.astype(float) @ Y)
    C = label_correlation(sp.csr_matrix(yty))
    assert sp.issparse(C)
    np.testing.assert_allclose(C.toarray(), label_correlation(yty), rtol=1e-15, atol=0)
    R, w = RowNormalisedLabels(C).sparse_block(sp.csr_matrix(Y))
    Yw = mlda_weighted_labels(Y, label_correlation(yty))
    np.testing.assert_allclose((R @ C).toarray(), Yw, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(w, Yw.sum(axis=1), rtol=1e-14, atol=1e-15)
    assert R.nnz == np.count_nonzero(Y)


@pytest.mark.parametrize("name", ["mlda", "dmlda"])
def test_mlda_and_dmlda_with_a_sparse_label_side_are_the_papers_pencil(few_dense_labels, name):
    from test_methods import ref_problem, ref_solve

    X, Y = _data(n=240, D=50)
    model = getattr(dmlfe, name.upper())(n_components=5, gamma_xy=0.1).fit(
        X, sp.csr_matrix(Y))
    assert model.route_ == "feature"
    A, B = ref_problem(name, X.toarray(), Y.astype(float))  # mvmd eq. 41-47 in n x n
    w, _ = ref_solve(A, B)
    np.testing.assert_allclose(model.eigenvalues_[:5], w[:5], rtol=1e-10)
    P = model.components_[:5].T
    np.testing.assert_allclose(P.T @ B @ P, np.eye(5), atol=1e-9)


@pytest.mark.parametrize("name", ["MLDA", "DMLDA"])
def test_mlda_and_dmlda_of_a_store_with_many_labels_on_the_relation_route(
        few_dense_labels, tmp_path, cluster_client, monkeypatch, name):
    from tests.helpers import write_store

    X, Y = _data(n=300, D=400, q=40, seed=2)
    Y[:4] = 0
    path = tmp_path / "s.zarr"
    write_store(path, X, sp.csr_matrix(Y), ["train"] * 300, chunk_rows=64)
    kw = dict(n_components=4, route="relation", n_prototypes=60, gamma_xy=0.1)
    sparse_fit = getattr(dmlfe, name)(**kw).fit(str(path))
    monkeypatch.setattr(sufficient, "MAX_DENSE_LABELS", 2048)
    dense_fit = getattr(dmlfe, name)(**kw).fit(str(path))
    assert sparse_fit.route_ == dense_fit.route_ == "relation"
    top = abs(dense_fit.eigenvalues_[0])  # S_b has rank < q: the rest is round-off
    np.testing.assert_allclose(sparse_fit.eigenvalues_, dense_fit.eigenvalues_, rtol=1e-10,
                               atol=1e-10 * top)
    np.testing.assert_allclose(np.abs(sparse_fit.transform(X)),
                               np.abs(dense_fit.transform(X)), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("name", ["MLDA", "CCA"])
def test_a_dense_relation_label_product_above_the_limit_is_refused_before_the_pass(
        few_dense_labels, monkeypatch, name):
    from dmlfe.methods import label_space

    X, Y = _data(n=300, D=400, q=40)
    monkeypatch.setattr(label_space, "MAX_LABEL_PRODUCT_BYTES", 8 * 60 * 40 - 1)
    Xd = da.from_array(X, chunks=(64, X.shape[1]), asarray=False)
    Yd = da.from_array(sp.csr_matrix(Y), chunks=(64, Y.shape[1]), asarray=False)
    counter = _CountComputes()
    with counter, dask.config.set(scheduler="sync"), \
            pytest.raises(InputError, match=r"p x q X\^T Y.*p = 60 prototypes and q = 40 "
                                            r"labels.*n_prototypes <= 59"):
        getattr(dmlfe, name)(n_components=3, route="relation", n_prototypes=60).fit(Xd, Yd)
    assert counter.count == 0
