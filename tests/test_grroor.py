"""GRROOR (eq. 16, Algorithm 1): monotone objective on real data, stationarity of the
alternating solution on a small problem, selection, refusal above the limits, and the
distributed passes on a real LocalCluster."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import data_path, sparse_dask
from sklearn.exceptions import ConvergenceWarning

from dmlfe import GRROOR
from dmlfe.selection.grroor import alm_simplex_qp, gpi_stiefel, project_simplex


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
    Y = np.vstack([b.Y for b in bs])
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
