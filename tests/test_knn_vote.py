"""KNNLabelVote (dmlfe.evaluation.knn_vote): the exact k-nearest-neighbour label vote.

References are written here: the full similarity (distance) matrix in numpy, neighbours
by a stable sort with the lower training index first, the weighted label sums. Then:
block sizes, a real two-worker LocalCluster (one compute per call), the saved-classifier
files and the command line, a pipeline file, and precision@1 on MULAN's scene against
the label-frequency baseline.
"""

from __future__ import annotations

import json

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
import yaml
from helpers import count_computes, mulan_arrays, scheduler_graphs, sparse_dask, write_store

import dmlfe
from dmlfe.classifier_files import PREDICT_CLASSIFIERS, load_classifier, save_classifier
from dmlfe.evaluation import KNNLabelVote
from dmlfe.evaluation.knn_vote import _SCATTERED, top_k_of_csr
from dmlfe.evaluation.registry import get_classifier


def _data(n=90, m=25, d=6, q=12, seed=0):
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, d))
    Y = (rng.uniform(size=(n, q)) < 0.2).astype(np.int8)
    Y[:, 0] = Z[:, 0] > 0.3  # a label that follows the embeddings
    return Z, Y, rng.normal(size=(m, d))


def _reference(Ztr, Ytr, Zq, k, metric="cosine", weights="similarity"):
    """Brute force: every pair, stable sort, weighted vote (dense scores, neighbours)."""
    Ytr = Ytr.toarray() if sp.issparse(Ytr) else np.asarray(Ytr, dtype=np.float64)
    n = Ztr.shape[0]
    k = min(k, n)
    if metric == "cosine":
        def unit(a):
            norm = np.linalg.norm(a, axis=1, keepdims=True)
            return a / np.where(norm > 0, norm, 1.0)
        sim = unit(Zq) @ unit(Ztr).T
        key, w_all = sim, np.maximum(sim, 0.0)
    else:
        dist = np.sqrt(((Zq[:, None, :] - Ztr[None, :, :]) ** 2).sum(axis=2))
        key, w_all = -dist, 1.0 / (1.0 + dist)
    S = np.zeros((Zq.shape[0], Ytr.shape[1]))
    nbrs = np.zeros((Zq.shape[0], k), dtype=np.int64)
    for i in range(Zq.shape[0]):
        order = np.lexsort((np.arange(n), -key[i]))[:k]  # best first, lower index on ties
        nbrs[i] = order
        w = np.ones(k) if weights == "uniform" else w_all[i, order]
        if w.sum() <= 0:
            w = np.ones(k)
        S[i] = (w / w.sum()) @ Ytr[order]
    return S, nbrs


def _labels(Y, form):
    if form == "dense":
        return Y
    if form == "csr":
        return sp.csr_matrix(Y)
    return sparse_dask(Y.astype(np.float64), 20)  # dask array of CSR blocks


@pytest.mark.parametrize("form", ["dense", "csr", "dask-csr"])
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("weights", ["similarity", "uniform"])
def test_scores_match_brute_force(form, metric, weights):
    Z, Y, Zq = _data()
    clf = KNNLabelVote(n_neighbors=7, metric=metric, weights=weights).fit(Z, _labels(Y, form))
    assert clf.n_neighbors_ == 7 and clf.n_labels_ == Y.shape[1] and clf.n_samples_ == 90
    assert sp.issparse(clf.train_labels_) and clf.train_labels_.nnz == Y.sum()
    S = clf.predict_proba(Zq)
    ref, nbrs = _reference(Z, Y, Zq, 7, metric, weights)
    assert sp.isspmatrix_csr(S) and S.shape == ref.shape
    # only labels some neighbour carries are stored
    assert S.nnz == np.count_nonzero(Y[nbrs].any(axis=1))
    np.testing.assert_allclose(S.toarray(), ref, rtol=1e-12, atol=1e-12)
    assert S.data.min() >= 0 and S.data.max() <= 1
    _, idx = clf.kneighbors(Zq)
    np.testing.assert_array_equal(idx, nbrs)
    np.testing.assert_allclose(clf.decision_function(Zq).toarray(), ref, rtol=1e-12,
                               atol=1e-12)


