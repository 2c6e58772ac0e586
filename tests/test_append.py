"""Issue 34, append: documents appended to a store (dmlfe.append, dmlfe ingest --append).

The appended store is compared with an ingest of all documents at once (the idf and
vocabulary learned on the train split, which the appended test documents are not part
of) and with independent scikit-learn/numpy references; failures injected at each step,
and kills, must leave the store's files exactly as they were.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import data_path
from sklearn.feature_extraction.text import CountVectorizer, HashingVectorizer
from sklearn.preprocessing import normalize

import dmlfe
from dmlfe.cli import main
from dmlfe.errors import DataFormatError, InputError
from dmlfe.store import history, open_store
from dmlfe.store import layout as F
from dmlfe.store.verify import verify_store

ROOT = Path(__file__).resolve().parents[1]
LABELS = ["alpha", "beta", "gamma", "delta", "eps"]
WORDS = [f"w{i:03d}" for i in range(400)]


# --------------------------------------------------------------------------- helpers
def _docs(seed: int, n: int, start: int, split: str | None, n_words: int = 300,
          labels: list[str] = LABELS) -> list[dict]:
    """Random documents: Zipf-ish words, 0-3 labels, ids d<start + k>."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n_words + 1)
    p /= p.sum()
    out = []
    for k in range(n):
        length = int(rng.integers(0, 25))  # some empty documents too
        words = rng.choice(WORDS[:n_words], size=length, p=p)
        labs = sorted(rng.choice(labels, size=int(rng.integers(0, 4)), replace=False).tolist())
        d = {"id": f"d{start + k}", "text": " ".join(words), "labels": labs}
        if split is not None:
            d["split"] = split
        out.append(d)
    return out


