"""Components kept on the columns the training documents use (dual and matrix-free routes).

The components of a column that no training document uses are exactly zero; the fit
forms and keeps only the others, ``transform`` multiplies only those, and
``components_`` builds the whole d x D array when it is read. Everything is compared
with dense numpy references and with fits that keep every column.
"""

from __future__ import annotations

import json
import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import sparse_dask, write_store

from dmlfe import compute
from dmlfe.compute import SelectColumns
from dmlfe.estimators import make_estimator
from dmlfe.model_io import load_model
from dmlfe.stats.gram import transpose_product
from dmlfe.stats.pass_ import compute_stats
from dmlfe.stats.sufficient import USED_COLUMNS_FRACTION


def _sparse_text(n: int, D: int, used: int, q: int = 3, seed: int = 0):
    """n documents on ``used`` random columns of D (the others empty), and new documents
    that also use columns the first ones never do."""
    rng = np.random.default_rng(seed)
    cols = np.sort(rng.choice(D, size=used, replace=False))
    X = sp.random(n, used, density=0.15, random_state=seed, format="csr")
    X.data = rng.uniform(0.1, 1.0, X.nnz)
    X = sp.csr_matrix((X.data, cols[X.indices], X.indptr), shape=(n, D))
    Y = (rng.uniform(size=(n, q)) < 0.35).astype(np.uint8)
    Y[0] = 1  # no label column is empty
    new = sp.random(7, D, density=0.2, random_state=seed + 1, format="csr")
    new.data = rng.uniform(0.1, 1.0, new.nnz)
    return X, Y, cols, new


