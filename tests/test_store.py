"""The dmlfe store: layout, parallel assembly, reading, subsets, atomicity, parquet."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
import zarr

import dmlfe.store.layout as F
import dmlfe.store.writer as W
from dmlfe.store import (
    IncompleteStoreError,
    StoreWriter,
    export_parquet,
    import_parquet,
    open_store,
    write_piece,
)

SPLITS = ("train", "test")


def make_data(n=61, D=23, q=5, seed=0):
    """Random CSR with empty rows, labels with unlabelled docs, ids, splits, an extra column."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, D, density=0.15, format="csr", random_state=rng, dtype=np.float64)
    dense = X.toarray()
    dense[::7] = 0  # every 7th document empty
    X = sp.csr_matrix(dense)  # canonical CSR, no explicit zeros
    Y = (rng.random((n, q)) < 0.3).astype(np.uint8)
    Y[::5] = 0  # every 5th document without labels
    ids = [f"doc-{i:03d}-é" for i in range(n)]
    splits = [SPLITS[i] for i in rng.integers(0, 2, size=n)]
    extra = [f"x{i % 4}" for i in range(n)]
    return X, Y, ids, splits, {"lewissplit": extra}


def sizes_to_bounds(sizes, n):
    """Piece boundaries from a list of sizes (the last piece takes the rest)."""
    bounds = [0]
    for s in sizes:
        bounds.append(min(n, bounds[-1] + s))
    if bounds[-1] < n:
        bounds.append(n)
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def build(out, data, piece_sizes, chunk_rows, *, client=None, with_split=True, **kwargs):
    X, Y, ids, splits, meta = data
    q = Y.shape[1]
    kwargs.setdefault("label_names", [f"L{j}" for j in range(q)])
    kwargs.setdefault("feature_names", [f"w{j}" for j in range(X.shape[1])])
    with StoreWriter(out, chunk_rows=chunk_rows, overwrite=kwargs.pop("overwrite", False)) as w:
        args = [
            (
                w.tmp_path,
                k,
                X[a:b],
                Y[a:b],
                ids[a:b],
                splits[a:b] if with_split else None,
                {key: col[a:b] for key, col in meta.items()},
            )
            for k, (a, b) in enumerate(sizes_to_bounds(piece_sizes, X.shape[0]))
        ]
        if client is not None:
            pieces = client.gather([client.submit(write_piece, *a) for a in args])
        else:
            pieces = [write_piece(*a) for a in args]
        return w.finalize(pieces, n_features=X.shape[1], client=client, **kwargs)


def assert_csr_identical(A, B):
    assert isinstance(A, sp.csr_matrix) or sp.isspmatrix_csr(A)
    assert A.shape == B.shape and A.dtype == np.float64
    A, B = sp.csr_matrix(A), sp.csr_matrix(B)
    np.testing.assert_array_equal(A.indptr, B.indptr)
    np.testing.assert_array_equal(A.indices, B.indices)
    np.testing.assert_array_equal(A.data, B.data)


@pytest.fixture
def small_elem_chunk(monkeypatch):
    # several zarr chunks of X/data in a small test store
    monkeypatch.setattr(F, "ELEM_CHUNK", 37)


