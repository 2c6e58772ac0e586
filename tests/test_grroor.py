"""GRROOR (eq. 16, Algorithm 1): monotone objective on real data, stationarity of the
alternating solution on a small problem, selection, refusal above the limits, and the
distributed passes on a real LocalCluster."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import data_path, sparse_dask
from scipy.linalg import solve_sylvester
from sklearn.exceptions import ConvergenceWarning

from dmlfe import GRROOR
from dmlfe.selection.grroor import (
    alm_simplex_qp,
    gpi_stiefel,
    heat_kernel_laplacian,
    project_simplex,
    shifted_cg,
    simplex_qp,
    sym_sylvester,
)


def _small(n=40, D=12, k=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    Y = (X[:, :k] + 0.5 * rng.normal(size=(n, k)) > 0.3).astype(np.int8)
    return X, Y


def _mulan(name, rows=None):
    from dmlfe.readers.arff import read_mulan

    src = read_mulan(data_path("mulan", f"{name}-train.arff"),
                     data_path("mulan", f"{name}.xml"))
    bs = list(src.batches(1000))
    X = sp.vstack([sp.csr_matrix(b.X) for b in bs], format="csr")
    Y = sp.vstack([b.Y for b in bs]).toarray()
    return (X, Y) if rows is None else (X[:rows], Y[:rows])


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # tol = 0
def test_objective_monotone_on_emotions():
    X, Y = _mulan("emotions")
    X = X.toarray()
    g = GRROOR(n_features_to_select=10, max_iter=15, tol=0).fit(X, Y)
    h = np.asarray(g.objective_history_)
    assert len(h) == 16 and g.n_iter_ == 15
    assert np.all(np.diff(h) <= 1e-10 * np.abs(h[:-1]))
    assert h[-1] < h[0]
    assert g.scores_.min() >= 0 and g.scores_.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("name, rows", [("yeast", 600), ("medical", None)])
def test_default_fit_converges_on_real_data(name, rows):
    """With its defaults the fit stops on the objective's relative change (tol 1e-6),
    well before max_iter, without a ConvergenceWarning, and the history never rises.
    (medical: its 200 most frequent words, to keep the D x D steps small.)"""
    X, Y = _mulan(name, rows)
    if X.shape[1] > 200:
        X = X[:, np.argsort(-X.getnnz(axis=0), kind="stable")[:200]]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        g = GRROOR(n_features_to_select=20).fit(X, Y)
    h = np.asarray(g.objective_history_)
    assert g.converged_ and g.n_iter_ < g.max_iter
    assert len(h) == g.n_iter_ + 1
    assert abs(h[-2] - h[-1]) <= g.tol * abs(h[-1])
    assert np.all(np.abs(np.diff(h[:-1])) > g.tol * np.abs(h[1:-1]))  # it stopped at once
    assert np.all(np.diff(h) <= 1e-10 * np.abs(h[:-1]))
    assert np.allclose(g.V_.mean(axis=0), 0.0, atol=1e-9 * np.abs(g.V_).max())


def test_max_iter_warns_and_says_so():
    X, Y = _small()
    with pytest.warns(ConvergenceWarning, match=r"max_iter = 2 .*relative change"):
        g = GRROOR(n_features_to_select=3, max_iter=2, tol=1e-15).fit(X, Y)
    assert not g.converged_ and g.n_iter_ == 2 and len(g.objective_history_) == 3


def test_stationarity_on_a_small_problem():
    X, Y = _small()
    g = GRROOR(n_features_to_select=5, n_latent=2, alpha=1.0, beta=0.5, eta=0.1,
               lam=0.2, sigma2=20.0, max_iter=3000, tol=1e-15).fit(X, Y)
    n, D = X.shape
    Xc = X - X.mean(0)
    H = np.eye(n) - 1.0 / n
    Yp = 2.0 * Y - 1.0
    th, W, V, B = g.scores_, g.W_, g.V_, g.B_
    # the pieces of eq. 17 rebuilt here from the paper's definitions
    from sklearn.neighbors import kneighbors_graph

    G = kneighbors_graph(X, 5, mode="distance").toarray()
    S = np.where(G > 0, np.exp(-G**2 / 20.0), 0.0)
    S = np.maximum(S, S.T)
    L = np.diag(S.sum(1)) - S
    F = Xc / np.linalg.norm(Xc, axis=0)
    A = (F.T @ F) ** 2
    Yn = Y / np.linalg.norm(Y, axis=0)
    rv, rU = np.linalg.eigh(1.0 - Yn.T @ Yn)
    R = (rU * np.maximum(rv, 0.01 * rv.max())) @ rU.T
    scale = np.abs(Yp).sum()
    # V: eq. 29 on the centred V (1^T V = 0, GRROOR's Notes): the gradient's projection
    # onto centred matrices vanishes
    assert np.abs(V.mean(axis=0)).max() < 1e-12 * np.abs(V).max()
    gV = H @ (V - Xc @ np.diag(th) @ W) + (V @ B - Yp) @ B.T + 0.1 * L @ V
    assert np.abs(H @ gV).max() < 1e-6 * scale
    # B: eq. 31
    gB = V.T @ (V @ B - Yp) + 0.5 * B @ R
    assert np.abs(gB).max() < 1e-6 * scale
    # W on the Stiefel manifold: Euclidean gradient G = 2(JW - M) must be W Λ, Λ symmetric
    J = np.diag(th) @ Xc.T @ Xc @ np.diag(th)
    M = np.diag(th) @ Xc.T @ V
    Gw = J @ W - M
    assert np.abs(Gw - W @ (W.T @ Gw)).max() < 1e-6 * np.abs(M).max()
    Lam = W.T @ Gw
    assert np.abs(Lam - Lam.T).max() < 1e-6 * np.abs(M).max()
    # θ: KKT of eq. 21 on the simplex
    Q = (Xc.T @ Xc) * (W @ W.T) + 0.2 * A
    s = 2.0 * np.diag(Xc.T @ V @ W.T)
    grad = 2.0 * Q @ th - s
    on = th > 1e-9
    nu = grad[on].mean()
    tol = 1e-5 * np.abs(grad).max()
    assert np.abs(grad[on] - nu).max() < tol
    assert np.all(grad[~on] >= nu - tol)


def test_sub_solvers():
    rng = np.random.default_rng(1)
    J = rng.normal(size=(8, 8))
    J = J @ J.T
    M = rng.normal(size=(8, 3))
    W0 = np.linalg.qr(rng.normal(size=(8, 3)))[0]
    W, _ = gpi_stiefel(J, M, W0, max_iter=5000, tol=1e-15)
    assert np.allclose(W.T @ W, np.eye(3), atol=1e-12)
    f = np.trace(W.T @ J @ W - 2 * W.T @ M)
    for _ in range(50):  # no random orthonormal W does better
        Wr = np.linalg.qr(rng.normal(size=(8, 3)))[0]
        assert np.trace(Wr.T @ J @ Wr - 2 * Wr.T @ M) >= f - 1e-9
    # simplex QP: against the best of all 255 supports (equality-constrained KKT on each)
    Q = J / 10
    s = rng.normal(size=8)
    th, _ = alm_simplex_qp(Q, s, np.full(8, 1 / 8), 1.0, max_iter=500, tol=1e-13)
    best, ref = np.inf, None
    for mask in range(1, 256):
        F = np.flatnonzero([(mask >> i) & 1 for i in range(8)])
        K = np.block([[2 * Q[np.ix_(F, F)], np.ones((F.size, 1))], [np.ones((1, F.size)), 0]])
        t = np.zeros(8)
        t[F] = np.linalg.solve(K, np.r_[s[F], 1.0])[: F.size]
        if t.min() >= 0 and t @ Q @ t - s @ t < best:
            best, ref = t @ Q @ t - s @ t, t
    assert np.allclose(th, ref, atol=1e-9)
    assert np.allclose(project_simplex(np.array([0.2, 5.0, -1.0])), [0, 1, 0])


def test_selection_and_transform():
    X, Y = _small(n=50, D=15)
    g = GRROOR(n_features_to_select=4).fit(sp.csr_matrix(X), Y)
    idx = np.flatnonzero(g.get_support())
    assert len(idx) == 4
    assert set(idx) == set(g.ranking_[:4])
    assert np.all(g.scores_[idx].min() >= np.delete(g.scores_, idx).max())
    assert np.array_equal(g.transform(X), X[:, idx])
    assert np.array_equal(g.transform(sp.csr_matrix(X)).toarray(), X[:, idx])
    assert np.array_equal(g.get_support(indices=True), idx)


def test_refuses_above_the_limits():
    X, Y = _small()
    with pytest.raises(ValueError, match=r"D = 12 features.*MiB.*max_features = 10"):
        GRROOR(max_features=10, n_features_to_select=2).fit(X, Y)
    with pytest.raises(ValueError, match=r"n = 40 documents.*MiB.*max_samples = 30"):
        GRROOR(max_samples=30, n_features_to_select=2).fit(X, Y)
    with pytest.raises(ValueError, match=r"parameter lam=-1.0"):
        GRROOR(lam=-1.0).fit(X, Y)
    # a pipeline file written for 0.1.0 names λ lambda_: told the new name
    from dmlfe.selection.curves import feature_ranking

    with pytest.raises(ValueError, match=r"no parameter\(s\) \['lambda_'\]; lambda_ is now "
                                         "called lam"):
        feature_ranking("grroor", X, Y, 2, {"lambda_": 1.0})


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # 3 iterations
def test_cluster_matches_memory(cluster_client):
    X, Y = _small(n=60, D=14, seed=3)
    X = X * (np.random.default_rng(0).uniform(size=X.shape) < 0.5)
    kw = {"n_features_to_select": 5, "max_iter": 3, "tol": 0}
    mem = GRROOR(**kw).fit(sp.csr_matrix(X), Y)
    Xd = sparse_dask(X, 13)
    dist = GRROOR(client=cluster_client, **kw).fit(Xd, Y)
    assert np.allclose(dist.scores_, mem.scores_, atol=1e-9)
    assert np.allclose(dist.objective_history_, mem.objective_history_, rtol=1e-9)
    # scatter + gather + 2 per iteration (X^T H V before the loop, then H X Θ W, X^T H V)
    assert dist.n_passes_ == 2 + 1 + 2 * 3
    sel = dist.transform(Xd)
    assert np.array_equal(sel.compute().toarray(), X[:, dist.get_support()])


def _dense_laplacian(L):
    return L.toarray() if sp.issparse(L) else np.asarray(L)


def test_fast_updates_match_dense_reference():
    """One iteration's V, B and θ updates against the same equations solved densely: V by
    scipy's Bartels-Stewart Sylvester solver on eq. 30, B on eq. 32, θ by the paper's
    ALM (eq. 23-28) and the KKT conditions of eq. 21."""
    rng = np.random.default_rng(4)
    n, D, k, c, a, eta, beta, lam = 30, 10, 4, 3, 1.0, 2.5, 0.7, 0.3
    X = rng.normal(size=(n, D))
    Yp = 2.0 * (rng.uniform(size=(n, k)) < 0.4) - 1.0
    L = heat_kernel_laplacian(X, 5, 20.0)
    assert sp.issparse(L) and np.allclose(np.asarray(L.sum(axis=1)).ravel(), 0.0)
    H = np.eye(n) - 1.0 / n
    B = rng.normal(size=(c, k))
    P = rng.normal(size=(n, c))
    V0 = rng.normal(size=(n, c))
    V0 -= V0.mean(axis=0)
    # V step (eq. 30): (H + ηL) V + V (α B B^T) = H P
    V = GRROOR._v_step(L, eta, a, B, P, V0)
    ref = solve_sylvester(H + eta * _dense_laplacian(L), a * B @ B.T, H @ P)
    assert np.allclose(V, ref, rtol=0, atol=1e-8 * np.abs(ref).max())
    # the shifted systems one by one
    shifts = np.array([0.0, 0.5, 3.0])
    Xs, _ = shifted_cg(L, eta, shifts, P, np.zeros_like(P), tol=1e-12)
    for j, nu in enumerate(shifts):
        Aj = (1.0 + nu) * np.eye(n) + eta * _dense_laplacian(L)
        assert np.allclose(Xs[:, j], np.linalg.solve(Aj, P[:, j]), atol=1e-9)
    # B step (eq. 32): (α V^T V) B + B (β R) = α V^T Y, R symmetric positive definite
    R = rng.normal(size=(k, k))
    R = R @ R.T + 0.1 * np.eye(k)
    Bn = sym_sylvester(np.linalg.eigh(a * V.T @ V), beta * R, a * V.T @ Yp)
    assert np.allclose(Bn, solve_sylvester(a * V.T @ V, beta * R, a * V.T @ Yp), atol=1e-9)
    # θ step (eq. 21-22) against the paper's ALM and the KKT conditions
    Xc = X - X.mean(axis=0)
    S = Xc.T @ Xc
    W = np.linalg.qr(rng.normal(size=(D, c)))[0]
    F = Xc / np.linalg.norm(Xc, axis=0)
    Q = S * (W @ W.T) + lam * (F.T @ F) ** 2
    s = 2.0 * np.sum((Xc.T @ V) * W, axis=1)
    theta = simplex_qp(Q, s, np.full(D, 1.0 / D))
    alm, _ = alm_simplex_qp(Q, s, np.full(D, 1.0 / D), np.trace(Q) / D, max_iter=20000,
                            tol=1e-14)
    assert np.allclose(theta, alm, atol=1e-8)
    g = 2.0 * Q @ theta - s
    on = theta > 0
    assert theta.min() >= 0 and theta.sum() == pytest.approx(1.0)
    assert np.ptp(g[on]) < 1e-8 * np.abs(g).max()
    assert np.all(g[~on] >= g[on].mean() - 1e-8 * np.abs(g).max())


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # tol = 0
def test_objective_monotone_on_medical():
    """All 1,449 medical features: the fast updates keep the history non-increasing."""
    X, Y = _mulan("medical")
    g = GRROOR(max_iter=12, tol=0).fit(X, Y)
    h = np.asarray(g.objective_history_)
    assert len(h) == 13
    assert np.all(np.diff(h) <= 1e-10 * np.abs(h[:-1]))
    assert h[-1] < h[0] and g.theta_steps_rejected_ == 0


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # max_iter 5
def test_grid_search_cv_over_a_pipeline():
    from sklearn.base import clone
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import Pipeline

    from dmlfe import MLkNN

    X, Y = _small(n=80, D=12)
    pipe = Pipeline([("select", GRROOR(n_features_to_select=4, max_iter=5)),
                     ("clf", MLkNN(k=5))])
    grid = {"select__lam": [0.1, 10.0], "select__n_latent": [2, 3]}
    gs = GridSearchCV(pipe, grid, cv=2).fit(X, Y)
    assert set(gs.best_params_) == set(grid)
    assert gs.best_params_["select__lam"] in grid["select__lam"]
    assert len(gs.cv_results_["params"]) == 4
    sel = gs.best_estimator_.named_steps["select"]
    assert sel.get_support().sum() == 4 and gs.predict(X).shape == Y.shape
    c = clone(sel).set_params(lam=0.5)
    assert c.get_params()["lam"] == 0.5 and not hasattr(c, "scores_")


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_grroor_search_staged_and_grid():
    from dmlfe.selection import grroor_search, paper_grid
    from dmlfe.selection.search import PAPER_VALUES

    X, Y = _small(n=70, D=12, k=4)
    r = grroor_search(X, Y, estimator=GRROOR(n_features_to_select=4, max_iter=20),
                      max_sweeps=1, n_features=6, cv=None)
    assert r.n_fit + r.n_validation == 70 and r.n_validation == 21 and len(r.folds) == 1
    # one staged round: each parameter over its paper values, settings not repeated
    assert len(r.results) <= 1 + 3 * len(PAPER_VALUES) + len(paper_grid(4, 12)["n_latent"])
    keys = [tuple(sorted(x["params"].items())) for x in r.results]
    assert len(set(keys)) == len(keys)
    best = min(r.results, key=lambda x: x["acr"])
    assert r.best_params == best["params"]
    est = r.estimator
    assert est.V_.shape[0] == 70 and est.lam == r.best_params["lam"]
    assert est.n_latent == r.best_params["n_latent"]
    # an explicit grid: every combination, and the paper's c values
    r2 = grroor_search(X, Y, estimator=GRROOR(n_features_to_select=4, max_iter=5),
                       grid={"lam": [0.1, 10.0], "beta": [1.0]}, n_features=4)
    assert sorted(x["params"]["lam"] for x in r2.results) == [0.1, 10.0]
    assert paper_grid(53, 1001)["n_latent"] == [2, 14, 27, 40, 53]
    with pytest.raises(ValueError, match="grid='full'"):
        grroor_search(X, Y, grid="full")


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_grroor_search_cv_folds_use_only_the_training_rows(monkeypatch):
    """cv=3: every setting is fitted on two folds of the given (training) rows and scored
    on the third; the validation parts partition those rows, and ACR is their mean."""
    import dmlfe.selection.search as search

    X, Y = _small(n=60, D=10, k=4)
    seen = []
    real_acr = search.acr

    def spy(ranking, X_fit, Y_fit, X_val, Y_val, n_features):
        seen.append((X_fit, X_val))
        return real_acr(ranking, X_fit, Y_fit, X_val, Y_val, n_features)

    monkeypatch.setattr(search, "acr", spy)
    r = search.grroor_search(X, Y, estimator=GRROOR(n_features_to_select=4, max_iter=10),
                             grid={"lam": [0.1, 10.0]}, n_features=4, cv=3)
    assert len(r.folds) == 3 and len(seen) == 2 * 3
    val = np.concatenate([v for _, v in r.folds])
    assert np.array_equal(np.sort(val), np.arange(60))  # a partition of the rows given
    for (f, v), (X_fit, X_val) in zip(r.folds * 2, seen, strict=True):
        assert np.intersect1d(f, v).size == 0 and f.size + v.size == 60
        assert np.array_equal(X_fit, X[f]) and np.array_equal(X_val, X[v])
    for res in r.results:
        assert len(res["acr_folds"]) == 3
        assert res["acr"] == pytest.approx(np.mean(res["acr_folds"]), rel=1e-5)
    assert r.best_params == min(r.results, key=lambda x: x["acr"])["params"]
    for bad in (1, 0, 61, 2.5, True):
        with pytest.raises(ValueError, match="cv="):
            search.grroor_search(X, Y, grid={"lam": [1.0]}, cv=bad)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # max_iter 30
def test_rank_unscored_orders_the_zero_scores():
    """θ is sparse at small λ; the features at θ = 0 follow by the steepest slope any
    feasible W row allows (a lower bound of the fitted W's gradient), or by that
    gradient; θ and the fit are the same either way."""

    X, Y = _small(n=80, D=30, k=4, seed=3)
    kw = {"lam": 1e-3, "max_iter": 30, "n_features_to_select": 5}
    s = GRROOR(**kw).fit(X, Y)
    g = GRROOR(rank_unscored="gradient", **kw).fit(X, Y)
    assert np.array_equal(s.scores_, g.scores_) and np.array_equal(s.W_, g.W_)
    th = s.scores_
    zero = th == 0
    assert zero.sum() >= 10  # sparse θ
    Xc = X - X.mean(axis=0)
    r = Xc.T @ (Xc @ (th[:, None] * s.W_) - s.V_)
    from dmlfe.evaluation.metrics import squared_cosines

    A = squared_cosines(Xc.T @ Xc)
    steep = 2 * s.lam * (A @ th) - 2 * np.linalg.norm(r, axis=1)
    assert np.allclose(s.reduced_costs_, steep, atol=1e-8 * np.abs(steep).max())
    # the slope at the fitted W (the θ problem's gradient at the last V) is never steeper
    grad = 2 * np.sum(s.W_ * r, axis=1) + 2 * s.lam * (A @ th)
    assert np.all(s.reduced_costs_ <= grad + 1e-9 * np.abs(grad).max())  # ||W_j|| <= 1
    assert not np.allclose(s.reduced_costs_[zero], g.reduced_costs_[zero])
    for est in (s, g):
        k = int((~zero).sum())
        assert np.array_equal(np.sort(est.ranking_[:k]), np.flatnonzero(~zero))
        assert np.all(np.diff(th[est.ranking_[:k]]) <= 0)
        assert np.all(np.diff(est.reduced_costs_[est.ranking_[k:]]) >= 0)
    with pytest.raises(ValueError, match="rank_unscored"):
        GRROOR(rank_unscored="theta").fit(X, Y)