def _write(path: Path, docs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def _digest(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` (and every folder, as None)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
    return out


def _siblings(store: Path) -> list[str]:
    return sorted(p.name for p in store.parent.iterdir() if p.name.startswith(f".{store.name}"))


def _assert_same_data(a, b) -> None:
    xa, xb = a.X.compute(), b.X.compute()
    for attr in ("data", "indices", "indptr"):
        np.testing.assert_array_equal(getattr(xa, attr), getattr(xb, attr))
    assert xa.shape == xb.shape
    np.testing.assert_array_equal(a.Y.compute().toarray(), b.Y.compute().toarray())
    assert a.ids.compute().tolist() == b.ids.compute().tolist()
    assert a.split.compute().tolist() == b.split.compute().tolist()


def _dense_y(docs: list[dict], names: list[str]) -> np.ndarray:
    Y = np.zeros((len(docs), len(names)), dtype=np.uint8)
    for r, d in enumerate(docs):
        for lab in d["labels"]:
            Y[r, names.index(lab)] = 1
    return Y


JSONL = {"id_field": "id", "split_field": "split"}


@pytest.fixture
def corpus(tmp_path):
    """Train documents A, test documents B (B with words A never has), and A+B."""
    A = _docs(1, 45, 0, "train")
    B = _docs(2, 70, 45, "test", n_words=400)
    return {"A": _write(tmp_path / "A.jsonl", A), "B": _write(tmp_path / "B.jsonl", B),
            "AB": _write(tmp_path / "AB.jsonl", A + B), "docs_A": A, "docs_B": B}


# --------------------------------------------------------------------------- equality
@pytest.mark.parametrize("vectorizer", ["tfidf", "hashing"])
@pytest.mark.parametrize("elem_chunk,chunk_rows,n_a,n_b1", [
    (64, 16, 37, 20),      # starts mid row chunk and mid element chunk, adds several chunks
    (512, 8, 45, 30),      # the element chunk reaches back before the last row chunk
    (F.ELEM_CHUNK, 16, 48, 5),  # starts exactly at a row chunk boundary
])
def test_append_equals_an_ingest_of_all_documents(tmp_path, monkeypatch, cluster_client,
                                                  vectorizer, elem_chunk, chunk_rows, n_a,
                                                  n_b1):
    monkeypatch.setattr(F, "ELEM_CHUNK", elem_chunk)
    A = _docs(1, n_a, 0, "train")
    B = _docs(2, 70, n_a, "test", n_words=400)
    B1, B2 = B[:n_b1], B[n_b1:]
    for d in B2:  # the second batch takes its split from --split, not from the file
        del d["split"]
    opts = {"vectorizer": vectorizer, "fit_split": "train", **JSONL}
    if vectorizer == "hashing":
        opts["n_features"] = 2**9
    store = dmlfe.ingest(_write(tmp_path / "A.jsonl", A), "jsonl", tmp_path / "s.zarr",
                         chunk_rows=chunk_rows, **opts)
    ref = dmlfe.ingest(_write(tmp_path / "AB.jsonl", A + B1 + [{**d, "split": "test"}
                                                               for d in B2]),
                       "jsonl", tmp_path / "ref.zarr", chunk_rows=chunk_rows, **opts)
    before = open_store(store)
    fp0, X0 = before.fingerprint, before.X.compute()

    e1 = dmlfe.append(store, _write(tmp_path / "B1.jsonl", B1), client=cluster_client,
                      **JSONL)
    e2 = dmlfe.append(store, _write(tmp_path / "B2.jsonl", B2), "jsonl", split="test",
                      id_field="id", client=cluster_client)
    after, fresh = open_store(store), open_store(ref)
    _assert_same_data(after, fresh)
    assert after.n_docs == n_a + 70 and after.label_names == fresh.label_names
    assert verify_store(store).ok and _siblings(store) == []

    # the stored rows did not change (the idf is kept), and are the independent
    # reference's: scikit-learn's counts over the stored vocabulary, weighted by the idf
    # computed here from A's document frequencies
    X = after.X.compute()
    texts = [d["text"] for d in A + B]
    if vectorizer == "tfidf":
        counts = CountVectorizer(vocabulary=after.feature_names).transform(texts)
        df = np.diff(CountVectorizer(vocabulary=after.feature_names)
                     .transform([d["text"] for d in A]).tocsc().indptr)
        assert set(after.feature_names) == {w for d in A for w in d["text"].split()}
    else:
        counts = HashingVectorizer(n_features=2**9, alternate_sign=False,
                                   norm=None).transform(texts)
        df = np.diff(sp.csc_matrix(counts[:n_a]).indptr)
    idf = np.log((1 + n_a) / (1 + df)) + 1
    expect = normalize(sp.csr_matrix(counts.multiply(idf[None, :])), norm="l2")
    np.testing.assert_allclose(X.toarray(), expect.toarray(), rtol=1e-12, atol=1e-15)
    assert (X[:n_a] != X0).nnz == 0
    np.testing.assert_array_equal(after.Y.compute().toarray(), _dense_y(A + B, after.label_names))

    # history: one entry per write, contiguous rows, the fingerprint after each write
    h = history(store)
    assert [e["kind"] for e in h] == ["ingest", "append", "append"]
    assert [e["rows"] for e in h] == [[0, n_a], [n_a, n_a + n_b1], [n_a + n_b1, n_a + 70]]
    assert [e["n_docs_before"] for e in h] == [0, n_a, n_a + n_b1]
    assert h[0]["fingerprint"] == fp0 and h[-1]["fingerprint"] == after.fingerprint
    assert len({e["fingerprint"]["uuid"] for e in h}) == 3
    assert h[1]["source"] == {"format": "jsonl", "source": [str(tmp_path / "B1.jsonl")],
                              "reader_options": JSONL, "split": None}
    assert h[2]["source"]["split"] == "test" and e1 == h[1] and e2 == h[2]
    unseen = e1["report"]["unseen_terms"]
    if vectorizer == "hashing":
        assert unseen is None
    else:  # counted here from the texts: the words of B1 that A does not have
        vocab = set(after.feature_names)
        words = [w for d in B1 for w in d["text"].split() if w not in vocab]
        assert unseen["distinct"] == len(set(words)) and unseen["occurrences"] == len(words)
        top = max(set(words), key=lambda w: (words.count(w), -WORDS.index(w)))
        assert unseen["most_frequent"][0] == [top, words.count(top)]


def test_append_to_a_store_without_split_and_new_split_values(tmp_path):
    A = [{k: v for k, v in d.items() if k != "split"} for d in _docs(1, 21, 0, None)]
    store = dmlfe.ingest(_write(tmp_path / "A.jsonl", A), "jsonl", tmp_path / "s.zarr",
                         chunk_rows=8, id_field="id")
    assert open_store(store).split is None
    dmlfe.append(store, _write(tmp_path / "B.jsonl", _docs(2, 10, 21, None)), split="test",
                  id_field="id")
    dmlfe.append(store, _write(tmp_path / "C.jsonl", _docs(3, 3, 31, "dev")), **JSONL)
    dmlfe.append(store, _write(tmp_path / "D.jsonl", _docs(4, 2, 34, None)), id_field="id")
    st = open_store(store)
    assert st.split.compute().tolist() == [None] * 21 + ["test"] * 10 + ["dev"] * 3 + [None] * 2
    # new values follow the stored ones: codes already written keep their meaning
    assert st.split_categories == ["test", "dev"]
    assert st.ids.compute().tolist() == [f"d{i}" for i in range(36)]
    assert verify_store(store).ok
    anndata = pytest.importorskip("anndata")
    ad = anndata.read_zarr(store)
    assert ad.n_obs == 36 and ad.obs["split"].tolist()[21:34] == ["test"] * 10 + ["dev"] * 3


def test_append_numeric_mulan_equals_an_ingest_of_both_files(tmp_path):
    train, test = data_path("mulan", "scene-train.arff"), data_path("mulan", "scene-test.arff")
    xml = data_path("mulan", "scene.xml")
    store = dmlfe.ingest(train, "mulan", tmp_path / "s.zarr", chunk_rows=500, labels=xml)
    ref = dmlfe.ingest([train, test], "mulan", tmp_path / "ref.zarr", chunk_rows=500,
                       labels=xml)
    e = dmlfe.append(store, test, labels=xml)
    assert e["rows"] == [1211, 2407] and e["source"]["format"] == "mulan"
    a, b = open_store(store), open_store(ref)
    _assert_same_data(a, b)
    assert a.label_names == b.label_names and a.feature_names == b.feature_names
    assert verify_store(store).ok


# --------------------------------------------------------------------------- refusals
def _refused(store: Path, call, exc_type, *phrases: str) -> None:
    before = _digest(store)
    with pytest.raises(exc_type) as info:
        call()
    msg = str(info.value)
    for phrase in phrases:
        assert phrase in msg, msg
    assert "\n" not in msg
    assert _digest(store) == before and _siblings(store) == []


def test_refusals_name_the_id_label_or_format_and_change_nothing(tmp_path, corpus):
    store = dmlfe.ingest(corpus["A"], "jsonl", tmp_path / "s.zarr", chunk_rows=16, **JSONL)
    old = _docs(5, 3, 100, "test")
    old[1]["id"] = "d7"  # a stored document's id
    path = _write(tmp_path / "dup.jsonl", old)
    _refused(store, lambda: dmlfe.append(store, path, **JSONL), InputError,
             str(path), "'d7'", "new document 1", "already in the store", "row 7")
    twice = _docs(5, 4, 100, "test")
    twice[3]["id"] = twice[1]["id"]
    path = _write(tmp_path / "twice.jsonl", twice)
    _refused(store, lambda: dmlfe.append(store, path, **JSONL), DataFormatError,
             str(path), "'d101'", "line 4", "was already used")  # the reader's check
    new_label = _docs(6, 3, 100, "test", labels=LABELS + ["zeta"])
    new_label[2]["labels"] = ["alpha", "zeta"]
    path = _write(tmp_path / "label.jsonl", new_label)
    _refused(store, lambda: dmlfe.append(store, path, **JSONL), InputError,
             str(path), "label 'zeta'", "not one of the 5 labels")
    arff = data_path("mulan", "scene-test.arff")
    _refused(store, lambda: dmlfe.append(store, arff, "mulan",
                                         labels=data_path("mulan", "scene.xml")),
             InputError, "cannot append format 'mulan'", "text", "jsonl")
    _refused(store, lambda: dmlfe.append(store, corpus["B"], vectorizer="hashing", **JSONL),
             InputError, "vectoriser option(s) vectorizer", "store's own vectoriser")
    _refused(store, lambda: dmlfe.append(store, None, "synthetic"), InputError,
             "'synthetic' cannot be appended")

    numeric = dmlfe.ingest(data_path("mulan", "scene-train.arff"), "mulan",
                           tmp_path / "n.zarr", labels=data_path("mulan", "scene.xml"))
    _refused(numeric, lambda: dmlfe.append(numeric, corpus["B"], "jsonl", **JSONL),
             InputError, "cannot append format 'jsonl'", "numeric features", "mulan")
    yeast = data_path("mulan", "yeast-test.arff")
    _refused(numeric, lambda: dmlfe.append(numeric, yeast, labels=data_path("mulan",
                                                                            "yeast.xml")),
             InputError, str(yeast), "103 features", "has 294")


# --------------------------------------------------------------------------- atomicity
def _boom(*args, **kwargs):
    raise RuntimeError("injected failure")


def _fail_on_call(orig, n: int):
    calls = []

    def wrapped(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            raise RuntimeError("injected failure")
        return orig(*args, **kwargs)
    return wrapped


@pytest.mark.parametrize("point", ["link", "chunks", "record", "metadata", "swap",
                                   "between_renames"])
def test_a_failure_at_any_point_leaves_the_store_as_it_was(tmp_path, corpus, monkeypatch,
                                                           point):
    import dmlfe.store.writer as W
    import dmlfe.tempfiles as T

    store = dmlfe.ingest(corpus["A"], "jsonl", tmp_path / "s.zarr", chunk_rows=16, **JSONL)
    before = _digest(store)
    if point == "link":
        monkeypatch.setattr(W, "_link_tree", _boom)
    elif point == "chunks":  # after some chunks were written
        monkeypatch.setattr(W, "_fill_row_chunk", _fail_on_call(W._fill_row_chunk, 3))
    elif point == "record":
        monkeypatch.setattr(W.integrity, "build_record", _boom)
    elif point == "metadata":  # the root metadata, written last
        monkeypatch.setattr(W, "fingerprint_of", _boom)
    elif point == "swap":
        monkeypatch.setattr(W, "swap_into_place", _boom)
    else:  # no atomic exchange: two renames, the second fails
        def no_exchange(a, b):
            monkeypatch.setattr(T.os, "replace", _fail_on_call(os.replace, 2))
            return False
        monkeypatch.setattr(T, "_exchange", no_exchange)
    with pytest.raises(RuntimeError, match="injected failure"):
        dmlfe.append(store, corpus["B"], **JSONL)
    monkeypatch.undo()
    assert _digest(store) == before and _siblings(store) == []
    assert verify_store(store).ok and open_store(store).n_docs == 45
    # and the next append works
    dmlfe.append(store, corpus["B"], **JSONL)
    assert open_store(store).n_docs == 115


_KILLED = """
import os, sys, time
from pathlib import Path
import dmlfe, dmlfe.store.writer as W, dmlfe.tempfiles as T
marker = Path(sys.argv[3])

def pause(orig):
    def wrapped(*a, **k):
        marker.write_text("now")
        time.sleep(60)
        return orig(*a, **k)
    return wrapped

point = sys.argv[4]
if point == "chunks":
    W._fill_row_chunk = pause(W._fill_row_chunk)
elif point == "record":
    W.integrity.build_record = pause(W.integrity.build_record)
elif point == "swap":
    W.swap_into_place = pause(W.swap_into_place)
elif point == "between_renames":  # no atomic exchange, killed between the two renames
    calls = []
    orig = os.replace
    def replace(a, b):
        if calls:
            marker.write_text("now")
            time.sleep(60)
        calls.append(1)
        return orig(a, b)
    def no_exchange(a, b):
        T.os.replace = replace
        return False
    T._exchange = no_exchange
dmlfe.append(sys.argv[1], sys.argv[2], id_field="id", split_field="split")
"""


@pytest.mark.parametrize("point", ["chunks", "record", "swap", "between_renames"])
def test_a_killed_append_leaves_the_store_as_it_was(tmp_path, corpus, point):
    store = dmlfe.ingest(corpus["A"], "jsonl", tmp_path / "s.zarr", chunk_rows=16, **JSONL)
    before = _digest(store)
    marker = tmp_path / "marker"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, str(store), str(corpus["B"]),
                             str(marker), point], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, "the append ended before it reached the kill point"
            assert time.monotonic() < deadline, "the append did not reach the kill point"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(30)
    left = _siblings(store)
    assert len(left) == (2 if point == "between_renames" else 1), left
    if point == "between_renames":
        assert not store.exists()  # half-swapped: opening the store puts it back
        with pytest.warns(RuntimeWarning, match="previous version"):
            st = open_store(store)
        assert st.n_docs == 45
    assert _digest(store) == before and verify_store(store).ok
    assert main(["clean", str(store)]) == 0
    assert _siblings(store) == [] and _digest(store) == before
    dmlfe.append(store, corpus["B"], **JSONL)
    assert open_store(store).n_docs == 115 and verify_store(store).ok


def test_swap_fallback_and_recovery(tmp_path, monkeypatch, capsys):
    import dmlfe.tempfiles as T

    out, new = tmp_path / "s", tmp_path / "new"
    out.mkdir()
    (out / "f").write_text("old")
    new.mkdir()
    (new / "f").write_text("new")
    T.swap_into_place(new, out)  # the atomic exchange where the system has it
    assert (out / "f").read_text() == "new" and sorted(os.listdir(tmp_path)) == ["s"]
    monkeypatch.setattr(T, "_exchange", lambda a, b: False)
    new.mkdir()
    (new / "f").write_text("newer")
    T.swap_into_place(new, out)
    assert (out / "f").read_text() == "newer" and sorted(os.listdir(tmp_path)) == ["s"]
    # a kill between the renames: the old version set aside, none at out
    aside = tmp_path / f".s.old-{2**22 + 7}-0123456789ab"  # a pid that does not run
    out.rename(aside)
    assert T.recover_swap(tmp_path / "missing") == []
    with pytest.warns(RuntimeWarning, match="put back"):
        assert T.recover_swap(out) == [aside]
    assert (out / "f").read_text() == "newer" and not aside.exists()
    # killed after the second rename: the set-aside old version is removed
    aside.mkdir()
    assert T.recover_swap(out) == [aside] and not aside.exists() and out.is_dir()
    # dmlfe clean FOLDER puts set-aside versions back at any depth
    (tmp_path / "deep").mkdir()
    out.rename(tmp_path / "deep" / aside.name)
    assert main(["clean", str(tmp_path)]) == 0
    assert "warning:" in capsys.readouterr().err  # one line in the CLI's terms
    assert (out.parent / "deep" / "s" / "f").read_text() == "newer"


# --------------------------------------------------------------------------- history
def test_history_of_a_store_written_without_one(tmp_path, corpus):
    store = dmlfe.ingest(corpus["A"], "jsonl", tmp_path / "s.zarr", chunk_rows=16, **JSONL)
    meta_path = store / "zarr.json"
    root = json.loads(meta_path.read_text())
    del root["attributes"]["dmlfe"]["provenance"]["history"]  # as an older dmlfe wrote it
    meta_path.write_text(json.dumps(root))
    st = open_store(store)
    (entry,) = history(store)
    assert entry["rows"] == [0, 45] and entry["fingerprint"] == st.fingerprint
    assert entry["source"] == {"format": "jsonl", "source": [str(corpus["A"])],
                               "reader_options": JSONL}
    dmlfe.append(store, corpus["B"], **JSONL)
    h = open_store(store).history()
    assert [e["rows"] for e in h] == [[0, 45], [45, 115]]
    assert h[0]["fingerprint"] == st.fingerprint


# --------------------------------------------------------------------------- command line
def test_cli_append_verify_info_and_fit(tmp_path, corpus, capsys, cluster_client):
    address = cluster_client.scheduler.address
    store = tmp_path / "s.zarr"
    assert main(["ingest", str(corpus["A"]), "--format", "jsonl", "--out", str(store),
                 "--id-field", "id", "--split-field", "split", "--chunk-rows", "16",
                 "--quiet"]) == 0
    B = [{k: v for k, v in d.items() if k != "split"} for d in corpus["docs_B"]]
    new = _write(tmp_path / "new.jsonl", B)
    capsys.readouterr()
    assert main(["ingest", str(new), "--format", "jsonl", "--append", str(store),
                 "--split", "test", "--id-field", "id", "--scheduler", address]) == 0
    out = capsys.readouterr().out
    assert f"appended 70 documents to store {store} (rows 45..114)" in out
    assert "are not in the store's vocabulary and got no column" in out
    assert main(["verify", str(store)]) == 0
    assert "intact" in capsys.readouterr().out
    assert main(["info", str(store)]) == 0
    out = capsys.readouterr().out
    assert "history (2):" in out
    assert f"ingest rows 0..44 (45 documents) from jsonl {corpus['A']}" in out
    assert f"append rows 45..114 (70 documents) from jsonl {new}, split test" in out
    assert f"store uuid {open_store(store).fingerprint['uuid']}" in out
    assert open_store(store).split.compute().tolist() == ["train"] * 45 + ["test"] * 70

    model = tmp_path / "model"
    assert main(["fit", str(store), "--method", "mddm", "--dim", "3", "--split", "test",
                 "--out", str(model), "--scheduler", address]) == 0
    fitted = dmlfe.load_model(model)
    ref = dmlfe.MDDM(n_components=3, split="test", cache=False).fit(store)
    np.testing.assert_allclose(fitted.eigenvalues_, ref.eigenvalues_, rtol=1e-10)
    assert fitted.training_store_["uuid"] == open_store(store).fingerprint["uuid"]


@pytest.mark.parametrize("extra,message", [
    (["--out", "X", "--split", "test"], "--split applies to --append only"),
    (["--append", "S", "--overwrite"], "--overwrite does not apply to --append"),
    (["--append", "S", "--chunk-rows", "8"], "--chunk-rows does not apply to --append"),
    (["--append", "S", "--vectorizer", "hashing"], "vectoriser option(s) vectorizer"),
])
def test_cli_append_refusals(tmp_path, corpus, capsys, extra, message):
    store = dmlfe.ingest(corpus["A"], "jsonl", tmp_path / "s.zarr", chunk_rows=16, **JSONL)
    before = _digest(store)
    extra = [str(store) if a == "S" else str(tmp_path / "x.zarr") if a == "X" else a
             for a in extra]
    capsys.readouterr()
    rc = main(["ingest", str(corpus["B"]), "--format", "jsonl", "--id-field", "id", *extra])
    err = capsys.readouterr().err
    assert rc == 2 and message in err, err
    assert _digest(store) == before


def test_an_append_that_finds_the_store_replaced_gives_up(tmp_path, corpus, monkeypatch):
    import dmlfe.store.writer as W

    store = dmlfe.ingest(corpus["A"], "jsonl", tmp_path / "s.zarr", chunk_rows=16, **JSONL)
    other = _write(tmp_path / "C.jsonl", _docs(7, 5, 500, "test"))
    orig = W.integrity.build_record
    calls = []

    def meanwhile(*args, **kwargs):  # another append lands while this one builds
        if not calls:
            calls.append(1)
            dmlfe.append(store, other, **JSONL)
        return orig(*args, **kwargs)

    monkeypatch.setattr(W.integrity, "build_record", meanwhile)
    with pytest.raises(dmlfe.errors.StoreError, match="replaced by another process"):
        dmlfe.append(store, corpus["B"], **JSONL)
    st = open_store(store)
    assert st.n_docs == 50 and st.ids.compute().tolist()[-1] == "d504"
    assert _siblings(store) == [] and verify_store(store).ok


def test_unchanged_chunks_are_links_and_changed_ones_new_files(tmp_path, corpus, monkeypatch):
    import dmlfe.store.writer as W

    store = dmlfe.ingest(corpus["A"], "jsonl", tmp_path / "s.zarr", chunk_rows=16, **JSONL)
    before = _digest(store)
    seen = {}

    def check(new, out):  # the next version, just before the swap
        for key in ("obs/_index/c/0", "obs/_index/c/1", "obs/_index/c/2", "X/data/c/0"):
            seen[key] = os.stat(Path(new) / key).st_ino == os.stat(Path(out) / key).st_ino
        seen["old bytes"] = _digest(Path(out)) == before
        return swap_into_place(new, out)

    swap_into_place = W.swap_into_place
    monkeypatch.setattr(W, "swap_into_place", check)
    dmlfe.append(store, corpus["B"], **JSONL)
    # rows 0-31 are untouched, rows 32-44 share the chunk the new rows start in, and the
    # one element chunk holds old and new entries
    assert seen == {"obs/_index/c/0": True, "obs/_index/c/1": True, "obs/_index/c/2": False,
                    "X/data/c/0": False, "old bytes": True}


def test_an_empty_source_is_refused(tmp_path, corpus):
    store = dmlfe.ingest(corpus["A"], "jsonl", tmp_path / "s.zarr", chunk_rows=16, **JSONL)
    empty = _write(tmp_path / "empty.jsonl", [])
    _refused(store, lambda: dmlfe.append(store, empty, **JSONL), InputError, str(empty),
             "holds no documents")
