"""dmlfe.stats.outer.dense_outer (the Gram tiles and relation kernels) against scipy."""

import numpy as np
import pytest
import scipy.sparse as sp

from dmlfe.compute import add_column_parts, used_columns
from dmlfe.stats import outer
from dmlfe.stats.outer import DENSE_RATIO, dense_gram, dense_outer


def _zipf_rows(n: int, D: int, seed: int) -> sp.csr_matrix:
    """Text-like rows: a few columns in most rows, most columns in very few."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, D + 1) ** 1.1
    p /= p.sum()
    rows = [rng.choice(D, size=rng.integers(0, 30), p=p) for _ in range(n)]
    indptr = np.cumsum([0] + [len(r) for r in rows])
    data = rng.random(indptr[-1]) + 0.1
    # duplicates within a row (non-canonical CSR) are summed by the product
    cols = np.concatenate([np.zeros(0, np.int64), *rows]).astype(np.int64)
    return sp.csr_matrix((data, cols, indptr), shape=(n, D))


def _both_kinds_of_column(a: sp.csr_matrix, b: sp.csr_matrix) -> tuple[int, int]:
    ca = np.bincount(a.indices, minlength=a.shape[1]).astype(float)
    cb = np.bincount(b.indices, minlength=b.shape[1])
    used = (ca > 0) & (cb > 0)
    heavy = used & (ca * cb >= DENSE_RATIO * a.shape[0] * b.shape[0])
    return int(heavy.sum()), int((used & ~heavy).sum())


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("threads", [None, 1, 4])
def test_dense_outer_equals_the_sparse_product(seed, threads):
    a, b = _zipf_rows(300, 5000, seed), _zipf_rows(170, 5000, seed + 10)
    heavy, light = _both_kinds_of_column(a, b)
    assert heavy > 0 and light > 0  # both halves of the split are exercised
    # and columns that only one block uses, which the split leaves out
    assert np.any((np.bincount(a.indices, minlength=5000) > 0)
                  != (np.bincount(b.indices, minlength=5000) > 0))
    ref = (a @ b.T).toarray()
    out = dense_outer(a, b, threads=threads)
    assert out.flags.c_contiguous and out.dtype == np.float64
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-12 * np.abs(ref).max())
    np.testing.assert_allclose(dense_outer(a, a), (a @ a.T).toarray(), rtol=0, atol=1e-11)
    # dense and mixed inputs take the plain BLAS product
    np.testing.assert_allclose(dense_outer(a.toarray(), b), ref, atol=1e-12)
    np.testing.assert_allclose(dense_outer(a, b.toarray()), ref, atol=1e-12)


@pytest.mark.parametrize("n", [0, 1, 3, 301, 517])
@pytest.mark.parametrize("blocks", [1, 4, 7])
@pytest.mark.parametrize("threads", [1, 3])
def test_dense_gram_is_the_exactly_symmetric_product(n, blocks, threads, monkeypatch):
    monkeypatch.setattr(outer, "GRAM_ROW_BLOCKS", blocks)
    monkeypatch.setattr(outer, "MIRROR_STEP", 64)  # several mirror blocks at these sizes
    a = _zipf_rows(n, 4000, n)
    if n > 100:
        heavy, light = _both_kinds_of_column(a, a)
        assert heavy > 0 and light > 0
    ref = (a @ a.T).toarray()
    G = dense_gram(a, threads=threads)
    assert G.shape == (n, n) and G.flags.c_contiguous and G.dtype == np.float64
    np.testing.assert_array_equal(G, G.T)
    np.testing.assert_allclose(G, ref, rtol=0, atol=1e-12 * max(np.abs(ref).max(initial=0), 1))
    np.testing.assert_allclose(dense_gram(a.toarray()), ref, rtol=0, atol=1e-11)
    # only light columns (no dsyrk) and only heavy ones (no sparse rest)
    light_only = sp.csr_matrix(np.eye(n, 4000))
    np.testing.assert_array_equal(dense_gram(light_only), np.eye(n))
    full = sp.csr_matrix(np.ones((n, 3)))
    np.testing.assert_array_equal(dense_gram(full), np.full((n, n), 3.0))


def test_dense_outer_edge_shapes():
    a = _zipf_rows(20, 50, 3)
    assert dense_outer(a, a[:0]).shape == (20, 0)
    assert dense_outer(a[:0], a).shape == (0, 20)
    z = sp.csr_matrix((5, 50))
    np.testing.assert_array_equal(dense_outer(z, a), np.zeros((5, 20)))
    with pytest.raises(ValueError, match="columns"):
        dense_outer(a, _zipf_rows(3, 40, 1))


def test_column_parts_sum_like_the_dense_partials():
    blocks = [_zipf_rows(40, 3000, s) for s in range(5)]
    V = np.random.default_rng(0).normal(size=(3000, 7))
    ref = sum(b.T @ (b @ V) for b in blocks)
    parts = []
    for b in blocks:
        cols, narrow = used_columns(b)
        np.testing.assert_array_equal(cols, np.unique(b.indices))
        np.testing.assert_allclose(narrow.toarray(), b.toarray()[:, cols])
        parts.append((cols, narrow.T @ (narrow @ V[cols])))
    cols, vals = add_column_parts(*parts)
    out = np.zeros_like(ref)
    out[cols] = vals
    np.testing.assert_allclose(out, ref, atol=1e-12)
    assert not np.any(ref[np.setdiff1d(np.arange(3000), cols)])


@pytest.mark.parametrize("n_rows", [0, 1, 2, 40])  # few rows: the np.unique branch
def test_used_columns_narrows_exactly(n_rows):
    b = _zipf_rows(n_rows, 3000, 7)
    b = b.tocsc().tocsr() if n_rows == 2 else b  # canonical and non-canonical input
    cols, narrow = used_columns(b)
    np.testing.assert_array_equal(cols, np.unique(b.indices))
    assert cols.dtype == np.int64 and narrow.shape == (n_rows, cols.size)
    np.testing.assert_allclose(narrow.toarray(), b.toarray()[:, cols])


def test_driver_threads_is_one_inside_a_dask_task(cluster_client):
    """The driver's threading stays off in worker tasks (their threads are the parallelism)."""
    from dmlfe.compute import driver_threads

    assert cluster_client.submit(driver_threads, pure=False).result() == 1