# ----------------------------------------------------------------------------- layout / read
@pytest.mark.parametrize(
    "piece_sizes,chunk_rows",
    [([8] * 8, 8), ([10, 0, 3, 17, 1], 8), ([1000], 5), ([6, 6, 6], 64)],
)
def test_roundtrip_open_store(tmp_path, small_elem_chunk, piece_sizes, chunk_rows):
    data = make_data()
    X, Y, ids, splits, meta = data
    out = build(
        tmp_path / "s.zarr",
        data,
        piece_sizes,
        chunk_rows,
        attrs={"source": "unit", "report": {"n_read": 61}},
    )
    assert out == (tmp_path / "s.zarr").absolute()
    assert not list(tmp_path.glob(".s.zarr.*")), "temporary directory left behind"
    for open_rows in (None, 9):
        s = open_store(out, chunk_rows=open_rows)
        cr = chunk_rows if open_rows is None else open_rows
        expected_chunks = tuple(min(cr, 61 - r) for r in range(0, 61, cr))
        assert s.X.chunks == (expected_chunks, (23,))
        assert s.Y.chunks[0] == s.ids.chunks[0] == s.split.chunks[0] == expected_chunks
        assert isinstance(s.X.blocks[0].compute(), sp.csr_matrix)
        assert_csr_identical(s.X.compute(), X)
        np.testing.assert_array_equal(s.Y.compute().toarray(), Y)
        assert s.Y.dtype == np.uint8
        assert s.ids.compute().tolist() == ids
        assert s.split.compute().tolist() == splits
    assert s.obs_column("lewissplit").tolist() == meta["lewissplit"]
    assert s.obs_columns == ["lewissplit"]
    assert s.label_names == [f"L{j}" for j in range(5)]
    assert s.feature_names == [f"w{j}" for j in range(23)]
    assert s.hashing is None
    assert s.attrs["source"] == "unit" and s.attrs["report"] == {"n_read": 61}
    assert (s.n_docs, s.n_features, s.n_labels, s.nnz) == (61, 23, 5, X.nnz)
    assert s.stored_chunk_rows == chunk_rows

    g = zarr.open_group(out, mode="r")
    assert dict(g["X"].attrs) == {
        "encoding-type": "csr_matrix",
        "encoding-version": "0.1.0",
        "shape": [61, 23],
    }
    assert g["X/data"].dtype == np.float64 and g["X/indices"].dtype == np.int32
    assert g["X/indptr"].dtype == np.int64 and g["X/indptr"].chunks == (chunk_rows,)
    assert g["X/data"].chunks == (37,)
    meta_attrs = g.attrs["dmlfe"]
    assert meta_attrs["complete"] is True and meta_attrs["nnz"] == X.nnz


def test_anndata_opens_store(tmp_path):
    anndata = pytest.importorskip("anndata")
    data = make_data()
    X, Y, ids, splits, meta = data
    out = build(tmp_path / "s.zarr", data, [20, 20, 21], 16)
    assert_csr_identical(anndata.io.read_elem(zarr.open_group(out)["X"]), X)
    ad = anndata.read_zarr(out)
    assert ad.shape == (61, 23)
    assert_csr_identical(ad.X, X)
    assert ad.obs_names.tolist() == ids
    assert ad.obs["split"].astype(str).tolist() == splits
    assert ad.obs["lewissplit"].tolist() == meta["lewissplit"]
    assert ad.var_names.tolist() == [f"w{j}" for j in range(23)]
    np.testing.assert_array_equal(ad.obsm["Y"].toarray(), Y)
    assert list(ad.uns["label_names"]) == [f"L{j}" for j in range(5)]


def test_hashing_store_without_split(tmp_path):
    anndata = pytest.importorskip("anndata")
    D = 2**18
    rng = np.random.default_rng(3)
    X = sp.random(30, D, density=1e-4, format="csr", random_state=rng)
    Y = (rng.random((30, 3)) < 0.5).astype(np.uint8)
    ids = [str(i) for i in range(30)]
    hashing = {"n_features": D, "ngram_range": [1, 3], "alternate_sign": False}
    out = build(
        tmp_path / "h.zarr",
        (X, Y, ids, ids, {}),
        [11],
        8,
        with_split=False,
        feature_names=None,
        hashing=hashing,
    )
    s = open_store(out)
    assert s.split is None and s.feature_names is None and s.hashing == hashing
    assert_csr_identical(s.X.compute(), X)
    with pytest.raises(ValueError, match="no split"):
        s.subset("train")
    ad = anndata.read_zarr(out)
    assert ad.shape == (30, D)
    assert ad.var_names[:3].tolist() == ["0", "1", "2"] and ad.var_names[-1] == str(D - 1)
    assert_csr_identical(ad.X, X)
    # the numbered var index must stay small on disk
    assert F.dir_size(out / "var") < 50_000


