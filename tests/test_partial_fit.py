"""partial_fit (issue 34): blocks of rows accumulated, the eigenproblem solved lazily, and
the result equal to ``fit`` on the stacked blocks for every registered method."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import mulan_arrays, write_store
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline

from dmlfe.errors import InputError
from dmlfe.estimators import MDDM, MVMD, PCA, estimator_classes, make_estimator
from dmlfe.methods.registry import all_methods
from dmlfe.stats.gram import extend_gram

METHODS = sorted(all_methods())

#: (n, D, rows per block): n > D/2 keeps the feature route; n <= D/2 the dual route
#: (in memory); "switch" starts on the dual route and leaves it as rows arrive.
REGIMES = {"feature": (120, 30, 30), "dual": (60, 200, 15), "switch": (120, 100, 20)}


def data(n: int, D: int, q: int = 4, seed: int = 0, density: float = 0.15):
    rng = np.random.default_rng(seed)
    X = sp.random(n, D, density=density, random_state=seed, format="csr")
    X.data = rng.random(X.nnz) + 0.5
    Y = (rng.random((n, q)) < 0.35).astype(np.int8)
    Y[np.arange(n), np.arange(n) % q] = 1  # every label used, every document labelled
    return X, Y


def blocks(n: int, rows: int):
    return [slice(s, min(s + rows, n)) for s in range(0, n, rows)]


def assert_same_solution(a, b, what: str) -> None:
    """Eigenvalues to 1e-10 relative, components and embeddings to 1e-8 (both fits apply
    the same sign rule)."""
    assert (a.route_, a.n_components_, a.n_samples_) == (b.route_, b.n_components_,
                                                         b.n_samples_), what
    scale = np.abs(a.eigenvalues_).max()
    assert np.abs(a.eigenvalues_ - b.eigenvalues_).max() <= 1e-10 * scale, what
    np.testing.assert_allclose(b.components_, a.components_, rtol=0, atol=1e-8, err_msg=what)
    np.testing.assert_allclose(b.mean_, a.mean_, rtol=0, atol=1e-12, err_msg=what)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("regime", sorted(REGIMES))
@pytest.mark.parametrize("method", METHODS)
def test_blocks_equal_fit_on_all_rows(method, regime):
    n, D, rows = REGIMES[regime]
    X, Y = data(n, D)
    full = make_estimator(method, n_components=2).fit(X, Y)
    inc = make_estimator(method, n_components=2)
    for s in blocks(n, rows):
        assert inc.partial_fit(X[s], Y[s]) is inc
    assert "eigenvalues_" not in vars(inc)  # nothing solved yet
    Z = inc.transform(X)
    assert_same_solution(full, inc, f"{method} {regime}")
    Zf = full.transform(X)
    np.testing.assert_allclose(Z, Zf, rtol=0, atol=1e-8 * np.abs(Zf).max())


def pca_reference(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    Xc = X - X.mean(axis=0)
    w, V = np.linalg.eigh(Xc.T @ Xc)
    return w[::-1], V[:, ::-1]


def test_pca_blocks_match_numpy_covariance():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(90, 8)) * np.arange(1, 9)  # distinct variances
    est = PCA(n_components=3)
    for s in blocks(90, 25):
        est.partial_fit(X[s])
    w, V = pca_reference(X)
    np.testing.assert_allclose(est.eigenvalues_, w, rtol=1e-10)
    for i in range(3):  # the sign rule is dmlfe's: compare up to sign
        c = est.components_[i]
        assert min(np.abs(c - V[:, i]).max(), np.abs(c + V[:, i]).max()) < 1e-8


def test_mddm_p_blocks_match_svd_of_centred_cross_product():
    X, Y = data(150, 40, seed=5)
    Xd = X.toarray()
    est = MDDM(n_components=3, variant="p")
    for s in blocks(150, 40):
        est.partial_fit(X[s], Y[s])
    F = (Xd - Xd.mean(0)).T @ (Y - Y.mean(0))  # Xc^T Yc; A = F F^T
    sv = np.linalg.svd(F, compute_uv=False)
    np.testing.assert_allclose(est.eigenvalues_[:3], sv[:3] ** 2, rtol=1e-10)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("method", ["mvmd", "mddm_p"])
def test_real_corpus_train_then_test_appended(method):
    """medical (1,449 word features): the training documents in three blocks, then the
    test documents appended; 333 rows start on the dual route, 978 end on the feature
    route, where a fit on all 978 goes."""
    Xtr, Ytr = mulan_arrays("medical", "train")
    Xte, Yte = mulan_arrays("medical", "test")
    X, Y = sp.vstack([Xtr, Xte], format="csr"), np.vstack([Ytr, Yte])
    inc = make_estimator(method, n_components=5)
    for s in blocks(Xtr.shape[0], 120):
        inc.partial_fit(Xtr[s], Ytr[s])
    train = make_estimator(method, n_components=5).fit(Xtr, Ytr)
    assert_same_solution(train, inc, f"{method} train")
    inc.partial_fit(Xte, Yte)
    assert_same_solution(make_estimator(method, n_components=5).fit(X, Y), inc,
                         f"{method} train + test")


# ----------------------------------------------------------------- what is kept
def test_feature_route_keeps_statistics_not_rows():
    n, D = 240, 30
    X, Y = data(n, D, seed=1)
    est = MVMD(n_components=2)
    sizes = []
    for k, s in enumerate(blocks(n, 30)):
        est.partial_fit(X[s], Y[s])
        if k in (3, 7):
            sizes.append(len(pickle.dumps(est)))
    acc = est._incremental
    assert acc.blocks is None and acc.gram is None
    # twice the rows, the same footprint: only D- and q-sized statistics are held
    assert abs(sizes[1] - sizes[0]) < 200
    Xd, Yd = X.toarray(), Y.astype(float)
    st = acc.stats
    assert st.n == n
    np.testing.assert_allclose(st.sum_x, Xd.sum(0), rtol=1e-12)
    np.testing.assert_allclose(st.sum_y, Yd.sum(0), rtol=1e-12)
    np.testing.assert_allclose(st.xty, Xd.T @ Yd, rtol=1e-12)
    np.testing.assert_allclose(st.yty, Yd.T @ Yd, rtol=1e-12)
    np.testing.assert_allclose(st.xtx, Xd.T @ Xd, rtol=1e-12)
    assert est.rows_read_ == n and est.n_passes_ == 0  # each row once, the solve none
    est.partial_fit(X[:30], Y[:30])
    est.transform(X[:2])
    assert est.rows_read_ == 30  # the new rows only


def test_dual_route_extends_the_gram():
    n, D = 60, 200
    X, Y = data(n, D, seed=2)
    est = PCA(n_components=2)
    for s in blocks(n, 13):
        est.partial_fit(X[s], Y[s])
        acc = est._incremental
        Xs = X[: s.stop].toarray()
        np.testing.assert_allclose(acc.gram, Xs @ Xs.T, rtol=1e-12, atol=1e-12)
    assert est.route_ == "dual" and est.n_passes_ == 1  # the map back only
    G = acc.gram.copy()
    est.transform(X[:3])
    np.testing.assert_array_equal(acc.gram, G)  # the solve worked in a copy


def test_extend_gram_tiles():
    rng = np.random.default_rng(4)
    parts = [sp.random(r, 50, density=0.3, random_state=r, format="csr") for r in (4, 7, 1, 5)]
    parts[2] = sp.csr_matrix(rng.random((1, 50)))  # a fully populated row among sparse ones
    G = None
    for i, b in enumerate(parts):
        G = extend_gram(G, parts[:i], b)
    A = sp.vstack(parts).toarray()
    np.testing.assert_allclose(G, A @ A.T, rtol=1e-13, atol=1e-13)
    with pytest.raises(ValueError, match="hold 4 rows but their Gram is 17 x 17"):
        extend_gram(G, parts[:1], parts[1])


def test_switch_from_dual_to_feature_drops_the_rows():
    n, D, rows = REGIMES["switch"]
    X, Y = data(n, D)
    est = MVMD(n_components=2)
    est.partial_fit(X[:20], Y[:20])
    assert est._incremental.blocks is not None and est.route_ == "dual"
    for s in blocks(n, rows)[1:]:
        est.partial_fit(X[s], Y[s])
    assert est._incremental.blocks is None and est.route_ == "feature"


# ----------------------------------------------------------------- API
def test_refit_after_each_block_equals_fit_on_the_prefix():
    n, D = 150, 25
    X, Y = data(n, D, seed=6)
    est = MDDM(n_components=2, variant="f")
    for s in blocks(n, 30):
        est.partial_fit(X[s], Y[s])
        ref = MDDM(n_components=2, variant="f").fit(X[: s.stop], Y[: s.stop])
        assert_same_solution(ref, est, f"prefix {s.stop}")
    # a fitted projection inside a Pipeline, used as it is
    pipe = Pipeline([("proj", FrozenEstimator(est)),
                     ("clf", LogisticRegression(max_iter=500))]).fit(X, Y[:, 0])
    np.testing.assert_allclose(pipe[:-1].transform(X), est.transform(X))


def test_fit_after_partial_fit_starts_afresh():
    X, Y = data(120, 30, seed=7)
    est = MVMD(n_components=2).partial_fit(X[:60], Y[:60])
    est.fit(X[60:], Y[60:])
    assert "_incremental" not in vars(est)
    assert_same_solution(MVMD(n_components=2).fit(X[60:], Y[60:]), est, "fit")
    est.partial_fit(X[:40], Y[:40])  # and a partial_fit after fit starts a new stream
    assert_same_solution(MVMD(n_components=2).fit(X[:40], Y[:40]), est, "partial_fit")


def test_class_labels_take_the_first_blocks_classes():
    rng = np.random.default_rng(8)
    X = rng.normal(size=(60, 6))
    y = np.arange(60) % 3
    est = MVMD(n_components=2)
    est.partial_fit(X[:30], y[:30]).partial_fit(X[30:], y[30:])
    assert_same_solution(MVMD(n_components=2).fit(X, y), est, "1-D labels")
    with pytest.raises(InputError, match=r"Y\[0\] = 5 is not one of the classes of the first"):
        est.partial_fit(X[:2], np.array([5, 0]))


# ----------------------------------------------------------------- errors
def test_feature_count_mismatch_is_refused():
    X, Y = data(40, 12)
    est = MVMD(n_components=2).partial_fit(X[:20], Y[:20])
    with pytest.raises(InputError, match="X has 11 features, but MVMD is expecting 12"):
        est.partial_fit(X[20:, :11], Y[20:])


def test_label_count_mismatch_is_refused():
    X, Y = data(40, 12)
    est = MVMD(n_components=2).partial_fit(X[:20], Y[:20])
    with pytest.raises(InputError, match="Y has 3 label columns, but the earlier blocks had 4"):
        est.partial_fit(X[20:], Y[20:, :3])


def test_changed_parameters_and_store_paths_are_refused(tmp_path):
    X, Y = data(40, 12)
    est = MVMD(n_components=2).partial_fit(X[:20], Y[:20])
    est.set_params(n_components=3)
    with pytest.raises(ValueError, match="parameter n_components changed from 2 to 3"):
        est.partial_fit(X[20:], Y[20:])
    with pytest.raises(InputError, match="partial_fit takes in-memory blocks"):
        MVMD().partial_fit(str(tmp_path / "store"))


def test_fit_reports_the_rows_it_read(tmp_path):
    X, Y = data(90, 20, seed=13)
    path = write_store(tmp_path / "s.zarr", X, Y, ["train"] * 90)
    first = MVMD(n_components=2).fit(path)
    assert first.rows_read_ == 90 and not first.stats_from_cache_
    again = MVMD(n_components=2).fit(path)  # the statistics cached beside the store
    assert again.stats_from_cache_ and (again.n_passes_, again.rows_read_) == (0, 0)
    assert_same_solution(first, again, "cached")


def test_every_estimator_has_partial_fit():
    for name, cls in estimator_classes().items():
        assert callable(getattr(cls, "partial_fit", None)), name
        assert "Parameters" in cls.partial_fit.__doc__


# ----------------------------------------------------------------- distributed
@pytest.mark.parametrize("method", ["mvmd", "mope"])
def test_partial_fit_on_a_local_cluster(cluster_client, method):
    """The solve's passes (the dual route's map back; a graph method's K-NN search and
    products) run on the client's workers; the result is fit's on the same client."""
    X, Y = data(60, 200, seed=9)
    full = make_estimator(method, n_components=2, client=cluster_client).fit(X, Y)
    inc = make_estimator(method, n_components=2, client=cluster_client)
    for s in blocks(60, 20):
        inc.partial_fit(X[s], Y[s])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert_same_solution(full, inc, method)


def test_save_solves_the_pending_blocks(tmp_path):
    from dmlfe.model_io import load_model

    X, Y = data(90, 20, seed=10)
    est = MVMD(n_components=2)
    for s in blocks(90, 30):
        est.partial_fit(X[s], Y[s])
    est.save(tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    assert_same_solution(MVMD(n_components=2).fit(X, Y), loaded, "saved")
