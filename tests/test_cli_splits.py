"""Split names as a user meets them: MULAN file names, --split-names, a JSONL corpus's
``split`` field, and the error for a split a store does not have."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

import dmlfe
from dmlfe.cli import main
from dmlfe.pipeline import run_pipeline
from dmlfe.readers.base import split_from_file_name

LABELS = ["a", "b"]
XML = ('<?xml version="1.0" encoding="utf-8"?>\n<labels xmlns="http://mulan.sourceforge.'
       'net/labels">\n' + "".join(f'<label name="{n}"></label>\n' for n in LABELS)
       + "</labels>\n")


def _arff(path: Path, n_rows: int, seed: int) -> Path:
    """A sparse MULAN ARFF file: 5 numeric features, then the labels a and b."""
    rng = np.random.default_rng(seed)
    lines = ["@relation toy"] + [f"@attribute f{j} numeric" for j in range(5)]
    lines += [f"@attribute {n} {{0,1}}" for n in LABELS] + ["@data"]
    for _ in range(n_rows):
        entries = [f"{j} {rng.integers(1, 9)}" for j in range(5) if rng.random() < 0.7]
        entries += [f"{5 + k} 1" for k in range(2) if rng.random() < 0.5]
        lines.append("{" + ",".join(entries) + "}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def mulan_files(tmp_path):
    train = _arff(tmp_path / "Toy-train-sparse.arff", 40, 1)
    test = _arff(tmp_path / "Toy-test-sparse.arff", 25, 2)
    xml = tmp_path / "Toy.xml"
    xml.write_text(XML, encoding="utf-8")
    return tmp_path, train, test, xml


@pytest.mark.parametrize("stem, split", [
    ("Corel5k-train-sparse", "train"), ("bibtex-test", "test"), ("bibtex_TRAIN", "train"),
    ("delicious.test", "test"), ("train", "train"), ("trainset-1", "trainset-1"),
    ("contest-2", "contest-2"), ("x-train-test", "x-train-test"), ("scene", "scene")])
def test_file_name_rule(stem, split):
    assert split_from_file_name(stem) == split


def _ingest(files, out: Path, client, *extra: str) -> int:
    """``dmlfe ingest`` of the train and test files as a user types it."""
    _, train, test, xml = files
    return main(["ingest", str(train), str(test), "--format", "mulan", "--labels", str(xml),
                 "--out", str(out), "--chunk-rows", "16", "--scheduler",
                 client.scheduler.address, "--quiet", *extra])


def test_mulan_file_names_give_train_and_test(mulan_files, cluster_client, capsys):
    tmp = mulan_files[0]
    out = tmp / "toy.zarr"
    assert _ingest(mulan_files, out, cluster_client) == 0
    st = dmlfe.open_store(out)
    assert sorted(st.split_categories) == ["test", "train"]
    assert st.subset("train").n_docs == 40 and st.subset("test").n_docs == 25
    # --split train now works where it failed with the stem as the split name
    model = tmp / "m"
    assert main(["fit", str(out), "--method", "pca", "--dim", "2", "--split", "train",
                 "--out", str(model), "--scheduler", cluster_client.scheduler.address,
                 "--quiet"]) == 0
    assert dmlfe.load_model(model).n_samples_ == 40


def test_split_names_rename(mulan_files, cluster_client, capsys):
    tmp = mulan_files[0]
    out = tmp / "renamed.zarr"
    assert _ingest(mulan_files, out, cluster_client, "--split-names", "train=fit,test=eval") == 0
    st = dmlfe.open_store(out)
    assert sorted(st.split_categories) == ["eval", "fit"]
    assert st.subset("eval").n_docs == 25
    # a name no document has: one line naming it and the splits there are; no store
    bad = tmp / "bad.zarr"
    assert _ingest(mulan_files, bad, cluster_client, "--split-names", "dev=validation") == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'dev'" in err and "'train'" in err and "'test'" in err
    assert not bad.exists()


def test_split_names_syntax_error(mulan_files, capsys):
    tmp, train, test, xml = mulan_files
    with pytest.raises(SystemExit) as exc:
        main(["ingest", str(train), "--format", "mulan", "--labels", str(xml), "--out",
              str(tmp / "x.zarr"), "--split-names", "train:fit"])
    assert exc.value.code == 2
    assert "OLD=NEW" in capsys.readouterr().err


def test_pipeline_reads_file_splits_and_renames(mulan_files, cluster_client, monkeypatch):
    tmp, train, test, xml = mulan_files
    monkeypatch.delenv("DMLFE_DATA", raising=False)  # it would replace the file's folder
    cfg = {"name": "toy", "datasets": [{
        "name": "toy", "format": "mulan", "source": [train.name, test.name],
        "options": {"labels": xml.name, "split_names": {"test": "heldout"}},
        "split": {"train": "train", "test": "heldout"}}],
        "methods": ["none"], "classifiers": ["ridge"], "d_curve": []}
    path = tmp / "p.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    res = run_pipeline(path, work_dir=tmp / "work", progress=False)
    (row,) = res.report["results"]
    assert row["metrics"]["test"]["n_documents"] == 25


def _jsonl(path: Path, with_split: bool) -> Path:
    rng = np.random.default_rng(0)
    words = ["red", "green", "blue", "sky", "sea", "leaf"]
    recs = [{"id": f"d{i}", "text": " ".join(rng.choice(words, 5)),
             "labels": [x for x in ("p", "q") if rng.random() < 0.5]}
            | ({"split": "train" if i < 30 else "test"} if with_split else {})
            for i in range(40)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return path


def test_jsonl_split_field_is_read_by_default(tmp_path, cluster_client, capsys):
    src = _jsonl(tmp_path / "c.jsonl", with_split=True)
    out = tmp_path / "c.zarr"
    assert main(["ingest", str(src), "--format", "jsonl", "--out", str(out), "--scheduler",
                 cluster_client.scheduler.address]) == 0
    assert "'split' field" in capsys.readouterr().err  # said, not silent
    st = dmlfe.open_store(out)
    assert st.subset("train").n_docs == 30 and st.subset("test").n_docs == 10


def test_store_without_splits_names_itself(tmp_path, cluster_client, capsys):
    src = _jsonl(tmp_path / "c.jsonl", with_split=False)
    out = tmp_path / "c.zarr"
    assert main(["ingest", str(src), "--format", "jsonl", "--out", str(out), "--scheduler",
                 cluster_client.scheduler.address, "--quiet"]) == 0
    assert dmlfe.open_store(out).split_categories is None
    capsys.readouterr()
    assert main(["fit", str(out), "--method", "pca", "--dim", "2", "--split", "train",
                 "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(out) in err and "no splits" in err
    assert "--split-field" in err and "subset()" not in err