def _quiet(est, X, Y=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return est.fit(X, Y)


def _dense_embedding(est, X) -> np.ndarray:
    """(X - mean_) components_^T in numpy, from the whole d x D components."""
    Xd = X.toarray()
    if est.centred_:
        Xd = Xd - est.mean_
    return Xd @ est.components_.T


def test_used_columns_rule():
    X, Y, cols, _ = _sparse_text(40, 300, 120)
    stats = compute_stats(X, Y)
    np.testing.assert_array_equal(stats.used_columns(), np.flatnonzero(X.getnnz(axis=0)))
    assert set(stats.used_columns()) <= set(cols)
    assert stats.used_columns(max_fraction=0.1) is None  # 120 of 300 used: not worth it
    full = compute_stats(sp.csr_matrix(np.ones((5, 10))), Y[:5])
    assert USED_COLUMNS_FRACTION < 1 and full.used_columns() is None
    stats.sumsq_x = None  # statistics cached by an older dmlfe
    assert stats.used_columns() is None


@pytest.mark.parametrize("table", [True, False])
def test_select_columns_drops_other_entries_only_when_asked(table, monkeypatch):
    # a lookup table per feature, or (above SELECT_TABLE_BYTES) a binary search: the same
    if not table:
        monkeypatch.setattr(compute, "SELECT_TABLE_BYTES", 0)
    X, _, _, new = _sparse_text(40, 300, 120)
    cols = np.flatnonzero(X.getnnz(axis=0))
    assert set(np.flatnonzero(new.getnnz(axis=0))) - set(cols)  # the test's premise
    kept = SelectColumns(cols, 300, drop_others=True)(new)
    np.testing.assert_array_equal(kept.toarray(), new.toarray()[:, cols])
    np.testing.assert_array_equal(SelectColumns(cols, 300)(X).toarray(), X.toarray()[:, cols])
    with pytest.raises(ValueError, match="columns the statistics found empty"):
        SelectColumns(cols, 300)(new)
    dense = SelectColumns(cols, 300, drop_others=True)(new.toarray())
    np.testing.assert_array_equal(dense, new.toarray()[:, cols])
    select = SelectColumns(cols, 300)
    select(X)
    assert (select._table is not None) == table
    # the table is not shipped: a pickled copy rebuilds it and selects the same
    copy = pickle.loads(pickle.dumps(select))
    assert copy._table is None
    np.testing.assert_array_equal(copy(X).toarray(), X.toarray()[:, cols])


@pytest.mark.parametrize("lazy", [False, True], ids=["memory", "dask"])
def test_transpose_product_on_the_used_columns(lazy):
    X, _, _, _ = _sparse_text(50, 400, 150)
    cols = np.flatnonzero(X.getnnz(axis=0))
    alpha = np.random.default_rng(3).standard_normal((50, 4))
    ref = X.toarray().T @ alpha
    Xin = sparse_dask(X, 12) if lazy else X
    np.testing.assert_allclose(transpose_product(Xin, alpha, columns=cols), ref[cols],
                               atol=1e-13)
    np.testing.assert_allclose(transpose_product(Xin, alpha), ref, atol=1e-13)


@pytest.mark.parametrize(("method", "d", "params"), [
    ("pca", 5, {"route": "dual"}),
    ("mvmd", 6, {"route": "dual"}),
    ("cca", 3, {"route": "dual"}),
    ("lsi", 4, {"route": "dual"}),
    ("pca", 4, {"route": "feature", "solver": "randomized", "tol": 1e-12}),
    ("mvmd", 5, {"route": "feature", "solver": "randomized", "tol": 1e-12}),
])
def test_fit_keeps_the_used_columns_and_equals_the_dense_route(method, d, params):
    X, Y, _, new = _sparse_text(60, 500, 200)
    used = np.flatnonzero(X.getnnz(axis=0))
    est = _quiet(make_estimator(method, n_components=d, **params), X, Y)
    kept, columns = est._kept_components()
    np.testing.assert_array_equal(columns, used)
    assert kept.shape == (est.n_components_, used.size)
    # what transform gives before components_ is read, for the training documents and
    # for new ones with entries in columns the training documents never use
    Z_train, Z_new = est.transform(X), est.transform(new)
    ref = _quiet(make_estimator(method, n_components=d, route="feature", solver="dense"), X, Y)
    np.testing.assert_allclose(est.eigenvalues_[:d], ref.eigenvalues_[:d], rtol=1e-8)
    full = est.components_  # built here, once, and kept instead
    assert full.shape == (d, 500) and est._kept_components()[1] is None
    assert full is est.components_
    assert not np.any(full[:, np.setdiff1d(np.arange(500), used)])
    np.testing.assert_array_equal(full[:, used], kept)
    cos = np.linalg.svd(np.linalg.qr(full.T)[0].T @ np.linalg.qr(ref.components_.T)[0],
                        compute_uv=False)
    assert cos.min() > 1 - 1e-8
    np.testing.assert_allclose(Z_train, _dense_embedding(est, X), atol=1e-12)
    np.testing.assert_allclose(Z_new, _dense_embedding(est, new), atol=1e-12)
    np.testing.assert_allclose(est.transform(new), Z_new, atol=1e-12)


def test_kept_columns_survive_pickle_save_and_float32(tmp_path):
    X, Y, _, new = _sparse_text(60, 500, 200)
    est = _quiet(make_estimator("mvmd", n_components=4, route="dual"), X, Y)
    clone = pickle.loads(pickle.dumps(est))
    assert clone._kept_components()[1] is not None
    np.testing.assert_array_equal(clone.transform(new), est.transform(new))
    kept, columns = est._kept_components()
    est.save(tmp_path / "m")  # written as kept (format 2): no d x D array is built
    assert est._kept_components()[1] is columns
    with np.load(tmp_path / "m" / "arrays.npz", allow_pickle=False) as z:
        np.testing.assert_array_equal(z["component_columns"], columns)
        np.testing.assert_array_equal(z["components_"], kept)
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    assert meta["format_version"] == 2
    assert meta["arrays"]["components_"] == [4, columns.size] < [4, 500]
    loaded = load_model(tmp_path / "m")
    np.testing.assert_array_equal(loaded._kept_components()[1], columns)
    np.testing.assert_allclose(loaded.transform(new), clone.transform(new), atol=1e-13)
    np.testing.assert_array_equal(loaded.components_, est.components_)
    assert loaded._kept_components()[1] is None  # built on first use, as after a fit
    loaded.save(tmp_path / "whole")  # now d x D: written so, without component_columns
    with np.load(tmp_path / "whole" / "arrays.npz", allow_pickle=False) as z:
        assert "component_columns" not in z.files and z["components_"].shape == (4, 500)
    np.testing.assert_array_equal(load_model(tmp_path / "whole").transform(new),
                                  loaded.transform(new))
    f32 = _quiet(make_estimator("mvmd", n_components=4, route="dual",
                                components_dtype="float32"), X, Y)
    assert f32._kept_components()[0].dtype == np.float32
    assert f32.transform(new).dtype == np.float32
    f32.save(tmp_path / "f32")
    back32 = load_model(tmp_path / "f32")
    assert back32._kept_components()[0].dtype == np.float32
    np.testing.assert_array_equal(back32.transform(new), f32.transform(new))
    np.testing.assert_array_equal(f32.components_, est.components_.astype(np.float32))
    # a pickle from when components_ was a plain attribute
    old = est.__getstate__()
    old["components_"] = est.components_
    del old["_components"], old["_component_columns"]
    restored = type(est).__new__(type(est))
    restored.__setstate__(old)
    np.testing.assert_array_equal(restored.transform(new), loaded.transform(new))
    est.components_ = np.zeros((4, 500))  # the setter keeps a whole d x D array
    assert est._kept_components()[1] is None and not est.transform(new).any()


def test_store_on_the_cluster_keeps_the_used_columns(tmp_path, cluster_client):
    X, Y, _, new = _sparse_text(90, 600, 220, seed=2)
    store = tmp_path / "s.zarr"
    write_store(store, X, Y, ["train"] * X.shape[0], chunk_rows=17)
    mem = _quiet(make_estimator("mvmd", n_components=5, route="dual"), X, Y)
    on_store = _quiet(make_estimator("mvmd", n_components=5, route="dual",
                                     client=cluster_client, cache=False,
                                     max_gather_bytes=0), str(store))
    assert on_store._kept_components()[1] is not None
    Z = on_store.transform(str(store)).compute()  # dask blocks through SelectColumns
    np.testing.assert_allclose(Z, mem.transform(X), atol=1e-12)
    Znew = on_store.transform(sparse_dask(new, 3)).compute()
    np.testing.assert_allclose(Znew, _dense_embedding(mem, new), atol=1e-12)
    np.testing.assert_allclose(on_store.components_, mem.components_, atol=1e-12)


def test_command_line_saves_and_applies_the_kept_columns(tmp_path, cluster_client, capsys):
    from dmlfe.cli import main
    from dmlfe.projection import read_embeddings

    X, Y, cols, _ = _sparse_text(80, 700, 250, seed=4)
    store = tmp_path / "s.zarr"
    write_store(store, X, Y, ["train"] * X.shape[0], chunk_rows=19)
    address = cluster_client.scheduler.address
    model = tmp_path / "model"
    assert main(["fit", str(store), "--method", "mvmd", "--dim", "4", "--route", "dual",
                 "--out", str(model), "--scheduler", address, "--quiet"]) == 0
    with np.load(model / "arrays.npz", allow_pickle=False) as z:
        np.testing.assert_array_equal(z["component_columns"], cols)
        assert z["components_"].shape == (4, cols.size)
    emb = tmp_path / "emb.zarr"
    assert main(["transform", str(model), str(store), "--out", str(emb), "--scheduler",
                 address, "--quiet"]) == 0
    capsys.readouterr()
    mem = _quiet(make_estimator("mvmd", n_components=4, route="dual"), X, Y)
    np.testing.assert_allclose(read_embeddings(emb), _dense_embedding(mem, X), atol=1e-10)
