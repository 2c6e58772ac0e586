"""Issue 47: labels kept sparse (CSR) in the store, its readers and the corpus readers."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from helpers import write_store

import dmlfe
from dmlfe.cli import main
from dmlfe.labels import dense_labels, label_rows, sparse_labels
from dmlfe.readers.xmc import read_xmc
from dmlfe.store import layout as F
from dmlfe.store import open_store
from dmlfe.store.integrity import build_record
from dmlfe.store.verify import verify_store

N, D, Q = 90, 12, 7


def _xmc_text(n: int, d: int, q: int, seed: int, labels_per_doc: int = 3) -> str:
    """An XMC file's text: header, then ``l1,l2 f:v ...`` per document."""
    rng = np.random.default_rng(seed)
    lines = [f"{n} {d} {q}"]
    for i in range(n):
        k = int(rng.integers(0, labels_per_doc + 1)) if i % 7 else 0  # some unlabelled
        labs = sorted(rng.choice(q, size=k, replace=False).tolist())
        feats = sorted(rng.choice(d, size=3, replace=False).tolist())
        lines.append(",".join(map(str, labs)) + " " + " ".join(f"{j}:{1 + j % 3}"
                                                              for j in feats))
    return "\n".join(lines) + "\n"


def _dense_from_xmc(text: str) -> np.ndarray:
    """The 0/1 labels of an XMC file, built here from its text (not by dmlfe)."""
    lines = text.splitlines()
    n, _, q = (int(v) for v in lines[0].split())
    Y = np.zeros((n, q), dtype=np.uint8)
    for r, line in enumerate(lines[1:]):
        head = line.split(" ", 1)[0]
        if head and ":" not in head:
            Y[r, [int(v) for v in head.split(",")]] = 1
    return Y


def _store_data(seed: int = 0) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.3, format="csr", random_state=seed, dtype=np.float64)
    X.data = rng.uniform(0.5, 2.0, X.nnz)
    Y = (rng.random((N, Q)) < 0.3).astype(np.uint8)
    Y[::6] = 0
    splits = np.where(np.arange(N) % 4 == 0, "test", "train")
    return X, Y, splits


def make_v1(store: Path) -> Path:
    """The store rewritten in format version 1: a dense n x q uint8 ``obsm/Y`` (as dmlfe
    wrote it before issue 47), with its integrity record rebuilt."""
    s = open_store(store)
    Y = s.Y.compute().toarray()
    meta = dict(s._meta)
    shutil.rmtree(store / "obsm" / "Y")
    group = zarr.open_group(str(store), mode="r+")
    F.new_array(group["obsm"], "Y", Y.shape, (s.stored_chunk_rows, max(Y.shape[1], 1)),
                np.uint8, F.ARRAY_ENC)[:] = Y
    meta["format_version"] = 1
    meta.pop("label_nnz")
    meta["uuid"] = uuid.uuid4().hex  # another store (this process has the first open)
    doc = json.loads((store / "zarr.json").read_text())
    doc["attributes"]["dmlfe"] = meta
    (store / "zarr.json").write_text(json.dumps(doc))
    meta["integrity"] = build_record(store)
    doc["attributes"]["dmlfe"] = meta
    (store / "zarr.json").write_text(json.dumps(doc))
    return store


