"""A warm start of the dense leading-eigenpair solver (issue 34: a refit after an append
starts from the eigenvectors of the problem before it).

Reference: scipy.linalg.eigh of the same matrix.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla

from dmlfe.solvers.leading import leading_eigh


def _problem(m: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((m, m)))
    w = 1.0 / np.arange(1, m + 1) ** 1.2
    return (Q * w) @ Q.T


def test_a_warm_start_near_the_answer_gives_the_pairs_of_a_cold_solve() -> None:
    m, k = 1200, 8
    A = _problem(m, 0)
    _, cold_V, _ = leading_eigh(A, k)
    # the same problem a little changed (an appended document), started from the old pairs
    rng = np.random.default_rng(1)
    u = rng.standard_normal(m) / np.sqrt(m)
    A2 = A + 1e-3 * np.outer(u, u)
    ref_w, ref_V = sla.eigh(A2, subset_by_index=[m - k, m - 1])
    ref_w, ref_V = ref_w[::-1], ref_V[:, ::-1]
    w, V, info = leading_eigh(A2, k, start=cold_V)
    assert info["method"] == "block-krylov-warm"
    np.testing.assert_allclose(w, ref_w, rtol=1e-9)
    np.testing.assert_allclose(np.abs(np.sum(V * ref_V, axis=0)), 1.0, atol=1e-8)
    # one restart checks the start's own Ritz pairs, a second one at most refines them
    assert info["restarts"] <= 2


def test_a_useless_start_falls_back_to_the_cold_solve() -> None:
    m, k = 1200, 8
    A = _problem(m, 2)
    ref_w = sla.eigh(A, subset_by_index=[m - k, m - 1], eigvals_only=True)[::-1]
    # vectors orthogonal to the leading ones: no help at all
    _, V = sla.eigh(A, subset_by_index=[0, k - 1])
    w, _, info = leading_eigh(A, k, start=V)
    np.testing.assert_allclose(w, ref_w, rtol=1e-9)
    assert info["method"] != "block-krylov-warm" or info["converged"]
