"""Issue 34, fits after an append: for every registered method and each route it takes
(feature, dual, relation; the graph methods), a fit on all rows of an appended store
equals a fresh fit (no cache) on a store ingested from all documents at once; and the
dual route's Gram, cached beside the store, is extended by the appended rows' products
only (never the old x old block again).

References: the fresh fit on the ``whole`` store (same rows in the same order, see
:func:`test_incremental_stats.grown_and_whole`) and X X^T computed densely with numpy.
"""

from __future__ import annotations

import io
from pathlib import Path

import dask
import numpy as np
import pytest
import scipy.sparse as sp
from test_incremental_stats import grown_and_whole

import dmlfe
from dmlfe.estimators import make_estimator
from dmlfe.methods.registry import all_methods
from dmlfe.stats import cache as stats_cache
from dmlfe.stats import gram as gram_module
from dmlfe.store import open_store

APPEND = {"id_field": "id", "split_field": "split"}
#: Methods whose default has a singular scatter on n < D (OPLS: gamma_x = 0), where
#: round-off of the order of 1e-16 in X^T X or G decides the components; a ridge keeps
#: the comparison about the append, not about that conditioning.
PARAMS = {"opls": {"gamma_x": 0.1}}


def _cases() -> list[tuple[str, str]]:
    out = []
    for name, spec in sorted(all_methods().items()):
        out += [(name, "auto"), (name, "relation")]
        if spec.dual and not spec.needs_graph and not spec.needs_kernel:
            out.append((name, "dual"))
    return out


CASES = _cases()


def _estimator(method: str, route: str, **kw):
    return make_estimator(method, n_components=2, route=route, **PARAMS.get(method, {}), **kw)


@pytest.fixture(scope="module")
def appended(tmp_path_factory) -> tuple[Path, Path, np.ndarray]:
    """(grown, whole, X of whole): every case fitted on ``grown`` before the append (the
    caches filled for the earlier version), then the append."""
    grown, whole, new = grown_and_whole(tmp_path_factory.mktemp("append_exact"))
    with dask.config.set(scheduler="threads"):
        for method, route in CASES:
            _estimator(method, route).fit(str(grown))
        dmlfe.append(grown, new, **APPEND)
        X = open_store(whole).X.compute()
    return grown, whole, X


def assert_same_fit(refit, fresh, X, what: str) -> None:
    """Eigenvalues to 1e-10 relative, components and embeddings to 1e-8 (both fits apply
    the sign rule)."""
    assert (refit.route_, refit.n_samples_, refit.n_components_) == \
        (fresh.route_, fresh.n_samples_, fresh.n_components_), what
    scale = np.abs(fresh.eigenvalues_).max()
    assert np.abs(refit.eigenvalues_ - fresh.eigenvalues_).max() <= 1e-10 * scale, what
    np.testing.assert_allclose(refit.components_, fresh.components_, rtol=0, atol=1e-8,
                               err_msg=what)
    Zf = fresh.transform(X)
    np.testing.assert_allclose(refit.transform(X), Zf, rtol=0,
                               atol=1e-8 * max(1.0, np.abs(Zf).max()), err_msg=what)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("method,route", CASES)
def test_fit_after_append_equals_a_fresh_fit(appended, method, route) -> None:
    grown, whole, X = appended
    refit = _estimator(method, route).fit(str(grown))
    fresh = _estimator(method, route, cache=False).fit(str(whole))
    assert refit.n_samples_ == X.shape[0] == 255
    if route == "dual":
        assert refit.route_ == "dual"
        # the map back X^T alpha reads every row, whatever the Gram's origin
        assert refit.rows_read_ == 255
    assert_same_fit(refit, fresh, X, f"{method} route={route}")


def _gram_files(store: Path) -> list[Path]:
    return sorted(stats_cache.stats_dir_for(store).glob("*.gram.npy"))


def test_dual_gram_is_extended_by_the_appended_rows_only(tmp_path, monkeypatch) -> None:
    grown, whole, new = grown_and_whole(tmp_path)
    first = dmlfe.PCA(n_components=3, route="dual").fit(str(grown))
    assert len(_gram_files(grown)) == 1 and first.n_passes_ == 4  # gather, stats, G, map
    dmlfe.append(grown, new, **APPEND)

    tiles: list[tuple[int, int | None]] = []
    tile = gram_module._tile

    def spy(xi, xj):
        tiles.append((xi.shape[0], None if xj is None else xj.shape[0]))
        return tile(xi, xj)

    def no_full_gram(*args, **kwargs):
        raise AssertionError("the Gram was computed from all rows again")

    monkeypatch.setattr(gram_module, "_tile", spy)
    monkeypatch.setattr(stats_cache, "gram_matrix", no_full_gram)
    refit = dmlfe.PCA(n_components=3, route="dual").fit(str(grown))
    # the appended rows with the old ones, and with themselves: 190 x 65 and 65 x 65
    assert tiles == [(190, 65), (65, None)]
    # gather, extension, map back: the statistics read the appended rows only, no pass
    assert refit.rows_read_ == 255 and refit.n_passes_ == 3

    X = open_store(whole).X.compute().toarray()
    saved = stats_cache.load_gram(stats_cache.stats_dir_for(grown),
                                  stats_cache.gram_params(open_store(grown)))
    np.testing.assert_allclose(saved, X @ X.T, rtol=1e-12, atol=1e-12)
    fresh = dmlfe.PCA(n_components=3, route="dual", cache=False).fit(str(whole))
    assert_same_fit(refit, fresh, X, "PCA dual")

    tiles.clear()  # saved for the new version: read, not computed
    again = dmlfe.PCA(n_components=3, route="dual").fit(str(grown))
    assert tiles == [] and again.n_passes_ == 2  # gather, map back
    np.testing.assert_array_equal(again.components_, refit.components_)

    removed = stats_cache.clean(grown)
    assert stats_cache.stats_dir_for(grown) in removed and _gram_files(grown) == []


