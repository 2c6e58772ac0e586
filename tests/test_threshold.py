"""The threshold rule on the real MULAN sets: d as the papers choose it.

mvmd eq. 15 / mddm eq. 9: d is the smallest number of leading eigenvalues whose sum
reaches t times the sum of all positive ones. For every registered method and every
MULAN training split, the estimator's d with ``n_components=0.999`` must equal the d
written out here on the whole spectrum of the same template (the A and B the fit
solved, captured from it) by ``scipy.linalg.eigh`` -- with no cap on the number of
components (the whole spectrum of these problems is cheap).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.linalg as sla
from helpers import mulan_arrays

import dmlfe.fit.run as run
from dmlfe import make_estimator
from dmlfe.methods.registry import all_methods

SETS = ["emotions", "scene", "yeast", "enron", "medical"]
T = 0.999
#: OLPP minimises: its objective has no positive eigenvalue and a threshold is refused.
MINIMISING = {"olpp"}


def reference_d(A: np.ndarray, B: np.ndarray | None, t: float) -> tuple[int, np.ndarray]:
    """eq. 15 on the whole spectrum of A p = lambda B p, round-off (<= 1e-10 x the
    largest) left out."""
    w = sla.eigh(A, B, eigvals_only=True)[::-1]
    pos = w[w > 1e-10 * w[0]]
    c = np.cumsum(pos)
    return int(np.searchsorted(c, t * c[-1], side="left") + 1), w


def captured_fit(name: str, X, Y, n_components: float | int = T, **kw):
    """(estimator, [the templates it solved and their statistics]); also used by
    benchmarks/scale.py's exactness check."""
    seen = []
    solve = run.solve

    def spy(plan, template, data, stats, **k):
        seen.append((template, stats))
        return solve(plan, template, data, stats, **k)

    run.solve = spy
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a regularised B says so
            est = make_estimator(name, n_components=n_components, **kw).fit(X, Y)
    finally:
        run.solve = solve
    return est, seen


@pytest.mark.parametrize("data", SETS)
def test_threshold_d_is_the_dense_reference_d(data):
    X, Y = mulan_arrays(data)
    for name in sorted(all_methods()):
        if name in MINIMISING:
            with pytest.raises(ValueError, match="no positive eigenvalue"):
                make_estimator(name, n_components=T).fit(X, Y)
            continue
        kernel = name.startswith("kmddm")
        kw = {} if kernel else {"route": "feature"}
        est, seen = captured_fit(name, X, Y, **kw)
        assert len(seen) == 1, name
        template, stats = seen[0]
        A = template.A if template.A is not None else template.operator_matrix(stats)
        B = template.B
        if B is not None and est.regularization_:
            B = B + est.regularization_ * np.eye(B.shape[0])
        d_ref, w = reference_d(A, B, T)
        assert est.n_components_ == d_ref, (data, name, est.solver_, est.n_components_, d_ref)
        k = min(d_ref, est.eigenvalues_.size)
        np.testing.assert_allclose(est.eigenvalues_[:k], w[:k], rtol=1e-6,
                                   atol=1e-9 * abs(w[0]), err_msg=f"{data} {name}")
        if not kernel:  # the default route (dual where n < D) chooses the same d
            auto = make_estimator(name, n_components=T)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                auto.fit(X, Y)
            if auto.route_ != "feature":
                assert auto.n_components_ == d_ref, (data, name, auto.route_,
                                                     auto.n_components_, d_ref)
