"""The one-pass statistics and their cache, against dense numpy references."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from distributed.diagnostics.plugin import SchedulerPlugin
from helpers import CountingScheduler, count_computes, labels_dask, sparse_dask, write_store

from dmlfe.stats.cache import load_or_compute_stats, stats_dir_for
from dmlfe.stats.pass_ import compute_stats, sum_partials

# --------------------------------------------------------------------------- #
# Helpers
# --------------------------------------------------------------------------- #

class GraphCounter(SchedulerPlugin):
    """Counts graphs submitted to a distributed scheduler (every compute is one)."""

    name = "dmlfe-graph-counter"

    def __init__(self) -> None:
        self.count = 0

    def update_graph(self, scheduler, **kwargs) -> None:
        self.count += 1


def data(n: int = 157, D: int = 23, q: int = 5, seed: int = 0, density: float = 0.25):
    rng = np.random.default_rng(seed)
    # a Generator samples the positions without permuting all n D of them (the legacy
    # RandomState does, which takes tens of seconds at D = 2^19)
    X = sp.random(n, D, density=density, format="csr", dtype=np.float64,
                  random_state=seed if n * D <= 10**6 else np.random.default_rng(seed))
    X.data = rng.standard_normal(X.nnz)  # mixed signs, not only positive tf-idf
    Y = (rng.random((n, q)) < 0.35).astype(np.uint8)
    return X, Y


def reference(X: sp.csr_matrix, Y: np.ndarray) -> dict[str, np.ndarray]:
    Xd = X.toarray()
    Yf = Y.astype(np.float64)
    return {
        "sum_x": Xd.sum(axis=0),
        "sumsq_x": (Xd * Xd).sum(axis=0),
        "sum_y": Yf.sum(axis=0),
        "xty": Xd.T @ Yf,
        "yty": Yf.T @ Yf,
        "xtx": Xd.T @ Xd,
    }


def assert_stats(stats, X, Y, *, with_xtx: bool, rtol: float = 1e-12) -> None:
    ref = reference(X, Y)
    assert stats.n == X.shape[0]
    for key in ("sum_x", "sumsq_x", "sum_y", "xty", "yty"):
        got = getattr(stats, key)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, ref[key], rtol=rtol, atol=rtol * np.abs(ref[key]).max())
    if with_xtx:
        np.testing.assert_allclose(
            stats.xtx, ref["xtx"], rtol=rtol, atol=rtol * np.abs(ref["xtx"]).max()
        )
    else:
        assert stats.xtx is None


# --------------------------------------------------------------------------- #
# compute_stats
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("rows", [7, 40, 157, 500])
def test_dask_matches_dense_numpy(rows):
    X, Y = data()
    stats = compute_stats(sparse_dask(X, rows), labels_dask(Y, rows), need_xtx=True)
    assert_stats(stats, X, Y, with_xtx=True)


def test_in_memory_inputs_match_dense_numpy():
    X, Y = data()
    assert_stats(compute_stats(X, Y, need_xtx=True), X, Y, with_xtx=True)
    assert_stats(compute_stats(X.toarray(), Y, need_xtx=True), X, Y, with_xtx=True)
    assert_stats(compute_stats(sp.csc_matrix(X), Y), X, Y, with_xtx=False)
    # Mixed: in-memory X with dask Y and the reverse.
    assert_stats(compute_stats(X, labels_dask(Y, 30)), X, Y, with_xtx=False)
    assert_stats(compute_stats(sparse_dask(X, 30), Y, need_xtx=True), X, Y, with_xtx=True)


def test_y_with_other_chunks_is_realigned():
    X, Y = data()
    stats = compute_stats(sparse_dask(X, 20), labels_dask(Y, 33), need_xtx=True)
    assert_stats(stats, X, Y, with_xtx=True)


def test_centred_statistics_from_the_pass():
    X, Y = data()
    stats = compute_stats(sparse_dask(X, 50), labels_dask(Y, 50), need_xtx=True)
    Xc = X.toarray() - X.toarray().mean(axis=0)
    Yc = Y - Y.mean(axis=0)
    np.testing.assert_allclose(stats.centred_xtx(), Xc.T @ Xc, atol=1e-12 * n_abs(Xc.T @ Xc))
    np.testing.assert_allclose(stats.centred_xty(), Xc.T @ Yc, atol=1e-12 * n_abs(Xc.T @ Yc))


def n_abs(a: np.ndarray) -> float:
    return float(np.abs(a).max())


def test_cluster_equals_in_memory(cluster_client):
    X, Y = data(n=311, D=31, q=4, seed=3)
    local = compute_stats(X, Y, need_xtx=True)
    for rows in (16, 100):
        remote = compute_stats(
            sparse_dask(X, rows), labels_dask(Y, rows), need_xtx=True, client=cluster_client
        )
        for key in ("sum_x", "sum_y", "xty", "yty", "xtx"):
            a, b = getattr(remote, key), getattr(local, key)
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * np.abs(b).max())
        assert remote.n == local.n
    assert_stats(local, X, Y, with_xtx=True)


def test_without_xty_the_rest_is_unchanged_and_xty_is_refused(cluster_client):
    # D q above 2^20: the sparse X^T Y branch (a few hundred values a row suffice)
    X, Y = data(n=311, D=2**19, q=4, seed=5, density=1e-3)
    full = compute_stats(X, Y)
    for stats in (compute_stats(X, Y, need_xty=False),
                  compute_stats(sparse_dask(X, 50), labels_dask(Y, 50), need_xty=False,
                                client=cluster_client)):
        assert stats.xty.shape == (0, 4)
        for key in ("sum_x", "sumsq_x", "sum_y", "yty"):
            ref = getattr(full, key)  # the cluster sums in another order: round-off only
            np.testing.assert_allclose(getattr(stats, key), ref, rtol=1e-12,
                                       atol=1e-12 * np.abs(ref).max())
        assert stats.n == full.n and stats.n_features == 2**19
        with pytest.raises(ValueError, match="need_xty=True"):
            stats.centred_xty()
    assert full.xty.shape == (2**19, 4)


def test_exactly_one_compute_local():
    X, Y = data()
    counter = CountingScheduler()
    with dask.config.set(scheduler=counter):
        compute_stats(sparse_dask(X, 10), labels_dask(Y, 10), need_xtx=True)
    assert counter.count == 1
    counter = CountingScheduler()
    with dask.config.set(scheduler=counter):
        compute_stats(X, Y, need_xtx=True)  # in memory: no dask at all
    assert counter.count == 0


def test_exactly_one_graph_on_the_cluster(cluster_client):
    X, Y = data(n=200)
    Xd, Yd = sparse_dask(X, 25), labels_dask(Y, 25)
    cluster_client.register_plugin(GraphCounter(), name=GraphCounter.name)

    def graphs(dask_scheduler):
        return dask_scheduler.plugins[GraphCounter.name].count

    before = cluster_client.run_on_scheduler(graphs)
    stats = compute_stats(Xd, Yd, need_xtx=True, client=cluster_client)
    after = cluster_client.run_on_scheduler(graphs)
    assert after - before == 1
    assert_stats(stats, X, Y, with_xtx=True)


def test_dense_limit_error_names_memory_and_remedy():
    X, Y = data(D=23)
    with pytest.raises(ValueError) as err:
        compute_stats(sparse_dask(X, 50), labels_dask(Y, 50), need_xtx=True, max_dense_features=22)
    msg = str(err.value)
    assert "D = 23" in msg and "GiB" in msg and f"{23 * 23 * 8:,} bytes" in msg
    assert "max_dense_features" in msg and "does not need X^T X" in msg
    # 2^20 features: 8 TiB of X^T X, stated in GiB.
    big = sp.csr_matrix((4, 2**20))
    with pytest.raises(ValueError, match="8192.00 GiB"):
        compute_stats(big, np.zeros((4, 2), np.uint8), need_xtx=True)
    # Without X^T X the same wide matrix is fine.
    stats = compute_stats(big, np.ones((4, 2), np.uint8))
    assert stats.xty.shape == (2**20, 2) and stats.n == 4


def test_block_fn_hook_and_its_width_limit():
    X, Y = data()

    def features(block):  # a dense feature map that widens the block
        b = block.toarray()
        return np.hstack([b**2, np.ones((b.shape[0], 1))])

    ref_X = sp.csr_matrix(features(X))
    stats = compute_stats(sparse_dask(X, 30), labels_dask(Y, 30), need_xtx=True, block_fn=features)
    assert stats.n_features == X.shape[1] + 1
    assert_stats(stats, ref_X, Y, with_xtx=True)
    with pytest.raises(ValueError, match="D = 24"):
        compute_stats(X, Y, need_xtx=True, block_fn=features, max_dense_features=23)


def test_row_mask_numpy_and_dask():
    X, Y = data()
    mask = np.random.default_rng(5).random(X.shape[0]) < 0.4
    for m in (mask, da.from_array(mask, chunks=60)):
        stats = compute_stats(sparse_dask(X, 25), labels_dask(Y, 25), need_xtx=True, row_mask=m)
        assert_stats(stats, X[mask], Y[mask], with_xtx=True)
    assert_stats(compute_stats(X, Y, row_mask=mask), X[mask], Y[mask], with_xtx=False)


def test_wide_sparse_partials_stay_exact():
    # D * q above the sparse-partial threshold: X^T Y and X^T X go through sparse sums.
    rng = np.random.default_rng(2)
    n, D, q = 120, 300_000, 4
    nnz = 700  # built by hand: sp.random is slow for huge, very sparse shapes
    X = sp.csr_matrix(
        (rng.standard_normal(nnz), (rng.integers(0, n, nnz), rng.integers(0, D, nnz))),
        shape=(n, D),
    )
    Y = (rng.random((n, q)) < 0.5).astype(np.uint8)
    stats = compute_stats(sparse_dask(X, 13), labels_dask(Y, 13))
    np.testing.assert_allclose(stats.xty, (X.T @ Y.astype(float)), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(stats.sum_x, np.asarray(X.sum(axis=0)).ravel(), atol=1e-14)
    Xs, _ = data(n=90, D=400, seed=4)
    Xs = sp.csr_matrix(Xs.multiply(sp.random(90, 400, density=0.05, random_state=1) != 0))
    stats = compute_stats(sparse_dask(Xs, 9), labels_dask(Y[:90], 9), need_xtx=True)
    np.testing.assert_allclose(stats.xtx, (Xs.T @ Xs).toarray(), rtol=1e-12, atol=1e-14)


def test_sum_partials_is_the_pairwise_sum_in_order_and_leaves_inputs_untouched():
    import itertools

    rng = np.random.default_rng(0)
    a = sp.random(30, 30, density=0.02, format="csr", random_state=1)
    b = sp.random(30, 30, density=0.02, format="csr", random_state=2)
    c = rng.standard_normal((30, 30))
    d = rng.standard_normal((30, 30)) * 1e-9  # round-off shows if the order changes
    a0, b0, c0, d0 = a.toarray(), b.toarray(), c.copy(), d.copy()
    for k in (2, 3, 4):
        for items in itertools.product((a, b, c, d), repeat=k):
            dense = [m.toarray() if sp.issparse(m) else m for m in items]
            want = dense[0].copy()
            for m in dense[1:]:
                want = want + m
            got = sum_partials(list(items))
            got = got.toarray() if sp.issparse(got) else got
            np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(a.toarray(), a0)
    np.testing.assert_array_equal(b.toarray(), b0)
    np.testing.assert_array_equal(c, c0)
    np.testing.assert_array_equal(d, d0)


def test_row_mismatch_is_reported():
    X, Y = data()
    with pytest.raises(ValueError, match="157 rows .* Y has 150"):
        compute_stats(X, Y[:150])


# --------------------------------------------------------------------------- #
# Cache
# --------------------------------------------------------------------------- #

def test_cache_saves_then_reuses_without_computing(tmp_path):
    X, Y = data()
    Xd, Yd = sparse_dask(X, 40), labels_dask(Y, 40)
    cdir = tmp_path / "cache"
    first, n1 = count_computes(lambda: load_or_compute_stats(Xd, Yd, cache_dir=cdir))
    second, n2 = count_computes(lambda: load_or_compute_stats(Xd, Yd, cache_dir=cdir))
    assert (n1, n2) == (1, 0)
    assert_stats(second, X, Y, with_xtx=False)
    npz, js = sorted(cdir.glob("*.npz")), sorted(cdir.glob("*.json"))
    assert len(npz) == len(js) == 1 and npz[0].stem == js[0].stem
    meta = json.loads(js[0].read_text())
    assert meta["has_xtx"] is False and meta["n"] == X.shape[0]
    assert meta["params"]["data"]["x"]["name"] == Xd.name
    with np.load(npz[0], allow_pickle=False) as z:
        assert set(z.files) == {"n", "sum_x", "sumsq_x", "sum_y", "xty", "yty"}
    assert not [p for p in cdir.iterdir() if ".tmp-" in p.name]

    # X^T X wanted: recomputed once, then it also serves requests without it.
    with_xtx, n3 = count_computes(
        lambda: load_or_compute_stats(Xd, Yd, cache_dir=cdir, need_xtx=True)
    )
    again, n4 = count_computes(lambda: load_or_compute_stats(Xd, Yd, cache_dir=cdir))
    assert (n3, n4) == (1, 0)
    assert_stats(with_xtx, X, Y, with_xtx=True)
    np.testing.assert_array_equal(again.xtx, with_xtx.xtx)

    # Other data: another key.
    X2, Y2 = data(seed=9)
    _, n5 = count_computes(lambda: load_or_compute_stats(X2, Y2, cache_dir=cdir))
    assert n5 == 0  # in memory: no dask, but a new entry
    assert len(list(cdir.glob("*.npz"))) == 2


def test_cache_ignores_a_corrupt_entry(tmp_path):
    X, Y = data()
    load_or_compute_stats(X, Y, cache_dir=tmp_path)
    (npz,) = tmp_path.glob("*.npz")
    npz.write_bytes(b"not a zip file")
    with pytest.warns(RuntimeWarning, match="unreadable statistics cache"):
        stats = load_or_compute_stats(X, Y, cache_dir=tmp_path)
    assert_stats(stats, X, Y, with_xtx=False)


def test_store_path_cache_is_a_sibling_and_keys_the_split(tmp_path):
    X, Y = data()
    split = np.where(np.arange(X.shape[0]) % 3 == 0, "test", "train")
    store_path = write_store(tmp_path / "corpus.zarr", sp.csr_matrix(X), Y, split,
                             chunk_rows=50)
    inside = sorted(p.relative_to(store_path) for p in store_path.rglob("*"))

    train, n1 = count_computes(lambda: load_or_compute_stats(str(store_path), split="train"))
    train2, n2 = count_computes(lambda: load_or_compute_stats(store_path, split="train"))
    test, n3 = count_computes(lambda: load_or_compute_stats(store_path, split="test"))
    assert (n1, n2, n3) == (1, 0, 1)
    keep = split == "train"
    assert_stats(train2, X[keep], Y[keep], with_xtx=False)
    assert_stats(test, X[~keep], Y[~keep], with_xtx=False)
    sib = stats_dir_for(store_path)
    assert sib == tmp_path / "corpus.zarr.stats" and sib.is_dir()
    assert len(list(sib.glob("*.json"))) == 2
    metas = [json.loads(p.read_text()) for p in sib.glob("*.json")]
    assert sorted(m["params"]["split"][0] for m in metas) == ["test", "train"]
    assert all(m["params"]["data"]["path"] == str(store_path.resolve()) for m in metas)
    assert sorted(p.relative_to(store_path) for p in store_path.rglob("*")) == inside  # nothing
    # written inside the store

    # A feature map must be described to be cached, and is then keyed apart.
    with pytest.raises(ValueError, match="route="):
        load_or_compute_stats(store_path, block_fn=lambda b: b)
    _, n4 = count_computes(
        lambda: load_or_compute_stats(store_path, block_fn=lambda b: b, route={"map": "identity"})
    )
    assert n4 == 1


def test_unwritable_cache_still_returns_statistics(tmp_path):
    X, Y = data()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stats = load_or_compute_stats(X, Y, cache_dir=Path(blocker) / "sub")
    assert any("could not save statistics" in str(w.message) for w in caught)
    assert_stats(stats, X, Y, with_xtx=False)


def test_label_fn_and_weighted_scatter():
    # MLDA-style label map (mvmd eq. 44): y'_i = C y_i / ||y_i||_1, rows without labels stay 0.
    X, Y = data()
    C = np.array([[1.0, 0.5, 0.0, 0.2, 0.1]] * 5)
    C = (C + C.T) / 2

    def label_map(yb):
        yb = yb.astype(np.float64)
        l1 = yb.sum(axis=1, keepdims=True)
        return np.divide(yb @ C, l1, out=np.zeros((yb.shape[0], 5)), where=l1 > 0)

    Yp = label_map(Y)
    w = Yp.sum(axis=1)
    Xd = X.toarray()
    for src_x, src_y in ((X, Y), (sparse_dask(X, 30), labels_dask(Y, 30))):
        stats = compute_stats(src_x, src_y, label_fn=label_map, need_xtwx=True)
        np.testing.assert_allclose(stats.xty, Xd.T @ Yp, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(stats.yty, Yp.T @ Yp, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(stats.sum_y, Yp.sum(axis=0), rtol=1e-12)
        ref = Xd.T @ (Xd * w[:, None])
        np.testing.assert_allclose(stats.xtwx, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
        assert stats.xtx is None
    # dense rows (the dual route's reduced data is F-ordered), with weights >= 0 (one
    # weighted syrk) and with a negative one (the general product)
    for label_fn in (label_map, lambda yb: label_map(yb) - 0.3):
        wd = label_fn(Y).sum(axis=1)
        assert (wd < 0).any() == (label_fn is not label_map)
        ref = Xd.T @ (Xd * wd[:, None])
        for dense in (Xd, np.asfortranarray(Xd)):
            got = compute_stats(dense, Y, label_fn=label_fn, need_xtwx=True).xtwx
            np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    assert compute_stats(X, Y).xtwx is None
    with pytest.raises(ValueError, match="D = 23"):
        compute_stats(X, Y, need_xtwx=True, max_dense_features=10)


def test_cache_keeps_weighted_scatter_and_label_maps_apart(tmp_path):
    X, Y = data()

    def double(yb):
        return 2.0 * yb

    with pytest.raises(ValueError, match="labels="):
        load_or_compute_stats(X, Y, cache_dir=tmp_path, label_fn=double)
    a = load_or_compute_stats(
        X, Y, cache_dir=tmp_path, label_fn=double, labels="double", need_xtwx=True
    )
    b = load_or_compute_stats(X, Y, cache_dir=tmp_path, label_fn=double, labels="double")
    np.testing.assert_array_equal(a.xtwx, b.xtwx)  # served from the entry with X^T W X
    plain = load_or_compute_stats(X, Y, cache_dir=tmp_path)
    np.testing.assert_allclose(2.0 * plain.xty, a.xty, rtol=1e-14)
    assert plain.xtwx is None
    assert len(list(tmp_path.glob("*.npz"))) == 2


def test_real_store_split_and_sibling_cache(tmp_path):
    from dmlfe.store import StoreWriter, open_store, write_piece

    X, Y = data(n=90)
    splits = np.where(np.arange(90) % 4 == 0, "test", "train")
    ids = [f"d{i}" for i in range(90)]
    out = tmp_path / "tiny.zarr"
    with StoreWriter(out, chunk_rows=16) as w:
        pieces = [
            write_piece(w.tmp_path, k, X[a:b], Y[a:b], ids[a:b], list(splits[a:b]), {})
            for k, (a, b) in enumerate(((0, 40), (40, 90)))
        ]
        path = w.finalize(
            pieces,
            n_features=X.shape[1],
            label_names=[f"L{j}" for j in range(Y.shape[1])],
            feature_names=[f"f{j}" for j in range(X.shape[1])],
        )
    before = sorted(p.relative_to(path) for p in Path(path).rglob("*"))
    keep = splits == "train"
    stats, n1 = count_computes(lambda: load_or_compute_stats(path, split="train", need_xtx=True))
    again, n2 = count_computes(lambda: load_or_compute_stats(path, split="train"))
    assert (n1, n2) == (1, 0)
    assert_stats(stats, X[keep], Y[keep], with_xtx=True)
    np.testing.assert_array_equal(again.xtx, stats.xtx)
    meta = json.loads(next(stats_dir_for(path).glob("*.json")).read_text())
    assert meta["params"]["data"]["shape"] == [90, X.shape[1]]
    assert meta["params"]["data"]["nnz"] == X.nnz
    assert sorted(p.relative_to(path) for p in Path(path).rglob("*")) == before
    full = load_or_compute_stats(path)
    assert_stats(full, X, Y, with_xtx=False)
    assert open_store(path).n_docs == 90


class _WideMap:
    """A block map to dense rows of ``width`` columns that records each block's rows."""

    def __init__(self, width: int, D: int) -> None:
        self.W = np.random.default_rng(3).standard_normal((D, width))
        self.rows: list[int] = []

    def __call__(self, xb):
        self.rows.append(xb.shape[0])
        return np.asarray(xb @ self.W)


