"""DMLDA on the dual route's operator form (issue 33 part 3) against its pencil written
out from mvmd eq. 45-47 in numpy, independently of dmlfe's builders."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
from helpers import principal_cosines, write_store

from dmlfe.estimators import make_estimator
from dmlfe.solvers import dual
from dmlfe.solvers.dual import exact_duplicates

GAMMA = 0.1


def _data(n, D, q=4, seed=0, duplicates=0, unlabelled=0, empty_label=False, empty_rows=0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, D, density=0.08, random_state=seed, format="csr")
    X.data = rng.uniform(0.1, 1.0, X.nnz)
    Y = (rng.uniform(size=(n, q)) < 0.35).astype(np.uint8)
    Y[np.arange(n), np.arange(n) % q] = 1
    if duplicates:  # equal documents, some with other labels: a rank-deficient Gram
        X = sp.vstack([X, X[:duplicates]]).tocsr()
        Y = np.vstack([Y, Y[:duplicates][:, ::-1]])
    if empty_rows:
        X = sp.vstack([X, sp.csr_matrix((empty_rows, D))]).tocsr()
        Y = np.vstack([Y, np.eye(empty_rows, q, dtype=np.uint8)])
    Y[:unlabelled] = 0
    if empty_label:
        Y = np.hstack([Y, np.zeros((Y.shape[0], 1), dtype=Y.dtype)])
    return X, Y


def _pencil(X, Y, gamma=GAMMA):
    """(A, B) of mvmd eq. 45-47: S_w(Y) = diag(sum_k y(k)) - Y diag(n(1)) Y^T,
    S_b(Y) = q I - (u n(1)^T Y^T + Y n(1) u^T) + l Y diag(n(1) o n(1)) Y^T - S_w(Y)."""
    Xd = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=float)
    Yd = np.asarray(Y, dtype=float)
    l, q = Yd.shape
    counts = Yd.sum(axis=0)
    n1 = np.array([1.0 / c if c else 0.0 for c in counts])
    u = np.ones(l)
    Sw = np.diag(Yd.sum(axis=1)) - Yd @ np.diag(n1) @ Yd.T
    cross = np.outer(u, Yd @ n1)
    Sb = q * np.eye(l) - (cross + cross.T) + l * Yd @ np.diag(n1 * n1) @ Yd.T - Sw
    A = Xd.T @ Sb @ Xd
    B = Xd.T @ Sw @ Xd + gamma * np.eye(Xd.shape[1])
    return 0.5 * (A + A.T), 0.5 * (B + B.T)


def _check(fit, X, Y, d):
    A, B = _pencil(X, Y)
    ref = sla.eigh(A, B, eigvals_only=True)[::-1][:d]
    w = fit.eigenvalues_[:d]
    assert np.max(np.abs(w - ref)) <= 1e-10 * abs(ref[0])
    P = fit.components_[:d].T
    np.testing.assert_allclose(P.T @ B @ P, np.eye(d), atol=1e-9)
    np.testing.assert_allclose(P.T @ A @ P, np.diag(w), atol=1e-9 * abs(ref[0]))
    return ref


@pytest.mark.parametrize("case", [
    {}, {"duplicates": 12}, {"unlabelled": 9}, {"empty_label": True},
    {"duplicates": 6, "unlabelled": 5, "empty_rows": 2}])
@pytest.mark.parametrize("d", [3, 10])
def test_operator_form_equals_the_dense_pencil(case, d):
    X, Y = _data(120, 400, seed=3, **case)
    fit = make_estimator("dmlda", n_components=d, route="dual", gamma_xy=GAMMA).fit(X, Y)
    assert fit.route_ == "dual" and fit.solver_ == "dual-operator"
    assert fit.n_components_ == d
    _check(fit, X, Y, d)


def test_operator_form_agrees_with_the_reduced_form(monkeypatch):
    X, Y = _data(150, 500, seed=5, duplicates=10)
    fit = make_estimator("dmlda", n_components=6, route="dual").fit(X, Y)
    assert fit.solver_ == "dual-operator"
    # the reduced form: the same problem without form 5
    monkeypatch.setattr(dual, "_direct_operator", lambda *a, **k: None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        red = make_estimator("dmlda", n_components=6, route="dual").fit(X, Y)
    assert red.solver_ == "dual-reduced"
    np.testing.assert_allclose(fit.eigenvalues_[:6], red.eigenvalues_[:6], rtol=1e-9)
    assert principal_cosines(fit.components_, red.components_).min() > 1 - 1e-9


@pytest.mark.parametrize(("shape", "d"), [((140, 45), 3), ((40, 150), 40)],
                         ids=["more-documents-than-features", "d-above-the-rank"])
def test_reduced_form_where_the_operator_cannot_solve(shape, d):
    X, Y = _data(*shape, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        fit = make_estimator("dmlda", n_components=d, route="dual").fit(X, Y)
        ref = make_estimator("dmlda", n_components=d, route="feature",
                             solver="dense").fit(X, Y)
    assert fit.solver_ == "dual-reduced"
    k = min(d, ref.n_genuine_)
    np.testing.assert_allclose(fit.eigenvalues_[:k], ref.eigenvalues_[:k], rtol=1e-8,
                               atol=1e-9 * ref.eigenvalues_[0])


def test_no_convergence_warns_and_takes_the_reduced_form(monkeypatch):
    monkeypatch.setattr(dual, "OPERATOR_PASSES", 1)
    X, Y = _data(120, 400, seed=4)
    with pytest.warns(RuntimeWarning, match="operator form did not converge"):
        fit = make_estimator("dmlda", n_components=5, route="dual").fit(X, Y)
    assert fit.solver_ == "dual-reduced"
    _check(fit, X, Y, 5)


def test_threshold_keeps_the_reduced_form():
    X, Y = _data(60, 200, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        fit = make_estimator("dmlda", n_components=0.9, route="dual").fit(X, Y)
        ref = make_estimator("dmlda", n_components=0.9, route="feature",
                             solver="dense").fit(X, Y)
    assert fit.solver_ == "dual-reduced"
    assert fit.n_components_ == ref.n_components_


def test_exact_duplicates_groups_equal_rows():
    X, _ = _data(30, 80, seed=6)
    X = sp.vstack([X, X[[4, 7, 4]], sp.csr_matrix((1, 80))]).tocsr()
    X = X + sp.csr_matrix(([1e-3], ([1], [0])), shape=X.shape)  # near, not equal
    G = (X @ X.T).toarray()
    group, first = exact_duplicates(G)
    rows = X.toarray()
    assert group[-1] == -1
    for i in range(X.shape[0] - 1):
        same = [j for j in range(X.shape[0] - 1) if np.array_equal(rows[i], rows[j])]
        assert {group[j] for j in same} == {group[i]}
        assert all(group[j] != group[i] for j in range(X.shape[0] - 1) if j not in same)
    assert sorted(first) == sorted({min(j for j in range(X.shape[0] - 1)
                                        if group[j] == g) for g in range(first.size)})


def test_operator_form_on_a_store_and_cluster(tmp_path, cluster_client):
    X, Y = _data(90, 300, seed=8, duplicates=5)
    store = tmp_path / "s.zarr"
    write_store(store, X, Y, ["train"] * X.shape[0], chunk_rows=17)
    mem = make_estimator("dmlda", n_components=4, route="dual").fit(X, Y)
    on = make_estimator("dmlda", n_components=4, route="dual", client=cluster_client,
                        cache=False, max_gather_bytes=0).fit(str(store))
    assert on.solver_ == mem.solver_ == "dual-operator"
    np.testing.assert_allclose(on.eigenvalues_[:4], mem.eigenvalues_[:4], rtol=1e-10)
    _check(on, X, Y, 4)


def test_linearly_dependent_documents_stay_exact():
    # distinct documents whose rows are linearly dependent (x_c = x_a + x_b, a singular
    # Gram that merging equal rows does not mend): the operator form either stays exact
    # or stops and hands the problem to the reduced form, with a warning
    X, Y = _data(100, 400, seed=11)
    X = sp.vstack([X, X[0] + X[1], X[2] + 2.0 * X[3]]).tocsr()
    Y = np.vstack([Y, Y[:2]])
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        fit = make_estimator("dmlda", n_components=8, route="dual").fit(X, Y)
    assert fit.solver_ in ("dual-operator", "dual-reduced")
    _check(fit, X, Y, 8)


def test_breakdown_is_raised_when_the_block_loses_orthonormality(monkeypatch):
    from dmlfe.solvers import pencil

    monkeypatch.setattr(pencil, "ORTH_LIMIT", -1.0)  # every block "departs"
    X, Y = _data(120, 400, seed=4)
    with pytest.warns(RuntimeWarning, match="operator form stopped"):
        fit = make_estimator("dmlda", n_components=5, route="dual").fit(X, Y)
    assert fit.solver_ == "dual-reduced"
    _check(fit, X, Y, 5)
