"""The XMC and svmlight readers and exports (issue 36): files written here with the
quirks of the formats, compared with the matrices they were written from, with
scikit-learn's ``load_svmlight_file`` where it can read them, and read back after export."""

from __future__ import annotations

import gzip
import io
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import data_path, mulan_arrays
from sklearn.datasets import load_svmlight_file
from test_fuzz_readers import Case, _check, _drain_numeric, mutate, run_cases

from dmlfe import ingest
from dmlfe.cli import main
from dmlfe.errors import DataFormatError, InputError, MissingPathError
from dmlfe.readers import base
from dmlfe.readers.xmc import read_name_map, read_svmlight, read_xmc
from dmlfe.store import export_svmlight, export_xmc, open_store

# ----------------------------------------------------------------------------- helpers


def _corpus(n: int, D: int, q: int, seed: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """Random features and labels with documents without labels, without features, and
    without either; values of many magnitudes and signs."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, D, density=0.15, random_state=rng, format="csr")
    X.data = rng.choice([-2.5, 0.125, 1.0, 3.75e-4, 1e6, 0.1, 7.0], size=X.nnz)
    keep = np.ones(n)
    keep[::11] = 0  # documents without features
    X = sp.csr_matrix(sp.diags(keep) @ X)
    X.eliminate_zeros()
    X.sort_indices()
    Y = (rng.random((n, q)) < 0.3).astype(np.uint8)
    Y[::7] = 0  # documents without labels (every 77th has neither)
    return X, Y


def _lines(X, Y, *, offset: int, svmlight: bool, seed: int = 0,
           shuffle: bool = True) -> list[str]:
    """Document lines with the quirks: features shuffled (unless not ``shuffle``),
    explicit zeros, spaces after commas, unlabelled lines led by a space or by the first
    feature, trailing blanks, and (svmlight) qid: tokens and comments after the data."""
    rng = np.random.default_rng(seed)
    D = X.shape[1]
    out = []
    for r in range(X.shape[0]):
        cols = X.indices[X.indptr[r] : X.indptr[r + 1]]
        vals = X.data[X.indptr[r] : X.indptr[r + 1]]
        feats = [f"{c + offset}:{float(v)!r}" for c, v in zip(cols, vals, strict=True)]
        free = sorted(set(range(D)) - set(cols.tolist()))
        if r % 5 == 0 and free:
            feats.append(f"{free[0] + offset}:0")  # an explicit zero
        order = rng.permutation(len(feats)) if shuffle else \
            np.argsort([int(f.split(":")[0]) for f in feats])
        feats = [feats[i] for i in order]
        labs = np.flatnonzero(Y[r]).tolist()
        lab = (", " if r % 3 == 0 else ",").join(map(str, labs))
        if svmlight and labs and r % 4 == 1:
            feats.insert(0, f"qid:{r}")
        if svmlight and not labs and not feats:
            feats = [f"{offset}:0"]  # svmlight skips blank lines
        if labs:
            line = f"{lab} {' '.join(feats)}".rstrip()
        else:
            line = (" " if r % 2 else "") + " ".join(feats)
        if r % 4 == 0:
            line += "  \t"
        if svmlight and r % 6 == 0:
            line += " # a comment: 1:2 3,4"
        out.append(line)
    return out


def _write(path: Path, lines: list[str], header: str | None = None, crlf_every: int = 2,
           tail: str = "\n\n") -> Path:
    parts = [] if header is None else [header + "\r\n"]
    for i, line in enumerate(lines):
        parts.append(line + ("\r\n" if i % crlf_every == 0 else "\n"))
    path.write_bytes(("".join(parts) + tail).encode("utf-8"))
    return path


def _xmc_file(path: Path, X, Y, **kw) -> Path:
    header = f"{X.shape[0]} {X.shape[1]} {Y.shape[1]}"
    return _write(path, _lines(X, Y, offset=0, svmlight=False), header, **kw)


def _read(src, batch_size: int = 1000):
    bs = list(src.batches(batch_size))
    X = sp.vstack([b.X for b in bs], format="csr")
    Y = np.vstack([b.Y.toarray() for b in bs])
    ids = [i for b in bs for i in b.ids]
    splits = [s for b in bs for s in b.splits]
    return X, Y, ids, splits, [len(b) for b in bs]


def _store_arrays(path):
    blocks = list(open_store(path).iter_blocks())
    X = sp.vstack([b["X"] for b in blocks], format="csr")
    return X, np.vstack([b["Y"].toarray() for b in blocks]), len(blocks)


def _same(A, B) -> None:
    assert A.shape == B.shape
    assert (sp.csr_matrix(A) != sp.csr_matrix(B)).nnz == 0


# ----------------------------------------------------------------------------- XMC


def test_xmc_quirks_read_as_written(tmp_path):
    X, Y = _corpus(120, 25, 6, seed=1)
    path = _xmc_file(tmp_path / "eurlex_train.txt", X, Y)
    src = read_xmc(path)
    Xr, Yr, ids, splits, _ = _read(src)
    _same(Xr, X)
    np.testing.assert_array_equal(Yr, Y)
    assert Xr.dtype == np.float64 and Yr.dtype == np.uint8
    assert src.label_names == [str(i) for i in range(6)]
    assert src.feature_names is None and src.n_features == 25
    assert ids[:2] == ["eurlex_train:0", "eurlex_train:1"] and set(splits) == {"train"}
    assert src.report.n_read == 120
    assert f"{int((Y.sum(axis=1) == 0).sum())} documents without labels" in src.report.notes


def test_xmc_header_keeps_unused_trailing_columns(tmp_path):
    X, Y = _corpus(30, 8, 3, seed=2)
    path = _write(tmp_path / "a.txt", _lines(X, Y, offset=0, svmlight=False), "30 12 5")
    Xr, Yr, *_ = _read(read_xmc(path))
    assert Xr.shape == (30, 12) and Yr.shape == (30, 5)
    _same(Xr[:, :8], X)
    assert Xr[:, 8:].nnz == 0 and not Yr[:, 3:].any()


def test_xmc_blank_line_is_an_empty_document_within_the_count(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("3 4 2\n1 0:1\n\n0 3:2\n\n\n")
    Xr, Yr, *_ = _read(read_xmc(path))
    np.testing.assert_array_equal(Xr.toarray(), [[1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 2]])
    np.testing.assert_array_equal(Yr, [[0, 1], [0, 0], [1, 0]])


def test_label_and_feature_maps_name_the_columns(tmp_path):
    X, Y = _corpus(20, 5, 3, seed=3)
    path = _xmc_file(tmp_path / "a.txt", X, Y)
    (tmp_path / "labels.txt").write_bytes(b"\xef\xbb\xbfsport\r\npolitics\r\ncaf\xc3\xa9\r\n\n")
    (tmp_path / "features.txt").write_text("a\nb\nc\nd\ne\n")
    src = read_xmc(path, label_map=tmp_path / "labels.txt",
                   feature_map=tmp_path / "features.txt")
    assert src.label_names == ["sport", "politics", "café"]
    assert src.feature_names == list("abcde")


def test_train_and_test_files_are_one_corpus_with_splits(tmp_path):
    X, Y = _corpus(50, 10, 4, seed=4)
    a = _xmc_file(tmp_path / "train.txt", X[:30], Y[:30])
    b = tmp_path / "test.txt.gz"
    b.write_bytes(gzip.compress(_xmc_file(tmp_path / "t", X[30:], Y[30:]).read_bytes()))
    Xr, Yr, ids, splits, sizes = _read(read_xmc([a, b]), batch_size=7)
    _same(Xr, X)
    np.testing.assert_array_equal(Yr, Y)
    assert splits == ["train"] * 30 + ["test"] * 20
    assert ids[29:31] == ["train:29", "test:0"]
    assert sizes == [7] * 7 + [1]  # batches run across the files


def test_chunks_equal_one_read_and_the_report_counts_each_pass_once(tmp_path):
    X, Y = _corpus(3000, 60, 9, seed=5)
    path = _xmc_file(tmp_path / "big.txt", X, Y)
    src = read_xmc(path)
    one = _read(src, batch_size=10_000)
    many = _read(src, batch_size=37)
    assert one[4] == [3000] and many[4] == [37] * 81 + [3]
    _same(many[0], one[0])
    np.testing.assert_array_equal(many[1], one[1])
    assert many[2] == one[2]
    _same(one[0], X)
    assert src.report.n_read == 3000


# ----------------------------------------------------------------------------- svmlight


def test_svmlight_equals_scikit_learn_where_it_reads(tmp_path):
    """Comments, qid:, one-based indices and unlabelled lines led by a space: the
    lines scikit-learn's reader accepts; both readers must agree on them."""
    X, Y = _corpus(150, 20, 5, seed=6)
    lines = _lines(X, Y, offset=1, svmlight=True, shuffle=False)  # sklearn wants them sorted
    lines = [(" " + ln) if ln[:1].isdigit() and ":" in ln.split()[0] else ln.replace(", ", ",")
             for ln in lines]
    path = _write(tmp_path / "rcv1.svm", ["# header comment"] + lines, crlf_every=3)
    Xs, ys = load_svmlight_file(str(path), multilabel=True, zero_based=False)
    src = read_svmlight(path)
    Xr, Yr, *_ = _read(src, batch_size=16)
    assert Xr.shape[0] == Xs.shape[0] == 150
    _same(Xr[:, : Xs.shape[1]], Xs)
    assert Xr[:, Xs.shape[1] :].nnz == 0
    for r, labs in enumerate(ys):
        assert np.flatnonzero(Yr[r]).tolist() == sorted(int(v) for v in labs)
    assert any("one-based" in n for n in src.report.notes)
    assert any(n.startswith("qid: ignored on") for n in src.report.notes)


def test_svmlight_all_quirks_read_as_written(tmp_path):
    X, Y = _corpus(90, 12, 4, seed=7)
    X = X.tolil()
    X[1, 11] = 2.0  # the largest index is used: n_features = 12
    X = X.tocsr()
    Y[1, 3] = 1
    path = _write(tmp_path / "data.svm", _lines(X, Y, offset=0, svmlight=True), tail="\n# end\n")
    Xr, Yr, *_ = _read(read_svmlight(path, zero_based=True), batch_size=8)
    _same(Xr, X)
    np.testing.assert_array_equal(Yr, Y)


def test_zero_based_rule(tmp_path):
    one = tmp_path / "one.svm"
    one.write_text("0 1:1 3:2\n1 2:5\n")
    zero = tmp_path / "zero.svm"
    zero.write_text("0 0:1 3:2\n1 2:5\n")
    # auto: no index 0 -> one-based
    np.testing.assert_array_equal(_read(read_svmlight(one))[0].toarray(), [[1, 0, 2], [0, 5, 0]])
    # the same file forced zero-based keeps a column 0
    np.testing.assert_array_equal(_read(read_svmlight(one, zero_based="true"))[0].toarray(),
                                  [[0, 1, 0, 2], [0, 0, 5, 0]])
    np.testing.assert_array_equal(_read(read_svmlight(zero))[0].toarray(),
                                  [[1, 0, 0, 2], [0, 0, 5, 0]])
    with pytest.raises(DataFormatError, match=r"zero\.svm, line 1: feature index 0 in a "
                       r"one-based file .*--zero-based true"):
        read_svmlight(zero, zero_based=False)
    with pytest.raises(ValueError, match="zero_based must be 'auto', True or False"):
        read_svmlight(zero, zero_based="maybe")


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("body, pattern", [
    ("1 0:1\n0 9:2\n", r"a\.txt, line 3: feature index 9 in '9:2' is out of range: the header "
     r"of .*a\.txt \(line 1\) declares 5 features \(indices 0\.\.4\)"),
    ("1 0:1\n0 2:abc\n", r"line 3: feature value 'abc' in '2:abc' is not a number"),
    ("1 0:1\n0 2:3:4\n", r"line 3: malformed feature '2:3:4'; expected 'index:value'"),
    ("1 0:1\n0 1.5:2\n", r"line 3: feature index '1\.5' in '1\.5:2' is not an integer"),
    ("1 0:1\n0 2:nan\n", r"line 3: feature value 'nan' in '2:nan' is not finite"),
    ("1 0:1 3:1 0:2\n0 2:1\n", r"line 2: feature index 0 appears twice on the line"),
    ("1 0:1\n0,7 2:1\n", r"line 3: label index 7 is out of range: the header of .*a\.txt "
     r"\(line 1\) declares 3 labels \(indices 0\.\.2\)"),
    ("1 0:1\n0,x 2:1\n", r"line 3: label 'x' is not a label index .* in the label list '0,x'"),
    ("1 0:1\n0,,1 2:1\n", r"line 3: an empty label between commas in the label list '0,,1'"),
    ("1 0:1\n1 2:1\n0 1:1\n", r"a\.txt, line 4: document 3, but the header \(line 1\) "
     r"declares 2 documents"),
    ("1 0:1\n", r"a\.txt: the header \(line 1\) declares 2 documents but the file has 1 "
     r"document lines"),
])
def test_xmc_errors_name_file_line_and_token(tmp_path, body, pattern):
    path = tmp_path / "a.txt"
    path.write_text("2 5 3\n" + body)
    with pytest.raises(DataFormatError, match=pattern):
        _read(read_xmc(path), batch_size=1)


@pytest.mark.parametrize("header, pattern", [
    ("2 5", r"a\.txt, line 1: the XMC header must be three non-negative integers 'n_docs "
     r"n_features n_labels', found '2 5'"),
    ("1 0:1 2:3", r"line 1: the XMC header must be .*looks like a document.*'svmlight'"),
    ("2 5 0", r"line 1: the header declares 0 labels"),
])
def test_xmc_bad_header(tmp_path, header, pattern):
    path = tmp_path / "a.txt"
    path.write_text(header + "\n1 0:1\n")
    with pytest.raises(DataFormatError, match=pattern):
        read_xmc(path)


def test_xmc_headers_and_maps_must_agree(tmp_path):
    a = tmp_path / "train.txt"
    a.write_text("1 5 3\n0 1:1\n")
    b = tmp_path / "test.txt"
    b.write_text("1 6 3\n0 1:1\n")
    with pytest.raises(DataFormatError, match=r"train\.txt and .*test\.txt disagree in their "
                       r"headers \(line 1\): 5 features and 3 labels vs 6 and 3"):
        read_xmc([a, b])
    lm = tmp_path / "labels.txt"
    lm.write_text("x\ny\n")
    with pytest.raises(DataFormatError, match=r"labels\.txt: the label map has 2 names but the "
                       r"header of .*train\.txt \(line 1\) declares 3 labels"):
        read_xmc(a, label_map=lm)
    lm.write_text("x\n\ny\nz\n")
    with pytest.raises(DataFormatError, match=r"labels\.txt, line 2: blank line in the label map"):
        read_name_map(lm, "label map")
    lm.write_text("x\ny\nx\n")
    with pytest.raises(DataFormatError, match=r"labels\.txt, line 3: name 'x' is given twice "
                       r"\(first on line 1\)"):
        read_name_map(lm, "label map")
    with pytest.raises(MissingPathError, match=r"label map .*nothere\.txt does not exist"):
        read_xmc(a, label_map=tmp_path / "nothere.txt")


def test_svmlight_errors(tmp_path):
    path = tmp_path / "s.svm"
    path.write_text("# c\n1 1:1\n-1 2:1\n")
    with pytest.raises(DataFormatError, match=r"s\.svm, line 3: label '-1' is not a label index "
                       r".*binary svmlight file \(labels \+1/-1\) is not multi-label"):
        read_svmlight(path)
    path.write_text("0 1:1\n2 3:1\n")
    lm = tmp_path / "l.txt"
    lm.write_text("a\nb\n")
    with pytest.raises(DataFormatError, match=r"s\.svm, line 2: label index 2 is out of range: "
                       r"the label map .*l\.txt names 2 labels"):
        read_svmlight(path, label_map=lm)
    with pytest.raises(DataFormatError, match=r"s\.svm, line 2: feature index 3 is out of "
                       r"range: the feature map .*l\.txt names 2 features \(indices 1\.\.2\)"):
        read_svmlight(path, feature_map=lm)
    path.write_text("# only comments\n1,2\n\n")
    with pytest.raises(DataFormatError, match=r"no document holds a feature"):
        read_svmlight(path)
    path.write_text("1 1:1\n0 2:x\n")
    with pytest.raises(DataFormatError, match=r"s\.svm, line 2: feature value 'x' in '2:x'"):
        read_svmlight(path)  # refused when opened, before anything is written


def test_line_longer_than_the_limit(tmp_path, monkeypatch):
    path = tmp_path / "a.txt"
    path.write_text("2 500 2\n0 1:1\n1 " + " ".join(f"{j}:1" for j in range(400)) + "\n")
    monkeypatch.setattr(base, "MAX_LINE_BYTES", 200)
    with pytest.raises(DataFormatError, match=r"a\.txt, line 3: longer than 200 bytes"):
        _read(read_xmc(path))


# ----------------------------------------------------------------------------- ingest, export


def test_ingest_on_a_cluster_in_several_chunks(tmp_path, cluster_client):
    X, Y = _corpus(400, 30, 6, seed=8)
    path = _xmc_file(tmp_path / "data.txt", X, Y)
    store = ingest(path, "xmc", tmp_path / "s.zarr", chunk_rows=64, client=cluster_client)
    Xs, Ys, n_blocks = _store_arrays(store)
    assert n_blocks == 7
    _same(Xs, X)
    np.testing.assert_array_equal(Ys, Y)
    s = open_store(store)
    assert s.label_names == [str(i) for i in range(6)] and s.n_features == 30
    assert s.feature_names is None and s.feature_kind == "numbered"


@pytest.mark.parametrize("fmt", ["xmc", "svmlight"])
def test_round_trip_ingest_export_ingest(tmp_path, fmt):
    X, Y = _corpus(150, 18, 5, seed=9)
    (tmp_path / "labels.txt").write_text("".join(f"label {i}\n" for i in range(5)))
    (tmp_path / "features.txt").write_text("".join(f"w{i}\n" for i in range(18)))
    maps = {"label_map": tmp_path / "labels.txt", "feature_map": tmp_path / "features.txt"}
    first = ingest(_xmc_file(tmp_path / "a.txt", X, Y), "xmc", tmp_path / "a.zarr",
                   chunk_rows=40, **maps)
    out = tmp_path / f"out.{fmt}"
    export = export_xmc if fmt == "xmc" else export_svmlight
    export(first, out, label_map=tmp_path / "lm", feature_map=tmp_path / "fm")
    assert (tmp_path / "lm").read_text() == (tmp_path / "labels.txt").read_text()
    again = ingest(out, fmt, tmp_path / "b.zarr", chunk_rows=40, label_map=tmp_path / "lm",
                   feature_map=tmp_path / "fm")
    Xa, Ya, _ = _store_arrays(first)
    Xb, Yb, _ = _store_arrays(again)
    _same(Xa, X)
    _same(Xb, X)
    np.testing.assert_array_equal(Ya, Y)
    np.testing.assert_array_equal(Yb, Y)
    assert open_store(again).label_names == [f"label {i}" for i in range(5)]
    assert open_store(again).feature_names == [f"w{i}" for i in range(18)]
    with pytest.raises(FileExistsError, match="already exists"):
        export(first, out)


def test_exported_files_are_read_by_scikit_learn(tmp_path):
    X, Y = _corpus(60, 9, 3, seed=10)
    X = X.tolil()
    X[0, 8] = 1.5
    X = X.tocsr()
    store = ingest(_xmc_file(tmp_path / "a.txt", X, Y), "xmc", tmp_path / "a.zarr")
    export_svmlight(store, tmp_path / "a.svm")
    labelled = Y.sum(axis=1) > 0
    lines = (tmp_path / "a.svm").read_text().splitlines()
    assert all(ln.startswith(" ") for ln, lab in zip(lines, labelled, strict=True) if not lab)
    Xs, ys = load_svmlight_file(io.BytesIO("\n".join(lines).encode()), multilabel=True,
                                zero_based=False, n_features=9)
    _same(Xs, X)
    assert [tuple(int(v) for v in t) for t in ys] == [
        tuple(np.flatnonzero(row).tolist()) for row in Y]


def test_real_mulan_set_through_xmc(tmp_path, shared_data):
    """A real corpus (MULAN medical) exported as XMC reads back as the ARFF reader read it."""
    X, Y = mulan_arrays("medical", "train")
    store = ingest(data_path("mulan", "medical-train.arff"), "mulan", tmp_path / "m.zarr",
                   labels=data_path("mulan", "medical.xml"), chunk_rows=100)
    out = export_xmc(store, tmp_path / "medical_train.txt", label_map=tmp_path / "labels.txt")
    header = out.read_text().split("\n", 1)[0]
    assert header == f"{X.shape[0]} {X.shape[1]} {Y.shape[1]}"
    src = read_xmc(out, label_map=tmp_path / "labels.txt")
    Xr, Yr, _, splits, _ = _read(src, batch_size=64)
    _same(Xr, X)
    np.testing.assert_array_equal(Yr, Y)
    assert src.label_names == open_store(store).label_names and set(splits) == {"train"}


def test_cli_ingest_fit_export(tmp_path, cluster_client, capsys):
    X, Y = _corpus(240, 40, 4, seed=11)
    Y[:, 0] |= (np.arange(240) % 3 == 0).astype(np.uint8)  # every label is used
    a = _xmc_file(tmp_path / "train.txt", X[:180], Y[:180])
    b = _xmc_file(tmp_path / "test.txt", X[180:], Y[180:])
    address = cluster_client.scheduler.address
    store = tmp_path / "x.zarr"
    assert main(["ingest", str(a), str(b), "--format", "xmc", "--out", str(store),
                 "--chunk-rows", "50", "--scheduler", address, "--quiet"]) == 0
    Xs, Ys, n_blocks = _store_arrays(store)
    _same(Xs, X)
    np.testing.assert_array_equal(Ys, Y)
    assert n_blocks == 5
    model = tmp_path / "model"
    assert main(["fit", str(store), "--method", "mvmd", "--beta", "0.3", "--dim", "3",
                 "--split", "train", "--out", str(model), "--scheduler", address]) == 0
    assert f"model: {model.resolve()}" in capsys.readouterr().out
    out = tmp_path / "x.svm"
    assert main(["export", str(store), "--format", "svmlight", "--out", str(out),
                 "--label-map", str(tmp_path / "lm.txt")]) == 0
    again = tmp_path / "y.zarr"
    assert main(["ingest", str(out), "--format", "svmlight", "--zero-based", "false",
                 "--label-map", str(tmp_path / "lm.txt"), "--out", str(again), "--quiet"]) == 0
    Xa, Ya, _ = _store_arrays(again)
    _same(Xa, X[:, : Xa.shape[1]])  # svmlight keeps no trailing unused feature
    assert X[:, Xa.shape[1] :].nnz == 0
    np.testing.assert_array_equal(Ya, Y)


def test_cli_errors_are_one_line(tmp_path, capsys):
    path = tmp_path / "a.txt"
    path.write_text("2 5 3\n0 1:1\n1 8:1\n")
    assert main(["ingest", str(path), "--format", "xmc", "--out", str(tmp_path / "s.zarr"),
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert re.fullmatch(r"dmlfe ingest: error: .*a\.txt, line 3: feature index 8 in '8:1' is "
                        r"out of range: .*", err)
    assert not (tmp_path / "s.zarr").exists()
    store = ingest(_xmc_file(tmp_path / "b.txt", *_corpus(10, 4, 2, seed=12)), "xmc",
                   tmp_path / "b.zarr")
    assert main(["export", str(store), "--out", str(tmp_path / "b.parquet"),
                 "--label-map", str(tmp_path / "lm")]) == 2
    assert "--label-map and --feature-map go with --format xmc or svmlight" in \
        capsys.readouterr().err


def test_export_of_a_split(tmp_path):
    X, Y = _corpus(70, 10, 4, seed=13)
    a = _xmc_file(tmp_path / "x_train.txt", X[:50], Y[:50])
    b = _xmc_file(tmp_path / "x_test.txt", X[50:], Y[50:])
    store = ingest([a, b], "xmc", tmp_path / "s.zarr", chunk_rows=16)
    out = export_xmc(open_store(store).subset("test"), tmp_path / "test.txt")
    assert out.read_text().split("\n", 1)[0] == "20 10 4"
    Xr, Yr, *_ = _read(read_xmc(out))
    _same(Xr, X[50:])
    np.testing.assert_array_equal(Yr, Y[50:])


def test_undecodable_or_damaged_files_are_named(tmp_path):
    path = tmp_path / "a.svm"
    path.write_bytes(b"1 1:1\n0 2:1 # caf\xe9\n1 3:\xff\n")
    with pytest.raises(DataFormatError, match=r"a\.svm, line 3: not valid UTF-8 .*byte 0xff"):
        read_svmlight(path)
    gz = tmp_path / "b.txt.gz"
    gz.write_bytes(gzip.compress(b"2 4 2\n0 1:1\n1 2:1\n")[:-12])
    with pytest.raises(DataFormatError, match=r"b\.txt\.gz: cannot decompress .*gzip stream is "
                       r"truncated or corrupt"):
        _read(read_xmc(gz))
    with pytest.raises(DataFormatError, match=r"is not a file; pass XMC files"):
        read_xmc(tmp_path)


def test_cli_flags_of_other_formats_are_refused_in_flag_terms(tmp_path, capsys):
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": "a b", "labels": ["x"]}\n')
    assert main(["ingest", str(path), "--format", "jsonl", "--zero-based", "true",
                 "--label-map", str(path), "--out", str(tmp_path / "s.zarr"), "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (
        "dmlfe ingest: error: --label-map, --zero-based do not apply to --format jsonl; "
        "dmlfe ingest --help says which formats each flag goes with")
    xmc = _xmc_file(tmp_path / "b.txt", *_corpus(10, 4, 2, seed=14))
    assert main(["ingest", str(xmc), "--format", "xmc", "--zero-based", "true",
                 "--out", str(tmp_path / "s.zarr"), "--quiet"]) == 2
    assert "--zero-based does not apply to --format xmc" in capsys.readouterr().err


def test_label_matrix_bounds(tmp_path, monkeypatch):
    from dmlfe.readers import xmc

    path = tmp_path / "a.txt"
    path.write_text("2 5 1000\n1 0:1\n999 2:1\n")
    # batches hold CSR labels: any batch size works, whatever the number of labels
    assert _read(read_xmc(path), batch_size=4)[1].shape == (2, 1000)
    assert _read(read_xmc(path), batch_size=5000)[1].shape == (2, 1000)
    monkeypatch.setattr(xmc, "MAX_LABELS", 999)
    with pytest.raises(DataFormatError, match=r"a\.txt, line 1: the header declares 1,000 "
                       r"labels, more than the 999"):
        read_xmc(path)
    svm = tmp_path / "a.svm"
    svm.write_text("1 1:1\n999 2:1\n")
    with pytest.raises(DataFormatError, match=r"a\.svm, line 2: label index 999 is beyond"):
        read_svmlight(svm)


def test_feature_map_of_a_store_without_feature_names(tmp_path):
    store = ingest(_xmc_file(tmp_path / "b.txt", *_corpus(10, 4, 2, seed=15)), "xmc",
                   tmp_path / "b.zarr")
    with pytest.raises(InputError, match=r"has no feature names \(its features are numbered\)"):
        export_xmc(store, tmp_path / "b2.txt", feature_map=tmp_path / "fm")
    assert not (tmp_path / "b2.txt").exists()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", ["xmc", "svmlight"])
def test_fuzz(tmp_path, fmt):
    """Mutants of a valid file (byte flips, cuts, duplicated or deleted spans and lines,
    metacharacters) read to the end or fail with a DmlfeError naming the file, never
    with another exception (the campaign of test_fuzz_readers)."""
    rng = np.random.default_rng([20_260_917, len(fmt)])
    X, Y = _corpus(40, 12, 5, seed=16)
    if fmt == "xmc":
        seed = _xmc_file(tmp_path / "seed.txt", X, Y).read_bytes()
        read = read_xmc
    else:
        seed = _write(tmp_path / "seed.svm", _lines(X, Y, offset=1, svmlight=True)).read_bytes()
        read = read_svmlight
    _drain_numeric(read(tmp_path / ("seed.txt" if fmt == "xmc" else "seed.svm")))
    cases = []
    for i in range(60):
        data, what = mutate(seed, rng)
        p = tmp_path / f"m{i}.{fmt}"
        p.write_bytes(data if i % 4 else gzip.compress(data))
        cases.append(Case(f"{fmt}#{i} {what}", lambda p=p: _drain_numeric(read(p)), p))
    _check(fmt, run_cases(cases))
