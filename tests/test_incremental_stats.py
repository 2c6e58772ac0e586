"""Issue 34, incremental statistics: after an append, a fit on the store reads only the
appended documents when statistics of an earlier version are cached beside it.

References: the same fit on a store ingested from all documents at once, and the raw
sums computed with numpy from the stored rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import labelled_docs as _docs

import dmlfe
from dmlfe.stats.cache import load_or_compute_stats
from dmlfe.store import open_store

APPEND = {"id_field": "id", "split_field": "split"}


def _write(path: Path, docs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


@pytest.fixture
def stores(tmp_path: Path) -> tuple[Path, Path, Path]:
    """See :func:`grown_and_whole`."""
    return grown_and_whole(tmp_path)


def grown_and_whole(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(grown, whole, new-docs file) under ``tmp_path``: ``grown`` is ingested from the
    first documents (150 train, 40 test) and is to be appended to from the new-docs file
    (50 train, 15 test); ``whole`` holds all documents at once, in the same order, with
    its idf learned on the first documents' training split, as ``grown``'s."""
    first = _docs(1, 150, 0, "train") + _docs(2, 40, 150, "test")
    more = _docs(3, 50, 190, "train") + _docs(4, 15, 240, "test")
    a = _write(tmp_path / "a.jsonl", first)
    b = _write(tmp_path / "b.jsonl", more)
    opts = dict(chunk_rows=32, vectorizer="hashing", n_features=512, fit_split="train",
                **APPEND)
    grown = dmlfe.ingest(a, "jsonl", tmp_path / "grown.zarr", **opts)
    # the whole corpus with the first documents' training split marked apart, so that
    # its idf comes from the same documents as grown's (an append keeps the idf)
    marked = [{**d, "split": "first"} if d["split"] == "train" else d for d in first]
    ab = _write(tmp_path / "ab.jsonl", marked + more)
    whole = dmlfe.ingest(ab, "jsonl", tmp_path / "whole.zarr", **{**opts, "fit_split": "first"})
    return Path(grown), Path(whole), b


def _raw(store_path: Path, split: str | list[str]) -> tuple[np.ndarray, np.ndarray]:
    s = open_store(store_path).subset(split)
    return s.X.compute().toarray(), s.Y.compute().toarray().astype(np.float64)


def test_since_view_holds_the_appended_rows(stores) -> None:
    grown, _, new = stores
    dmlfe.append(grown, new)
    store = open_store(grown)
    n_before = store.history()[-1]["rows"][0]
    assert n_before == 190
    tail = store.subset("train").since(n_before)
    ids = tail.ids.compute().tolist()
    assert ids == [f"d{k}" for k in range(190, 240)]
    assert tail.selection["since"] == n_before
    assert store.since(store.n_docs).n_docs == 0