# --------------------------------------------------------------------------- round trip
def test_xmc_round_trip_keeps_labels_sparse(tmp_path):
    text = _xmc_text(150, 20, 40, seed=1)
    path = tmp_path / "c.txt"
    path.write_text(text)
    out = dmlfe.ingest(path, "xmc", tmp_path / "s.zarr", chunk_rows=32)
    store = open_store(out)
    assert store.format_version == F.FORMAT_VERSION == 2
    Y = store.Y.compute()
    assert sp.isspmatrix_csr(Y) and Y.dtype == np.uint8 and Y.shape == (150, 40)
    expected = _dense_from_xmc(text)
    np.testing.assert_array_equal(Y.toarray(), expected)
    assert store.Y._meta.shape == (0, 0) and sp.issparse(store.Y._meta)
    # on disk: anndata's csr_matrix encoding, ones and int32 label columns
    group = zarr.open_group(str(out), mode="r")
    assert group["obsm/Y"].attrs["encoding-type"] == "csr_matrix"
    assert list(group["obsm/Y"].attrs["shape"]) == [150, 40]
    assert group["obsm/Y/indices"].dtype == np.int32
    assert group["obsm/Y/indptr"].dtype == np.int64
    assert (group["obsm/Y/data"][:] == 1).all() and group["obsm/Y/data"].shape == \
        (int(expected.sum()),)
    # every block, view and iteration gives CSR
    for block in store.iter_blocks():
        assert sp.isspmatrix_csr(block["Y"])
    rows = np.arange(0, 150, 4)
    np.testing.assert_array_equal(store.take(rows).Y.compute().toarray(), expected[rows])
    np.testing.assert_array_equal(store.since(100).Y.compute().toarray(), expected[100:])
    np.testing.assert_array_equal(store.reblock(7).Y.compute().toarray(), expected)
    split = np.asarray(store.split.compute())
    np.testing.assert_array_equal(store.subset("c").Y.compute().toarray(),
                                  expected[split == "c"])


def test_anndata_reads_csr_labels(tmp_path):
    anndata = pytest.importorskip("anndata")
    X, Y, splits = _store_data()
    store = write_store(tmp_path / "s.zarr", X, Y, splits, chunk_rows=16)
    adata = anndata.read_zarr(store)
    assert sp.issparse(adata.obsm["Y"]) and adata.obsm["Y"].format == "csr"
    np.testing.assert_array_equal(adata.obsm["Y"].toarray(), Y)


def test_labels_read_on_two_worker_cluster(tmp_path, cluster_client):
    import dask

    X, Y, splits = _store_data(seed=3)
    store = open_store(write_store(tmp_path / "s.zarr", X, Y, splits, chunk_rows=16))
    counts = store.Y.map_blocks(lambda b: np.asarray(b.sum(axis=0)), dtype=np.int64,
                                chunks=((1,) * store.Y.numblocks[0], (Q,)),
                                meta=np.empty((0, 0), dtype=np.int64))
    got, whole = dask.compute(counts, store.subset("train").Y)  # the client: processes
    np.testing.assert_array_equal(got.sum(axis=0), Y.sum(axis=0))
    assert sp.isspmatrix_csr(whole)
    np.testing.assert_array_equal(whole.toarray(), Y[splits == "train"])
    np.testing.assert_array_equal(sparse_labels(store.Y, cluster_client).toarray(), Y)


# --------------------------------------------------------------------------- memory
def test_reader_at_30000_labels_never_builds_a_dense_block(tmp_path):
    q, n = 30_000, 400
    path = tmp_path / "big.txt"
    path.write_text(_xmc_text(n, 50, q, seed=4, labels_per_doc=5))
    src = read_xmc(path)
    nnz = 0
    for batch in src.batches(200):
        assert sp.isspmatrix_csr(batch.Y) and batch.Y.shape == (len(batch), q)
        nbytes = batch.Y.data.nbytes + batch.Y.indices.nbytes + batch.Y.indptr.nbytes
        # O(nnz + rows): far below the 200 x 30,000 bytes of a dense block
        assert nbytes <= 16 * (batch.Y.nnz + len(batch) + 1)
        nnz += batch.Y.nnz
    store = open_store(dmlfe.ingest(path, "xmc", tmp_path / "s.zarr", chunk_rows=128))
    assert store.n_labels == q
    size = sum(f.stat().st_size for f in (store.path / "obsm" / "Y").rglob("c/*"))
    assert size < 16 * (nnz + n)  # no n x q array on disk either
    info = store.info()
    stats = info["label_stats"]
    assert stats["n_labels"] == q and stats["label_pairs"] == nnz
    assert len(stats["docs_per_label"]["top"]) == 10
    lines = main_lines(["info", str(store.path)])
    assert sum(ln.startswith("  ") for ln in lines) < 120  # short at 30,000 labels


