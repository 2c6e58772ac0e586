"""Graph methods on the relation route above the full-spectrum size, in memory.

There R^T A R is kept as an operator (:class:`dmlfe.graph.products.ProjectedOperator`)
and only its products are used; OLPP's leading pairs (the zero end of -R^T L R) come
from shift-and-invert. Each fit is checked against ``scipy.linalg.eigh`` of the dense
template formed by the products pass without the operator (the path the dense
references of test_graph.py check at small n), and its embeddings against that fit's.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
from test_threshold import captured_fit

import dmlfe.fit.graph as graph_fit
import dmlfe.solvers.dense as dense_solvers
import dmlfe.solvers.leading as leading
from dmlfe.graph.products import ProjectedOperator
from dmlfe.solvers.leading import FULL_SPECTRUM_LIMIT

N = FULL_SPECTRUM_LIMIT + 100
D = 2 * N  # X of full row rank: R = X X^T is, and OLPP's spectrum is not round-off
K = 5


@pytest.fixture(scope="module")
def docs():
    rng = np.random.default_rng(11)
    X = sp.random(N, D, density=0.012, random_state=11, format="csr")
    X.data = rng.random(X.nnz) + 0.1
    Y = (rng.random((N, 4)) < 0.3).astype(float)
    Y[Y.sum(axis=1) == 0, 0] = 1.0
    return X, Y


def test_projected_operator_is_the_dense_product():
    rng = np.random.default_rng(0)
    n, p = 40, 25
    R = rng.standard_normal((n, p))
    S = sp.random(n, n, density=0.2, random_state=1, format="csr")  # not symmetric
    U, V = rng.standard_normal((n, 2)), rng.standard_normal((n, 2))
    op = ProjectedOperator(R, S, [(-0.7, R.T @ U, R.T @ V)])
    M = R.T @ S.toarray() @ R - 0.7 * (R.T @ U) @ (R.T @ V).T
    ref = 0.5 * (M + M.T)
    Z = rng.standard_normal((p, 3))
    np.testing.assert_allclose(op @ Z, ref @ Z, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(op.toarray(), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(op), ref, rtol=1e-12, atol=1e-12)
    assert op.trace() == pytest.approx(np.trace(ref), rel=1e-12)


def _fit(name, X, Y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return captured_fit(name, X, Y, n_components=4, route="relation", n_neighbors=K,
                            **kw)


@pytest.mark.parametrize("name,solver", [("mope", "eigh-operator"),
                                         ("ssmope", None),  # by the sign of its trace
                                         ("olpp", "eigh-shift-invert"),
                                         ("lpp", None)])
def test_relation_route_operator_against_dense_template(docs, name, solver, monkeypatch):
    X, Y = docs
    # block Krylov pays above KRYLOV_MIN_SIZE only; here the operator's products are
    # checked at a size whose dense reference is quick
    # (and within a budget of products that grows with the size)
    monkeypatch.setattr(leading, "KRYLOV_MIN_SIZE", N // 2)
    monkeypatch.setattr(dense_solvers, "OPERATOR_BUDGET", 1.0)
    est, seen = _fit(name, X, Y)
    assert isinstance(seen[0][0].A, ProjectedOperator)
    if solver is not None:
        assert est.solver_ == solver
    # the same fit with R^T A R formed by the products pass
    monkeypatch.setattr(graph_fit, "FULL_SPECTRUM_LIMIT", 10 * N)
    dense, seen_d = _fit(name, X, Y)
    template = seen_d[0][0]
    assert isinstance(template.A, np.ndarray)
    B = template.B
    if B is not None and est.regularization_:
        B = B + est.regularization_ * np.eye(B.shape[0])
    w = sla.eigh(template.A, B, eigvals_only=True)[::-1]
    atol = 1e-10 * abs(w).max()  # OLPP's leading eigenvalues are its smallest in size
    np.testing.assert_allclose(est.eigenvalues_[:4], w[:4], rtol=1e-8, atol=atol)
    np.testing.assert_allclose(dense.eigenvalues_[:4], w[:4], rtol=1e-8, atol=atol)
    Z, Zd = est.transform(X[:50]), dense.transform(X[:50])
    # the vectors of both are Krylov pairs with relative residuals below KRYLOV_TOL
    np.testing.assert_allclose(Z, Zd, atol=1e-4 * abs(Zd).max())