def test_missing_split_values(tmp_path):
    X, Y, ids, splits, meta = make_data(n=20)
    with StoreWriter(tmp_path / "m.zarr", chunk_rows=6) as w:
        pieces = [
            write_piece(w.tmp_path, 0, X[:8], Y[:8], ids[:8], [None, *splits[1:8]]),
            write_piece(w.tmp_path, 1, X[8:15], Y[8:15], ids[8:15], None),
            write_piece(w.tmp_path, 2, X[15:], Y[15:], ids[15:], splits[15:]),
        ]
        out = w.finalize(pieces, n_features=23, label_names=list("abcde"))
    s = open_store(out)
    expected = [None, *splits[1:8]] + [None] * 7 + splits[15:]
    assert s.split.compute().tolist() == expected
    info = s.info()
    assert info["docs_without_split"] == 8
    assert sum(info["splits"].values()) == 12
    assert s.feature_names is None and info["features"] == "numbered"


# ----------------------------------------------------------------------------- cluster
def _store_files(path: Path) -> dict[str, bytes]:
    # root zarr.json holds the uuid and creation time, which differ between builds
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and p != path / "zarr.json"
    }


def test_cluster_finalize_byte_identical(tmp_path, small_elem_chunk, cluster_client):
    data = make_data(n=97, seed=5)
    seq = build(tmp_path / "seq.zarr", data, [13, 0, 40, 7], 10)
    par = build(tmp_path / "par.zarr", data, [13, 0, 40, 7], 10, client=cluster_client)
    a, b = _store_files(seq), _store_files(par)
    assert a.keys() == b.keys() and len(a) > 20
    assert all(a[k] == b[k] for k in a)
    ga, gb = zarr.open_group(seq, mode="r"), zarr.open_group(par, mode="r")
    for name in ("X/data", "X/indices", "X/indptr", "obsm/Y/data", "obsm/Y/indices",
                 "obsm/Y/indptr", "obs/_index", "obs/split/codes"):
        np.testing.assert_array_equal(ga[name][:], gb[name][:])
    # finalize is also independent of how the documents were cut into pieces
    other = build(tmp_path / "other.zarr", data, [10] * 10, 10)
    c = _store_files(other)
    assert all(a[k] == c[k] for k in a) and a.keys() == c.keys()


def test_blockwise_reduction_on_cluster(tmp_path, cluster_client):
    import dask

    data = make_data(n=83, seed=7)
    X, Y, ids, _, _ = data
    s = open_store(build(tmp_path / "s.zarr", data, [30], 16), chunk_rows=11)
    nb = s.X.numblocks[0]
    colsum = s.X.map_blocks(
        lambda b: np.asarray(b.sum(axis=0)), dtype=np.float64, chunks=((1,) * nb, (s.n_features,))
    ).sum(axis=0)
    xty = s.X.map_blocks(
        lambda b, y: (b.T @ y.astype(np.float64)).toarray()[None],
        s.Y,
        dtype=np.float64,
        new_axis=2,
        chunks=((1,) * nb, (s.n_features,), (s.n_labels,)),
    ).sum(axis=0)
    got_colsum, got_xty, got_ids = dask.compute(colsum, xty, s.ids)  # default: the client
    np.testing.assert_allclose(got_colsum, np.asarray(X.sum(axis=0)).ravel(), rtol=1e-12)
    np.testing.assert_allclose(got_xty, (X.T @ Y.astype(np.float64)), rtol=1e-12)
    assert got_ids.tolist() == ids
    # a subset view works on the cluster too
    t = s.subset("test")
    mask = np.array(data[3]) == "test"
    sub = t.X.map_blocks(
        lambda b: np.asarray(b.sum(axis=0)),
        dtype=np.float64,
        chunks=((1,) * t.X.numblocks[0], (s.n_features,)),
    ).sum(axis=0)
    np.testing.assert_allclose(sub.compute(), np.asarray(X[mask].sum(axis=0)).ravel(), rtol=1e-12)


