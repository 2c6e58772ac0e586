"""Issue 34, incremental statistics: after an append, a fit on the store reads only the
appended documents when statistics of an earlier version are cached beside it.

References: the same fit on a store ingested from all documents at once, and the raw
sums computed with numpy from the stored rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import append_corpus

import dmlfe
from dmlfe.stats.cache import load_or_compute_stats
from dmlfe.store import open_store

APPEND = {"id_field": "id", "split_field": "split"}


@pytest.fixture
def stores(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(grown, whole, new-docs file): see :func:`conftest.append_corpus`."""
    return append_corpus(tmp_path)


def _raw(store_path: Path, split: str | list[str]) -> tuple[np.ndarray, np.ndarray]:
    s = open_store(store_path).subset(split)
    return s.X.compute().toarray(), s.Y.compute().astype(np.float64)


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
    assert refit.rows_read_ == 200
    np.testing.assert_allclose(refit.eigenvalues_[:2], fresh.eigenvalues_[:2], rtol=1e-10)


def test_an_append_of_other_documents_keeps_the_views_key(stores, tmp_path) -> None:
    grown, _, new = stores
    train = open_store(grown).subset("train")
    before = train.content_fingerprint
    assert before == open_store(grown).fingerprint == open_store(grown).history()[0]["fingerprint"]
    load_or_compute_stats(train, need_xtx=True)
    # only test documents appended: the training view's documents are the same
    tests_only = tmp_path / "tests_only.jsonl"
    tests_only.write_text("".join(line + "\n" for line in new.read_text().splitlines()
                                  if '"split": "test"' in line))
    dmlfe.append(grown, tests_only)
    store = open_store(grown)
    assert store.fingerprint != before
    assert store.subset("train").content_fingerprint == before
    assert store.content_fingerprint == store.fingerprint  # its last rows were appended
    assert store.subset("test").content_fingerprint == store.fingerprint
    again = load_or_compute_stats(store.subset("train"), need_xtx=True)
    assert again.from_cache and again.rows_read == 0
    fit = dmlfe.MDDM(n_components=2, split="train", variant="p").fit(str(grown))
    assert fit.rows_read_ == 0
