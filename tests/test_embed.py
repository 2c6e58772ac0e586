"""Raw text in, embeddings out: the store's vectoriser, text_pipeline, dmlfe embed/predict."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
import zarr

import dmlfe
from dmlfe.cli import main
from dmlfe.errors import StoreError
from dmlfe.projection import read_embeddings

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota",
         "kappa", "Lambda", "mu"]


def _corpus(n: int = 60, seed: int = 3) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        labels = [lab for lab in ("x", "y", "z") if rng.random() < 0.4]
        # label-dependent words, so that the supervised projection has signal
        words = list(rng.choice(WORDS, size=rng.integers(2, 10)))
        words += ["beta gamma"] * ("x" in labels) + ["Lambda"] * 2 * ("y" in labels)
        out.append({"id": f"doc{i}", "text": " ".join(words), "labels": labels,
                    "split": "train" if i < 45 else "test"})
    return out


def _stored_rows(store) -> sp.csr_matrix:
    return sp.vstack([b.compute() for b in store.X.to_delayed().ravel()]).tocsr()


@pytest.fixture(scope="module", params=["tfidf", "hashing"])
def fitted(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(request.param)
    records = _corpus()
    src = tmp / "c.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    opts = {"ngram_range": (1, 2), "sublinear_tf": True, "fit_split": "train", "min_df": 2}
    if request.param == "hashing":
        opts = {"vectorizer": "hashing", "n_features": 128, "ngram_range": (1, 2)}
    store = dmlfe.ingest(src, format="jsonl", out=tmp / "s.zarr", chunk_rows=16,
                         id_field="id", split_field="split", **opts)
    model_dir = dmlfe.MDDM(n_components=2, split="train").fit(store).save(tmp / "model")
    return tmp, records, store, model_dir


def test_text_in_equals_the_stored_rows_and_embeddings(fitted):
    tmp, records, store, model_dir = fitted
    texts = [r["text"] for r in records]
    st = dmlfe.open_store(store)
    vec = st.text_vectorizer()
    assert (vec.transform(texts) != _stored_rows(st)).nnz == 0  # bit for bit
    model = dmlfe.load_model(model_dir)
    pipe = dmlfe.text_pipeline(model)
    Z = pipe.transform(texts)
    Zs = model.transform(st.X).compute()
    np.testing.assert_allclose(Z, Zs, rtol=0, atol=1e-12)
    # a document is vectorised alone as within the corpus (no state between calls)
    np.testing.assert_allclose(pipe.transform(texts[7:8]), Zs[7:8], rtol=0, atol=1e-12)
    if vec.vocabulary is not None:  # unseen words are dropped, as at ingest
        np.testing.assert_allclose(pipe.transform([texts[0] + " unseenword"]), Zs[:1],
                                   rtol=0, atol=1e-12)


def test_cli_embed_jsonl_parquet_and_stdin(fitted, monkeypatch, capsys):
    tmp, records, store, model_dir = fitted
    model = dmlfe.load_model(model_dir)
    Zs = model.transform(dmlfe.open_store(store).X).compute()
    out = tmp / "emb-jsonl"
    assert main(["embed", str(model_dir), str(tmp / "c.jsonl"), "--out", str(out),
                 "--id-field", "id", "--overwrite"]) == 0
    g = zarr.open_group(str(out), mode="r")
    np.testing.assert_allclose(read_embeddings(out), Zs, rtol=0, atol=1e-12)
    assert list(g["obs/_index"][:]) == [r["id"] for r in records]
    pq.write_table(pa.table({"text": [r["text"] for r in records]}), tmp / "docs.parquet")
    out = tmp / "emb-parquet"
    assert main(["embed", str(model_dir), str(tmp / "docs.parquet"), "--out", str(out),
                 "--overwrite"]) == 0
    np.testing.assert_allclose(read_embeddings(out), Zs, atol=1e-12)
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(r["text"] for r in records[:5])))
    out = tmp / "emb-stdin"
    assert main(["embed", str(model_dir), "-", "--out", str(out), "--overwrite"]) == 0
    np.testing.assert_allclose(read_embeddings(out), Zs[:5], atol=1e-12)
    assert "5 documents x 2 components" in capsys.readouterr().out


@pytest.mark.parametrize("fitted", ["tfidf"], indirect=True)  # the vectoriser is tested above
def test_cli_predict_writes_label_sets_and_scores(fitted, capsys):
    tmp, records, store, model_dir = fitted
    texts = tmp / "docs.txt"
    texts.write_text("\n".join(r["text"] for r in records[45:]) + "\n")
    out = tmp / "labels.jsonl"
    assert main(["predict", str(model_dir), str(texts), "--out", str(out), "--overwrite",
                 "--workers", "1"]) == 0
    assert "holds no saved classifier: fitting ridge" in capsys.readouterr().err
    got = [json.loads(line) for line in out.read_text().splitlines()]
    # the reference: the same classifier fitted on the stored training embeddings
    st = dmlfe.open_store(store)
    model = dmlfe.load_model(model_dir)
    train = st.subset("train")
    clf = dmlfe.MultiLabelRidge().fit(model.transform(train.X), train.Y)
    test = st.subset("test")
    Zt = model.transform(test.X)
    P, S = np.asarray(clf.predict(Zt)), np.asarray(clf.predict_proba(Zt))
    names = list(st.label_names)
    assert [g["id"] for g in got] == [str(i) for i in range(15)]
    assert [g["labels"] for g in got] == [[names[j] for j in np.flatnonzero(p)] for p in P]
    np.testing.assert_allclose([[g["scores"][n] for n in names] for g in got], S, atol=1e-12)


@pytest.mark.parametrize("fitted", ["tfidf"], indirect=True)
def test_cli_predict_uses_the_classifier_saved_by_fit(fitted, capsys, monkeypatch):
    tmp, records, store, _ = fitted
    model_dir = tmp / "model-mlknn"
    assert main(["fit", str(store), "--method", "mvmd", "--dim", "2", "--split", "train",
                 "--out", str(model_dir), "--classifier", "mlknn", "--workers", "1",
                 "--overwrite"]) == 0
    assert "classifier: mlknn" in capsys.readouterr().out
    texts = [r["text"] for r in records[45:]]
    (tmp / "new.txt").write_text("\n".join(texts) + "\n")
    out = tmp / "mlknn.jsonl"

    def no_cluster(*a, **k):
        raise AssertionError("predict with a saved classifier started a cluster")

    monkeypatch.setattr("dmlfe.cli.transform.client_from_args", no_cluster)
    assert main(["predict", str(model_dir), str(tmp / "new.txt"), "--out", str(out)]) == 0
    assert "no saved classifier" not in capsys.readouterr().err
    got = [json.loads(line) for line in out.read_text().splitlines()]
    # the reference: ML-kNN fitted here, in memory, on the stored training embeddings
    model = dmlfe.load_model(model_dir)
    train = dmlfe.open_store(store).subset("train")
    clf = dmlfe.MLkNN().fit(np.asarray(model.transform(train.X).compute()),
                            train.Y.compute())
    pipe = dmlfe.text_pipeline(model, clf)
    P, S = np.asarray(pipe.predict(texts)), np.asarray(pipe.predict_proba(texts))
    names = list(train.label_names)
    assert [g["labels"] for g in got] == [[names[j] for j in np.flatnonzero(p)] for p in P]
    np.testing.assert_allclose([[g["scores"][n] for n in names] for g in got], S, rtol=0,
                               atol=1e-12)


def test_stores_without_a_vectoriser_are_refused(tmp_path):
    store = dmlfe.ingest(None, format="synthetic", out=tmp_path / "s.zarr", n_docs=30,
                         vocab_size=40, n_labels=3, seed=0)
    st = dmlfe.open_store(store)
    if st.attrs.get("vectorizer") is None:
        with pytest.raises(StoreError, match="not ingested from raw text"):
            st.text_vectorizer()
    else:  # a synthetic corpus is text too: then its idf must be kept
        assert st.text_vectorizer().transform(["w1 w2"]).shape == (1, st.n_features)