# ----------------------------------------------------------------------------- subset / info
def test_subset(tmp_path):
    data = make_data()
    X, Y, ids, splits, meta = data
    s = open_store(build(tmp_path / "s.zarr", data, [25], 8), chunk_rows=20)
    split_arr = np.array(splits)
    for wanted in ("train", ["train", "test"], ("test", "test")):
        names = [wanted] if isinstance(wanted, str) else wanted
        mask = np.isin(split_arr, names)
        t = s.subset(wanted)
        assert t.n_docs == mask.sum() and t.is_subset
        assert_csr_identical(t.X.compute(), X[mask])
        np.testing.assert_array_equal(t.Y.compute().toarray(), Y[mask])
        assert t.ids.compute().tolist() == list(np.array(ids)[mask])
        assert set(t.split.compute()) == set(split_arr[mask])
        assert t.nnz == X[mask].nnz
        assert t.obs_column("lewissplit").tolist() == list(np.array(meta["lewissplit"])[mask])
        # blocks are the original row blocks, filtered
        expected = [int(mask[r : r + 20].sum()) for r in range(0, 61, 20)]
        assert list(t.X.chunks[0]) == [c for c in expected if c]
        assert t.X.chunks[0] == t.Y.chunks[0] == t.ids.chunks[0]
    both = s.subset(["train", "test"]).subset("test")
    assert both.ids.compute().tolist() == list(np.array(ids)[split_arr == "test"])
    empty = s.subset("train").subset("test")
    assert empty.n_docs == 0 and empty.X.compute().shape == (0, 23)
    with pytest.raises(ValueError, match="'dev'.*splits are"):
        s.subset("dev")


def test_info_counts(tmp_path):
    data = make_data(n=73, seed=2)
    X, Y, ids, splits, meta = data
    out = build(tmp_path / "s.zarr", data, [30, 30], 16, attrs={"source": "unit"})
    info = open_store(out).info()
    assert info["shape"] == [73, 23] and info["nnz"] == X.nnz
    assert info["density"] == pytest.approx(X.nnz / (73 * 23))
    assert info["labels"] == {f"L{j}": int(Y[:, j].sum()) for j in range(5)}
    assert info["docs_without_labels"] == int((Y.sum(axis=1) == 0).sum())
    assert info["empty_docs"] == int((np.diff(X.indptr) == 0).sum()) >= 11
    assert info["splits"] == {s: splits.count(s) for s in ("test", "train")}
    assert info["chunking"]["chunk_rows"] == 16 and info["chunking"]["n_chunks"] == 5
    assert info["chunking"]["zarr_chunks"]["X/indptr"] == [16]
    assert info["size_on_disk_bytes"] == sum(
        p.stat().st_size for p in out.rglob("*") if p.is_file()
    )
    assert info["provenance"]["source"] == "unit"
    json.dumps(info)  # printable by the CLI
    sub = open_store(out).subset("train").info()
    mask = np.array(splits) == "train"
    assert sub["shape"] == [int(mask.sum()), 23] and sub["nnz"] == X[mask].nnz
    assert sub["docs_without_labels"] == int((Y[mask].sum(axis=1) == 0).sum())


# ----------------------------------------------------------------------------- atomicity
def test_exception_inside_writer_leaves_nothing(tmp_path):
    X, Y, ids, splits, meta = make_data(n=10)
    out = tmp_path / "s.zarr"
    with pytest.raises(RuntimeError, match="boom"), StoreWriter(out, chunk_rows=4) as w:
        write_piece(w.tmp_path, 0, X, Y, ids, splits)
        raise RuntimeError("boom")
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_failure_during_finalize_leaves_nothing(tmp_path, monkeypatch):
    X, Y, ids, splits, meta = make_data(n=10)
    out = tmp_path / "s.zarr"

    def broken(*args):
        raise OSError("disk full")

    monkeypatch.setattr(W, "_fill_row_chunk", broken)
    w = StoreWriter(out, chunk_rows=4)
    pieces = [write_piece(w.tmp_path, 0, X, Y, ids, splits)]
    with pytest.raises(OSError, match="disk full"):
        w.finalize(pieces, n_features=23, label_names=list("abcde"))
    assert list(tmp_path.iterdir()) == []