def main_lines(argv: list[str]) -> list[str]:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    return buf.getvalue().splitlines()


def test_info_label_statistics(tmp_path):
    X, Y, splits = _store_data(seed=5)
    Y[:, 6] = 0
    Y[10, 6] = 1  # a label on one document
    store = open_store(write_store(tmp_path / "s.zarr", X, Y, splits, chunk_rows=16))
    info = store.info()
    counts = Y.sum(axis=0)
    assert info["labels"] == {f"L{j}": int(c) for j, c in enumerate(counts)}
    assert info["docs_without_labels"] == int((Y.sum(axis=1) == 0).sum())
    stats = info["label_stats"]
    per_label, per_doc = stats["docs_per_label"], stats["labels_per_doc"]
    assert (per_label["min"], per_label["max"]) == (int(counts.min()), int(counts.max()))
    assert per_label["median"] == float(np.median(counts))
    assert per_label["labels_with_one_doc"] == 1
    assert per_label["top"][0] == [f"L{int(np.argmax(counts))}", int(counts.max())]
    assert per_doc["mean"] == pytest.approx(Y.sum() / N)
    assert per_doc["max"] == int(Y.sum(axis=1).max())
    text = "\n".join(main_lines(["info", str(store.path)]))
    assert "documents per label: min" in text and "labels per document: mean" in text


# --------------------------------------------------------------------------- version 1
def test_version_1_store_is_read_as_csr(tmp_path):
    X, Y, splits = _store_data(seed=6)
    store = make_v1(write_store(tmp_path / "s.zarr", X, Y, splits, chunk_rows=16))
    s = open_store(store)
    assert s.format_version == 1
    got = s.Y.compute()
    assert sp.isspmatrix_csr(got)
    np.testing.assert_array_equal(got.toarray(), Y)
    np.testing.assert_array_equal(s.subset("test").Y.compute().toarray(), Y[splits == "test"])
    assert s.info()["label_stats"]["label_pairs"] == int(Y.sum())
    assert verify_store(store).ok


def test_append_migrates_a_version_1_store(tmp_path):
    X, Y, splits = _store_data(seed=7)
    cut = 60
    whole = write_store(tmp_path / "whole.zarr", X, Y, splits, chunk_rows=16)
    part = make_v1(write_store(tmp_path / "part.zarr", X[:cut], Y[:cut], splits[:cut],
                               chunk_rows=16))
    before = open_store(part)
    first = before.fingerprint["uuid"]
    from dmlfe.store.writer import StoreAppender, write_piece

    ids = [f"doc{i:03d}" for i in range(cut, N)]
    with StoreAppender(before) as w:
        piece = write_piece(w.tmp_path, 0, X[cut:], sp.csr_matrix(Y[cut:]), ids,
                            list(splits[cut:]), {})
        entry = w.finalize([piece], source={"format": "test"})
    assert entry["migrated_from_format"] == 1
    after = open_store(part)
    assert after.format_version == 2 and after.fingerprint["uuid"] != first
    np.testing.assert_array_equal(after.Y.compute().toarray(), Y)
    assert (after.X.compute() != open_store(whole).X.compute()).nnz == 0
    assert verify_store(part).ok
    assert not (part / "obsm" / "Y" / "c").exists()  # the dense array is gone


