"""Issue 34, the dual route's Gram cache after appends: the first version's Gram is saved
whole, each later version as the strip of its new rows only (its record listing every
strip from row 0, each with its CRC-32), and a refit starts its row-space solve from the
Ritz block the fit before the append saved.

References: X X^T computed densely with numpy from the store's own rows; the leading
eigenpairs of F F^T from numpy's SVD of F; a fresh fit (no cache) on a store ingested
from all documents at once.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from test_append_exact import APPEND, assert_same_fit
from test_incremental_stats import _docs, _write, grown_and_whole

import dmlfe
from dmlfe.solvers import dual as dual_module
from dmlfe.solvers import leading
from dmlfe.stats import cache as stats_cache
from dmlfe.stats.gram import GramStrips
from dmlfe.store import open_store


def _dense_gram(view) -> np.ndarray:
    X = view.X.compute().toarray()
    return X @ X.T


def _record(view) -> dict:
    params = stats_cache.gram_params(view)
    path = stats_cache.stats_dir_for(view.path) / f"{stats_cache.stats_key(params)}.gram.json"
    return json.loads(path.read_text())


def _strip_file(view) -> Path:
    """The file of the strip the view's own version added (the last of its record)."""
    return stats_cache.stats_dir_for(view.path) / _record(view)["parts"][-1]["file"]


def _gram(view, **kw) -> tuple[np.ndarray, int]:
    return stats_cache.load_or_compute_gram(view, view.X, **kw)


@pytest.fixture
def three_versions(tmp_path, monkeypatch):
    """A store with its Gram saved at 190 rows, then after two appends (50 + 15 rows), the
    Gram of each version computed by load_or_compute_gram; (store, [G0, G1, G2])."""
    grown, _, new = grown_and_whole(tmp_path)
    more = _write(tmp_path / "c.jsonl", _docs(5, 15, 255, "train"))
    grams = [_gram(open_store(grown))]
    for batch in (new, more):
        dmlfe.append(grown, batch, **APPEND)
        grams.append(_gram(open_store(grown)))
    assert [passes for _, passes in grams] == [1, 1, 1]
    return grown, [G for G, _ in grams]


def test_each_append_writes_its_strip_and_the_strips_make_the_gram(three_versions,
                                                                   monkeypatch) -> None:
    grown, (G0, G1, G2) = three_versions
    view = open_store(grown)
    assert view.n_docs == 270
    np.testing.assert_allclose(G2, _dense_gram(view), rtol=1e-12, atol=1e-12)
    # the old x old block is the earlier version's Gram, copied, not computed again
    np.testing.assert_array_equal(G2[:255, :255], G1)
    np.testing.assert_array_equal(G1[:190, :190], G0)
    parts = _record(view)["parts"]
    assert [p["rows"] for p in parts] == [[0, 190], [190, 255], [255, 270]]
    directory = stats_cache.stats_dir_for(grown)
    # each file holds only the rows its version added, each with all the columns then
    assert [np.load(directory / p["file"]).shape for p in parts] == \
        [(190, 190), (65, 255), (15, 270)]
    assert sorted(f.name for f in directory.glob("*.gram.npy")) == \
        sorted(p["file"] for p in parts)

    def no_compute(*args, **kwargs):
        raise AssertionError("the Gram was computed")

    monkeypatch.setattr(stats_cache, "gram_matrix", no_compute)
    monkeypatch.setattr(stats_cache, "extend_gram_into", no_compute)
    # read back from the three strips: the Gram the fit had, bit for bit
    again, passes = _gram(view)
    assert passes == 0
    np.testing.assert_array_equal(again, G2)
    saved = stats_cache.load_gram(directory, stats_cache.gram_params(view))
    np.testing.assert_array_equal(saved, G2)
    assert saved.flags.writeable and not np.shares_memory(saved, again)


def test_a_damaged_strip_is_refused_and_rewritten(three_versions, monkeypatch) -> None:
    grown, (_, _, G2) = three_versions
    view = open_store(grown)
    strip = _strip_file(view)
    good = strip.read_bytes()
    flipped = bytearray(good)
    flipped[-3] ^= 0x10  # one bit of a value; the header and the length unchanged
    strip.write_bytes(bytes(flipped))
    computed = []
    monkeypatch.setattr(stats_cache, "gram_matrix",
                        lambda *a, **k: computed.append(1) or np.zeros(0))
    with pytest.warns(RuntimeWarning, match=r"ignoring unreadable Gram cache entry .*CRC-32"):
        G, passes = _gram(view)
    # extended again from the version before, whose strips are intact
    assert passes == 1 and computed == []
    np.testing.assert_array_equal(G, G2)
    assert strip.read_bytes() == good