def test_one_neighbour_gives_its_labels():
    Z, Y, _ = _data(seed=1)
    for metric in ("cosine", "euclidean"):
        clf = KNNLabelVote(n_neighbors=1, metric=metric).fit(Z, sp.csr_matrix(Y))
        Zq = Z[::3] * 1.0001 if metric == "cosine" else Z[::3] + 1e-9
        np.testing.assert_array_equal(clf.predict_proba(Zq).toarray(), Y[::3])
        has = Y[::3].any(axis=1)
        np.testing.assert_array_equal(clf.predict(Zq).toarray()[has], Y[::3][has])


def test_ties_go_to_the_lower_training_index():
    a, b = [1.0, 0.0], [0.0, 1.0]
    Z = np.array([b, a, b, a, a, [1.0, 1.0]])
    Y = np.eye(6, dtype=np.int8)
    for bt in (None, 1, 2):
        for metric in ("cosine", "euclidean"):
            clf = KNNLabelVote(n_neighbors=2, metric=metric, train_block_rows=bt)
            clf.fit(Z, Y)
            _, idx = clf.kneighbors(np.array([[2.0, 0.0], [0.0, 3.0]]) if metric == "cosine"
                                    else np.array([a, b]))
            np.testing.assert_array_equal(idx, [[1, 3], [0, 2]])
            ref, nbrs = _reference(Z, Y, np.array([a, b]), 2, metric)
            np.testing.assert_array_equal(nbrs, [[1, 3], [0, 2]])
    # equal scores: predict_top_k and predict's fallback take the lower label index
    clf = KNNLabelVote(n_neighbors=2, weights="uniform").fit(Z, Y)
    idx, top = clf.predict_top_k(np.array([a]), 4)
    np.testing.assert_array_equal(idx, [[1, 3, 0, 2]])  # then the unscored, lowest first
    np.testing.assert_allclose(top, [[0.5, 0.5, 0.0, 0.0]])
    np.testing.assert_array_equal(clf.predict(np.array([a]), threshold=0.9).toarray(),
                                  [[0, 1, 0, 0, 0, 0]])


def test_block_sizes_do_not_change_the_result():
    Z, Y, Zq = _data(n=203, m=57, seed=2)
    one = KNNLabelVote(n_neighbors=9, block_rows=10_000, train_block_rows=10_000).fit(Z, Y)
    many = KNNLabelVote(n_neighbors=9, block_rows=8, train_block_rows=13).fit(Z, Y)
    v1, i1 = one.kneighbors(Zq)
    v2, i2 = many.kneighbors(Zq)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_allclose(v1, v2, rtol=1e-14, atol=1e-14)
    S1, S2 = one.predict_proba(Zq), many.predict_proba(Zq)
    np.testing.assert_array_equal(S1.indices, S2.indices)
    np.testing.assert_allclose(S1.data, S2.data, rtol=1e-14)
    # k larger than a training block: the merge keeps k
    big = KNNLabelVote(n_neighbors=30, train_block_rows=7).fit(Z, Y)
    ref, nbrs = _reference(Z, Y, Zq, 30)
    np.testing.assert_array_equal(big.kneighbors(Zq)[1], nbrs)
    np.testing.assert_allclose(big.predict_proba(Zq).toarray(), ref, rtol=1e-12, atol=1e-12)


def test_dask_queries_one_compute_each_call():
    Z, Y, Zq = _data(n=120, m=40, seed=3)
    clf = KNNLabelVote(n_neighbors=5, block_rows=6, train_block_rows=25).fit(Z, Y)
    ref = clf.predict_proba(Zq)
    _, n_local = count_computes(lambda: clf.predict_proba(Zq))
    assert n_local == 0  # numpy queries, no client: in this process
    S, n = count_computes(lambda: clf.predict_proba(da.from_array(Zq, chunks=11)))
    assert n == 1
    np.testing.assert_allclose(S.toarray(), ref.toarray(), rtol=1e-14, atol=0)
    fitted, n_fit = count_computes(lambda: KNNLabelVote(n_neighbors=5).fit(
        da.from_array(Z, chunks=30), sparse_dask(Y.astype(float), 30)))
    assert n_fit == 1
    np.testing.assert_allclose(fitted.predict_proba(Zq).toarray(), ref.toarray(),
                               rtol=1e-14, atol=0)


