"""Projection Z = (X - mean) P against dense numpy, and the zarr / parquet outputs read back."""

from __future__ import annotations

import json

import dask.array as da
import numpy as np
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
import zarr
from helpers import sparse_dask

from dmlfe.projection import project, read_embeddings, write_embeddings


def setup_data(n: int = 101, D: int = 17, d: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, D, density=0.3, format="csr", random_state=seed)
    P = rng.standard_normal((D, d))
    mean = np.asarray(X.mean(axis=0)).ravel()
    ids = np.array([f"doc-{i:04d}" for i in range(n)])
    return X, P, mean, ids


def assert_close(a, b):
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * np.abs(b).max())


@pytest.mark.parametrize("rows", [10, 33, 500])
def test_project_matches_dense_numpy(rows):
    X, P, mean, _ = setup_data()
    Xd = X.toarray()
    Z = project(sparse_dask(X, rows), P, mean)
    assert isinstance(Z, da.Array) and Z.dtype == np.float64
    assert Z.chunks[0] == sparse_dask(X, rows).chunks[0]
    assert_close(Z.compute(), (Xd - mean) @ P)
    assert_close(project(sparse_dask(X, rows), P).compute(), Xd @ P)  # uncentred


def test_project_in_memory_inputs():
    X, P, mean, _ = setup_data()
    ref = (X.toarray() - mean) @ P
    assert_close(project(X, P, mean).compute(), ref)
    assert_close(project(X.toarray(), P, mean).compute(), ref)


def test_new_documents_use_the_training_mean():
    X, P, mean, _ = setup_data()
    X_new, _, _, _ = setup_data(n=12, seed=5)
    Z = project(sparse_dask(X_new, 5), P, mean).compute()
    assert_close(Z, (X_new.toarray() - mean) @ P)


def test_project_blocks_stay_sparse():
    X, P, mean, _ = setup_data()
    seen = []

    def spy(block):
        seen.append(sp.issparse(block))
        return block

    project(sparse_dask(X, 30), P, mean, block_fn=spy).compute(scheduler="sync")
    assert seen and all(seen)


@pytest.mark.parametrize("rows", [10, 33])
def test_float32_components_project_in_float32(rows, monkeypatch):
    import dmlfe.projection as projection

    X, P, mean, _ = setup_data()
    P32 = P.astype(np.float32)
    ref = (X.toarray() - mean) @ P32.astype(np.float64)  # float64 numpy on the same P
    tol = 1e-5 * np.abs(ref).max()
    monkeypatch.setattr(projection, "_OFFSET_ROWS", 4)  # the offset in several slabs
    blocks = []
    real = projection.to_float_block
    monkeypatch.setattr(projection, "to_float_block",
                        lambda xb, *a: blocks.append(real(xb, *a)) or blocks[-1])
    Z = project(sparse_dask(X, rows), P32, mean)
    assert Z.dtype == np.float32 and Z.chunks[0] == sparse_dask(X, rows).chunks[0]
    Zc = Z.compute(scheduler="sync")
    assert Zc.dtype == np.float32
    np.testing.assert_allclose(Zc, ref, rtol=0, atol=tol)
    assert blocks and all(sp.issparse(b) and b.dtype == np.float32 for b in blocks)
    Zm = project(X, P32, mean).compute()  # in memory
    assert Zm.dtype == np.float32
    np.testing.assert_allclose(Zm, ref, rtol=0, atol=tol)
    # the offset, slab by slab, is mean @ P accumulated in float64
    off = projection.mean_offset(mean, P32)
    assert off.dtype == np.float32
    np.testing.assert_allclose(off, mean @ P32.astype(np.float64), rtol=1e-6)
    # any other dtype is float64, as before
    assert project(X, P.astype(np.float16), mean).dtype == np.float64
    np.testing.assert_array_equal(projection.mean_offset(mean, P), mean @ P)


