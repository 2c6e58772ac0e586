"""The classifier registry (dmlfe.evaluation.registry): a classifier declared once is
offered by ``dmlfe fit --classifier``, saved and loaded with the model, used by ``dmlfe
predict`` and ``dmlfe evaluate`` and by a pipeline file's ``classifiers:`` entries.

The toy classifier below is registered by this file alone. References are computed here:
the toy refitted in memory on embeddings (or raw features) read from the store, and the
measures with scikit-learn.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import yaml
from helpers import write_store
from sklearn.metrics import f1_score, hamming_loss

import dmlfe
from dmlfe.classifier_files import PREDICT_CLASSIFIERS, load_classifier
from dmlfe.cli import main
from dmlfe.evaluation.registry import (
    ClassifierDeclaration,
    all_classifiers,
    get_classifier,
    register_classifier,
    unregister_classifier,
)
from dmlfe.pipeline import run_pipeline
from dmlfe.pipeline.config import CLASSIFIERS, load_config

N, D, Q = 120, 20, 3


def _dense(Z: Any) -> np.ndarray:
    return Z.toarray() if sp.issparse(Z) else np.asarray(Z, dtype=np.float64)


class ToyCentroids:
    """Scores label j by which of two centroids (its documents', the others') is nearer."""

    def __init__(self, shift: float = 0.0) -> None:
        self.shift = shift

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {"shift": self.shift}

    def fit(self, Z: Any, Y: Any) -> ToyCentroids:
        Z, Y = _dense(Z), _dense(Y)
        pos = (Y.T @ Z) / np.maximum(Y.sum(0), 1)[:, None]
        neg = ((1 - Y).T @ Z) / np.maximum((1 - Y).sum(0), 1)[:, None]
        self.coef_ = pos - neg
        self.intercept_ = 0.5 * ((neg ** 2).sum(1) - (pos ** 2).sum(1)) + self.shift
        self.n_features_in_ = Z.shape[1]
        return self

    def decision_function(self, Z: Any) -> np.ndarray:
        return _dense(Z) @ self.coef_.T + self.intercept_

    def predict_proba(self, Z: Any) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-self.decision_function(Z)))

    def predict(self, Z: Any) -> np.ndarray:
        return (self.decision_function(Z) > 0).astype(np.int8)


def _nearer_centroid(Ztr, Ytr, Z, shift=0.0) -> np.ndarray:
    """The toy's rule written out: label j when z is nearer its documents' centroid."""
    out = np.zeros((Z.shape[0], Ytr.shape[1]), np.int8)
    for j in range(Ytr.shape[1]):
        on = Ytr[:, j] == 1
        dp = ((Z - Ztr[on].mean(0)) ** 2).sum(1)
        dn = ((Z - Ztr[~on].mean(0)) ** 2).sum(1)
        out[:, j] = 0.5 * (dn - dp) + shift > 0
    return out


@pytest.fixture
def toy():
    spec = register_classifier(ClassifierDeclaration("toy", ToyCentroids, {"shift": 0.0},
                                                     predict=True, doc="a test's toy"))
    yield spec
    unregister_classifier("toy")
    assert "toy" not in all_classifiers() and "toy" not in PREDICT_CLASSIFIERS


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    Y = (rng.uniform(size=(N, Q)) < 0.4).astype(np.uint8)
    X = Y @ rng.normal(size=(Q, D)) + 0.4 * rng.normal(size=(N, D))
    X[rng.uniform(size=X.shape) < 0.3] = 0.0
    splits = ["train" if i % 3 else "test" for i in range(N)]
    return sp.csr_matrix(X), Y, splits


def test_dmlfe_own_classifiers_are_declared_once():
    assert dict(CLASSIFIERS) == {n: (s.cls.__name__, s.defaults)
                                 for n, s in all_classifiers().items()}
    assert set(CLASSIFIERS) == {"ridge", "mlknn", "knn-vote", "br", "flda", "ppml"}
    assert set(PREDICT_CLASSIFIERS) == {"ridge", "flda", "mlknn", "knn-vote"}
    assert get_classifier("RIDGE").cls is dmlfe.MultiLabelRidge
    with pytest.raises(ValueError, match="binary relevance takes 'logistic'"):
        get_classifier("br").make({"estimator": "svm"})
    with pytest.raises(ValueError, match="registered already"):
        register_classifier(ClassifierDeclaration("ridge", ToyCentroids))


def test_toy_through_fit_predict_and_evaluate(toy, data, tmp_path, cluster_client, capsys):
    X, Y, splits = data
    store = write_store(tmp_path / "s.zarr", X, Y, splits, chunk_rows=16)
    address = cluster_client.scheduler.address
    model_dir = tmp_path / "model"
    assert main(["fit", str(store), "--method", "mddm_p", "--dim", "2", "--split", "train",
                 "--classifier", "toy", "--out", str(model_dir), "--scheduler", address,
                 "--quiet"]) == 0
    name, clf = load_classifier(model_dir)
    assert name == "toy" and type(clf) is ToyCentroids
    # reference: the model's embeddings in memory, the rule written out above
    model = dmlfe.load_model(model_dir)
    tr, te = (np.array([s == k for s in splits]) for k in ("train", "test"))
    Ztr, Zte = np.asarray(model.transform(X[tr])), np.asarray(model.transform(X[te]))
    P = _nearer_centroid(Ztr, Y[tr], Zte)
    assert 0 < P.sum() < P.size  # the rule is not trivial on these data
    out = tmp_path / "preds.jsonl"
    assert main(["predict", str(model_dir), str(store), "--split", "test", "--out", str(out),
                 "--scheduler", address]) == 0
    got = [json.loads(line) for line in out.read_text().splitlines()]
    names = [f"L{j}" for j in range(Q)]
    assert [g["labels"] for g in got] == [[names[j] for j in np.flatnonzero(p)] for p in P]
    metrics = tmp_path / "metrics.json"
    assert main(["evaluate", str(model_dir), str(store), "--split", "test", "--json",
                 str(metrics), "--scheduler", address, "--quiet"]) == 0
    rep = json.loads(metrics.read_text())
    assert rep["classifier"] == "toy"
    assert rep["metrics"]["hamming_loss"] == pytest.approx(hamming_loss(Y[te], P), abs=1e-12)
    assert rep["metrics"]["micro_f1"] == pytest.approx(
        f1_score(Y[te], P, average="micro", zero_division=1.0), abs=1e-12)


def test_toy_in_a_pipeline_file(toy, data, tmp_path):
    import dask

    X, Y, splits = data
    store = write_store(tmp_path / "s.zarr", X, Y, splits, chunk_rows=16)
    cfg = {"name": "toy", "datasets": [{"name": "s", "store": str(store)}],
           "methods": ["none"], "classifiers": ["toy", {"name": "toy", "shift": 0.5,
                                                          "label": "toy+"}],
           "metrics": ["hamming_loss"], "d_curve": []}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    loaded = load_config(path)
    assert [(c.label, c.params) for c in loaded.classifiers] == [
        ("toy", {"shift": 0.0}), ("toy+", {"shift": 0.5})]
    with dask.config.set(scheduler="threads"):
        res = run_pipeline(path, work_dir=tmp_path / "w", progress=False)
    tr, te = (np.array([s == k for s in splits]) for k in ("train", "test"))
    Xd = X.toarray()
    for label, shift in (("toy", 0.0), ("toy+", 0.5)):
        P = _nearer_centroid(Xd[tr], Y[tr], Xd[te], shift)
        table = res.report["tables"][label]["hamming_loss"]["s"]
        assert table["none"] == pytest.approx(hamming_loss(Y[te], P), abs=1e-12), label
    bad = {**cfg, "classifiers": [{"name": "toy", "k": 3}]}
    path.write_text(yaml.safe_dump(bad), encoding="utf-8")
    with pytest.raises(Exception, match=r"classifiers\[0\]\.k"):
        load_config(path)