def test_a_damaged_first_strip_makes_every_later_version_compute_again(three_versions
                                                                       ) -> None:
    grown, (_, _, G2) = three_versions
    view = open_store(grown)
    base = stats_cache.stats_dir_for(grown) / _record(view)["parts"][0]["file"]
    data = bytearray(base.read_bytes())
    data[len(data) // 2] ^= 0x01
    base.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match="CRC-32") as caught:
        G, passes = _gram(view)
    # this version's entry, then the earlier one's: both rest on the damaged strip
    assert len([w for w in caught if "ignoring unreadable Gram" in str(w.message)]) == 2
    assert passes == 1
    np.testing.assert_allclose(G, G2, rtol=1e-12, atol=1e-12)
    parts = _record(view)["parts"]
    assert [p["rows"] for p in parts] == [[0, 270]]  # saved whole this time
    np.testing.assert_array_equal(
        stats_cache.load_gram(stats_cache.stats_dir_for(grown), stats_cache.gram_params(view)),
        G)


@pytest.mark.parametrize("damage", ["missing strip", "truncated strip", "record"])
def test_a_missing_or_unreadable_part_is_a_miss_with_a_warning(three_versions, damage
                                                               ) -> None:
    grown, (_, _, G2) = three_versions
    view = open_store(grown)
    strip = _strip_file(view)
    if damage == "missing strip":
        strip.unlink()
    elif damage == "truncated strip":
        strip.write_bytes(strip.read_bytes()[:-8])
    else:
        params = stats_cache.gram_params(view)
        record = strip.with_name(f"{stats_cache.stats_key(params)}.gram.json")
        meta = json.loads(record.read_text())
        meta["parts"][1]["file"] = "../elsewhere.npy"
        record.write_text(json.dumps(meta))
    with pytest.warns(RuntimeWarning, match="ignoring unreadable Gram cache entry"):
        G, passes = _gram(view)
    assert passes == 1
    np.testing.assert_allclose(G, G2, rtol=1e-12, atol=1e-12)
    assert [p["rows"] for p in _record(view)["parts"]] == [[0, 190], [190, 255], [255, 270]]