def test_in_memory_slices_of_a_wide_block_map_stay_small(monkeypatch):
    import dmlfe.stats.pass_ as pass_

    rng = np.random.default_rng(0)
    X = sp.random(1000, 40, density=0.2, random_state=1, format="csr")
    Y = (rng.uniform(size=(1000, 3)) < 0.4).astype(np.uint8)
    width = 50
    # a slice's dense output may take 8 * 50 * 100 bytes: 100 rows at a time
    monkeypatch.setattr(pass_, "IN_MEMORY_BLOCK_BYTES", 8 * width * 100)
    fn = _WideMap(width, 40)
    got = compute_stats(X, Y, need_xtx=True, block_fn=fn)
    assert max(fn.rows) == 100 and sum(fn.rows[1:]) == 1000  # (the first: the width probe)
    R = X @ fn.W
    np.testing.assert_allclose(got.xtx, R.T @ R, rtol=1e-12)
    np.testing.assert_allclose(got.sum_x, R.sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(got.xty, R.T @ Y, rtol=1e-12)
    # at least 64 rows, at most IN_MEMORY_ROWS; a map that cannot be probed: 4,096
    assert pass_.slice_rows(10**9, 8) == 64
    assert pass_.slice_rows(1, 2**40) == pass_.IN_MEMORY_ROWS
    assert pass_.slice_rows(None, 2**27) == 4096