def test_on_a_local_cluster_as_in_process(cluster_client, monkeypatch):
    import dmlfe.compute

    Z, Y, Zq = _data(n=160, m=45, seed=4)
    Zd = da.from_array(Z, chunks=40)
    Yd = sparse_dask(Y.astype(np.float64), 40)
    Qd = da.from_array(Zq, chunks=10)
    for metric in ("cosine", "euclidean"):
        with dask.config.set(scheduler="threads"):  # in-process reference
            local = KNNLabelVote(n_neighbors=6, metric=metric, block_rows=4,
                                 train_block_rows=30).fit(Z, Y)
            ref = local.predict_proba(Zq)
        assert dmlfe.compute.computing_client() is cluster_client
        monkeypatch.setattr(dmlfe.compute, "SCATTER_BYTES", 0)  # training blocks scattered
        clf = KNNLabelVote(n_neighbors=6, metric=metric, block_rows=4, train_block_rows=30)
        clf.fit(Zd, Yd)
        before = scheduler_graphs(cluster_client)
        S = clf.predict_proba(Qd)
        assert scheduler_graphs(cluster_client) - before == 1  # one compute per call
        scattered = [f.key for f in _SCATTERED[clf][3]]
        assert len(scattered) == 6  # 160 rows in blocks of 30
        np.testing.assert_array_equal(S.indices, ref.indices)
        np.testing.assert_allclose(S.data, ref.data, rtol=1e-13)
        # numpy queries with a client current run there too
        np.testing.assert_allclose(clf.predict_proba(Zq).toarray(), ref.toarray(),
                                   rtol=1e-13, atol=0)
        # the training blocks were scattered once, for both calls
        assert [f.key for f in _SCATTERED[clf][3]] == scattered
        np.testing.assert_allclose(S.toarray(), _reference(Z, Y, Zq, 6, metric)[0],
                                   rtol=1e-12, atol=1e-12)
        monkeypatch.undo()


def test_predict_and_top_k():
    Z, Y, Zq = _data(seed=5)
    clf = KNNLabelVote(n_neighbors=8).fit(Z, Y)
    S = clf.predict_proba(Zq).toarray()
    P = clf.predict(Zq)
    assert sp.isspmatrix_csr(P) and P.dtype == np.int8
    want = (S >= 0.5).astype(np.int8)
    for i in np.flatnonzero(want.sum(axis=1) == 0):
        want[i, np.argmax(S[i])] = 1  # the best label (lowest index on equal scores)
    np.testing.assert_array_equal(P.toarray(), want)
    assert (np.diff(clf.predict(Zq, threshold=1.0).indptr) >= 1).all()  # never empty
    for k in (1, 3, Y.shape[1]):
        idx, top = clf.predict_top_k(Zq, k)
        order = np.lexsort((np.broadcast_to(np.arange(S.shape[1]), S.shape), -S), axis=-1)
        np.testing.assert_array_equal(idx, order[:, :k])
        np.testing.assert_allclose(top, np.take_along_axis(S, order[:, :k], axis=1))
    # the row blocks of the top-k selection do not change it
    Ssp = clf.predict_proba(Zq)
    for a, b in zip(top_k_of_csr(Ssp, 4, block_rows=3), top_k_of_csr(Ssp, 4), strict=True):
        np.testing.assert_array_equal(a, b)


def test_parameters_and_errors():
    Z, Y, Zq = _data()
    clf = KNNLabelVote(n_neighbors=3, metric="euclidean", weights="uniform", block_rows=5)
    assert clf.get_params() == {"n_neighbors": 3, "metric": "euclidean", "weights": "uniform",
                                "block_rows": 5, "train_block_rows": None}
    assert clf.set_params(n_neighbors=4).n_neighbors == 4
    with pytest.raises(Exception, match="not fitted"):
        clf.predict_proba(Zq)
    for bad, match in (({"n_neighbors": 0}, "n_neighbors=0"), ({"n_neighbors": 2.5}, "integer"),
                       ({"metric": "manhattan"}, "metric='manhattan'"),
                       ({"weights": "distance"}, "weights='distance'"),
                       ({"block_rows": 0}, "block_rows=0")):
        with pytest.raises(ValueError, match=match):
            KNNLabelVote(**bad).fit(Z, Y)
    with pytest.raises(ValueError, match=r"Y\[row 0, label 1\] = 2"):
        Y2 = Y.copy()
        Y2[0, 1] = 2
        KNNLabelVote().fit(Z, sp.csr_matrix(Y2))
    with pytest.raises(ValueError, match="2-D"):
        KNNLabelVote().fit(Z, Y[:, :, None])
    with pytest.raises(ValueError, match="must match"):
        KNNLabelVote().fit(Z, Y[:-1])
    with pytest.warns(UserWarning, match="n_neighbors_=4"):
        small = KNNLabelVote(n_neighbors=10).fit(Z[:4], Y[:4])
    assert small.n_neighbors == 10 and small.n_neighbors_ == 4
    np.testing.assert_allclose(small.predict_proba(Zq).toarray(),
                               _reference(Z[:4], Y[:4], Zq, 10)[0], rtol=1e-12, atol=1e-12)
    fitted = KNNLabelVote().fit(Z, Y)
    with pytest.raises(Exception, match="features"):
        fitted.predict_proba(Zq[:, :3])
    with pytest.raises(ValueError, match="threshold"):
        fitted.predict(Zq, threshold=0)
    with pytest.raises(ValueError, match="k=13"):
        fitted.predict_top_k(Zq, 13)
    Zbad = Zq.copy()
    Zbad[2, 1] = np.nan
    with pytest.raises(Exception, match="finite|NaN"):
        fitted.predict_proba(Zbad)
    with pytest.raises(Exception, match="0 sample"):
        fitted.predict_proba(Zq[:0])


