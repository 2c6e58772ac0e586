"""Statistics of hashed text touch few of D features: centring, in-place addition, the
thin SVD and the statistics cache work on the used features' rows only, and must give
exactly what the whole arrays give.

References: the same operations written out on the whole dense arrays with numpy/scipy.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp

import dmlfe
from dmlfe.solvers.dense import thin_svd
from dmlfe.solvers.result import flip_signs
from dmlfe.stats.cache import load_stats, save_stats, stats_key
from dmlfe.stats.pass_ import compute_stats
from dmlfe.stats.sufficient import SufficientStats
from dmlfe.store import open_store

D = 4096


def _sparse_stats(seed: int, n: int = 60, used: int = 200) -> tuple[SufficientStats, np.ndarray]:
    """Raw sums of a random X that uses ``used`` of D columns, with numpy; and X."""
    rng = np.random.default_rng(seed)
    cols = rng.choice(D, size=used, replace=False)
    X = np.zeros((n, D))
    X[:, cols] = rng.random((n, used)) * (rng.random((n, used)) < 0.3)
    Y = (rng.random((n, 5)) < 0.4).astype(float)
    stats = SufficientStats(n=n, sum_x=X.sum(0), sum_y=Y.sum(0), xty=X.T @ Y, yty=Y.T @ Y,
                            xtx=X.T @ X, sumsq_x=(X * X).sum(0))
    return stats, X


def test_in_place_addition_on_used_rows_equals_the_whole_addition() -> None:
    a, _ = _sparse_stats(1)
    b, _ = _sparse_stats(2)
    whole = {k: getattr(a, k) + getattr(b, k) for k in a._SUMS if getattr(a, k) is not None}
    assert b.used_columns(0.5) is not None  # the used-rows path is taken
    a += b
    for key, value in whole.items():
        np.testing.assert_array_equal(getattr(a, key), value, err_msg=key)
    assert a.n == 120


def test_centred_xty_on_used_rows_equals_the_dense_formula() -> None:
    s, _ = _sparse_stats(3)
    dense = s.xty - np.outer(s.sum_x, s.sum_y) / s.n
    np.testing.assert_array_equal(s.centred_xty(), dense)


def test_thin_svd_of_few_used_rows_equals_the_svd_of_the_whole_matrix() -> None:
    s, _ = _sparse_stats(4)
    F = s.centred_xty()
    w, U = thin_svd(F)
    U_ref, sv, _ = sla.svd(F, full_matrices=False)
    np.testing.assert_allclose(w, sv**2, rtol=1e-12)
    np.testing.assert_allclose(U, flip_signs(U_ref), atol=1e-12)
    assert not U[np.flatnonzero(s.sumsq_x == 0)].any()


def test_the_cache_keeps_the_used_rows_and_gives_back_the_whole_arrays(tmp_path: Path) -> None:
    s, _ = _sparse_stats(5)
    params = {"what": "a test entry"}
    npz = save_stats(s, tmp_path, params)
    with np.load(npz) as z:
        rows = z["rows"]
        assert z["xty"].shape == (rows.size, 5) and z["xtx"].shape == (rows.size,) * 2
    np.testing.assert_array_equal(rows, np.flatnonzero(s.sumsq_x))
    back = load_stats(tmp_path, params, need_xtx=True)
    for key in s._SUMS:
        if getattr(s, key) is None:
            assert getattr(back, key) is None
        else:
            np.testing.assert_array_equal(getattr(back, key), getattr(s, key), err_msg=key)


def test_a_cache_entry_with_damaged_rows_is_ignored_with_a_warning(tmp_path: Path) -> None:
    s, _ = _sparse_stats(6)
    params = {"what": "a damaged entry"}
    npz = save_stats(s, tmp_path, params)
    with np.load(npz) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["rows"] = arrays["rows"][::-1].copy()  # not increasing
    np.savez(npz, **arrays)
    meta_path = tmp_path / f"{stats_key(params)}.json"
    meta = json.loads(meta_path.read_text())
    from dmlfe.stats.cache import arrays_digest  # the record's own rule
    meta["sha256"] = arrays_digest(arrays)
    meta_path.write_text(json.dumps(meta))
    with pytest.warns(RuntimeWarning, match="increasing indices"):
        assert load_stats(tmp_path, params, need_xtx=True) is None


def test_a_store_hashed_to_many_features_extends_its_cache_on_used_rows(tmp_path: Path) -> None:
    """After an append, statistics of a store hashed to 2^16 equal the numpy sums of all
    its rows, and the saved entry holds only the used features' rows."""
    rng = np.random.default_rng(7)
    words = [f"t{i}" for i in range(400)]

    def docs(start: int, n: int) -> list[dict]:
        return [{"id": f"d{start + k}", "split": "train",
                 "text": " ".join(rng.choice(words, size=int(rng.integers(3, 20)))),
                 "labels": sorted(set(rng.choice(["a", "b", "c"], size=2).tolist()))}
                for k in range(n)]

    first, more = tmp_path / "first.jsonl", tmp_path / "more.jsonl"
    first.write_text("".join(json.dumps(d) + "\n" for d in docs(0, 120)))
    more.write_text("".join(json.dumps(d) + "\n" for d in docs(120, 30)))
    store = dmlfe.ingest(first, "jsonl", tmp_path / "s.zarr", vectorizer="hashing",
                         n_features=2**16, chunk_rows=40, id_field="id")
    dmlfe.MDDM(n_components=2, variant="p").fit(str(store))
    dmlfe.append(store, more, id_field="id")
    refit = dmlfe.MDDM(n_components=2, variant="p").fit(str(store))
    assert refit.rows_read_ == 30
    st = open_store(store)
    X = st.X.compute().toarray()
    Y = st.Y.compute().astype(float)
    from dmlfe.stats.cache import load_or_compute_stats
    stats = load_or_compute_stats(st)
    assert stats.from_cache
    np.testing.assert_allclose(stats.xty, X.T @ Y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(stats.sum_x, X.sum(0), rtol=1e-12, atol=1e-12)
    entries = [p for p in Path(str(store) + ".stats").glob("*.json")
               if json.loads(p.read_text()).get("n") == 150]
    assert len(entries) == 1
    with np.load(entries[0].with_suffix(".npz")) as z:
        assert z["xty"].shape[0] == np.count_nonzero((X * X).sum(0)) < 2**16 // 2
    fresh = compute_stats(sp.csr_matrix(X), Y)
    np.testing.assert_allclose(refit.eigenvalues_[:2],
                               np.sort(np.linalg.svd(fresh.centred_xty(),
                                                     compute_uv=False) ** 2)[::-1][:2],
                               rtol=1e-10)


def test_a_thin_svd_fit_keeps_its_components_on_the_used_features(tmp_path: Path) -> None:
    """MDDMp on text hashed to 2^16: the fitted components are held on the features the
    documents use (``EigenResult.columns``), and equal the dense SVD of Xc^T Yc."""
    rng = np.random.default_rng(8)
    words = [f"u{i}" for i in range(300)]
    docs = [{"id": f"d{k}", "text": " ".join(rng.choice(words, size=int(rng.integers(3, 20)))),
             "labels": sorted(set(rng.choice(["a", "b", "c"], size=2).tolist()))}
            for k in range(90)]
    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps(d) + "\n" for d in docs))
    store = dmlfe.ingest(src, "jsonl", tmp_path / "s.zarr", vectorizer="hashing",
                         n_features=2**16, chunk_rows=40, id_field="id")
    est = dmlfe.MDDM(n_components=2, variant="p", route="feature").fit(str(store))
    X = open_store(store).X.compute().toarray()
    Y = open_store(store).Y.compute().astype(float)
    used = np.flatnonzero((X * X).sum(0))
    assert est._component_columns is not None
    np.testing.assert_array_equal(est._component_columns, used)
    F = (X - X.mean(0)).T @ (Y - Y.mean(0))
    U, s, _ = np.linalg.svd(F, full_matrices=False)
    np.testing.assert_allclose(est.eigenvalues_[:2], s[:2] ** 2, rtol=1e-10)
    np.testing.assert_allclose(est.components_, flip_signs(U[:, :2]).T, atol=1e-10)
    np.testing.assert_allclose(est.transform(X), (X - X.mean(0)) @ flip_signs(U[:, :2]),
                               atol=1e-8)