def test_append_to_version_2_store_keeps_label_chunks(tmp_path, monkeypatch):
    """Several label element chunks: the append rewrites only the last one."""
    monkeypatch.setattr(F, "ELEM_CHUNK", 16)
    X, Y, splits = _store_data(seed=8)
    cut = 50
    part = write_store(tmp_path / "part.zarr", X[:cut], Y[:cut], splits[:cut], chunk_rows=16)
    from dmlfe.store.writer import StoreAppender, write_piece

    ids = [f"doc{i:03d}" for i in range(cut, N)]
    with StoreAppender(open_store(part)) as w:
        piece = write_piece(w.tmp_path, 0, X[cut:], Y[cut:], ids, list(splits[cut:]), {})
        w.finalize([piece], source={"format": "test"})
    after = open_store(part)
    np.testing.assert_array_equal(after.Y.compute().toarray(), Y)
    assert len(list((part / "obsm" / "Y" / "indices" / "c").iterdir())) > 2
    assert verify_store(part).ok


# --------------------------------------------------------------------------- verify
def _write_label_element(store: Path, name: str, pos: int, value: int) -> None:
    arr = zarr.open_array(str(store / "obsm" / "Y" / name), mode="r+")
    arr[pos] = value


@pytest.mark.parametrize("name, value, message", [
    ("data", 2, "obsm/Y/data: element 3 (document row"),
    ("indices", Q + 5, f"label indices outside [0, {Q}) ({Q + 5} at element 3)"),
])
def test_verify_catches_a_damaged_label_chunk(tmp_path, name, value, message):
    X, Y, splits = _store_data(seed=9)
    store = write_store(tmp_path / "s.zarr", X, Y, splits, chunk_rows=16)
    _write_label_element(store, name, 3, value)
    report = verify_store(store)  # with its record: the chunk's CRC-32 differs
    assert not report.ok and any(p.startswith(f"obsm/Y/{name}: chunk c/0 ")
                                 for p in report.problems), report.problems
    doc = json.loads((store / "zarr.json").read_text())
    doc["attributes"]["dmlfe"].pop("integrity")  # without one: the values are checked
    (store / "zarr.json").write_text(json.dumps(doc))
    report = verify_store(store)
    assert not report.ok and any(message in p for p in report.problems), report.problems


def test_verify_catches_unsorted_labels_of_a_row(tmp_path):
    X, Y, splits = _store_data(seed=10)
    Y[1] = 0
    Y[1, [2, 4]] = 1
    store = write_store(tmp_path / "s.zarr", X, Y, splits, chunk_rows=16)
    start = int(zarr.open_array(str(store / "obsm/Y/indptr"), mode="r")[1])
    _write_label_element(store, "indices", start + 1, 1)  # row 1: labels 2, 1
    doc = json.loads((store / "zarr.json").read_text())
    doc["attributes"]["dmlfe"].pop("integrity")
    (store / "zarr.json").write_text(json.dumps(doc))
    problems = verify_store(store).problems
    assert any("obsm/Y/indices" in p and "do not increase" in p for p in problems), problems


# --------------------------------------------------------------------------- helpers
def test_write_piece_rejects_non_binary_sparse_labels(tmp_path):
    from dmlfe.store import StoreWriter, write_piece

    X, Y, splits = _store_data()
    bad = sp.csr_matrix(Y[:10])
    bad.data[0] = 3
    with StoreWriter(tmp_path / "s.zarr", chunk_rows=8) as w, \
            pytest.raises(ValueError, match=r"piece 0: label matrix Y must be 0/1 but holds 3 "
                          r"at document 'd\d'"):
        write_piece(w.tmp_path, 0, X[:10], bad, [f"d{i}" for i in range(10)], None)


def test_label_helpers():
    Y = label_rows([[3, 1], [], [0, 0, 2]], 5)
    assert sp.isspmatrix_csr(Y) and Y.dtype == np.uint8
    np.testing.assert_array_equal(Y.toarray(), [[0, 1, 0, 1, 0], [0] * 5, [1, 0, 1, 0, 0]])
    import dask.array as da

    dense = Y.toarray()
    for given in (dense, Y, da.from_array(dense, chunks=(2, 5))):
        got = sparse_labels(given)
        assert sp.isspmatrix_csr(got) and got.dtype == np.uint8
        np.testing.assert_array_equal(got.toarray(), dense)
        np.testing.assert_array_equal(dense_labels(given), dense.astype(np.float64))