def test_declared_and_saved(tmp_path):
    assert dmlfe.KNNLabelVote is KNNLabelVote
    assert get_classifier("knn-vote").cls is KNNLabelVote and "knn-vote" in PREDICT_CLASSIFIERS
    Z, Y, Zq = _data(seed=6)
    clf = KNNLabelVote(n_neighbors=6, metric="euclidean").fit(Z, sp.csr_matrix(Y))
    save_classifier(clf, tmp_path, name="knn-vote")
    meta = json.loads((tmp_path / "classifier" / "classifier.json").read_text())
    assert {"labels_data_", "labels_indices_", "labels_indptr_",
            "train_embeddings_"} <= set(meta["arrays"])
    name, got = load_classifier(tmp_path)
    assert name == "knn-vote" and got.get_params() == clf.get_params()
    a, b = got.predict_proba(Zq), clf.predict_proba(Zq)
    assert (a != b).nnz == 0
    assert (got.predict(Zq) != clf.predict(Zq)).nnz == 0


def test_fit_predict_evaluate_commands(tmp_path, cluster_client):
    from dmlfe.cli import main

    rng = np.random.default_rng(7)
    n, q = 120, 4
    Y = (rng.uniform(size=(n, q)) < 0.35).astype(np.uint8)
    X = Y @ rng.normal(size=(q, 15)) + 0.3 * rng.normal(size=(n, 15))
    X[rng.uniform(size=X.shape) < 0.3] = 0.0
    splits = ["train" if i % 3 else "test" for i in range(n)]
    store = write_store(tmp_path / "s.zarr", sp.csr_matrix(X), Y, splits, chunk_rows=16)
    address = cluster_client.scheduler.address
    model_dir = tmp_path / "model"
    assert main(["fit", str(store), "--method", "mddm_p", "--dim", "3", "--split", "train",
                 "--classifier", "knn-vote", "--out", str(model_dir), "--scheduler", address,
                 "--quiet"]) == 0
    name, clf = load_classifier(model_dir)
    assert name == "knn-vote" and type(clf) is KNNLabelVote
    model = dmlfe.load_model(model_dir)
    tr, te = (np.array([s == k for s in splits]) for k in ("train", "test"))
    Ztr, Zte = (np.asarray(model.transform(sp.csr_matrix(X[m]))) for m in (tr, te))
    with dask.config.set(scheduler="threads"):
        ref = KNNLabelVote().fit(Ztr, Y[tr])
        P = ref.predict(Zte).toarray()
        S = ref.predict_proba(Zte).toarray()
    out = tmp_path / "preds.jsonl"
    assert main(["predict", str(model_dir), str(store), "--split", "test", "--out", str(out),
                 "--scheduler", address]) == 0
    got = [json.loads(line) for line in out.read_text().splitlines()]
    names = [f"L{j}" for j in range(q)]
    assert [g["labels"] for g in got] == [[names[j] for j in np.flatnonzero(p)] for p in P]
    np.testing.assert_allclose([[g["scores"][nm] for nm in names] for g in got], S,
                               rtol=1e-9, atol=1e-12)
    metrics = tmp_path / "metrics.json"
    assert main(["evaluate", str(model_dir), str(store), "--split", "test", "--json",
                 str(metrics), "--scheduler", address, "--quiet"]) == 0
    from sklearn.metrics import hamming_loss

    rep = json.loads(metrics.read_text())
    assert rep["classifier"] == "knn-vote"
    assert rep["metrics"]["hamming_loss"] == pytest.approx(hamming_loss(Y[te], P), abs=1e-12)