def test_strips_are_extended_on_a_cluster(tmp_path, cluster_client) -> None:
    grown, _, new = grown_and_whole(tmp_path)
    G0, _ = _gram(open_store(grown).subset("train"), client=cluster_client)
    dmlfe.append(grown, new, client=cluster_client, **APPEND)
    view = open_store(grown).subset("train")  # 150 + 50 training rows, several chunks
    assert len(view.X.chunks[0]) > 2
    G, passes = _gram(view, client=cluster_client)  # the new rows' tiles on the workers
    assert passes == 1
    np.testing.assert_allclose(G, _dense_gram(view), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(G[:150, :150], G0)
    assert [p["rows"] for p in _record(view)["parts"]] == [[0, 150], [150, 200]]


# --------------------------------------------------------------------------- #
# The warm start of the row-space solve
# --------------------------------------------------------------------------- #
def _appended_problem(m0: int, m: int, rank: int = 60, seed: int = 3):
    """F (m x rank) with decaying columns: A0 = F[:m0] F[:m0]^T before an append, A = F F^T
    after it; the leading eigenpairs of A from the SVD of F."""
    rng = np.random.default_rng(seed)
    F = rng.standard_normal((m, rank)) * 0.8 ** np.arange(rank)
    U, s, _ = np.linalg.svd(F, full_matrices=False)
    return F[:m0] @ F[:m0].T, F @ F.T, s**2, U


def _same_pairs(w, V, w_ref, U_ref, k, tol) -> None:
    """Eigenvalues to 1e-10 relative; each vector within the Davis-Kahan bound of its
    residual: ||A v - w v|| <= tol w puts v within tol w / gap of the eigenvector."""
    np.testing.assert_allclose(w[:k], w_ref[:k], rtol=1e-10)
    signs = np.sign(np.sum(V[:, :k] * U_ref[:, :k], axis=0))
    gaps = np.minimum(np.abs(np.diff(w_ref[:k + 1], prepend=np.inf)[:k]),
                      np.abs(np.diff(w_ref[:k + 1]))[:k])
    apart = np.linalg.norm(V[:, :k] * signs - U_ref[:, :k], axis=0)
    assert np.all(apart <= 2 * tol * w_ref[:k] / gaps), apart


def test_leading_eigh_from_the_ritz_block_before_an_append() -> None:
    m0, m, k = 2_600, 2_640, 8
    A0, A, w_ref, U_ref = _appended_problem(m0, m)
    assert leading.krylov_pays(m, k)
    _, _, before = leading.leading_eigh(A0, k)
    start = np.vstack([before["ritz"], np.zeros((m - m0, before["ritz"].shape[1]))])
    w, V, info = leading.leading_eigh(A, k, start=start)
    assert info["warm_start"] is True and info["converged"]
    # the warm solve stops at a tighter residual than the cold one's tol
    _same_pairs(w, V, w_ref, U_ref, k, leading.KRYLOV_TOL * leading.WARM_TOL_FRACTION)
    w_cold, V_cold, cold = leading.leading_eigh(A, k)
    assert cold["warm_start"] is False
    _same_pairs(w_cold, V_cold, w_ref, U_ref, k, leading.KRYLOV_TOL)
    # float64 products from the start against the cold solve's float64 and float32 ones
    assert info["products"] < cold["products"]


def test_a_start_that_does_not_converge_falls_back(monkeypatch) -> None:
    m, k = 2_600, 8
    _, A, w_ref, U_ref = _appended_problem(m, m)
    far = np.random.default_rng(0).standard_normal((m, k + leading.KRYLOV_OVERSAMPLING))
    far -= U_ref @ (U_ref.T @ far)  # nothing of the leading space: one restart is too few
    monkeypatch.setattr(leading, "WARM_RESTARTS", 1)
    w, V, info = leading.leading_eigh(A, k, start=far)
    assert info["warm_start"] is False
    _same_pairs(w, V, w_ref, U_ref, k, leading.KRYLOV_TOL)
    _, _, cold = leading.leading_eigh(A, k)
    assert info["products"] > cold["products"]  # the failed start's products are counted


def test_appended_rows_with_leading_directions_of_their_own() -> None:
    # the new documents share no feature with the old ones (G is block diagonal) and
    # bring the two largest eigenvalues: the old Ritz block, zero on their rows, spans
    # an invariant subspace without them, exact and wrong on its own
    m0, m, k = 2_600, 2_640, 8
    _, A0, w_old, U_old = _appended_problem(m0, m0)
    F_new = np.random.default_rng(1).standard_normal((m - m0, 2)) * 30.0
    A = np.zeros((m, m))
    A[:m0, :m0], A[m0:, m0:] = A0, F_new @ F_new.T
    U_new, s_new, _ = np.linalg.svd(F_new, full_matrices=False)
    w_ref = np.concatenate([w_old, s_new**2])
    U_ref = np.hstack([np.vstack([U_old, np.zeros((m - m0, U_old.shape[1]))]),
                       np.vstack([np.zeros((m0, 2)), U_new])])
    order = np.argsort(w_ref)[::-1][:k + 1]
    w_ref, U_ref = w_ref[order], U_ref[:, order]
    assert w_ref[1] > 2 * w_old[0]  # both new directions lead
    _, _, before = leading.leading_eigh(A0, k)
    start = np.vstack([before["ritz"], np.zeros((m - m0, before["ritz"].shape[1]))])
    w, V, info = leading.leading_eigh(A, k, start=start)
    _same_pairs(w, V, w_ref, U_ref, k, leading.KRYLOV_TOL)


def test_mvmd_refit_starts_from_the_fit_before_the_append(tmp_path, monkeypatch) -> None:
    # the block Krylov branch on these few documents, where LAPACK would take them
    monkeypatch.setattr(leading, "FULL_SPECTRUM_LIMIT", 0)
    monkeypatch.setattr(leading, "krylov_pays", lambda m, k: True)
    grown, whole, new = grown_and_whole(tmp_path)
    kw = dict(n_components=3, route="dual")
    first = dmlfe.MVMD(**kw).fit(str(grown))
    assert first.solver_info_ is None  # a first fit: no start
    starts = sorted(stats_cache.stats_dir_for(grown).glob("*.start.npy"))
    assert len(starts) == 1 and np.load(starts[0]).shape == (190, 3 + leading.KRYLOV_OVERSAMPLING)
    dmlfe.append(grown, new, **APPEND)
    refit = dmlfe.MVMD(**kw).fit(str(grown))
    assert "rows [0, 190)" in refit.solver_info_["warm_start"]
    fresh = dmlfe.MVMD(cache=False, **kw).fit(str(whole))
    assert fresh.solver_info_ is None
    X = open_store(whole).X.compute()
    assert_same_fit(refit, fresh, X, "MVMD dual, warm refit")


# --------------------------------------------------------------------------- #
# The warm refit on the Gram's strips, never assembled (GramStrips)
# --------------------------------------------------------------------------- #
def _strips_of(G: np.ndarray, bounds: list[int]) -> list[np.ndarray]:
    """The cache's layout of the dense G: rows [a, b) of G with their first b columns."""
    return [np.ascontiguousarray(G[a:b, :b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def test_gram_strips_apply_the_gram_from_its_strips_or_from_x() -> None:
    rng = np.random.default_rng(5)
    dense = sp.random(60, 300, density=0.05, random_state=rng).toarray()
    dense[7] = 0.0  # an empty document
    X = sp.csr_matrix(dense)
    G = (X @ X.T).toarray()  # the reference, dense numpy
    W = rng.standard_normal((60, 4))
    on_strips = GramStrips(_strips_of(G, [0, 40, 52, 60]))
    columns = np.unique(X.indices)
    through_x = on_strips.with_rows(X, columns)
    assert on_strips.rows is None and through_x.rows.shape == (60, columns.size)
    for g in (on_strips, through_x):
        assert g.shape == (60, 60)
        np.testing.assert_allclose(g @ W, G @ W, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(g.diagonal(), np.diag(G), rtol=1e-12, atol=1e-12)
        for c in (0, 40, 45, 52, 59):  # at a strip's first row and within one
            np.testing.assert_allclose(g.columns_from(c), G[:, c:], rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(g.dense(), G)  # from the strips, bit for bit
    # a dense X, or one with as many stored values as G, costs more than G's products
    assert on_strips.with_rows(X.toarray()) is on_strips
    assert on_strips.with_rows(sp.csr_matrix(np.ones((60, 300)))) is on_strips
    with pytest.raises(ValueError, match="strip cannot hold"):
        GramStrips([G[:40, :40], G[40:60, :50]])


def test_block_krylov_checked_after_each_product_stops_early() -> None:
    m0, m, k = 2_600, 2_640, 8
    A0, A, w_ref, U_ref = _appended_problem(m0, m)
    _, _, before = leading.leading_eigh(A0, k)
    start = np.vstack([before["ritz"], np.zeros((m - m0, before["ritz"].shape[1]))])
    tol = leading.KRYLOV_TOL * leading.WARM_TOL_FRACTION
    runs = [leading.block_krylov_eigh(lambda V: A @ V, m, k, depth=8, tol=tol, v0=start,
                                      max_restarts=2, check_each=each)
            for each in (False, True)]
    for w, V, info in runs:
        assert info["converged"]
        _same_pairs(w, V, w_ref, U_ref, k, tol)
    assert runs[1][2]["products"] < runs[0][2]["products"]


@pytest.fixture
def krylov_everywhere(monkeypatch):
    """The block Krylov branch (and so the warm start) on a few hundred documents, where
    LAPACK would take them."""
    monkeypatch.setattr(leading, "FULL_SPECTRUM_LIMIT", 0)
    monkeypatch.setattr(leading, "krylov_pays", lambda m, k: True)
    monkeypatch.setattr(dual_module, "krylov_pays", lambda m, k: True)


@pytest.mark.parametrize("gather", [True, False], ids=["x-on-driver", "strips"])
def test_warm_refit_applies_the_gram_without_assembling_it(tmp_path, cluster_client,
                                                           krylov_everywhere, monkeypatch,
                                                           gather) -> None:
    grown, whole, new = grown_and_whole(tmp_path)
    kw = dict(n_components=3, route="dual", client=cluster_client,
              max_gather_bytes=2**30 if gather else 0)
    dmlfe.MVMD(**kw).fit(str(grown))
    dmlfe.append(grown, new, client=cluster_client, **APPEND)
    assert len(open_store(grown).X.chunks[0]) > 2

    used: list[bool] = []
    product = GramStrips.__matmul__

    def spy(self, W):
        used.append(self.rows is not None)
        return product(self, W)

    def no_dense(self):
        raise AssertionError("the Gram was assembled")

    monkeypatch.setattr(GramStrips, "__matmul__", spy)
    monkeypatch.setattr(GramStrips, "dense", no_dense)
    refit = dmlfe.MVMD(**kw).fit(str(grown))
    assert "rows [0, 190)" in refit.solver_info_["warm_start"]
    # X's products on the driver when it holds X; else the strips' (memory maps)
    assert used and set(used) == {gather}
    assert refit.n_passes_ == (3 if gather else 2)  # (gather,) extension, map back
    fresh = dmlfe.MVMD(**{**kw, "cache": False}).fit(str(whole))
    assert fresh.solver_info_ is None
    assert_same_fit(refit, fresh, open_store(whole).X.compute(), "MVMD dual, warm strips")
    # the appended rows' strip was saved for the next fit, as the dense path saves it
    assert [p["rows"] for p in _record(open_store(grown))["parts"]] == [[0, 190], [190, 255]]


def test_a_damaged_strip_is_found_before_the_warm_solve(tmp_path, krylov_everywhere) -> None:
    grown, whole, new = grown_and_whole(tmp_path)
    kw = dict(n_components=3, route="dual")
    dmlfe.MVMD(**kw).fit(str(grown))
    dmlfe.append(grown, new, **APPEND)
    view = open_store(grown)
    opened, passes = stats_cache.gram_strips(view, view.X)
    assert passes == 1 and [s.shape for s in opened.strips] == [(190, 190), (65, 255)]
    np.testing.assert_allclose(opened.dense(), _dense_gram(view), rtol=1e-12, atol=1e-12)
    assert stats_cache.gram_strips(view, view.X)[1] == 0  # saved: opened, not computed
    base = stats_cache.stats_dir_for(grown) / _record(view)["parts"][0]["file"]
    data = bytearray(base.read_bytes())
    data[len(data) // 2] ^= 0x01  # the lowest bit of one value
    base.write_bytes(bytes(data))
    assert stats_cache.gram_strips(view, view.X) is None
    # without the 64-bit sums (a record written before them) the CRC-32 finds it
    record = stats_cache.stats_dir_for(grown) / \
        f"{stats_cache.stats_key(stats_cache.gram_params(view))}.gram.json"
    meta = json.loads(record.read_text())
    for part in meta["parts"]:
        del part["sum64"]
    record.write_text(json.dumps(meta))
    assert stats_cache.gram_strips(view, view.X) is None
    # the fit computes the Gram again (load_or_compute_gram warns) and is still exact
    with pytest.warns(RuntimeWarning, match="CRC-32"):
        refit = dmlfe.MVMD(**kw).fit(str(grown))
    fresh = dmlfe.MVMD(cache=False, **kw).fit(str(whole))
    assert_same_fit(refit, fresh, open_store(whole).X.compute(), "MVMD dual, damaged strip")
    restored = stats_cache.gram_strips(view, view.X)
    assert restored is not None and restored[1] == 0
    np.testing.assert_allclose(restored[0].dense(), _dense_gram(view), rtol=1e-12, atol=1e-12)


def test_a_warm_solve_on_the_strips_that_does_not_converge_falls_back(
        tmp_path, krylov_everywhere, monkeypatch) -> None:
    grown, whole, new = grown_and_whole(tmp_path)
    kw = dict(n_components=3, route="dual")
    dmlfe.MVMD(**kw).fit(str(grown))
    dmlfe.append(grown, new, **APPEND)
    # no Krylov step from the start: its Rayleigh-Ritz pairs alone are not converged
    monkeypatch.setattr(leading, "WARM_DEPTH", 1)
    monkeypatch.setattr(leading, "WARM_RESTARTS", 1)
    assembled: list[int] = []
    dense = GramStrips.dense
    monkeypatch.setattr(GramStrips, "dense",
                        lambda self: assembled.append(1) or dense(self))
    refit = dmlfe.MVMD(**kw).fit(str(grown))
    assert assembled == [1] and refit.solver_info_ is None  # the cold solve, on G itself
    fresh = dmlfe.MVMD(cache=False, **kw).fit(str(whole))
    assert_same_fit(refit, fresh, open_store(whole).X.compute(), "MVMD dual, cold fallback")