def test_incomplete_store_refused(tmp_path):
    X, Y, ids, splits, meta = make_data(n=10)
    # a crashed ingest: pieces written, then the process died (no abort, no finalize)
    w = StoreWriter(tmp_path / "s.zarr", chunk_rows=4)
    write_piece(w.tmp_path, 0, X, Y, ids, splits)
    assert not (tmp_path / "s.zarr").exists()
    with pytest.raises(IncompleteStoreError, match=r"not a complete dmlfe store \(an interrupted"):
        open_store(w.tmp_path)
    # a store whose metadata lacks the marker (killed just before writing it)
    out = build(tmp_path / "t.zarr", make_data(n=10), [10], 4)
    root = json.loads((out / "zarr.json").read_text())
    del root["attributes"]["dmlfe"]["complete"]
    (out / "zarr.json").write_text(json.dumps(root))
    with pytest.raises(IncompleteStoreError, match="not a complete dmlfe store"):
        open_store(out)
    (out / "zarr.json").write_text('{"attributes": {"dmlfe": {"n_docs": ')  # torn write
    with pytest.raises(IncompleteStoreError, match="not a complete dmlfe store"):
        open_store(out)
    with pytest.raises(FileNotFoundError, match="no store"):
        open_store(tmp_path / "absent.zarr")


def test_overwrite_semantics(tmp_path):
    out = tmp_path / "s.zarr"
    build(out, make_data(n=10, seed=1), [10], 4)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        StoreWriter(out, chunk_rows=4)
    data2 = make_data(n=12, seed=2)
    s_old = open_store(out)
    build(out, data2, [5], 4, overwrite=True)
    s = open_store(out)
    assert s.n_docs == 12
    assert_csr_identical(s.X.compute(), data2[0])
    assert s_old.n_docs == 10  # an old handle keeps its own metadata
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]
    # a store that appeared at out while the writer ran
    w = StoreWriter(tmp_path / "late.zarr", chunk_rows=4)
    pieces = [write_piece(w.tmp_path, 0, *make_data(n=10)[:4])]
    build(tmp_path / "late.zarr", make_data(n=10), [10], 4)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        w.finalize(pieces, n_features=23, label_names=list("abcde"))
    assert not w.tmp_path.exists() and open_store(tmp_path / "late.zarr").n_docs == 10
    # overwrite never replaces something that is not a store
    other = tmp_path / "notes"
    other.mkdir()
    (other / "precious.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a zarr store"):
        StoreWriter(other, chunk_rows=4, overwrite=True)
    assert (other / "precious.txt").exists()


def test_writer_removes_what_killed_writers_left(tmp_path):
    """A new writer for OUT removes the temporaries of OUT whose process is gone (with
    a warning naming each), and leaves those of live processes and other outputs."""
    import os
    import subprocess
    import sys
    import time

    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()  # its pid is now that of no process
    out = tmp_path / "s.zarr"
    dead = tmp_path / f".s.zarr.tmp-{done.pid}-0123456789ab"
    (dead / "pieces" / "00000000").mkdir(parents=True)
    (dead / "pieces" / "00000000" / "data.npy").write_bytes(b"\0" * 1000)
    old_format = tmp_path / ".s.zarr.tmp-0f1e2d3c4b5a69788796a5b4c3d2e1f0"  # no pid
    old_format.mkdir()
    hours_ago = time.time() - 2 * 3600
    os.utime(old_format, (hours_ago, hours_ago))
    recent_old_format = tmp_path / ".s.zarr.tmp-ffffffffffffffffffffffffffffffff"
    recent_old_format.mkdir()  # no pid and young: perhaps still being written
    live = tmp_path / f".s.zarr.tmp-{os.getpid()}-aaaaaaaaaaaa"
    live.mkdir()
    other = tmp_path / f".t.zarr.tmp-{done.pid}-bbbbbbbbbbbb"
    other.mkdir()
    with pytest.warns(RuntimeWarning) as record:
        build(out, make_data(n=10), [10], 4)
    messages = " ".join(str(w.message) for w in record)
    assert str(dead) in messages and str(old_format) in messages
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["s.zarr", recent_old_format.name, live.name, other.name])
    assert open_store(out).n_docs == 10
    # the writer's own temporary carries its pid, so it is never taken for a stale one
    w = StoreWriter(tmp_path / "u.zarr", chunk_rows=4)
    assert w.tmp_path.name.startswith(f".u.zarr.tmp-{os.getpid()}-")
    w.abort()