def test_shape_mismatch_is_reported():
    X, P, mean, _ = setup_data()
    with pytest.raises(ValueError, match="17 features but components have 16 rows"):
        project(X, P[:16])
    with pytest.raises(ValueError, match="mean has 16 entries"):
        project(X, P, mean[:16])


def test_write_zarr_and_read_back(tmp_path):
    X, P, mean, ids = setup_data()
    Z = project(sparse_dask(X, 30), P, mean)
    out = write_embeddings(Z, tmp_path / "emb.zarr", ids=ids, attrs={"role": "test"},
                           method="pca")
    g = zarr.open_group(str(out), mode="r")
    assert_close(read_embeddings(out), (X.toarray() - mean) @ P)
    assert_close(read_embeddings(out, 2), ((X.toarray() - mean) @ P)[:, :2])
    assert g["obsm/X_pca"].chunks == (30, 3)
    assert g["obs/_index"][:].tolist() == ids.tolist()
    meta = g.attrs["dmlfe"]
    assert meta["n"] == 101 and meta["d"] == 3 and meta["role"] == "test"
    assert [p.name for p in tmp_path.iterdir()] == ["emb.zarr"]  # no temporary left
    with pytest.raises(FileExistsError, match="overwrite=True"):
        write_embeddings(Z, out)
    # Irregular chunks and dask ids, replacing the old output.
    Z2 = project(sparse_dask(X, 30), P).rechunk({0: (40, 11, 50)})
    write_embeddings(Z2, out, ids=da.from_array(ids, chunks=25), overwrite=True)
    g = zarr.open_group(str(out), mode="r")
    assert_close(read_embeddings(out), X.toarray() @ P)
    assert "X_embedding" in g["obsm"]  # no method named
    assert g["obs/_index"][:].tolist() == ids.tolist()
    assert [p.name for p in tmp_path.iterdir()] == ["emb.zarr"]


def test_write_parquet_and_read_back(tmp_path):
    X, P, mean, ids = setup_data()
    Z = project(sparse_dask(X, 30), P, mean)
    out = write_embeddings(Z, tmp_path / "emb.parquet", ids=ids, format="parquet")
    table = pq.read_table(out)
    assert table.column_names == ["id", "z0", "z1", "z2"]
    got_ids = np.array(table.column("id").to_pylist())
    got = np.column_stack([table.column(f"z{j}").to_numpy() for j in range(3)])
    order = np.argsort(got_ids)
    np.testing.assert_array_equal(got_ids[order], ids)
    assert_close(got[order], (X.toarray() - mean) @ P)
    assert len(list(out.glob("part-*.parquet"))) == 4
    assert json.loads((out / "_dmlfe.json").read_text())["n"] == 101
    # Without ids the row number is the id.
    out2 = write_embeddings(Z, tmp_path / "noid.parquet", format="parquet")
    t2 = pq.read_table(out2)
    assert sorted(t2.column("id").to_pylist(), key=int) == [str(i) for i in range(101)]


def test_workers_write_their_chunks(cluster_client, tmp_path):
    X, P, mean, ids = setup_data(n=150)
    ref = (X.toarray() - mean) @ P
    Z = project(sparse_dask(X, 40), P, mean)
    out = write_embeddings(Z, tmp_path / "c.zarr", ids=ids, client=cluster_client)
    assert_close(read_embeddings(out), ref)
    outp = write_embeddings(
        Z,
        tmp_path / "c.parquet",
        ids=da.from_array(ids, chunks=40),
        format="parquet",
        client=cluster_client,
    )
    t = pq.read_table(outp)
    got = np.column_stack([t.column(f"z{j}").to_numpy() for j in range(3)])
    order = np.argsort(np.array(t.column("id").to_pylist()))
    assert_close(got[order], ref)


def test_bad_format_is_reported(tmp_path):
    with pytest.raises(ValueError, match="'csv' is not one of"):
        write_embeddings(np.zeros((2, 2)), tmp_path / "x", format="csv")