def test_in_a_pipeline_file(tmp_path):
    from sklearn.metrics import hamming_loss

    from dmlfe.pipeline import run_pipeline

    rng = np.random.default_rng(8)
    n, q = 90, 3
    Y = (rng.uniform(size=(n, q)) < 0.4).astype(np.uint8)
    X = Y @ rng.normal(size=(q, 12)) + 0.4 * rng.normal(size=(n, 12))
    splits = ["train" if i % 3 else "test" for i in range(n)]
    store = write_store(tmp_path / "s.zarr", sp.csr_matrix(X), Y, splits, chunk_rows=16)
    cfg = {"name": "kv", "datasets": [{"name": "s", "store": str(store)}],
           "methods": ["none"], "classifiers": [{"name": "knn-vote", "n_neighbors": 5}],
           "metrics": ["hamming_loss"], "d_curve": []}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    with dask.config.set(scheduler="threads"):
        res = run_pipeline(path, work_dir=tmp_path / "w", progress=False)
        tr, te = (np.array([s == k for s in splits]) for k in ("train", "test"))
        P = KNNLabelVote(n_neighbors=5).fit(X[tr], Y[tr]).predict(X[te]).toarray()
    table = res.report["tables"]["knn-vote"]["hamming_loss"]["s"]
    assert table["none"] == pytest.approx(hamming_loss(Y[te], P), abs=1e-12)


def test_precision_at_1_on_scene_beats_the_label_frequency():
    Xtr, Ytr = mulan_arrays("scene", "train")
    Xte, Yte = mulan_arrays("scene", "test")
    clf = KNNLabelVote(n_neighbors=10).fit(Xtr, sp.csr_matrix(Ytr))
    idx, _ = clf.predict_top_k(Xte, 1)
    p_at_1 = Yte[np.arange(len(Yte)), idx[:, 0]].mean()
    # baseline: the most frequent training label for every document
    baseline = Yte[:, np.argmax(Ytr.sum(axis=0))].mean()
    assert p_at_1 > baseline + 0.3, (p_at_1, baseline)
    assert p_at_1 > 0.6


def test_predict_on_raw_text(tmp_path, cluster_client):
    """``dmlfe predict MODEL new.txt`` with a saved knn-vote (CSR outputs densified)."""
    from dmlfe.cli import main

    rng = np.random.default_rng(9)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    records = []
    for i in range(60):
        labels = [lab for lab in ("x", "y", "z") if rng.random() < 0.4]
        text = list(rng.choice(words, size=rng.integers(2, 8)))
        text += ["beta gamma"] * ("x" in labels) + ["theta"] * 2 * ("y" in labels)
        records.append({"id": f"d{i}", "text": " ".join(text), "labels": labels,
                        "split": "train" if i < 45 else "test"})
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    with dask.config.set(scheduler="threads"):
        store = dmlfe.ingest(src, format="jsonl", out=tmp_path / "s.zarr", chunk_rows=16,
                             id_field="id", split_field="split", fit_split="train")
    model_dir = tmp_path / "model"
    address = cluster_client.scheduler.address
    assert main(["fit", str(store), "--method", "mddm_p", "--dim", "2", "--split", "train",
                 "--classifier", "knn-vote", "--out", str(model_dir), "--scheduler", address,
                 "--quiet"]) == 0
    (tmp_path / "new.txt").write_text("\n".join(r["text"] for r in records[45:]) + "\n")
    out = tmp_path / "p.jsonl"
    assert main(["predict", str(model_dir), str(tmp_path / "new.txt"), "--out", str(out)]) == 0
    got = [json.loads(line) for line in out.read_text().splitlines()]
    _, clf = load_classifier(model_dir)
    model = dmlfe.load_model(model_dir)
    st = dmlfe.open_store(store)
    with dask.config.set(scheduler="threads"):
        Z = np.asarray(model.transform(st.subset("test").X))
        P, S = clf.predict(Z).toarray(), clf.predict_proba(Z).toarray()
    names = list(st.label_names)
    assert len(got) == 15 and all(g["labels"] for g in got)  # never empty
    assert [g["labels"] for g in got] == [[names[j] for j in np.flatnonzero(p)] for p in P]
    np.testing.assert_allclose([[g["scores"][n] for n in names] for g in got], S, atol=1e-12)