def test_cached_statistics_are_extended_by_the_appended_rows(stores) -> None:
    grown, whole, new = stores
    before = load_or_compute_stats(open_store(grown).subset("train"), need_xtx=True)
    assert before.rows_read == 150 and not before.from_cache
    dmlfe.append(grown, new)
    after = load_or_compute_stats(open_store(grown).subset("train"), need_xtx=True)
    assert after.rows_read == 50  # the appended training documents only
    X, Y = _raw(whole, ["first", "train"])
    assert after.n == X.shape[0] == 200
    np.testing.assert_allclose(after.sum_x, X.sum(0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(after.xty, X.T @ Y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(after.yty, Y.T @ Y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(after.xtx, X.T @ X, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(after.sumsq_x, (X * X).sum(0), rtol=1e-12, atol=1e-12)
    # saved for the new version: the next fit reads nothing
    again = load_or_compute_stats(open_store(grown).subset("train"), need_xtx=True)
    assert again.from_cache and again.rows_read == 0


def test_an_entry_without_xtx_is_not_extended_for_a_request_that_needs_it(stores) -> None:
    grown, _, new = stores
    load_or_compute_stats(open_store(grown).subset("train"))  # X^T Y only
    dmlfe.append(grown, new)
    full = load_or_compute_stats(open_store(grown).subset("train"), need_xtx=True)
    assert full.rows_read == 200 and full.xtx is not None


@pytest.mark.parametrize("method,params", [
    ("MDDM", {"variant": "p"}),
    ("PCA", {"route": "feature"}),
    ("MVMD", {"route": "feature"}),
])
def test_fit_after_append_equals_a_fresh_fit(stores, cluster_client, method, params) -> None:
    grown, whole, new = stores
    kind = getattr(dmlfe, method)
    kind(n_components=3, split="train", client=cluster_client, **params).fit(str(grown))
    dmlfe.append(grown, new, client=cluster_client, **APPEND)
    refit = kind(n_components=3, split="train", client=cluster_client, **params).fit(str(grown))
    fresh = kind(n_components=3, split=["first", "train"], client=cluster_client,
                 cache=False, **params).fit(str(whole))
    assert refit.rows_read_ == 50 and fresh.rows_read_ == 200
    # reading the appended rows is no pass over X; the fresh fit's statistics are one
    assert (refit.n_passes_, fresh.n_passes_) == (0, 1)
    assert refit.n_samples_ == fresh.n_samples_ == 200
    np.testing.assert_allclose(refit.eigenvalues_[:3], fresh.eigenvalues_[:3], rtol=1e-10)
    np.testing.assert_allclose(refit.components_, fresh.components_, atol=1e-8)
    emb = open_store(whole).subset("test").X.compute()
    np.testing.assert_allclose(refit.transform(emb), fresh.transform(emb), atol=1e-8)


def test_parameters_that_depend_on_every_row_are_recomputed(stores) -> None:
    grown, whole, new = stores
    # MLDA's label weights come from Y^T Y of all rows: the earlier entry is under
    # other parameters, so the fit reads every row (and still equals a fresh fit)
    dmlfe.MLDA(n_components=2, split="train", route="feature").fit(str(grown))
    dmlfe.append(grown, new)
    refit = dmlfe.MLDA(n_components=2, split="train", route="feature").fit(str(grown))
    fresh = dmlfe.MLDA(n_components=2, split=["first", "train"], route="feature",
                       cache=False).fit(str(whole))
    assert refit.rows_read_ == 200 and refit.n_passes_ == 1
    np.testing.assert_allclose(refit.eigenvalues_[:2], fresh.eigenvalues_[:2], rtol=1e-10)


def test_an_append_of_other_splits_keeps_a_view_and_its_cache(stores) -> None:
    grown, _, _ = stores
    tests_only = _write(grown.parent / "t.jsonl", _docs(5, 20, 500, "test"))
    before = open_store(grown).subset("train")
    first = load_or_compute_stats(before, need_xtx=True)
    dmlfe.append(grown, tests_only, **APPEND)
    after = open_store(grown)
    assert after.fingerprint != before.fingerprint
    assert after.subset("train").content_fingerprint == before.content_fingerprint
    assert after.subset("test").content_fingerprint == after.fingerprint
    again = load_or_compute_stats(after.subset("train"), need_xtx=True)
    assert again.from_cache and again.rows_read == 0
    np.testing.assert_array_equal(again.xtx, first.xtx)


def test_a_pipeline_on_a_grown_store_reruns_what_depends_on_the_new_rows(
        stores, tmp_path, cluster_client) -> None:
    from dmlfe.pipeline import load_config, run_pipeline

    grown, _, _ = stores
    cfg = {"name": "grow", "datasets": [{"name": "g", "store": str(grown)}],
           "methods": [{"name": "pca", "d": [3], "route": "feature"}, {"name": "mddm_p", "d": [2]}],
           "classifiers": ["ridge"], "metrics": ["hamming_loss", "micro_f1"]}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(cfg))
    work = tmp_path / "work"

    def run() -> tuple[dict[str, list[str]], list[dict]]:
        res = run_pipeline(load_config(path), work_dir=work, progress=False,
                           client=cluster_client)
        kinds: dict[str, list[str]] = {}
        for s in res.stages:
            kinds.setdefault(s.status, []).append(s.kind)
        fits = [json.loads((work / "cache" / "fit" / s.key / "stage.json").read_text())
                for s in res.ran if s.kind == "fit"]
        return kinds, fits

    first, _ = run()
    assert first["ran"].count("fit") == 2
    # test documents appended: the fits (training split only) are reused
    dmlfe.append(grown, _write(tmp_path / "t.jsonl", _docs(7, 25, 900, "test")), **APPEND)
    second, _ = run()
    assert "fit" not in second["ran"] and second["cached"].count("fit") == 2
    assert "transform" in second["ran"] and "classify" in second["ran"]
    # training documents appended: the fits run again, reading the new documents only
    dmlfe.append(grown, _write(tmp_path / "u.jsonl", _docs(8, 30, 950, "train")), **APPEND)
    third, fits = run()
    assert third["ran"].count("fit") == 2 and len(fits) == 2
    # the first fit extends the statistics by the new rows and saves them; the other
    # finds them saved (an entry with X^T X serves a request without it)
    assert sorted(f["rows_read"] for f in fits) in ([0, 30], [30, 30]), fits
