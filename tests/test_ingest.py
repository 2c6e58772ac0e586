"""End-to-end ingestion: corpus -> store, against in-memory scikit-learn references."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import data_path
from sklearn.feature_extraction.text import TfidfVectorizer

import dmlfe
from dmlfe.cli import main as cli_main
from dmlfe.readers.synthetic import SyntheticCorpus
from dmlfe.store import open_store

SYN = {"n_docs": 1_500, "vocab_size": 3_000, "n_labels": 8, "seed": 7}


def _synthetic_reference(**vec):
    corpus = SyntheticCorpus(**SYN)
    texts, labels, ids = [], [], []
    for b in corpus.batches(500):
        texts += b.texts
        labels += b.labels
        ids += b.ids
    tv = TfidfVectorizer(**vec)
    X = tv.fit_transform(texts)
    col = {n: j for j, n in enumerate(corpus.label_names)}
    Y = np.zeros((len(texts), len(col)), np.uint8)
    for r, labs in enumerate(labels):
        for lab in labs:
            Y[r, col[lab]] = 1
    return X, Y, ids, list(tv.get_feature_names_out()), corpus.label_names


def _assert_store_equals(store, X, Y, ids):
    got = store.X.compute()
    assert sp.issparse(got)
    assert got.shape == X.shape
    np.testing.assert_allclose(got.toarray(), X.toarray(), rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(store.Y.compute().toarray(), Y)
    assert list(store.ids.compute()) == list(ids)


@pytest.mark.parametrize("chunk_rows", [400, 1_000])
def test_synthetic_store_equals_sklearn_on_cluster(tmp_path, cluster_client, chunk_rows):
    vec = {"ngram_range": (1, 2), "min_df": 2, "max_features": 4_000, "sublinear_tf": True}
    X, Y, ids, names, labels = _synthetic_reference(**vec)
    out = dmlfe.ingest(
        None,
        format="synthetic",
        out=tmp_path / "s.zarr",
        chunk_rows=chunk_rows,
        client=cluster_client,
        **SYN,
        **vec,
    )
    store = open_store(out)
    assert store.feature_names == names
    assert store.label_names == list(labels)
    _assert_store_equals(store, X, Y, ids)
    assert store.X.numblocks[0] == -(-SYN["n_docs"] // chunk_rows)


def test_synthetic_same_without_cluster_and_any_chunking(tmp_path):
    X, Y, ids, names, _ = _synthetic_reference()
    out = dmlfe.ingest(None, format="synthetic", out=tmp_path / "s.zarr", chunk_rows=333, **SYN)
    store = open_store(out, chunk_rows=250)
    _assert_store_equals(store, X, Y, ids)


def test_hashing_store_equals_sklearn(tmp_path, cluster_client):
    from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer

    corpus = SyntheticCorpus(**SYN)
    texts = [t for b in corpus.batches(1000) for t in b.texts]
    out = dmlfe.ingest(
        None,
        format="synthetic",
        out=tmp_path / "h.zarr",
        chunk_rows=600,
        client=cluster_client,
        vectorizer="hashing",
        n_features=2**18,
        ngram_range=(1, 3),
        **SYN,
    )
    hv = HashingVectorizer(n_features=2**18, ngram_range=(1, 3), alternate_sign=False, norm=None)
    R = TfidfTransformer().fit_transform(hv.transform(texts))
    store = open_store(out)
    assert store.feature_names is None
    assert store.hashing["n_features"] == 2**18
    got = store.X.compute()
    assert got.shape == R.shape
    assert abs(got - R).max() <= 1e-12


def _write_jsonl(path, records, compress=False):
    opener = gzip.open if compress else open
    with opener(path, "wt", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")


def test_jsonl_with_fit_split_and_cli_info(tmp_path, capsys):
    records = [
        {"doc": f"d{i}", "body": txt, "tags": tags, "part": "train" if i % 4 else "test"}
        for i, (txt, tags) in enumerate(
            [
                ("the cat sat on the mat", ["pets"]),
                ("dogs chase cats", ["pets", "action"]),
                ("", ["empty"]),
                ("stocks fell sharply today", []),
                ("the market rallied", ["finance"]),
                ("cats and dogs and markets", ["pets", "finance"]),
                ("nothing to see", []),
            ]
        )
    ]
    src = tmp_path / "c.jsonl.gz"
    _write_jsonl(src, records, compress=True)
    out = dmlfe.ingest(
        src,
        format="jsonl",
        out=tmp_path / "j.zarr",
        chunk_rows=3,
        text_field="body",
        labels_field="tags",
        id_field="doc",
        split_field="part",
        fit_split="train",
    )
    store = open_store(out)
    train_texts = [r["body"] for r in records if r["part"] == "train"]
    tv = TfidfVectorizer().fit(train_texts)
    R = tv.transform([r["body"] for r in records])
    assert store.feature_names == list(tv.get_feature_names_out())
    np.testing.assert_allclose(store.X.compute().toarray(), R.toarray(), rtol=1e-12)
    assert list(store.split.compute()) == [r["part"] for r in records]
    assert store.label_names == sorted({t for r in records for t in r["tags"]})

    assert cli_main(["info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["shape"] == [7, len(store.feature_names)]
    assert info["docs_without_labels"] == 2
    # the empty text, plus the two test documents whose words never occur in training
    assert info["empty_docs"] == int((R.getnnz(axis=1) == 0).sum()) == 3
    assert info["splits"] == {"train": 5, "test": 2}


def test_failed_ingest_leaves_nothing(tmp_path):
    src = tmp_path / "bad.jsonl"
    with open(src, "w") as fh:
        for i in range(50):
            fh.write(json.dumps({"text": f"doc {i} words", "labels": ["a"]}) + "\n")
        fh.write("{not json\n")
    out = tmp_path / "bad.zarr"
    with pytest.raises(ValueError, match=r"bad\.jsonl.*51|51.*bad\.jsonl"):
        dmlfe.ingest(src, format="jsonl", out=out, chunk_rows=10)
    assert not out.exists()
    assert os.listdir(tmp_path) == ["bad.jsonl"]


def test_unknown_option_is_named(tmp_path):
    with pytest.raises(TypeError, match="modapte"):
        dmlfe.ingest(tmp_path / "x.jsonl", format="jsonl", out=tmp_path / "o", modapte=True)


@pytest.mark.parametrize(
    "name,shape,q",
    [
        ("scene", (1211, 294), 6),
        ("yeast", (1500, 103), 14),
        ("enron", (1123, 1001), 53),
        ("medical", (333, 1449), 45),
        ("emotions", (391, 72), 6),
    ],
)
def test_mulan_train_sets(tmp_path, name, shape, q):
    arff = data_path("mulan", f"{name}-train.arff")
    xml = data_path("mulan", f"{name}.xml")
    store = open_store(
        dmlfe.ingest(arff, format="mulan", labels=xml, out=tmp_path / "m.zarr", chunk_rows=500)
    )
    assert store.X.shape == shape
    assert store.Y.shape == (shape[0], q)
    assert len(store.label_names) == q


def test_meka_enron_equals_mulan_train_plus_test(tmp_path, cluster_client):
    mulan = open_store(
        dmlfe.ingest(
            [data_path("mulan", "enron-train.arff"), data_path("mulan", "enron-test.arff")],
            format="mulan",
            labels=data_path("mulan", "enron.xml"),
            out=tmp_path / "a.zarr",
            chunk_rows=400,
            client=cluster_client,
        )
    )
    meka = open_store(
        dmlfe.ingest(
            data_path("meka", "Enron.arff.bz2"),
            format="meka",
            out=tmp_path / "b.zarr",
            chunk_rows=300,
            client=cluster_client,
        )
    )
    assert sorted(mulan.label_names) == sorted(meka.label_names)
    assert sorted(mulan.feature_names) == sorted(meka.feature_names)
    # align columns by name, then compare rows as multisets
    lab = [meka.label_names.index(n) for n in mulan.label_names]
    feat = [meka.feature_names.index(n) for n in mulan.feature_names]
    a = np.hstack([mulan.X.compute().toarray(), mulan.Y.compute().toarray()])
    b = np.hstack([meka.X.compute().toarray()[:, feat], meka.Y.compute().toarray()[:, lab]])
    assert a.shape == b.shape == (1702, 1001 + 53)
    a = a[np.lexsort(a.T[::-1])]
    b = b[np.lexsort(b.T[::-1])]
    np.testing.assert_array_equal(a, b)
    assert sorted(set(mulan.split.compute())) == ["test", "train"]


def test_imdb(tmp_path, cluster_client):
    store = open_store(
        dmlfe.ingest(
            data_path("meka", "IMDB.arff.bz2"),
            format="meka",
            out=tmp_path / "imdb.zarr",
            chunk_rows=20_000,
            client=cluster_client,
        )
    )
    assert store.X.shape == (120_919, 1_001)
    assert store.Y.shape == (120_919, 28)


def test_reuters_modapte_r10(tmp_path, cluster_client):
    tar = data_path("reuters21578", "reuters21578.tar.gz")
    store = open_store(
        dmlfe.ingest(
            tar,
            format="reuters21578",
            modapte=True,
            top_n=10,
            out=tmp_path / "r10.zarr",
            chunk_rows=2_000,
            client=cluster_client,
        )
    )
    split = store.split.compute()
    assert (split == "train").sum() == 6_490
    assert (split == "test").sum() == 2_545
    assert len(store.label_names) == 10
    assert (store.Y.compute().toarray().sum(axis=1) > 0).all()


def test_cli_parquet_round_trip(tmp_path):
    out = dmlfe.ingest(None, format="synthetic", out=tmp_path / "s.zarr", chunk_rows=400, **SYN)
    assert cli_main(["export", str(out), "--out", str(tmp_path / "s.parquet")]) == 0
    assert (
        cli_main(
            [
                "import",
                str(tmp_path / "s.parquet"),
                "--out",
                str(tmp_path / "t.zarr"),
                "--chunk-rows",
                "700",
                "--workers",
                "2",
                "--quiet",
            ]
        )
        == 0
    )
    a, b = open_store(out), open_store(tmp_path / "t.zarr")
    assert (a.X.compute() != b.X.compute()).nnz == 0
    np.testing.assert_array_equal(a.Y.compute().toarray(), b.Y.compute().toarray())
    assert list(a.ids.compute()) == list(b.ids.compute())
    assert a.feature_names == b.feature_names


def test_cli_ingest_mulan_train_and_test(tmp_path, capsys):
    arffs = [str(data_path("mulan", f"emotions-{s}.arff")) for s in ("train", "test")]
    xml = str(data_path("mulan", "emotions.xml"))
    out = tmp_path / "emo.zarr"
    rc = cli_main(["ingest", *arffs, "--format", "mulan", "--labels", xml, "--out", str(out),
                   "--chunk-rows", "100", "--workers", "2"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "shape: [593, 72]" in text
    store = open_store(out)
    assert dict(zip(*np.unique(store.split.compute(), return_counts=True), strict=True)) == {
        "train": 391, "test": 202}


def test_cli_reports_bad_input_with_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.arff"
    bad.write_text("@relation 'x: -C 1'\n@attribute l {0,1}\n@attribute f numeric\n@data\n"
                   "1,0.5\n0,oops\n")
    rc = cli_main(["ingest", str(bad), "--format", "meka", "--out", str(tmp_path / "o.zarr"),
                   "--workers", "1", "--quiet"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "bad.arff" in err and "line 6" in err
    assert not (tmp_path / "o.zarr").exists()


def test_hashing_fit_split_with_parts_of_test_documents_only(tmp_path):
    from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer

    texts = ["alpha beta", "beta gamma", "gamma delta alpha", "delta", "alpha alpha", "eps",
             "beta zeta", "zeta eta", "eta alpha", "theta"]
    split = ["train"] * 6 + ["test"] * 4  # the last parts hold test documents only
    src = tmp_path / "c.jsonl"
    _write_jsonl(src, [{"text": t, "labels": ["x"], "split": s}
                       for t, s in zip(texts, split, strict=True)])
    out = dmlfe.ingest(src, format="jsonl", out=tmp_path / "h.zarr", chunk_rows=3,
                       split_field="split", fit_split="train", vectorizer="hashing",
                       n_features=2**8)
    hv = HashingVectorizer(n_features=2**8, alternate_sign=False, norm=None)
    tt = TfidfTransformer().fit(hv.transform(texts[:6]))
    R = tt.transform(hv.transform(texts))
    got = open_store(out).X.compute()
    assert abs(got - R).max() <= 1e-12


# --- empty or damaged input is refused before any store is written


def test_header_only_arff_is_refused_without_writing(tmp_path):
    from dmlfe.errors import InputError

    src = tmp_path / "f.arff"
    src.write_text("@relation 'f: -C 1'\n@attribute l {0,1}\n@attribute x numeric\n@data\n"
                   "% no rows\n")
    with pytest.raises(InputError, match=r"f\.arff has a header but no data rows: nothing to "
                                         "ingest"):
        dmlfe.ingest(src, format="meka", out=tmp_path / "o.zarr")
    assert os.listdir(tmp_path) == ["f.arff"]  # no store, no temporary folder


def test_arff_without_features_or_labels_is_refused(tmp_path):
    from dmlfe.errors import DataFormatError

    labels_only = tmp_path / "l.arff"
    labels_only.write_text("@relation l\n@attribute a {0,1}\n@attribute b {0,1}\n@data\n0,1\n")
    xml = tmp_path / "l.xml"
    xml.write_text('<labels xmlns="http://mulan.sourceforge.net/labels">'
                   '<label name="a"/><label name="b"/></labels>')
    with pytest.raises(DataFormatError, match=r"l\.arff.*no feature attribute"):
        dmlfe.ingest(labels_only, format="mulan", labels=xml, out=tmp_path / "o.zarr")
    no_c = tmp_path / "n.arff"
    no_c.write_text("@relation plain\n@attribute a {0,1}\n@attribute x numeric\n@data\n0,1\n")
    with pytest.raises(DataFormatError, match=r"n\.arff.*no '-C n' option"):
        dmlfe.ingest(no_c, format="meka", out=tmp_path / "o.zarr")
    assert not (tmp_path / "o.zarr").exists()


def test_empty_vocabulary_is_refused(tmp_path):
    from dmlfe.errors import InputError

    src = tmp_path / "v.jsonl"
    _write_jsonl(src, [{"text": "alpha beta", "labels": ["a"]},
                       {"text": "gamma delta", "labels": []}])
    with pytest.raises(InputError, match=r"v\.jsonl: the vocabulary is empty .*min_df=2"):
        dmlfe.ingest(src, format="jsonl", out=tmp_path / "o.zarr", min_df=2)
    blank = tmp_path / "b.jsonl"
    _write_jsonl(blank, [{"text": "", "labels": ["a"]}, {"text": " . ", "labels": []}])
    with pytest.raises(InputError, match=r"b\.jsonl: none of its 2 documents holds a term"):
        dmlfe.ingest(blank, format="jsonl", out=tmp_path / "o.zarr")
    nothing = tmp_path / "e.jsonl"
    nothing.write_text("\n\n")
    with pytest.raises(InputError, match=r"e\.jsonl holds no documents"):
        dmlfe.ingest(nothing, format="jsonl", out=tmp_path / "o.zarr")
    assert sorted(os.listdir(tmp_path)) == ["b.jsonl", "e.jsonl", "v.jsonl"]


def test_damaged_compressed_arff_through_ingest(tmp_path):
    import bz2

    from dmlfe.errors import DataFormatError

    text = "@relation 'f: -C 1'\n@attribute l {0,1}\n@attribute x numeric\n@data\n" + \
        "".join(f"{i % 2},{i}\n" for i in range(3000))
    packed = bz2.compress(text.encode())
    src = tmp_path / "f.arff.bz2"
    src.write_bytes(packed[:-100])
    with pytest.raises(DataFormatError, match=r"f\.arff\.bz2.*truncated or not bzip2"):
        dmlfe.ingest(src, format="meka", out=tmp_path / "o.zarr")
    assert os.listdir(tmp_path) == ["f.arff.bz2"]


def test_import_of_garbage_or_foreign_parquet_names_the_file(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dmlfe.errors import DataFormatError, MissingPathError
    from dmlfe.store import import_parquet

    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"PAR1 this is not a parquet file PAR1")  # was pyarrow ArrowInvalid
    with pytest.raises(DataFormatError, match=r"garbage\.parquet is not a readable Parquet"):
        import_parquet(garbage, tmp_path / "o.zarr")
    corpus = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"text": ["a b"], "labels": [["x"]]}), corpus)
    with pytest.raises(DataFormatError) as err:
        import_parquet(corpus, tmp_path / "o.zarr")
    message = str(err.value)
    assert "corpus.parquet is not a dmlfe export" in message
    assert "'id', 'split', 'indices', 'values' missing" in message
    with pytest.raises(MissingPathError, match="nope.parquet"):
        import_parquet(tmp_path / "nope.parquet", tmp_path / "o.zarr")
    assert not (tmp_path / "o.zarr").exists()

    rc = cli_main(["import", str(garbage), "--out", str(tmp_path / "o.zarr"), "--quiet"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "garbage.parquet is not a readable Parquet file" in err