# ----------------------------------------------------------------------------- bad inputs
def test_bad_inputs(tmp_path):
    X, Y, ids, splits, meta = make_data(n=10)
    with StoreWriter(tmp_path / "a.zarr", chunk_rows=4) as w:
        with pytest.raises(ValueError, match=r"must be 0/1 but holds 2 at document 'doc-003-é'"):
            Y2 = Y.copy()
            Y2[3, 1] = 2
            write_piece(w.tmp_path, 0, X, Y2, ids, splits)
        with pytest.raises(ValueError, match="9 ids for 10 rows"):
            write_piece(w.tmp_path, 0, X, Y, ids[:9], splits)
        with pytest.raises(ValueError, match="non-finite value in document 'doc-002-é'"):
            X2 = X.tolil()
            X2[2, 0] = np.nan
            write_piece(w.tmp_path, 0, X2.tocsr(), Y, ids, splits)
        with pytest.raises(ValueError, match="reserved"):
            write_piece(w.tmp_path, 0, X, Y, ids, splits, {"split": splits})
        p0 = write_piece(w.tmp_path, 0, X, Y, ids, splits)
        p1 = write_piece(w.tmp_path, 1, X[:3], Y[:3], ["n1", "n2", ids[7]], splits[:3])
        with pytest.raises(ValueError, match="duplicate document id 'doc-007-é'"):
            w.finalize([p0, p1], n_features=23, label_names=list("abcde"))
    assert list(tmp_path.iterdir()) == []

    def finalize_error(match, **kwargs):
        with StoreWriter(tmp_path / "b.zarr", chunk_rows=4) as w:
            pieces = [write_piece(w.tmp_path, 0, X, Y, ids, splits)]
            kwargs.setdefault("n_features", 23)
            kwargs.setdefault("label_names", list("abcde"))
            with pytest.raises((ValueError, TypeError), match=match):
                w.finalize(pieces, **kwargs)
        assert not (tmp_path / "b.zarr").exists()

    finalize_error("duplicate label name 'b'", label_names=list("abcbe"))
    finalize_error("4 label names", label_names=list("abcd"))
    finalize_error("X has 23 columns but n_features = 24", n_features=24)
    finalize_error("22 feature names", feature_names=[str(i) for i in range(22)])
    finalize_error("duplicate feature name 'w'", feature_names=["w"] * 23)
    finalize_error("not both", feature_names=[str(i) for i in range(23)], hashing={"n": 1})
    finalize_error("JSON serialisable", attrs={"source": object()})
    with pytest.raises(ValueError, match="chunk_rows"):
        StoreWriter(tmp_path / "c.zarr", chunk_rows=0)


# ----------------------------------------------------------------------------- parquet
def _assert_same_store(a, b):
    assert_csr_identical(a.X.compute(), b.X.compute())
    np.testing.assert_array_equal(a.Y.compute().toarray(), b.Y.compute().toarray())
    assert a.ids.compute().tolist() == b.ids.compute().tolist()
    assert (a.split is None) == (b.split is None)
    if a.split is not None:
        assert a.split.compute().tolist() == b.split.compute().tolist()
    assert a.label_names == b.label_names and a.feature_names == b.feature_names
    # a store written anew (an import) starts a history of its own, with its own fingerprint
    assert a.hashing == b.hashing
    assert {k: v for k, v in a.attrs.items() if k != "history"} == \
        {k: v for k, v in b.attrs.items() if k != "history"}
    assert [e["fingerprint"] for e in b.history()] == [b.fingerprint]
    assert a.obs_columns == b.obs_columns
    for k in a.obs_columns:
        assert a.obs_column(k).tolist() == b.obs_column(k).tolist()