def test_class_labels_vote_for_one_class():
    Z, Y, Zq = _data(seed=10)
    y = np.array(["a", "b", "c"])[Y[:, :3].argmax(axis=1)]
    clf = KNNLabelVote(n_neighbors=5).fit(Z, y)
    assert clf.target_type_ == "multiclass" and list(clf.classes_) == ["a", "b", "c"]
    onehot = (y[:, None] == clf.classes_[None, :]).astype(np.int8)
    ref = _reference(Z, onehot, Zq, 5)[0]
    np.testing.assert_allclose(clf.predict_proba(Zq), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(clf.predict(Zq), clf.classes_[ref.argmax(axis=1)])
    yb = Y[:, 0]
    binary = KNNLabelVote(n_neighbors=4, weights="uniform").fit(Z, yb)
    ref = _reference(Z, np.column_stack([1 - yb, yb]), Zq, 4, weights="uniform")[0]
    np.testing.assert_allclose(binary.decision_function(Zq), ref[:, 1] - 0.5, atol=1e-12)
    np.testing.assert_array_equal(binary.predict(Zq), ref.argmax(axis=1))


# --------------------------------------------------------------------------- raw features
def _sparse_data(n=130, m=35, D=400, q=14, seed=11):
    """tf-idf-like CSR features: few stored entries a row, many rows sharing none (exact
    ties at cosine 0, broken by the lower training index), an empty row."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, D, density=0.04, random_state=rng, format="csr")
    X = sp.csr_matrix(X.multiply(X > 0.2))  # drop some: rows with few features
    X.eliminate_zeros()
    X = sp.vstack([X[:7], sp.csr_matrix((1, D)), X[8:]], format="csr")  # row 7 empty
    Xq = sp.random(m, D, density=0.04, random_state=rng, format="csr")
    Y = (rng.uniform(size=(n, q)) < 0.2).astype(np.int8)
    Y[:, 0] = np.asarray(X[:, :40].sum(axis=1)).ravel() > 0.5
    return X, Y, Xq


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("weights", ["similarity", "uniform"])
def test_sparse_features_match_brute_force(metric, weights):
    X, Y, Xq = _sparse_data()
    ref, nbrs = _reference(X.toarray(), Y, Xq.toarray(), 8, metric, weights)
    for bq, bt in ((None, None), (6, 17), (1, 1000)):
        clf = KNNLabelVote(n_neighbors=8, metric=metric, weights=weights, block_rows=bq,
                           train_block_rows=bt).fit(X, sp.csr_matrix(Y))
        assert clf.sparse_features_ and not hasattr(clf, "train_embeddings_")
        assert clf.n_features_in_ == 400 and clf.train_data_.size == X.nnz
        _, idx = clf.kneighbors(Xq)
        np.testing.assert_array_equal(idx, nbrs)
        S = clf.predict_proba(Xq)
        assert sp.isspmatrix_csr(S)
        np.testing.assert_allclose(S.toarray(), ref, rtol=1e-12, atol=1e-12)
        # dense queries and a dask array of CSR blocks: the same
        np.testing.assert_allclose(clf.predict_proba(Xq.toarray()).toarray(), ref,
                                   rtol=1e-12, atol=1e-12)
        S2 = clf.predict_proba(sparse_dask(Xq, 9))
        np.testing.assert_allclose(S2.toarray(), ref, rtol=1e-12, atol=1e-12)
    # a dask array of CSR blocks in fit: kept sparse too, one compute with the labels
    fitted, n = count_computes(lambda: KNNLabelVote(n_neighbors=8, metric=metric,
                                                    weights=weights).fit(
        sparse_dask(X, 30), sparse_dask(Y.astype(np.float64), 30)))
    assert n == 1 and fitted.sparse_features_
    np.testing.assert_array_equal(fitted.kneighbors(Xq)[1], nbrs)
    # distances are those of the dense reference
    if metric == "euclidean":
        d, _ = fitted.kneighbors(Xq)
        full = np.sqrt(((Xq.toarray()[:, None] - X.toarray()[None]) ** 2).sum(axis=2))
        np.testing.assert_allclose(d, np.take_along_axis(full, nbrs, axis=1), atol=1e-12)


def test_sparse_pair_key_is_dense_only_at_block_size(monkeypatch):
    import dmlfe.evaluation.knn_vote as kv

    X, Y, Xq = _sparse_data(seed=12)
    shapes = []
    real = kv._top_k_rows

    def spy(key, k, offset):
        shapes.append(key.shape)
        return real(key, k, offset)

    monkeypatch.setattr(kv, "_top_k_rows", spy)
    KNNLabelVote(n_neighbors=4, block_rows=5, train_block_rows=20).fit(X, Y).predict_proba(Xq)
    assert shapes and max(a for a, _ in shapes) <= 5 and max(b for _, b in shapes) <= 20


def test_sparse_features_refuse_non_finite_and_refit_switches_paths():
    X, Y, Xq = _sparse_data(seed=13)
    clf = KNNLabelVote(n_neighbors=3).fit(X, Y)
    bad = Xq.copy()
    bad.data[4] = np.inf
    with pytest.raises(Exception, match="finite|infinity"):
        clf.predict_proba(bad)
    Z = X.toarray()[:, :5]
    clf.fit(Z, Y)  # dense now: the sparse arrays are gone
    assert not clf.sparse_features_ and not hasattr(clf, "train_data_")
    np.testing.assert_allclose(clf.predict_proba(Z[:4]).toarray(),
                               _reference(Z, Y, Z[:4], 3)[0], rtol=1e-12, atol=1e-12)
    clf.fit(X, Y)
    assert clf.sparse_features_ and not hasattr(clf, "train_embeddings_")


def test_sparse_features_on_a_local_cluster_as_in_process(cluster_client, monkeypatch):
    import dmlfe.compute

    X, Y, Xq = _sparse_data(n=150, m=40, seed=14)
    Xd, Yd, Qd = sparse_dask(X, 40), sparse_dask(Y.astype(np.float64), 40), sparse_dask(Xq, 10)
    for metric in ("cosine", "euclidean"):
        with dask.config.set(scheduler="threads"):  # in-process reference
            local = KNNLabelVote(n_neighbors=6, metric=metric, block_rows=4,
                                 train_block_rows=30).fit(X, Y)
            ref = local.predict_proba(Xq)
        assert dmlfe.compute.computing_client() is cluster_client
        monkeypatch.setattr(dmlfe.compute, "SCATTER_BYTES", 0)  # training blocks scattered
        clf = KNNLabelVote(n_neighbors=6, metric=metric, block_rows=4, train_block_rows=30)
        clf.fit(Xd, Yd)
        assert clf.sparse_features_
        before = scheduler_graphs(cluster_client)
        S = clf.predict_proba(Qd)
        assert scheduler_graphs(cluster_client) - before == 1  # one compute per call
        scattered = _SCATTERED[clf][3]
        assert len(scattered) == 5  # 150 rows in blocks of 30
        np.testing.assert_array_equal(S.indices, ref.indices)
        np.testing.assert_allclose(S.data, ref.data, rtol=1e-13)
        # in-memory CSR queries with a client current run there too, reusing the blocks
        np.testing.assert_allclose(clf.predict_proba(Xq).toarray(), ref.toarray(),
                                   rtol=1e-13, atol=0)
        assert _SCATTERED[clf][3] is scattered
        np.testing.assert_allclose(
            S.toarray(), _reference(X.toarray(), Y, Xq.toarray(), 6, metric)[0],
            rtol=1e-12, atol=1e-12)
        monkeypatch.undo()


def test_sparse_features_saved_and_loaded(tmp_path):
    X, Y, Xq = _sparse_data(seed=15)
    for metric in ("cosine", "euclidean"):
        clf = KNNLabelVote(n_neighbors=5, metric=metric).fit(X, sp.csr_matrix(Y))
        save_classifier(clf, tmp_path, name="knn-vote")
        meta = json.loads((tmp_path / "classifier" / "classifier.json").read_text())
        want = {"train_data_", "train_indices_", "train_indptr_", "labels_data_"}
        assert want <= set(meta["arrays"]) and "train_embeddings_" not in meta["arrays"]
        assert ("train_sq_norms_" in meta["arrays"]) == (metric == "euclidean")
        _, got = load_classifier(tmp_path)
        assert got.sparse_features_
        assert (got.predict_proba(Xq) != clf.predict_proba(Xq)).nnz == 0
        np.testing.assert_array_equal(got.kneighbors(Xq)[1], clf.kneighbors(Xq)[1])
