"""The multi-label classifiers against independent references: closed forms, scikit-learn,
and a direct loop implementation of ML-kNN as Zhang & Zhou (2007) publish it."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from scipy.special import expit
from sklearn.base import clone
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.naive_bayes import GaussianNB

from dmlfe.evaluation import BinaryRelevance, MLkNN, MultiLabelRidge, PerLabelFLDA


def _data(seed: int = 0, n: int = 160, d: int = 4, q: int = 3, shift: float = 0.0):
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, d)) + shift
    A = rng.normal(size=(d, q))
    Y = ((Z - shift) @ A + rng.normal(size=(n, q)) > 0.4).astype(np.int8)
    return Z, Y


# ------------------------------------------------------------------------- ridge
def test_ridge_matches_closed_form_and_sklearn():
    Z, Y = _data(0)
    alpha = 0.01
    model = MultiLabelRidge(alpha=alpha).fit(Z, Y)
    # Closed form with an appended column of ones whose weight is not penalised.
    A = np.hstack([Z, np.ones((len(Z), 1))])
    pen = alpha * np.diag([1.0] * Z.shape[1] + [0.0])
    beta = np.linalg.solve(A.T @ A + pen, A.T @ (2.0 * Y - 1.0))
    np.testing.assert_allclose(model.coef_, beta[:-1], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(model.intercept_, beta[-1], rtol=1e-10, atol=1e-12)
    sk = Ridge(alpha=alpha, fit_intercept=True).fit(Z, 2.0 * Y - 1.0)
    np.testing.assert_allclose(model.decision_function(Z), sk.predict(Z), rtol=1e-9, atol=1e-11)
    P = model.predict(Z)
    assert P.dtype == np.int8
    np.testing.assert_array_equal(P, (sk.predict(Z) > 0).astype(np.int8))


def test_ridge_dask_chunks_far_from_origin():
    # Embeddings with a large common offset: the chunk-wise centred moments must not lose it.
    Z, Y = _data(1, n=230, shift=1e5)
    sk = Ridge(alpha=0.5, fit_intercept=True).fit(Z, 2.0 * Y - 1.0)
    Zd = da.from_array(Z, chunks=(37, 4))
    for Yin in (Y, da.from_array(Y, chunks=(50, 3))):
        model = MultiLabelRidge(alpha=0.5).fit(Zd, Yin)
        np.testing.assert_allclose(model.coef_, sk.coef_.T, rtol=1e-7, atol=1e-9)
        S = model.decision_function(Zd)
        assert isinstance(S, da.Array) and S.chunks[0] == Zd.chunks[0]
        np.testing.assert_allclose(S.compute(), sk.predict(Z), rtol=1e-7, atol=1e-7)
        assert isinstance(model.predict(Zd), da.Array)


# --------------------------------------------------------------------------- FLDA
def test_flda_matches_sklearn_lda_and_dense_reference():
    Z, Y = _data(2, n=140, d=5, q=3)
    prior = PerLabelFLDA(threshold="prior", reg=0.0).fit(Z, Y)
    mid = PerLabelFLDA(threshold="midpoint", reg=0.0).fit(Z, Y)
    for j in range(Y.shape[1]):
        y = Y[:, j]
        lda = LinearDiscriminantAnalysis(solver="lsqr").fit(Z, y)
        np.testing.assert_allclose(prior.decision_function(Z)[:, j], lda.decision_function(Z),
                                   rtol=1e-8, atol=1e-9)
        np.testing.assert_array_equal(prior.predict(Z)[:, j], lda.predict(Z))
        # Dense reference: pooled within-class scatter about the class means, divided by n.
        m1, m0 = Z[y == 1].mean(axis=0), Z[y == 0].mean(axis=0)
        Sw = ((Z[y == 1] - m1).T @ (Z[y == 1] - m1) + (Z[y == 0] - m0).T @ (Z[y == 0] - m0))
        w = np.linalg.solve(Sw / len(Z), m1 - m0)
        g = (Z - (m0 + m1) / 2) @ w
        np.testing.assert_allclose(mid.decision_function(Z)[:, j], g, rtol=1e-9, atol=1e-10)
        shift = np.log(y.sum() / (len(y) - y.sum()))
        np.testing.assert_allclose(prior.decision_function(Z)[:, j], g + shift,
                                   rtol=1e-9, atol=1e-10)


def test_flda_constant_label_and_dask():
    Z, Y = _data(3, n=120, q=3)
    Y[:, 1] = 0
    Y[:, 2] = 1
    Zd = da.from_array(Z, chunks=(25, 4))
    ref = PerLabelFLDA().fit(Z, Y)
    model = PerLabelFLDA().fit(Zd, da.from_array(Y, chunks=(40, 3)))
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-9, atol=1e-12)
    S = model.decision_function(Zd).compute()
    assert np.all(S[:, 1] == -np.inf) and np.all(S[:, 2] == np.inf)
    P = model.predict(Zd).compute()
    np.testing.assert_array_equal(P[:, 1:], np.tile([0, 1], (len(Z), 1)))
    np.testing.assert_array_equal(P, ref.predict(Z))


# -------------------------------------------------------------------------- ML-kNN
def _reference_mlknn(Xtr, Ytr, Xte, k, s):
    """Zhang & Zhou (2007), written out with loops; neighbours ordered by (distance, index)."""
    n, q = Ytr.shape

    def knn(x, skip):
        d = sorted((float(np.sum((x - Xtr[i]) ** 2)), i) for i in range(n) if i != skip)
        return [i for _, i in d[:k]]

    prior = [(s + Ytr[:, l].sum()) / (2 * s + n) for l in range(q)]
    c1 = np.zeros((q, k + 1))
    c0 = np.zeros((q, k + 1))
    for i in range(n):
        nb = knn(Xtr[i], i)
        for l in range(q):
            C = sum(Ytr[j, l] for j in nb)
            if Ytr[i, l] == 1:
                c1[l, C] += 1
            else:
                c0[l, C] += 1
    pred = np.zeros((len(Xte), q), dtype=int)
    score = np.zeros((len(Xte), q))
    for t in range(len(Xte)):
        nb = knn(Xte[t], None)
        for l in range(q):
            C = sum(Ytr[j, l] for j in nb)
            p1 = prior[l] * (s + c1[l, C]) / (s * (k + 1) + c1[l].sum())
            p0 = (1 - prior[l]) * (s + c0[l, C]) / (s * (k + 1) + c0[l].sum())
            pred[t, l] = int(p1 > p0)
            score[t, l] = p1 / (p1 + p0)
    return pred, score


@pytest.mark.parametrize(("k", "s", "integer"), [(5, 1.0, False), (3, 0.5, True)])
def test_mlknn_matches_direct_implementation(k, s, integer):
    rng = np.random.default_rng(10 + k)
    if integer:
        # Small integer coordinates: many exactly tied distances and duplicate documents,
        # so the lower-index tie rule decides the neighbour sets.
        X = rng.integers(0, 3, size=(80, 2)).astype(float)
        Y = (rng.random((80, 4)) < 0.35).astype(np.int8)
        Y[:, 0] = (X[:, 0] >= 1)
    else:
        X = rng.normal(size=(80, 3))
        Y = ((X @ rng.normal(size=(3, 4)) + rng.normal(size=(80, 4))) > 0.3).astype(np.int8)
    Xtr, Ytr, Xte = X[:55], Y[:55], X[55:]
    pred, score = _reference_mlknn(Xtr, Ytr, Xte, k, s)
    for block_rows in (None, 4):
        model = MLkNN(k=k, s=s, block_rows=block_rows).fit(Xtr, Ytr)
        np.testing.assert_array_equal(model.predict(Xte), pred)
        np.testing.assert_allclose(model.predict_proba(Xte), score, rtol=0, atol=1e-12)
        # decision_function is the posterior's log-odds: > 0 exactly where predicted
        np.testing.assert_allclose(expit(model.decision_function(Xte)), score, rtol=0,
                                   atol=1e-12)
        np.testing.assert_array_equal(model.decision_function(Xte) > 0, pred == 1)
    assert pred.any() and not pred.all()
    # dask training and query embeddings: leave-one-out counts per chunk, same model
    dmodel = MLkNN(k=k, s=s, block_rows=3).fit(da.from_array(Xtr, chunks=(13, -1)), Ytr)
    np.testing.assert_array_equal(dmodel.cond_prob_true_, model.cond_prob_true_)
    np.testing.assert_array_equal(dmodel.cond_prob_false_, model.cond_prob_false_)
    Pd = dmodel.predict(da.from_array(Xte, chunks=(7, -1)))
    assert isinstance(Pd, da.Array)
    np.testing.assert_array_equal(Pd.compute(), pred)


def test_mlknn_needs_more_documents_than_k():
    Z, Y = _data(4, n=6)
    with pytest.raises(ValueError, match="k=6 needs at least k \\+ 1 = 7"):
        MLkNN(k=6).fit(Z, Y)


# ---------------------------------------------------------------- binary relevance
def test_binary_relevance_given_estimator_and_constant_label():
    Z, Y = _data(5, n=150, q=3)
    Y[:, 2] = 0
    model = BinaryRelevance(LogisticRegression(C=0.3)).fit(Z, Y)
    S = model.decision_function(Z)
    for j in range(2):
        lr = LogisticRegression(C=0.3).fit(Z, Y[:, j])
        np.testing.assert_allclose(S[:, j], lr.decision_function(Z), rtol=1e-10)
        np.testing.assert_array_equal(model.predict(Z)[:, j], lr.predict(Z))
    assert np.all(S[:, 2] == -np.inf) and not model.predict(Z)[:, 2].any()
    # an estimator with predict_proba only: the score is P(label relevant)
    nb = BinaryRelevance(GaussianNB()).fit(Z, Y)
    ref = GaussianNB().fit(Z, Y[:, 0]).predict_proba(Z)[:, 1]
    np.testing.assert_allclose(nb.decision_function(Z)[:, 0], ref, rtol=1e-12)


def test_binary_relevance_default_chooses_c_by_cross_validation():
    Z, Y = _data(6, n=120, q=2)
    Y[:3, 1] = 1
    Y[3:, 1] = 0  # 3 positives: 3 folds
    model = BinaryRelevance(Cs=(0.01, 1.0, 100.0), cv=5).fit(Z, Y)
    assert set(model.best_C_) <= {0.01, 1.0, 100.0}
    for j in range(2):
        lr = LogisticRegression(C=model.best_C_[j], max_iter=2000).fit(Z, Y[:, j])
        np.testing.assert_allclose(model.decision_function(Z)[:, j], lr.decision_function(Z),
                                   rtol=1e-6, atol=1e-8)
    Zd = da.from_array(Z, chunks=(50, -1))
    np.testing.assert_array_equal(model.predict(Zd).compute(), model.predict(Z))


# ------------------------------------------------------------- sklearn conventions
@pytest.mark.parametrize(
    ("est", "msg"),
    [
        (MultiLabelRidge(alpha=-1.0), "alpha=-1.0 must be"),
        (MLkNN(k=0), "k=0 must be"),
        (MLkNN(s=-1), "s=-1 must be"),
        (PerLabelFLDA(threshold="mean"), "threshold='mean'"),
        (BinaryRelevance(cv=1), "cv=1 must be"),
    ],
)
def test_parameters_validated_in_fit(est, msg):
    Z, Y = _data(7, n=30)
    with pytest.raises(ValueError, match=msg):
        est.fit(Z, Y)


def test_clone_params_labels_and_dimension_checks():
    m = MLkNN(k=3, s=0.5)
    assert clone(m).get_params() == {"k": 3, "s": 0.5, "block_rows": None}
    assert MultiLabelRidge().get_params() == {"alpha": 0.01}
    Z, Y = _data(8, n=40)
    bad = Y.copy()
    bad[7, 1] = 3
    with pytest.raises(ValueError, match=r"Y\[row 7, label 1\] = 3"):
        MultiLabelRidge().fit(Z, bad)
    with pytest.raises(ValueError, match=r"Y\[row 37, label 1\] = 3"):
        bad2 = Y.copy()
        bad2[37, 1] = 3
        MultiLabelRidge().fit(da.from_array(Z, chunks=(10, -1)), bad2)
    model = MultiLabelRidge().fit(Z, Y)
    with pytest.raises(ValueError, match="3 features, but MultiLabelRidge is expecting 4"):
        model.predict(Z[:, :3])
    with pytest.raises(ValueError, match="3 features, but MultiLabelRidge is expecting 4"):
        model.predict(da.from_array(Z[:, :3], chunks=(10, -1)))


def test_dask_classifiers_on_a_distributed_cluster(cluster_client):
    Z, Y = _data(9, n=200)
    Zd = da.from_array(Z, chunks=(50, -1))
    for est in (MultiLabelRidge(), MLkNN(k=5)):
        ref = clone(est).fit(Z, Y)
        model = clone(est).fit(Zd, da.from_array(Y, chunks=(50, -1)))
        np.testing.assert_array_equal(model.predict(Zd).compute(), ref.predict(Z))
        np.testing.assert_allclose(model.decision_function(Zd).compute(),
                                   ref.decision_function(Z), rtol=1e-10, atol=1e-12)


def test_moment_classifiers_keep_sparse_labels_sparse(cluster_client, monkeypatch):
    # ridge and FLDA from CSR labels (in memory, and as CSR dask blocks on a cluster)
    # equal their fits on the dense labels; no label block is made dense
    import scipy.sparse as sp

    from dmlfe.evaluation import _common

    Z, Y = _data(11, n=210, d=4, q=7)
    Y[:, 5] = 0  # a label no document has
    Ys = sp.csr_matrix(Y)
    dense_calls = []
    real = _common.dense_block
    monkeypatch.setattr(_common, "dense_block",
                        lambda b: dense_calls.append(sp.issparse(b)) or real(b))
    Zd = da.from_array(Z, chunks=(60, -1))
    Yd = da.from_array(Ys, chunks=(60, -1), asarray=False)
    for est in (MultiLabelRidge(alpha=0.3), PerLabelFLDA()):
        ref = clone(est).fit(Z, Y)
        for Zin, Yin in ((Z, Ys), (Zd, Ys), (Zd, Yd)):
            model = clone(est).fit(Zin, Yin)
            np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(model.intercept_, ref.intercept_, rtol=1e-10,
                                       atol=1e-12)
    assert not any(dense_calls)
    bad = Ys.copy()
    bad.data[3] = 2
    with pytest.raises(ValueError, match=r"Y\[row \d+, label \d+\] = 2"):
        MultiLabelRidge().fit(Z, bad)


def test_binary_relevance_columns_of_sparse_labels_and_mlknn_size_refusal(monkeypatch):
    import scipy.sparse as sp

    from dmlfe.stats import sufficient

    Z, Y = _data(12, n=120, d=3, q=4)
    Y[:, 2] = 1  # a constant label
    lr = LogisticRegression(C=2.0)
    ref = BinaryRelevance(estimator=lr).fit(Z, Y)
    got = BinaryRelevance(estimator=lr).fit(Z, sp.csr_matrix(Y))
    np.testing.assert_allclose(got.decision_function(Z), ref.decision_function(Z),
                               rtol=1e-12, atol=1e-12)
    # 120 x 4 int64 counts are 3,840 bytes
    monkeypatch.setattr(sufficient, "MAX_DENSE_LABEL_BYTES", 3000)
    with pytest.raises(ValueError, match=r"MLkNN: .*q = 4 labels.*knn-vote"):
        MLkNN(k=3).fit(Z, sp.csr_matrix(Y))