def _large_projection(D: int = 2**18, d: int = 8):
    """Sparse documents and components of D x d float64 (16.8 MB: above distributed's
    10 MB large-graph warning and dmlfe's SCATTER_BYTES)."""
    rng = np.random.default_rng(5)
    X = sp.random(120, D, density=2e-4, random_state=5, format="csr")
    return X, rng.standard_normal((D, d)), rng.standard_normal(D)


def test_large_components_are_scattered_not_sent_in_the_graph(cluster_client):
    # on a client, components above SCATTER_BYTES reach the workers as one scattered
    # future: the graph stays small, so distributed does not warn, and Z is unchanged
    import warnings

    from distributed import Future

    X, P, mean = _large_projection()
    ref = (X.toarray() - mean) @ P
    Z = project(sparse_dask(X, 50), P, mean, client=cluster_client)
    assert any(isinstance(v, Future) for v in _graph_leaves(Z))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Sending large graph")
        out = cluster_client.compute(Z).result()
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())
    # the default client is found without being named
    Z = project(sparse_dask(X, 50), P, mean)
    assert any(isinstance(v, Future) for v in _graph_leaves(Z))
    np.testing.assert_allclose(Z.compute(), ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())


def test_embedded_components_would_make_a_large_graph(cluster_client, monkeypatch):
    # the contrast: with scattering turned off, the same graph carries P and warns
    from dmlfe import compute

    monkeypatch.setattr(compute, "SCATTER_BYTES", 2**40)
    X, P, mean = _large_projection()
    Z = project(sparse_dask(X, 50), P, mean, client=cluster_client)
    with pytest.warns(UserWarning, match="Sending large graph"):
        cluster_client.compute(Z).result()


def test_a_local_scheduler_gets_the_components_in_the_graph(cluster_client):
    # a default client exists, but dask is set to compute locally: no future in the graph
    import dask

    X, P, mean = _large_projection()
    with dask.config.set(scheduler="threads"):
        Z = project(sparse_dask(X, 50), P, mean)
        out = Z.compute()
    from distributed import Future

    assert not any(isinstance(v, Future) for v in _graph_leaves(Z))
    np.testing.assert_allclose(out, (X.toarray() - mean) @ P, rtol=1e-10, atol=1e-9)


def _graph_leaves(Z):
    """The arguments of every task in Z's graph (futures and embedded arrays included)."""
    return [a for task in dict(Z.__dask_graph__()).values() for a in getattr(task, "args", ())]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_wide_components_in_column_blocks_give_the_csr_product_bit_for_bit(
        dtype, cluster_client):
    # d above PRODUCT_COLUMNS: sparse blocks are multiplied through their CSC form, a
    # block of P's columns at a time; each entry adds its row's products in the same
    # order as the CSR product, so the embeddings do not change by a bit
    from dmlfe import projection

    assert projection.PRODUCT_COLUMNS < 70
    X, P, mean = _large_projection(D=2**16, d=70)
    P = P.astype(dtype)
    offset = projection.mean_offset(mean, P)
    want = np.asarray(sp.csr_matrix(X, dtype=dtype) @ P) - offset
    blocks = projection.ColumnBlocks.of(P)
    assert [b.shape[1] for b in blocks.blocks] == [32, 32, 6]
    assert blocks.shape == P.shape and blocks.dtype == dtype
    np.testing.assert_array_equal(projection.project_block(X, P, offset), want)
    np.testing.assert_array_equal(projection.project_block(X, blocks, offset), want)
    # a dense block with the column blocks: the same product up to round-off
    np.testing.assert_allclose(projection.project_block(X.toarray(), blocks, offset), want,
                               rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-4 if dtype == np.float32 else 1e-12)
    # on a cluster the blocks are scattered one by one (as P would be: no large graph)
    import warnings

    Z = project(sparse_dask(X, 50), P, mean, client=cluster_client)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Sending large graph")
        np.testing.assert_array_equal(cluster_client.compute(Z).result(), want)
