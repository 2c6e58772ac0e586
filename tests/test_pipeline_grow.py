"""Issue 34, pipelines on a growing source corpus: a JSON Lines file that grew by new
lines is appended to the pipeline's store instead of ingested again, and only the
stages that read new rows run again.

References: the same pipeline run in a new work folder on a copy of the whole file
(a fresh ingest); the stages that ran, read from the run's result and stage records.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import labelled_docs as _docs

from dmlfe.pipeline import run_pipeline
from dmlfe.pipeline.sources import file_state, plan_update, with_digests
from dmlfe.projection import read_embeddings
from dmlfe.store import open_store

# idf learned from a split of its own, so that new training and test documents leave a
# fresh ingest's idf as it was: the append is then exactly a fresh ingest
OPTIONS = {"vectorizer": "hashing", "n_features": 512, "fit_split": "vocab", "id_field": "id"}


def _lines(docs: list[dict]) -> str:
    return "".join(json.dumps(d) + "\n" for d in docs)


def _config(folder: Path, corpus: Path, options: dict | None = None) -> Path:
    cfg = {"name": "grow",
           "datasets": [{"name": "news", "format": "jsonl", "source": str(corpus),
                         "options": options or OPTIONS, "chunk_rows": 32}],
           "methods": [{"name": "pca", "d": [3], "route": "feature"},
                       {"name": "mddm_p", "d": [2]}],
           "classifiers": ["ridge"], "metrics": ["hamming_loss", "micro_f1"],
           "d_curve": []}
    path = folder / "p.json"
    path.write_text(json.dumps(cfg))
    return path


def _run(path: Path, work: Path, client) -> tuple[object, dict[str, list[str]]]:
    res = run_pipeline(path, work_dir=work, progress=True, client=client)
    kinds: dict[str, list[str]] = {}
    for s in res.stages:
        kinds.setdefault(s.status, []).append(s.kind)
    return res, kinds


def _record(work: Path, kind: str, key: str) -> dict:
    return json.loads((work / "cache" / kind / key / "stage.json").read_text())


def _ingest_record(res, work: Path) -> dict:
    (st,) = [s for s in res.stages if s.kind == "ingest"]
    return _record(work, "ingest", st.key)


def _assert_as_fresh(res, work: Path, corpus: Path, tmp: Path) -> None:
    """The grown run's embeddings and metrics equal a fresh pipeline's on the whole file
    (run in this process, on dask's threads: the same sums in another order)."""
    folder = tmp / f"fresh-{len(list(tmp.glob('fresh-*')))}"
    folder.mkdir()
    copy = shutil.copy(corpus, folder / corpus.name)
    fresh, kinds = _run(_config(folder, Path(copy)), folder / "work", None)
    assert "cached" not in kinds
    assert [s.kind for s in fresh.stages] == [s.kind for s in res.stages]
    # the grown store holds the same documents, in the same order, as the fresh one
    a = open_store(_ingest_record(res, work)["store"])
    b = open_store(_ingest_record(fresh, folder / "work")["store"])
    assert list(a.ids) == list(b.ids)
    assert abs(a.X.compute() - b.X.compute()).max() < 1e-12
    n = 0
    for s, f in zip(res.stages, fresh.stages, strict=True):
        if s.kind == "transform":
            for role in ("train", "test"):
                Z = read_embeddings(work / "cache" / "transform" / s.key / f"{role}.zarr", None)
                Zf = read_embeddings(folder / "work" / "cache" / "transform" / f.key
                                     / f"{role}.zarr", None)
                assert Z.shape == Zf.shape and Z.shape[0] > 0
                np.testing.assert_allclose(Z, Zf, rtol=0, atol=1e-8)
                n += 1
        elif s.kind == "fit":
            ev = _record(work, "fit", s.key)["eigenvalues"]
            evf = _record(folder / "work", "fit", f.key)["eigenvalues"]
            # relative to the largest: the round-off tail of the spectrum is noise
            np.testing.assert_allclose(ev, evf, rtol=0, atol=1e-10 * max(evf))
        elif s.kind == "classify":
            m = _record(work, "classify", s.key)["metrics"]
            mf = _record(folder / "work", "classify", f.key)["metrics"]
            assert m.keys() == mf.keys()
            for role in m:
                for k, v in m[role].items():
                    assert v == pytest.approx(mf[role][k], abs=1e-8), (role, k)
    assert n == 4


def test_a_grown_source_file_is_appended_and_reruns_what_reads_new_rows(
        tmp_path, cluster_client, capsys) -> None:
    corpus = tmp_path / "news.jsonl"
    corpus.write_text(_lines(_docs(0, 60, 0, "vocab") + _docs(1, 150, 60, "train")
                             + _docs(2, 40, 210, "test")))
    path = _config(tmp_path, corpus)
    work = tmp_path / "work"
    res, first = _run(path, work, cluster_client)
    assert "cached" not in first and first["ran"].count("fit") == 2
    assert _ingest_record(res, work)["update"] == "ingest"

    # nothing changed: every stage is reused
    _, again = _run(path, work, cluster_client)
    assert "ran" not in again

    # test documents appended: an append; the fits (training documents only) are reused
    with open(corpus, "a") as f:
        f.write(_lines(_docs(3, 15, 250, "test")))
    res, second = _run(path, work, cluster_client)
    rec = _ingest_record(res, work)
    assert rec["update"] == "append" and rec["reason"] is None
    assert rec["appended_rows"] == [250, 265]
    assert len(open_store(rec["store"]).history()) == 2
    assert "fit" not in second["ran"] and second["cached"].count("fit") == 2
    assert second["ran"].count("transform") == 2 and "classify" in second["ran"]
    assert "ingesting the whole corpus again" not in capsys.readouterr().err
    _assert_as_fresh(res, work, corpus, tmp_path)

    # training documents appended: the fits run again, reading only the new documents
    with open(corpus, "a") as f:
        f.write(_lines(_docs(4, 30, 265, "train")))
    res, third = _run(path, work, cluster_client)
    rec = _ingest_record(res, work)
    assert rec["update"] == "append" and rec["appended_rows"] == [265, 295]
    assert len(open_store(rec["store"]).history()) == 3
    assert third["ran"].count("fit") == 2
    fits = [_record(work, "fit", s.key) for s in res.stages if s.kind == "fit"]
    # the first fit extends the statistics cache by the new rows; the other may find
    # them saved already
    assert sorted(f["rows_read"] for f in fits) in ([0, 30], [30, 30]), fits
    _assert_as_fresh(res, work, corpus, tmp_path)


def test_an_edited_or_idf_changing_source_is_ingested_again_with_the_reason(
        tmp_path, cluster_client, capsys) -> None:
    docs = _docs(0, 60, 0, "vocab") + _docs(1, 120, 60, "train") + _docs(2, 40, 180, "test")
    corpus = tmp_path / "news.jsonl"
    corpus.write_text(_lines(docs))
    path = _config(tmp_path, corpus)
    work = tmp_path / "work"
    _run(path, work, cluster_client)
    capsys.readouterr()

    # documents of the split the idf is learned from: a fresh ingest's idf changes
    with open(corpus, "a") as f:
        f.write(_lines(_docs(5, 10, 220, "vocab")))
    res, kinds = _run(path, work, cluster_client)
    rec = _ingest_record(res, work)
    assert rec["update"] == "ingest"
    assert "10 of the new documents are in split 'vocab'" in rec["reason"]
    assert len(open_store(rec["store"]).history()) == 1
    assert kinds["ran"].count("fit") == 2
    err = [ln for ln in capsys.readouterr().err.splitlines()
           if "ingesting the whole corpus again" in ln]
    assert len(err) == 1 and str(corpus) in err[0], err
    _assert_as_fresh(res, work, corpus, tmp_path)

    # test documents with a label the store does not have: the append refuses them, a
    # fresh ingest takes them
    new = _docs(7, 4, 230, "test")
    new[0]["labels"] = ["epsilon"]
    with open(corpus, "a") as f:
        f.write(_lines(new))
    res, kinds = _run(path, work, cluster_client)
    rec = _ingest_record(res, work)
    assert rec["update"] == "ingest" and "append was refused" in rec["reason"]
    assert "epsilon" in rec["reason"]
    store = open_store(rec["store"])
    assert len(store.history()) == 1 and "epsilon" in list(store.label_names)
    capsys.readouterr()

    # the first line edited (same length), then lines appended: not a growth
    text = corpus.read_text()
    edited = text.replace('"id": "d0"', '"id": "e0"', 1)
    assert len(edited) == len(text) and edited != text
    corpus.write_text(edited + _lines(_docs(6, 5, 240, "test")))
    res, kinds = _run(path, work, cluster_client)
    rec = _ingest_record(res, work)
    assert rec["update"] == "ingest" and "was edited within its first" in rec["reason"]
    store = open_store(rec["store"])
    assert len(store.history()) == 1 and store.ids[0] == "e0"
    assert kinds["ran"].count("fit") == 2
    err = [ln for ln in capsys.readouterr().err.splitlines()
           if "ingesting the whole corpus again" in ln]
    assert len(err) == 1 and "edited" in err[0], err
    _assert_as_fresh(res, work, corpus, tmp_path)


def _states(*paths: Path) -> list[dict]:
    return [file_state(p) for p in paths]


def test_only_an_appended_growth_is_an_append(tmp_path) -> None:
    """plan_update's verdicts on the ways a source can change (no store needed)."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"id": 1}\n{"id": 2}\n')
    b.write_text('{"id": 3}\n')
    attrs = {"reader_options": {"id_field": "id"}}

    def verdict(files: list[dict], fmt: str = "jsonl", at: dict = attrs, **kw):
        record = {"files": with_digests(rec_files), "option_files": [], "store_uuid": "u"}
        return plan_update(record, at, "u", files, [], fmt, kw)

    rec_files = _states(a)
    assert verdict(_states(a)).kind == "none"
    with open(a, "a") as f:
        f.write('{"id": 4}\n')
    up = verdict(_states(a))
    assert up.kind == "append" and up.tail == (str(a), 20, 30)
    # the same growth, but ids numbered by line: an append would renumber them
    up = verdict(_states(a), at={"reader_options": {}})
    assert up.kind == "ingest" and "no id field" in up.reason
    assert verdict(_states(a), split_names={"dev": "validation"}).kind == "ingest"
    # a store whose record names another store (an interrupted update)
    record = {"files": with_digests(rec_files), "option_files": [], "store_uuid": "old"}
    assert "interrupted" in plan_update(record, attrs, "u", _states(a), [], "jsonl",
                                        {}).reason
    # the last record completed by the new bytes: not whole new lines
    rec_files = _states(a)
    a.write_text(a.read_text()[:-1])
    rec_files = _states(a)
    with open(a, "a") as f:
        f.write('5}\n')
    assert "does not start a line" in verdict(_states(a)).reason
    # truncated
    a.write_text('{"id": 1}\n')
    assert "shorter" in verdict(_states(a)).reason
    # a file added to a two-file list; the files reordered; a grown file not the last
    rec_files = _states(a, b)
    c = tmp_path / "c.jsonl"
    c.write_text('{"id": 9}\n')
    up = verdict(_states(a, b, c), fmt="svmlight")
    assert up.kind == "append" and up.tail is None and up.new_files == [str(c)]
    assert "followed by new ones" in verdict(_states(b, a)).reason
    with open(a, "a") as f:
        f.write('{"id": 7}\n')
    assert "not the last file" in verdict(_states(a, b)).reason
    # a grown file of a format whose new bytes are not a file of their own
    rec_files = _states(b)
    with open(b, "a") as f:
        f.write('{"id": 8}\n')
    assert "not a svmlight file of their own" in verdict(_states(b), fmt="svmlight").reason