@pytest.mark.parametrize(("load", "want"), [(0.0, 4), (1.4, 3), (2.6, 1), (3.6, 1), (40.0, 1)])
def test_idle_cpus_are_those_the_load_average_leaves(monkeypatch, load, want):
    """BLAS threads for the driver's eigensolver: the CPUs not taken by the load (1 at
    least), as the 1-minute load average counts them."""
    import dmlfe.compute as compute

    monkeypatch.setattr(compute.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3},
                        raising=False)
    monkeypatch.setattr(compute.os, "getloadavg", lambda: (load, 0.0, 0.0))
    assert compute.idle_cpus() == want


def test_blas_threads_sets_and_restores_the_driver_blas_threads():
    from threadpoolctl import threadpool_info

    from dmlfe.compute import blas_threads, one_blas_thread

    before = {i["filepath"]: i["num_threads"] for i in threadpool_info()
              if i["user_api"] == "blas"}
    with one_blas_thread():
        assert all(i["num_threads"] == 1 for i in threadpool_info() if i["user_api"] == "blas")
    with blas_threads(2):
        assert all(i["num_threads"] == 2 for i in threadpool_info() if i["user_api"] == "blas")
    assert {i["filepath"]: i["num_threads"] for i in threadpool_info()
            if i["user_api"] == "blas"} == before


@pytest.mark.parametrize("threads", [1, 3])
def test_in_threads_runs_every_call_and_reraises(threads):
    from dmlfe.compute import in_threads

    out = np.zeros(5)

    def put(i, v):
        out[i] = v

    in_threads(put, range(5), [10.0, 11.0, 12.0, 13.0, 14.0], threads=threads)
    np.testing.assert_array_equal(out, [10.0, 11.0, 12.0, 13.0, 14.0])

    def fail(i):
        if i == 2:
            raise KeyError("call 2")

    with pytest.raises(KeyError, match="call 2"):
        in_threads(fail, range(4), threads=threads)


@pytest.mark.parametrize("shape", [(60, 9), (0, 4), (4, 0), (1, 1)])
@pytest.mark.parametrize("order", ["C", "F"])
def test_dense_crossprods_are_numpy_products(shape, order):
    rng = np.random.default_rng(3)
    x = np.asarray(rng.normal(size=shape), order=order)
    y = np.asarray(rng.normal(size=(shape[0], 3)), order=order)
    g = outer.dense_crossprod(x)
    assert g.shape == (shape[1], shape[1]) and g.flags.c_contiguous
    np.testing.assert_allclose(g, x.T @ x, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(g, g.T)  # exactly symmetric
    h = outer.dense_crossprod_with(x, y)
    assert h.shape == (shape[1], 3) and h.flags.c_contiguous
    np.testing.assert_allclose(h, x.T @ y, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("width", [0, 1, 7])
def test_add_crossprod_updates_in_place_and_stays_exactly_symmetric(width):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(40, width))
    s = rng.normal(size=(40, 40))
    c = np.ascontiguousarray(s @ s.T)
    c = 0.5 * (c + c.T)
    ref = c - 0.3 * (x @ x.T)
    got = outer.add_crossprod(c, x.T, -0.3)
    assert got is c
    np.testing.assert_allclose(c, ref, rtol=1e-13, atol=1e-12)
    np.testing.assert_array_equal(c, c.T)
    # dense_crossprod of the transpose is F F^T for the factor F = x
    np.testing.assert_allclose(outer.dense_crossprod(x.T), x @ x.T, atol=1e-12)
    with pytest.raises(ValueError, match="in place"):
        outer.add_crossprod(np.asfortranarray(c[:, :39]), x.T)


def test_split_with_int64_indices_gives_the_same_products(monkeypatch):
    # int32 per-value temporaries unless a size needs int64: both ways the same result
    a, b = _zipf_rows(200, 3000, 5), _zipf_rows(90, 3000, 6)
    with_int32 = dense_outer(a, b), dense_gram(a)
    monkeypatch.setattr(outer, "_index_dtype", lambda *sizes: np.int64)
    for got, ref in zip((dense_outer(a, b), dense_gram(a)), with_int32, strict=True):
        np.testing.assert_array_equal(got, ref)
    np.testing.assert_allclose(with_int32[0], (a @ b.T).toarray(), rtol=1e-12, atol=1e-12)


def test_blocks_without_heavy_columns_take_the_same_split():
    # every column rare: no dense part, the light CSR (narrowed, in slabs) does it all
    rng = np.random.default_rng(7)
    a = sp.random(300, 100_000, density=5e-4, format="csr", random_state=rng)
    b = sp.random(40, 100_000, density=5e-4, format="csr", random_state=rng)
    assert _both_kinds_of_column(a, b)[0] == 0 and _both_kinds_of_column(a, a)[0] == 0
    np.testing.assert_allclose(dense_outer(a, b), (a @ b.T).toarray(), rtol=1e-13, atol=1e-15)
    G = dense_gram(a)
    np.testing.assert_allclose(G, (a @ a.T).toarray(), rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(G, G.T)
