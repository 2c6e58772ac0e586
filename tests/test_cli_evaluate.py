"""``dmlfe evaluate`` and ``dmlfe predict`` on a store's split, as a user runs them.

References are independent: the model and the saved classifier applied to the stored
rows in memory, and the measures computed here with scikit-learn and numpy.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import write_store
from sklearn.metrics import (
    coverage_error,
    f1_score,
    hamming_loss,
    label_ranking_average_precision_score,
    label_ranking_loss,
    roc_auc_score,
)

import dmlfe
from dmlfe.classifier_files import load_classifier
from dmlfe.cli import main

N, D, Q = 150, 30, 4


def _data(seed: int = 7) -> tuple[sp.csr_matrix, np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    Y = (rng.uniform(size=(N, Q)) < 0.35).astype(np.uint8)
    W = rng.normal(size=(Q, D))
    X = Y @ W + 0.5 * rng.normal(size=(N, D))  # labels leave a trace in the features
    X[rng.uniform(size=X.shape) < 0.3] = 0.0
    splits = ["train" if i % 3 else "test" for i in range(N)]
    return sp.csr_matrix(X), Y, splits


@pytest.fixture(scope="module")
def fitted(tmp_path_factory, cluster_client):
    tmp = tmp_path_factory.mktemp("evaluate")
    X, Y, splits = _data()
    store = write_store(tmp / "s.zarr", X, Y, splits, chunk_rows=16)
    address = cluster_client.scheduler.address
    model_dir = tmp / "model"
    assert main(["fit", str(store), "--method", "mddm_p", "--dim", "3", "--split", "train",
                 "--classifier", "ridge", "--out", str(model_dir), "--scheduler", address,
                 "--quiet"]) == 0
    return tmp, store, model_dir, address, (X, Y, splits)


def _reference(model_dir, X, Y, splits, split="test"):
    """Predictions and scores of the saved model and classifier, on in-memory rows."""
    rows = np.array([s == split for s in splits])
    model = dmlfe.load_model(model_dir)
    _, clf = load_classifier(model_dir)
    Z = np.asarray(model.transform(X[rows]))
    return Y[rows], np.asarray(clf.predict(Z)), np.asarray(clf.predict_proba(Z)), rows


def _independent_metrics(T, P, S) -> dict[str, float]:
    inter, union = (T & P).sum(1), (T | P).sum(1)
    nt, npred = T.sum(1), P.sum(1)
    ok = (nt > 0) & (nt < T.shape[1])  # rankings are defined
    auc = [roc_auc_score(T[:, j], S[:, j]) for j in range(T.shape[1])
           if 0 < T[:, j].sum() < T.shape[0]]
    top = S[ok].argmax(1)
    return {
        "hamming_loss": hamming_loss(T, P),
        "example_accuracy": np.mean(np.where(union == 0, 1.0, inter / np.maximum(union, 1))),
        "example_precision": np.mean(np.where(npred == 0, (nt == 0) * 1.0,
                                              inter / np.maximum(npred, 1))),
        "example_recall": np.mean(np.where(nt == 0, (npred == 0) * 1.0,
                                           inter / np.maximum(nt, 1))),
        "example_f1": np.mean(np.where(nt + npred == 0, 1.0,
                                       2 * inter / np.maximum(nt + npred, 1))),
        "subset_accuracy": np.mean((T == P).all(1)),
        "micro_f1": f1_score(T, P, average="micro", zero_division=1.0),
        "macro_f1": f1_score(T, P, average="macro", zero_division=1.0),
        "ranking_loss": label_ranking_loss(T[ok], S[ok]),
        "one_error": np.mean(T[ok][np.arange(ok.sum()), top] == 0),
        "coverage": coverage_error(T[ok], S[ok]) - 1,
        "average_precision": label_ranking_average_precision_score(T[ok], S[ok]),
        "macro_auc": np.mean(auc),
    }


def test_evaluate_prints_the_13_measures_and_writes_json(fitted, capsys):
    tmp, store, model_dir, address, (X, Y, splits) = fitted
    out = tmp / "metrics.json"
    assert main(["evaluate", str(model_dir), str(store), "--split", "test", "--json", str(out),
                 "--scheduler", address, "--overwrite"]) == 0
    table = capsys.readouterr().out
    got = json.loads(out.read_text())
    T, P, S, rows = _reference(model_dir, X, Y, splits)
    assert not np.isin(S, [0.0, 1.0]).all()  # real scores, so the ranking measures mean something
    want = _independent_metrics(T.astype(bool), P.astype(bool), S)
    assert len(want) == 13
    for name, value in want.items():
        assert got["metrics"][name] == pytest.approx(value, abs=1e-12), name
        assert f"{name} " in table and f"{got['metrics'][name]:.4f}" in table
    assert got["metrics"]["n_documents"] == rows.sum()
    assert got["split"] == "test" and got["classifier"] == "ridge"


def test_evaluate_json_to_stdout(fitted, capsys):
    tmp, store, model_dir, address, _ = fitted
    assert main(["evaluate", str(model_dir), str(store), "--split", "test", "--json", "-",
                 "--scheduler", address, "--quiet"]) == 0
    got = json.loads(capsys.readouterr().out)  # nothing but the JSON on stdout
    assert set(got["metrics"]) >= {"hamming_loss", "macro_auc", "coverage"}
    assert not (tmp / "-").exists()


def test_evaluate_compares_labels_by_name(fitted, capsys):
    tmp, store, model_dir, address, (X, Y, splits) = fitted
    # the same documents with the label columns in another order: the same scores
    perm = [2, 0, 3, 1]
    shuffled = write_store(tmp / "perm.zarr", X, Y[:, perm], splits,
                           label_names=[f"L{j}" for j in perm])
    out = tmp / "perm.json"
    assert main(["evaluate", str(model_dir), str(shuffled), "--split", "test", "--json",
                 str(out), "--scheduler", address, "--quiet"]) == 0
    T, P, S, _ = _reference(model_dir, X, Y, splits)
    want = _independent_metrics(T.astype(bool), P.astype(bool), S)
    got = json.loads(out.read_text())["metrics"]
    assert got["micro_f1"] == pytest.approx(want["micro_f1"], abs=1e-12)
    assert got["macro_auc"] == pytest.approx(want["macro_auc"], abs=1e-12)
    # other labels: one line naming them
    other = write_store(tmp / "other.zarr", X, Y, splits, label_names=["L0", "L1", "L2", "zz"])
    capsys.readouterr()
    assert main(["evaluate", str(model_dir), str(other), "--split", "test",
                 "--scheduler", address]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'L3'" in err and "'zz'" in err and "by name" in err


def test_evaluate_refuses_a_model_without_a_classifier(fitted, capsys):
    tmp, store, _, address, _ = fitted
    bare = tmp / "bare"
    assert main(["fit", str(store), "--method", "pca", "--dim", "2", "--split", "train",
                 "--out", str(bare), "--scheduler", address, "--quiet"]) == 0
    assert main(["evaluate", str(bare), str(store), "--split", "test"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no classifier" in err and "--classifier" in err


def test_unknown_split_names_the_store_and_its_splits(fitted, capsys):
    tmp, store, model_dir, _, _ = fitted
    assert main(["evaluate", str(model_dir), str(store), "--split", "validation"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(store) in err and "'train'" in err and "'test'" in err
    assert "subset()" not in err


def test_predict_on_a_store_split(fitted, capsys):
    tmp, store, model_dir, address, (X, Y, splits) = fitted
    out = tmp / "preds.jsonl"
    assert main(["predict", str(model_dir), str(store), "--split", "test", "--out", str(out),
                 "--scheduler", address, "--overwrite"]) == 0
    got = [json.loads(line) for line in out.read_text().splitlines()]
    _, P, S, rows = _reference(model_dir, X, Y, splits)
    names = [f"L{j}" for j in range(Q)]
    assert [g["id"] for g in got] == [f"doc{i:03d}" for i in np.flatnonzero(rows)]
    assert [g["labels"] for g in got] == [[names[j] for j in np.flatnonzero(p)] for p in P]
    np.testing.assert_allclose([[g["scores"][n] for n in names] for g in got], S, atol=1e-12)
    # the same records on standard output, and only them
    capsys.readouterr()
    assert main(["predict", str(model_dir), str(store), "--split", "test", "--out", "-",
                 "--scheduler", address]) == 0
    captured = capsys.readouterr()
    assert [json.loads(line) for line in captured.out.splitlines()] == got
    assert "standard output" in captured.err


def test_binary_outputs_refuse_stdout(fitted, capsys):
    tmp, store, model_dir, _, _ = fitted
    assert main(["transform", str(model_dir), str(store), "--out", "-"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--out -" in err and "standard output" in err and "\n" not in err
    for argv in (["fit", str(store), "--method", "pca", "--dim", "2"], ["export", str(store)],
                 ["ingest", "--format", "synthetic"], ["import", str(store)]):
        assert main([*argv, "--out", "-"]) == 2, argv
        assert "cannot be written to standard output" in capsys.readouterr().err, argv
    assert not (tmp / "-").exists()


def test_the_documented_own_corpus_session_runs(tmp_path, cluster_client, monkeypatch, capsys):
    """The console lines of docs/cli.rst's own-corpus section, run as written."""
    import shlex
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "cli.rst").read_text()
    section = page.split(".. _cli-own-corpus:")[1]
    commands = [line.strip()[2:] for line in section.splitlines()
                if line.strip().startswith("$ dmlfe ")]
    assert [c.split()[1] for c in commands] == ["ingest", "fit", "evaluate", "predict",
                                                "predict"]
    rng = np.random.default_rng(1)
    topics = {"sea": ["sea", "wave", "blue"], "sky": ["sky", "cloud", "blue"],
              "plant": ["leaf", "green", "tree"]}
    lines = []
    for i in range(90):
        labels = [t for t in topics if rng.random() < 0.4]
        words = [w for t in labels for w in topics[t]] + list(rng.choice(["a", "the"], 3))
        lines.append(json.dumps({"id": f"d{i}", "text": " ".join(rng.permutation(words)),
                                 "labels": labels, "split": "train" if i < 60 else "test"}))
    (tmp_path / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "new.txt").write_text("blue wave sea\ngreen leaf\n")
    monkeypatch.chdir(tmp_path)
    address = cluster_client.scheduler.address
    for command in commands:
        argv = shlex.split(command)[1:]
        assert main([*argv, "--scheduler", address]) == 0, command
    out = capsys.readouterr().out
    metrics = json.loads((tmp_path / "metrics.json").read_text())["metrics"]
    assert metrics["n_documents"] == 30 and f"{metrics['micro_f1']:.4f}" in out
    preds = [json.loads(x) for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert [p["id"] for p in preds] == [f"d{i}" for i in range(60, 90)]
    stdout_preds = [json.loads(x) for x in out.splitlines() if x.startswith('{"id"')]
    assert [p["id"] for p in stdout_preds] == ["0", "1"]