def test_parquet_roundtrip(tmp_path, cluster_client):
    data = make_data(n=67, seed=4)
    X, Y, ids, splits, meta = data
    src = open_store(
        build(
            tmp_path / "s.zarr", data, [20], 16, attrs={"source": "unit", "report": {"n_read": 67}}
        )
    )
    pq_path = export_parquet(src, tmp_path / "s.parquet", row_group_rows=13)
    f = pq.ParquetFile(pq_path)
    assert f.num_row_groups == 6
    assert f.schema_arrow.names == ["id", "split", "indices", "values", "labels", "lewissplit"]
    table = f.read()
    row = 1  # hand check one document against the input
    assert table["id"][row].as_py() == ids[row]
    assert table["indices"][row].as_py() == X[row].indices.tolist()
    assert table["values"][row].as_py() == X[row].data.tolist()
    assert table["labels"][row].as_py() == [f"L{j}" for j in np.flatnonzero(Y[row])]
    assert table["labels"][0].as_py() == []  # document 0 has no labels
    back = open_store(import_parquet(pq_path, tmp_path / "back.zarr"))
    _assert_same_store(src, back)
    assert back.stored_chunk_rows == 16
    again = open_store(
        import_parquet(pq_path, tmp_path / "again.zarr", chunk_rows=7, client=cluster_client)
    )
    _assert_same_store(src, again)
    with pytest.raises(FileExistsError):
        export_parquet(src, pq_path)
    # a subset exports only its documents
    sub_path = export_parquet(src.subset("test"), tmp_path / "test.parquet")
    sub = open_store(import_parquet(sub_path, tmp_path / "test.zarr"))
    _assert_same_store(src.subset("test"), sub)


def test_parquet_roundtrip_hashing(tmp_path):
    rng = np.random.default_rng(9)
    D = 2**18
    X = sp.random(25, D, density=1e-4, format="csr", random_state=rng)
    Y = (rng.random((25, 2)) < 0.5).astype(np.uint8)
    ids = [f"h{i}" for i in range(25)]
    src = open_store(
        build(
            tmp_path / "h.zarr",
            (X, Y, ids, ids, {}),
            [9],
            8,
            with_split=False,
            feature_names=None,
            hashing={"n_features": D},
        )
    )
    back = open_store(
        import_parquet(export_parquet(src, tmp_path / "h.parquet"), tmp_path / "back.zarr")
    )
    _assert_same_store(src, back)
    assert pq.read_table(tmp_path / "h.parquet")["split"].null_count == 25


def test_take_rows_of_a_store_and_of_a_view(tmp_path):
    rng = np.random.default_rng(3)
    X = sp.random(50, 7, density=0.3, format="csr", random_state=4)
    Y = (rng.uniform(size=(50, 3)) < 0.4).astype(np.uint8)
    ids = [f"d{i}" for i in range(50)]
    splits = ["train" if i % 3 else "test" for i in range(50)]
    with StoreWriter(tmp_path / "s.zarr", chunk_rows=8) as w:
        pieces = [write_piece(w.tmp_path, k, X[s:s + 8], Y[s:s + 8], ids[s:s + 8],
                              splits[s:s + 8]) for k, s in enumerate(range(0, 50, 8))]
        w.finalize(pieces, n_features=7, label_names=["a", "b", "c"])
    store = open_store(tmp_path / "s.zarr")
    rows = np.array([41, 3, 17, 8, 9, 0])
    part = store.take(rows)
    order = np.sort(rows)
    assert (part.X.compute() != X[order]).nnz == 0
    np.testing.assert_array_equal(part.Y.compute().toarray(), Y[order])
    train = store.subset("train")
    train_rows = np.flatnonzero(np.array(splits) == "train")
    sub = train.take([0, 5, 6])
    assert list(sub.ids.compute()) == [ids[i] for i in train_rows[[0, 5, 6]]]
    with pytest.raises(ValueError, match="row positions"):
        store.take([50])


def test_reading_a_store_imports_neither_pandas_nor_pyarrow():
    """What a dask worker imports to read chunks, run a pass and project (no obs reader)."""
    import subprocess
    import sys

    code = ("import sys, dmlfe.store.reader, dmlfe.stats.pass_, dmlfe.stats.gram, "
            "dmlfe.projection; "
            "print(sorted(m for m in ('pandas', 'pyarrow', 'sklearn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
    import dmlfe.store as store

    assert {"open_store", "StoreWriter", "export_parquet"} <= set(dir(store))
    assert store.open_store is open_store
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        store.nope  # noqa: B018
