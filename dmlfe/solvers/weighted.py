"""(Psi G + gamma I)^{-1} for a row-weighted scatter Psi = diag(w) - V V^T of the n-space
(MLDA's and DMLDA's S_w(Y), mvmd eq. 41-42): what the dual route's forms 2 and 5
(:mod:`dmlfe.solvers.dual`) solve with, through one Cholesky factor of an n x n matrix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.linalg as sla

from dmlfe.compute import symmetric_matmul


def weighted_solver(G: np.ndarray, w: np.ndarray, V: np.ndarray, gamma: float
                    ) -> Callable[..., Any]:
    """``solve(R)`` = (Psi G + gamma I)^{-1} R for Psi = diag(w) - V V^T (w >= 0, gamma > 0),
    through one Cholesky factor; ``solve(R, image=True)`` = (that, G times it).

    The documents with w_i = 0 (no label: their rows of Psi are zero) have their rows of
    the solution at once, and on the others diag(w) G + gamma I = diag(w) S with
    S = G + gamma diag(w)^{-1} symmetric positive definite, the rank-q V V^T G part
    added by Woodbury. G S^{-1} = I - gamma diag(w)^{-1} S^{-1} gives the image on the
    labelled rows without a product with G. G is not changed.
    """
    lab = np.flatnonzero(w > 0)
    out = np.flatnonzero(w <= 0)
    wl = w[lab][:, None]
    V = np.asarray(V, dtype=np.float64).copy()
    V[out] = 0.0  # Psi's rows (and columns) of the unlabelled documents are zero
    Vl = V[lab]
    GV = symmetric_matmul(G, V)[lab]
    # every document labelled (the usual case): a plain copy, G^T being the F-ordered
    # G, instead of a gather
    S = np.array(G.T, order="F") if out.size == 0 else G[np.ix_(lab, lab)]
    S[np.diag_indices_from(S)] += gamma / wl[:, 0]
    factor = sla.cho_factor(S, lower=True, check_finite=False, overwrite_a=True)
    del S

    def k_inv(R: np.ndarray) -> np.ndarray:  # (diag(w) G + gamma I)^{-1} on the labelled
        return sla.cho_solve(factor, R / wl, check_finite=False)

    # (K - V (G V)^T)^{-1} R = K^{-1} R + K^{-1} V (I - (G V)^T K^{-1} V)^{-1} (G V)^T K^{-1} R
    KV = k_inv(Vl)
    GKV = (Vl - gamma * KV) / wl  # G_LL K^{-1} V
    core = np.eye(V.shape[1]) - GV.T @ KV

    def solve(R: np.ndarray, image: bool = False) -> Any:
        sol = np.empty(R.shape)
        sol[out] = R[out] / gamma
        rhs = R[lab]
        t = None
        if out.size:
            t = G[np.ix_(lab, out)] @ sol[out]  # G_LU psi_U
            rhs = rhs - (wl * t - Vl @ (Vl.T @ t))
        KR = k_inv(rhs)
        c = np.linalg.solve(core, GV.T @ KR)
        sol[lab] = KR + KV @ c
        if not image:
            return sol
        Gs = np.empty(R.shape)
        Gs[lab] = (rhs - gamma * KR) / wl + GKV @ c
        if t is not None:
            Gs[lab] += t
            Gs[out] = G[out] @ sol
        return sol, Gs

    return solve
