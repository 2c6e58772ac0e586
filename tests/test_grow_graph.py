"""Issue 34, the graph methods after an append: the exact K-NN graph saved for the store
before the append is extended by the appended rows (:func:`dmlfe.graph.knn.extend_graph`),
never computing an old x old distance again, and equals the exact graph searched from
scratch on a store ingested from all documents at once, ties included.

References: a dense numpy K-NN (integer counts, so every distance is exact and the
(distance, index) order has a single answer), the exact search on the ``whole`` store,
and fresh fits on it (:func:`test_append_exact.assert_same_fit`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import sparse_dask
from test_append_exact import assert_same_fit
from test_incremental_stats import APPEND, _docs, _write, grown_and_whole

import dmlfe
from dmlfe.graph import knn
from dmlfe.store import open_store

K = 7


def numpy_knn(X: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(squared distances, indices) of the k nearest other rows, by (distance, index)."""
    D2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(axis=2)
    np.fill_diagonal(D2, np.inf)
    order = np.array([np.lexsort((np.arange(len(row)), row))[:k] for row in D2])
    return np.take_along_axis(D2, order, axis=1), order


def tied_counts(seed: int = 0) -> sp.csr_matrix:
    """Small integer counts with exact duplicate rows: many equal distances."""
    rng = np.random.default_rng(seed)
    A = (rng.random((50, 12)) < 0.25) * rng.integers(1, 3, (50, 12))
    A = np.vstack([A, A[[0, 3, 3, 17]], A[40:44]]).astype(np.float64)
    return sp.csr_matrix(A)


@pytest.mark.parametrize("n_old", [8, 30, 50, 55, 58])
def test_extend_graph_equals_a_fresh_search_with_ties(n_old) -> None:
    X = tied_counts()
    n = X.shape[0]
    old = knn.knn_graph(X[:n_old], K, method="exact")
    grown = knn.extend_graph(old, X)
    d_ref, i_ref = numpy_knn(X.toarray(), K)
    np.testing.assert_array_equal(grown.indices, i_ref)
    np.testing.assert_array_equal(grown.sq_distances, d_ref)
    np.testing.assert_array_equal(grown.sq_norms, (X.toarray() ** 2).sum(axis=1))
    m = n - n_old
    assert grown.n_distances == m * (2 * n_old + m) < n * n
    # the same from row blocks of a dask array (the store's form), blocks straddling
    # the old/new boundary
    Xd = sparse_dask(X, 9)
    blocked = knn.extend_graph(knn.knn_graph(Xd[:n_old], K, method="exact"), Xd)
    np.testing.assert_array_equal(blocked.indices, i_ref)
    np.testing.assert_array_equal(blocked.sq_distances, grown.sq_distances)


def test_extension_computes_no_old_by_old_distance(monkeypatch) -> None:
    X = tied_counts(1)
    n_old = 37
    old = knn.knn_graph(sparse_dask(X[:n_old], 8), K, method="exact")
    pairs: list[tuple[np.ndarray, int, int]] = []
    inner = knn._pair_candidates

    def spy(xb, xc, rows_b, start_c, k):
        pairs.append((np.asarray(rows_b), int(start_c), int(xc.shape[0])))
        return inner(xb, xc, rows_b, start_c, k)

    monkeypatch.setattr(knn, "_pair_candidates", spy)
    grown = knn.extend_graph(old, sparse_dask(X, 8))
    computed = 0
    for rows_b, start_c, size_c in pairs:
        old_query = rows_b.size and rows_b.max() < n_old
        assert not (old_query and start_c + size_c <= n_old), (rows_b, start_c, size_c)
        assert rows_b.min() >= n_old or start_c >= n_old  # one side is appended rows
        computed += rows_b.size * size_c
    assert computed == grown.n_distances == (X.shape[0] - n_old) * (X.shape[0] + n_old)
    np.testing.assert_array_equal(grown.indices, numpy_knn(X.toarray(), K)[1])


def test_extend_graph_refuses_what_it_cannot_extend() -> None:
    X = tied_counts()
    old = knn.knn_graph(X[:20], K, method="exact")
    with pytest.raises(ValueError, match="covers 20 rows but X has only 10"):
        knn.extend_graph(old, X[:10])
    from dataclasses import replace
    with pytest.raises(ValueError, match="approximate"):
        knn.extend_graph(replace(old, exact=False), X)
    same = knn.extend_graph(old, X[:20])
    assert same.n_distances == 0 and not same.from_cache
    np.testing.assert_array_equal(same.indices, old.indices)


def _same_x(grown: Path, whole: Path, split=None, whole_split=None) -> np.ndarray:
    g, w = open_store(grown), open_store(whole)
    if split is not None:
        g, w = g.subset(split), w.subset(whole_split)
    Xg, Xw = g.X.compute(), w.X.compute()
    assert (Xg != Xw).nnz == 0  # the same rows, to the last bit: the graphs can be equal
    return Xw.toarray()