def test_gram_is_extended_on_a_cluster(tmp_path, cluster_client) -> None:
    grown, whole, new = grown_and_whole(tmp_path)
    kw = dict(n_components=3, route="dual", client=cluster_client)
    dmlfe.MDDM(split="train", **kw).fit(str(grown))
    old = open_store(grown).subset("train")
    G_old = stats_cache.load_gram(stats_cache.stats_dir_for(grown), stats_cache.gram_params(old))
    assert G_old is not None and G_old.shape == (150, 150)
    dmlfe.append(grown, new, client=cluster_client, **APPEND)
    view = open_store(grown).subset("train")
    X = open_store(whole).subset(["first", "train"]).X.compute().toarray()
    # the dask route of the extension: tiles of the old row blocks with the new rows
    # computed on the workers
    G = gram_module.gram_extended(G_old, view.X, client=cluster_client)
    np.testing.assert_allclose(G, X @ X.T, rtol=1e-12, atol=1e-12)
    refit = dmlfe.MDDM(split="train", **kw).fit(str(grown))
    fresh = dmlfe.MDDM(split=["first", "train"], cache=False, **kw).fit(str(whole))
    assert refit.n_samples_ == 200
    assert_same_fit(refit, fresh, X, "MDDM dual on the cluster")


def test_gram_cache_opt_out_size_guard_and_damage(tmp_path, monkeypatch) -> None:
    grown, _, _ = grown_and_whole(tmp_path)
    dmlfe.MVMD(n_components=2, route="dual", cache=False).fit(str(grown))
    assert _gram_files(grown) == []  # cache=False: nothing beside the store
    monkeypatch.setattr(stats_cache, "MAX_GRAM_CACHE_BYTES", 8 * 189 * 189)
    dmlfe.MVMD(n_components=2, route="dual").fit(str(grown))  # 190 rows: above it
    assert _gram_files(grown) == []
    monkeypatch.undo()
    ref = dmlfe.MVMD(n_components=2, route="dual").fit(str(grown))
    (npy,) = _gram_files(grown)
    data = npy.read_bytes()
    npy.write_bytes(data[: len(data) // 2])  # truncated
    with pytest.warns(RuntimeWarning, match="ignoring unreadable Gram cache entry"):
        again = dmlfe.MVMD(n_components=2, route="dual").fit(str(grown))
    np.testing.assert_allclose(again.components_, ref.components_, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(np.load(npy), np.load(io.BytesIO(data)))  # replaced


@pytest.mark.parametrize("n_old", [0, 7, 30])
def test_gram_extended_in_memory_equals_numpy(n_old) -> None:
    rng = np.random.default_rng(n_old)
    X = sp.random(30, 50, density=0.2, random_state=n_old, format="csr")
    X.data = rng.random(X.nnz)
    D = X.toarray()
    G = gram_module.gram_extended(D[:n_old] @ D[:n_old].T, X)
    np.testing.assert_allclose(G, D @ D.T, rtol=1e-13, atol=1e-13)
    with pytest.raises(ValueError, match="covers 31 rows but X has only 30"):
        gram_module.gram_extended(np.zeros((31, 31)), X)


def test_gram_and_graph_of_a_view_survive_an_append_of_other_documents(tmp_path,
                                                                      monkeypatch) -> None:
    grown, _, new = grown_and_whole(tmp_path)
    kw = dict(n_components=2, split="train")
    first = dmlfe.MVMD(route="dual", **kw).fit(str(grown))
    lpp = dmlfe.LPP(**kw).fit(str(grown))
    tests_only = tmp_path / "tests_only.jsonl"
    tests_only.write_text("".join(line + "\n" for line in new.read_text().splitlines()
                                  if '"split": "test"' in line))
    dmlfe.append(grown, tests_only, **APPEND)

    def no_search(*args, **kwargs):
        raise AssertionError("searched again")

    monkeypatch.setattr(stats_cache, "gram_matrix", no_search)
    monkeypatch.setattr(stats_cache, "extend_gram_into", no_search)
    again = dmlfe.MVMD(route="dual", **kw).fit(str(grown))
    assert again.n_passes_ == 2  # the gather and the map back: the Gram came from the cache
    np.testing.assert_array_equal(again.components_, first.components_)
    from dmlfe.graph import knn
    monkeypatch.setattr(knn, "knn_graph", no_search)
    lpp_again = dmlfe.LPP(**kw).fit(str(grown))
    np.testing.assert_array_equal(lpp_again.components_, lpp.components_)
