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
from dmlfe.solvers import direct_form, dual

GAMMA = 0.1


def _data(n, D, q=4, seed=0, duplicates=0, unlabelled=0, empty_label=False, empty_rows=0,
          multi=0.06, full=0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, D, density=0.08, random_state=seed, format="csr")
    X.data = rng.uniform(0.1, 1.0, X.nnz)
    # one label each and a second or third for some, as news wires have them: the
    # pencil's eigenvalues crowd below q - 1 (the split form's two operators)
    Y = (rng.uniform(size=(n, q)) < multi).astype(np.uint8)
    Y[np.arange(n), np.arange(n) % q] = 1
    Y[:full] = 1  # every label: a zero of M_a's diagonal
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
    {}, {"duplicates": 12}, {"unlabelled": 9}, {"empty_label": True}, {"full": 4},
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


@pytest.mark.parametrize(("attr", "value", "match"), [
    ("direct_form.OPERATOR_PASSES", 1, "operator form did not converge"),
    ("pencil.ORTH_LIMIT", -1.0, "operator form stopped")],  # every block "departs"
    ids=["no-convergence", "breakdown"])
def test_a_failed_lanczos_warns_and_takes_the_reduced_form(monkeypatch, attr, value, match):
    from dmlfe.solvers import pencil

    module, name = attr.split(".")
    monkeypatch.setattr({"direct_form": direct_form, "pencil": pencil}[module], name, value)
    X, Y = _data(120, 400, seed=4)
    with pytest.warns(RuntimeWarning, match=match):
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
    # distinct documents whose rows are linearly dependent (x_c = x_a + x_b) and equal
    # ones: a singular Gram, which the operator form never inverts
    X, Y = _data(100, 400, seed=11, duplicates=7)
    X = sp.vstack([X, X[0] + X[1], X[2] + 2.0 * X[3]]).tocsr()
    Y = np.vstack([Y, Y[:2]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        fit = make_estimator("dmlda", n_components=8, route="dual").fit(X, Y)
    assert fit.solver_ == "dual-operator"
    _check(fit, X, Y, 8)


def test_both_operators_solve_their_side_of_kappa():
    # d = 10 pairs, of which only a few lie above kappa = q / w_0 - 1 = 3: B^{-1} A gives
    # those and (kappa B - A)^{-1} A the rest; both against the dense pencil
    from dmlfe.methods.mlda import dmlda_nspace

    X, Y = _data(150, 500, seed=21, unlabelled=3, full=2)
    A, B = _pencil(X, Y)
    ref = sla.eigh(A, B, eigvals_only=True)[::-1][:10]
    kappa = direct_form.split_point(Y.shape[1] - Y.sum(axis=1), Y.sum(axis=1))
    assert kappa == 3.0 and 0 < int(np.sum(ref > kappa)) < 10
    G = (X @ X.T).toarray()
    lam, alpha = direct_form.direct_pairs(dmlda_nspace(Y, GAMMA), G, X.shape[1], 10)
    assert np.max(np.abs(lam - ref)) <= 1e-10 * ref[0]
    P = X.T @ alpha
    np.testing.assert_allclose(P.T @ B @ P, np.eye(10), atol=1e-9)
    np.testing.assert_allclose(A @ P, B @ P * lam, atol=1e-5 * ref[0])


def test_middle_matrix_is_semidefinite_and_its_null_space_is_found():
    # the A-inner product needs M_a = S_b(Y) >= 0 (mvmd eq. 46): checked on random
    # label matrices, with unlabelled documents, empty labels and documents with every
    # label (zeros of M_a's diagonal), and its null space against scipy's
    from dmlfe.methods.mlda import dmlda_nspace

    rng = np.random.default_rng(0)
    for _ in range(60):
        n, q = int(rng.integers(6, 40)), int(rng.integers(2, 6))
        Y = (rng.uniform(size=(n, q)) < rng.uniform(0.1, 0.8)).astype(float)
        pen = dmlda_nspace(Y, GAMMA)
        M = np.diag(pen.a_diag) + pen.a_factor @ pen.a_core @ pen.a_factor.T
        ev = np.linalg.eigvalsh(M)
        assert ev[0] >= -1e-12 * max(1.0, ev[-1])
        Z = direct_form.middle_null_space(pen.a_diag, pen.a_factor, pen.a_core)
        ref = sla.null_space(M, rcond=1e-10)
        assert Z.shape == ref.shape
        np.testing.assert_allclose(Z @ Z.T, ref @ ref.T, atol=1e-8)


def test_many_documents_outside_the_common_count_take_the_reduced_form():
    # most documents carry two or more labels: the Woodbury core would be as large as
    # the Gram, so the reduced form solves, exactly
    X, Y = _data(80, 300, seed=9, multi=0.5)
    w = Y.sum(axis=1)
    counts = np.bincount(w.astype(int))
    assert (w != np.argmax(counts)).sum() > direct_form.MAX_OTHER_FRACTION * w.size
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        fit = make_estimator("dmlda", n_components=4, route="dual").fit(X, Y)
    assert fit.solver_ == "dual-reduced"
    _check(fit, X, Y, 4)


def test_kappa_times_the_common_count_is_exact_despite_round_off():
    # q = 26, w_0 = 11: (q - w_0) / w_0 * w_0 misses q - w_0 by one unit of round-off;
    # the documents with 11 labels must still be outside P (the split form solves)
    rng = np.random.default_rng(5)
    n, q = 90, 26
    Y = np.zeros((n, q), dtype=np.uint8)
    for i in range(n):
        size = 11 if i < 70 else int(rng.integers(1, 14))
        Y[i, rng.choice(q, size=size, replace=False)] = 1
    kappa = direct_form.split_point(q - Y.sum(axis=1).astype(float), Y.sum(axis=1))
    assert (q - 11) - kappa * 11 != 0.0  # the round-off this guards against
    X, _ = _data(n, 400, seed=13)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        fit = make_estimator("dmlda", n_components=4, route="dual").fit(X, Y)
    assert fit.solver_ == "dual-operator"
    _check(fit, X, Y, 4)