def test_graph_methods_after_an_append_on_a_cluster(tmp_path, cluster_client,
                                                    monkeypatch) -> None:
    grown, whole, new = grown_and_whole(tmp_path)
    kw = dict(n_components=2, client=cluster_client)
    dmlfe.LPP(**kw).fit(str(grown))
    dmlfe.MOPE(**kw).fit(str(grown))
    dmlfe.append(grown, new, client=cluster_client, **APPEND)
    X = _same_x(grown, whole)

    fresh_search = knn.knn_graph
    extended: list[knn.KNNGraph] = []
    extend = knn.extend_graph

    def record(*args, **kwargs):
        extended.append(extend(*args, **kwargs))
        return extended[-1]

    def no_search(*args, **kwargs):
        raise AssertionError("the K-NN graph was searched from scratch after the append")

    monkeypatch.setattr(knn, "knn_graph", no_search)
    monkeypatch.setattr(knn, "extend_graph", record)
    lpp = dmlfe.LPP(**kw).fit(str(grown))
    mope = dmlfe.MOPE(**kw).fit(str(grown))  # the same K: the extended graph, saved
    assert len(extended) == 1
    g = extended[0]
    n_old, n = 190, 255
    assert g.n == n and g.n_distances == (n - n_old) * (n + n_old) < n * n

    reference = fresh_search(open_store(whole).X, K, method="exact", client=cluster_client)
    np.testing.assert_array_equal(g.indices, reference.indices)
    np.testing.assert_array_equal(g.sq_distances, reference.sq_distances)
    np.testing.assert_array_equal(g.sq_norms, reference.sq_norms)
    saved = knn.load_or_compute_graph(open_store(grown), K, client=cluster_client)
    assert saved.from_cache and saved.n_distances == 0
    np.testing.assert_array_equal(saved.indices, reference.indices)

    monkeypatch.setattr(knn, "knn_graph", fresh_search)
    for refit, cls in ((lpp, dmlfe.LPP), (mope, dmlfe.MOPE)):
        fresh = cls(cache=False, **kw).fit(str(whole))
        assert_same_fit(refit, fresh, X, f"{cls.__name__} after an append")


def test_duplicate_documents_appended_to_a_view(tmp_path, monkeypatch) -> None:
    """Appended copies of stored documents (distance 0, and ties at every distance the
    originals have): the training view's extended graph picks the same neighbours as
    the search on a store of all documents."""
    first = _docs(5, 60, 0, "train") + _docs(6, 10, 60, "test")
    copies = [{**d, "id": f"c{k}"} for k, d in enumerate(first[:12] + first[30:33])]
    more = copies + _docs(7, 8, 100, "train")
    opts = dict(chunk_rows=16, vectorizer="hashing", n_features=256, fit_split="train",
                **APPEND)
    grown = dmlfe.ingest(_write(tmp_path / "a.jsonl", first), "jsonl", tmp_path / "g.zarr",
                         **opts)
    # the idf from the same documents as grown's (see grown_and_whole)
    marked = [{**d, "split": "first"} if d["split"] == "train" else d for d in first]
    whole = dmlfe.ingest(_write(tmp_path / "ab.jsonl", marked + more), "jsonl",
                         tmp_path / "w.zarr", **{**opts, "fit_split": "first"})
    both = ["first", "train"]
    dmlfe.LPP(n_components=2, split="train").fit(str(grown))
    dmlfe.append(grown, _write(tmp_path / "b.jsonl", more), **APPEND)
    X = _same_x(grown, whole, "train", both)

    def no_search(*args, **kwargs):
        raise AssertionError("searched from scratch")

    fresh_search = knn.knn_graph
    monkeypatch.setattr(knn, "knn_graph", no_search)
    g = knn.load_or_compute_graph(open_store(grown).subset("train"), K)
    assert not g.from_cache and g.n_distances == 23 * (2 * 60 + 23)
    reference = fresh_search(open_store(whole).subset(both).X, K, method="exact")
    np.testing.assert_array_equal(g.indices, reference.indices)
    np.testing.assert_array_equal(g.sq_distances, reference.sq_distances)
    assert (g.sq_distances[60:72, 0] == 0.0).all()  # each copy finds its original
    refit = dmlfe.LPP(n_components=2, split="train").fit(str(grown))  # the saved graph
    monkeypatch.setattr(knn, "knn_graph", fresh_search)
    fresh = dmlfe.LPP(n_components=2, split=both, cache=False).fit(str(whole))
    assert_same_fit(refit, fresh, X, "LPP with duplicates appended")


def test_approximate_graph_is_searched_again_and_says_so(tmp_path, caplog) -> None:
    pytest.importorskip("pynndescent")
    grown, _, new = grown_and_whole(tmp_path)
    before = knn.load_or_compute_graph(open_store(grown), K, method="approximate")
    assert not before.exact
    dmlfe.append(grown, new, **APPEND)
    with caplog.at_level(logging.INFO, logger="dmlfe.graph.knn"):
        after = knn.load_or_compute_graph(open_store(grown), K, method="approximate")
    assert after.n == 255 and not after.exact and after.n_passes == 3
    assert "searched again from all rows after an append" in caplog.text


def test_a_saved_graph_of_other_rows_is_not_extended(tmp_path) -> None:
    """A damaged record naming fewer rows than the view held before the append: warned
    about and searched again (not extended into a wrong graph)."""
    grown, _, new = grown_and_whole(tmp_path)
    knn.load_or_compute_graph(open_store(grown), K)
    directory = knn.graph_dir_for(grown)
    (npz,) = directory.glob("*.npz")
    with np.load(npz) as z:
        arrays = {name: z[name][:100] for name in z.files}
    np.savez(npz, **arrays)
    rec = npz.with_suffix(".json")
    meta = json.loads(rec.read_text())
    meta["sha256"] = knn.arrays_digest(arrays)
    rec.write_text(json.dumps(meta))
    dmlfe.append(grown, new, **APPEND)
    with pytest.warns(RuntimeWarning, match="covers 100 documents but the view holds 190"):
        g = knn.load_or_compute_graph(open_store(grown), K)
    assert g.n == 255 and g.n_distances == 255 * 255
