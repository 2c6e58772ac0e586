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
from dmlfe.stats.sufficient import SufficientStats, held
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
    from dmlfe.stats.cache import npz_crc32  # the record's own rule
    meta["crc32"] = npz_crc32(npz)
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
    Y = st.Y.compute().toarray().astype(float)
    from dmlfe.stats.cache import load_or_compute_stats
    stats = load_or_compute_stats(st)
    assert stats.from_cache
    np.testing.assert_allclose(stats.xty, X.T @ Y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(stats.sum_x, X.sum(0), rtol=1e-12, atol=1e-12)
    entries = [p for p in Path(str(store) + ".stats").glob("*.json")
               if json.loads(p.read_text()).get("n") == 150]
    assert len(entries) == 1
    # a delta record: the earlier entry's archive (the first 120 documents' used rows)
    # and one of the 30 appended documents' used rows only
    base, delta = json.loads(entries[0].read_text())["parts"]
    with np.load(entries[0].parent / base["file"]) as z:
        assert z["xty"].shape[0] == np.count_nonzero((X[:120] ** 2).sum(0)) < 2**16 // 2
    with np.load(entries[0].with_suffix(".npz")) as z:
        used = np.flatnonzero((X[120:] ** 2).sum(0))
        np.testing.assert_array_equal(z["rows"], used)
        assert z["sum_x"].shape == used.shape
        assert np.diff(z["xty_indptr"])[np.setdiff1d(np.arange(2**16), used)].sum() == 0
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
    Y = open_store(store).Y.compute().toarray().astype(float)
    used = np.flatnonzero((X * X).sum(0))
    assert est._component_columns is not None
    np.testing.assert_array_equal(est._component_columns, used)
    F = (X - X.mean(0)).T @ (Y - Y.mean(0))
    U, s, _ = np.linalg.svd(F, full_matrices=False)
    np.testing.assert_allclose(est.eigenvalues_[:2], s[:2] ** 2, rtol=1e-10)
    np.testing.assert_allclose(est.components_, flip_signs(U[:, :2]).T, atol=1e-10)
    np.testing.assert_allclose(est.transform(X), (X - X.mean(0)) @ flip_signs(U[:, :2]),
                               atol=1e-8)


def _held_stats(seed: int, tmp_path: Path, n: int = 60, used: int = 200
                ) -> tuple[SufficientStats, np.ndarray, np.ndarray]:
    """Statistics saved and read back from the cache (held on the used rows), their X
    and Y."""
    s, X = _sparse_stats(seed, n, used)
    Y = (np.random.default_rng(seed + 100).random((n, 5)) < 0.4).astype(float)
    s = SufficientStats(n=n, sum_x=X.sum(0), sum_y=Y.sum(0), xty=X.T @ Y, yty=Y.T @ Y,
                        xtx=X.T @ X, sumsq_x=(X * X).sum(0))
    params = {"what": f"held {seed}"}
    save_stats(s, tmp_path, params)
    back = load_stats(tmp_path, params, need_xtx=True)
    assert back is not None
    return back, X, Y


def test_statistics_read_from_the_cache_stay_on_their_used_rows(tmp_path: Path) -> None:
    s, X, Y = _held_stats(11, tmp_path)
    used = np.flatnonzero((X * X).sum(0))
    np.testing.assert_array_equal(s.compact_rows, used)
    assert held(s, "xty").shape == (used.size, 5)
    assert held(s, "xtx").shape == (used.size, used.size)
    part, rows = s.centred_xty_rows()
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    np.testing.assert_array_equal(rows, used)
    np.testing.assert_allclose(part, (Xc.T @ Yc)[used], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(s.centred_xty(), Xc.T @ Yc, rtol=1e-12, atol=1e-12)
    assert s.compact_rows is not None  # centring made nothing whole
    # reading a matrix as an attribute gives the whole array, and makes them all whole
    np.testing.assert_allclose(s.xtx, X.T @ X, rtol=1e-12)
    assert s.compact_rows is None and held(s, "xty").shape == (D, 5)
    np.testing.assert_allclose(held(s, "xty"), X.T @ Y, rtol=1e-12)


@pytest.mark.parametrize("sparse_part", [True, False])
def test_adding_documents_into_held_rows_widens_them_and_equals_the_whole_sums(
        tmp_path: Path, sparse_part: bool) -> None:
    s, X, Y = _held_stats(12, tmp_path)
    rng = np.random.default_rng(13)
    X2 = np.zeros((9, D))
    new_cols = rng.choice(D, size=30, replace=False)  # most not used by X
    X2[:, new_cols] = rng.random((9, 30))
    Y2 = (rng.random((9, 5)) < 0.5).astype(float)
    part = compute_stats(sp.csr_matrix(X2), Y2, need_xtx=True)
    if sparse_part:  # as a pass leaves X^T Y of a few documents at huge D
        part.xty, part.xtx = sp.csr_matrix(part.xty), sp.csr_matrix(part.xtx)
    s += part
    Xa, Ya = np.vstack([X, X2]), np.vstack([Y, Y2])
    used = np.flatnonzero((Xa * Xa).sum(0))
    np.testing.assert_array_equal(s.compact_rows, used)  # widened, still held
    assert held(s, "xty").shape == (used.size, 5)
    np.testing.assert_allclose(held(s, "xty"), (Xa.T @ Ya)[used], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(held(s, "xtx"), (Xa.T @ Xa)[np.ix_(used, used)], rtol=1e-12,
                               atol=1e-12)
    assert s.n == 69
    np.testing.assert_allclose(s.sum_x, Xa.sum(0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(s.xty, Xa.T @ Ya, rtol=1e-12, atol=1e-12)


def test_held_rows_that_would_cover_most_features_become_whole(tmp_path: Path) -> None:
    s, X, Y = _held_stats(14, tmp_path, used=1800)
    assert s.compact_rows is not None
    rng = np.random.default_rng(15)
    free = np.flatnonzero((X * X).sum(0) == 0)
    X2 = np.zeros((4, D))
    X2[:, rng.choice(free, size=1000, replace=False)] = rng.random((4, 1000))
    Y2 = np.ones((4, 5))
    part = compute_stats(sp.csr_matrix(X2), Y2, need_xtx=True, dense_xty=False)
    assert part.used_columns(0.5) is not None  # the part alone is on few features
    s += part
    assert s.compact_rows is None  # together they use most of them
    Xa, Ya = np.vstack([X, X2]), np.vstack([Y, Y2])
    np.testing.assert_allclose(held(s, "xty"), Xa.T @ Ya, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(s.xtx, Xa.T @ Xa, rtol=1e-12, atol=1e-12)


def test_mddm_p_on_held_rows_solves_without_whole_arrays(tmp_path: Path) -> None:
    """MDDMp's operator form on statistics held on their used rows: F stays on those
    rows, and the thin SVD's pairs equal the dense SVD of the whole Xc^T Yc."""
    from dmlfe.methods.mddm import mddm_p
    from dmlfe.solvers.dense import solve_dense

    s, X, Y = _held_stats(16, tmp_path)
    t = mddm_p(s, dense=False)
    F, rows = t.lowrank_part()
    used = np.flatnonzero((X * X).sum(0))
    np.testing.assert_array_equal(rows, used)
    assert F.shape == (used.size, 5)
    res = solve_dense(t, 3, compact=True)
    Fd = (X - X.mean(0)).T @ (Y - Y.mean(0))
    U, sv, _ = np.linalg.svd(Fd, full_matrices=False)
    np.testing.assert_allclose(res.eigenvalues, sv**2, rtol=1e-10)
    whole = np.zeros((D, 3))
    whole[res.columns] = res.components
    np.testing.assert_allclose(whole, flip_signs(U[:, :3]), atol=1e-10)
    assert s.compact_rows is not None and t.lowrank_rows is not None
    # whoever reads the template's F as an attribute gets it whole
    np.testing.assert_allclose(t.lowrank, Fd, rtol=1e-10, atol=1e-10)
    assert t.lowrank_rows is None


def test_thin_svd_of_held_rows_equals_that_of_the_whole_matrix() -> None:
    rng = np.random.default_rng(17)
    rows = np.sort(rng.choice(D, size=50, replace=False))
    F = rng.standard_normal((50, 4))
    F[7] = 0.0  # a held row that is zero all the same
    whole = np.zeros((D, 4))
    whole[rows] = F
    w, U = thin_svd(whole)
    w2, U2, cols = thin_svd(F, compact=True, rows=rows, n_rows=D)
    np.testing.assert_array_equal(w2, w)
    np.testing.assert_array_equal(cols, np.delete(rows, 7))
    np.testing.assert_array_equal(U2, U[cols])


@pytest.mark.parametrize("density", [0.01, 0.3])
def test_add_into_a_dense_array_equals_the_dense_sum(density: float) -> None:
    """A sparse addend, scattered (few non-zeros) or slab by slab (many), with duplicate
    coordinates: the dense sum, entry for entry."""
    from dmlfe.stats.sufficient import add_into

    rng = np.random.default_rng(18)
    out = rng.standard_normal((3000, 700))
    m = sp.random(3000, 700, density=density, format="coo", random_state=19)
    m = sp.coo_matrix((np.r_[m.data, m.data[:50]], (np.r_[m.row, m.row[:50]],
                                                    np.r_[m.col, m.col[:50]])), m.shape)
    want = out + m.toarray()
    add_into(out, m)
    np.testing.assert_array_equal(out, want)


def test_centred_xtx_equals_the_dense_formula() -> None:
    s, X = _sparse_stats(20, n=70, used=3000)
    np.testing.assert_array_equal(s.centred_xtx(), s.xtx - np.outer(s.sum_x, s.sum_x) / s.n)
    Xc = X - X.mean(0)
    np.testing.assert_allclose(s.centred_xtx(), Xc.T @ Xc, rtol=1e-9, atol=1e-9)
