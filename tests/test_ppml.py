"""PPML (Ma et al. 2014): against a dense numpy Algorithm 1 written here, against
scikit-learn's PLSRegression at penalty 0, and in memory vs a real LocalCluster."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import labels_dask, sparse_dask, write_store
from sklearn.cross_decomposition import PLSRegression

from dmlfe import PPML


def _data(n=90, m=25, d=4, seed=0, sparse=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, m)) * rng.uniform(0.5, 2.0, size=m) + rng.uniform(-1, 2, size=m)
    if sparse:
        X = X * (rng.uniform(size=(n, m)) < 0.3)
    Y = (rng.uniform(size=(n, d)) < 0.3).astype(np.float64)
    Y[:, 0] = X[:, 0] + X[:, 1] > np.median(X[:, 0] + X[:, 1])
    Y[:, 1] = X[:, 2] - X[:, 3] > np.median(X[:, 2] - X[:, 3])
    return X, Y


def algorithm1(X, Y, h, lam, iters=200):
    """PPML's Algorithm 1 with explicit deflation of X and Y, dense numpy.

    Inner loop: eq. 11 start; p from q (p ∝ X^T Y q); q by eq. 14,
    q = (M M^T + λI)^† M p with M = Y^T X, normalised; w = X^T u (u = Y q), t = X w.
    Deflation X <- X - t p^T (p the X loading X^T t / t^T t), Y <- Y - t q^T with the
    penalised label loading q = Y^T t / (t^T t + λ) (eq. 12-15 applied to eq. 4).
    Prediction eq. 6 with T = X0 W (P^T W)^-1.
    """
    mx, my = X.mean(0), Y.mean(0)
    Xh, Yh = X - mx, Y - my
    X0 = Xh.copy()
    W, P, Q, T = [], [], [], []
    for _ in range(h):
        M = Yh.T @ Xh
        U, s, Vt = np.linalg.svd(M.T, full_matrices=False)
        q = Vt[0]
        w = U[:, 0]
        for _ in range(iters):
            p = Xh.T @ (Yh @ q)
            p /= np.linalg.norm(p)
            q = np.linalg.pinv(M @ M.T + lam * np.eye(len(q))) @ (M @ p)
            q /= np.linalg.norm(q)
            w_new = Xh.T @ (Yh @ q)
            w_new /= np.linalg.norm(w_new)
            if abs(w_new @ w) > 1 - 1e-14:
                w = w_new
                break
            w = w_new
        t = Xh @ w
        pl = Xh.T @ t / (t @ t)
        ql = Yh.T @ t / (t @ t + lam)
        Xh = Xh - np.outer(t, pl)
        Yh = Yh - np.outer(t, ql)
        W.append(w), P.append(pl), Q.append(ql), T.append(t)
    W, P, Q, T = map(np.column_stack, (W, P, Q, T))
    R = W @ np.linalg.inv(P.T @ W)
    assert np.allclose(X0 @ R, T, atol=1e-8)  # eq. 3 with the rotations
    B = R @ Q.T
    return {"W": W, "T": T, "B": B, "b": my - mx @ B}


def _match_signs(A, B):
    return B * np.sign(np.sum(A * B, axis=0))


@pytest.mark.parametrize("lam", [0.0, 5.0, 200.0])
def test_equals_dense_algorithm_1(lam):
    X, Y = _data()
    ref = algorithm1(X, Y, 6, lam)
    m = PPML(n_components=6, penalty=lam).fit(X, Y)
    assert np.allclose(m.x_weights_, _match_signs(m.x_weights_, ref["W"]), atol=1e-9)
    assert np.allclose(m.transform(X), _match_signs(m.transform(X), ref["T"]), atol=1e-8)
    assert np.allclose(m.coef_, ref["B"], atol=1e-9)
    assert np.allclose(m.intercept_, ref["b"], atol=1e-9)
    O = X @ ref["B"] + ref["b"]
    assert np.allclose(m.decision_function(X), O - 0.5, atol=1e-9)  # O - θ
    assert np.array_equal(m.predict(X), (O >= 0.5).astype(np.int8))
    assert m.n_passes_ == 1 + 6
    # eq. 15: shrinkage factors sigma^2 / (sigma^2 + lambda) of the score norms
    s2 = (ref["T"] ** 2).sum(0)
    assert np.allclose(m.shrinkage_, s2 / (s2 + lam))


def test_penalty_zero_is_pls_da():
    X, Y = _data(n=120, m=30, d=5, seed=3)
    k = 7
    m = PPML(n_components=k, penalty=0.0).fit(X, Y)
    s = PLSRegression(n_components=k, scale=False, max_iter=10_000, tol=1e-15).fit(X, Y)
    assert np.allclose(m.x_weights_, _match_signs(m.x_weights_, s.x_weights_), atol=1e-6)
    assert np.allclose(m.x_loadings_, _match_signs(m.x_loadings_, s.x_loadings_), atol=1e-6)
    assert np.allclose(m.transform(X), _match_signs(m.transform(X), s.x_scores_), atol=1e-5)
    assert np.allclose(m.decision_function(X) + m.threshold, s.predict(X), atol=1e-6)
    # the penalty shrinks the label loadings only: same weights, smaller outputs
    m2 = PPML(n_components=k, penalty=50.0).fit(X, Y)
    assert np.allclose(m2.x_weights_, m.x_weights_, atol=1e-10)
    assert np.all(np.abs(m2.y_loadings_) <= np.abs(m.y_loadings_) + 1e-15)


def test_sparse_input_and_threshold():
    X, Y = _data(sparse=True)
    Xs = sp.csr_matrix(X)
    a = PPML(n_components=5, penalty=1.0, threshold=0.3).fit(Xs, Y)
    b = PPML(n_components=5, penalty=1.0, threshold=0.3).fit(X, Y)
    assert np.allclose(a.coef_, b.coef_, atol=1e-12)
    O = Xs @ a.coef_ + a.intercept_
    assert np.allclose(a.decision_function(Xs), O - 0.3, atol=1e-12)
    assert np.array_equal(a.predict(Xs), (O >= 0.3).astype(np.int8))
    P = a.predict_proba(Xs)  # expit(4 (O - θ)): 1/2 at the threshold, O's ranking
    assert np.allclose(P, 1.0 / (1.0 + np.exp(-4.0 * (O - 0.3))), atol=1e-12)
    assert a.transform(Xs).shape == (X.shape[0], 5)


def test_stops_when_rank_is_exhausted():
    X, Y = _data(n=40, m=4, d=2)
    X = X[:, :3]
    m = PPML(n_components=10).fit(X, Y)
    assert m.n_components_ == 3
    assert m.x_weights_.shape == (3, 3)


@pytest.mark.parametrize("kw", [{"n_components": 0}, {"penalty": -1.0}, {"threshold": np.nan},
                                {"max_iter": 0}, {"tol": 1.5}])
def test_bad_parameters(kw):
    X, Y = _data()
    with pytest.raises(ValueError, match=next(iter(kw))):
        PPML(**kw).fit(X, Y)


def test_cluster_matches_memory(cluster_client, tmp_path):
    X, Y = _data(n=150, m=40, d=5, sparse=True, seed=7)
    mem = PPML(n_components=4, penalty=3.0).fit(sp.csr_matrix(X), Y)
    Xd, Yd = sparse_dask(X, 17), labels_dask(Y, 17)
    dist = PPML(n_components=4, penalty=3.0, client=cluster_client).fit(Xd, Yd)
    assert dist.n_passes_ == 1 + 4
    assert np.allclose(dist.coef_, mem.coef_, atol=1e-10)
    assert np.allclose(dist.intercept_, mem.intercept_, atol=1e-10)
    S = dist.decision_function(Xd)
    assert S.npartitions == Xd.npartitions  # lazy, per row block
    assert np.allclose(S.compute(), mem.decision_function(sp.csr_matrix(X)), atol=1e-10)
    assert np.array_equal(dist.predict(Xd).compute(), mem.predict(X))
    # from a store: its X and Y
    store = write_store(tmp_path / "s.zarr", sp.csr_matrix(X), Y.astype(np.uint8),
                        ["train"] * X.shape[0])
    st = PPML(n_components=4, penalty=3.0, client=cluster_client).fit(str(store))
    assert np.allclose(st.coef_, mem.coef_, atol=1e-10)


def test_pipeline_classifier_stage(tmp_path):
    import json

    import yaml

    from dmlfe.pipeline import run_pipeline

    cfg = {
        "name": "ppml",
        "datasets": [{"name": "syn", "format": "synthetic", "chunk_rows": 200,
                      "options": {"n_docs": 400, "n_labels": 5, "seed": 1,
                                  "max_features": 120, "fit_split": "train"}}],
        "methods": ["none"],
        "classifiers": [{"name": "ppml", "n_components": 4}],
        "metrics": ["hamming_loss", "micro_f1"],
    }
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    run_pipeline(path, work_dir=tmp_path / "work", progress=False)
    rep = json.loads((tmp_path / "work" / "report" / "report.json").read_text())
    row = rep["tables"]["ppml"]["micro_f1"]["syn"]
    assert set(row) == {"none"}
    assert all(0.0 < v <= 1.0 for v in row.values())
