"""GRROOR: embedded multi-label feature selection by orthogonal regression with feature
weights, global feature redundancy and global label relevance (Xu et al.;
``shared/seeds/grroor-orthogonal-regression-feature-selection.txt``).

With X the n x D documents x features matrix (the paper's X transposed), Xc = H X the
centred data, Y the n x k labels coded +-1 (section 2.1), the objective is eq. 16 with
the bias eliminated (eq. 17):

    J(W, θ, V, B) = ||Xc Θ W - H V||_F² + α ||Y - V B||_F² + η tr(V^T L V)
                    + λ θ^T A θ + β tr(R B^T B)
    s.t. W^T W = I_c, θ^T 1 = 1, θ >= 0, Θ = diag(θ),

solved by the paper's alternating scheme (Algorithm 1): W by generalized power
iteration on the Stiefel manifold (eq. 18, Nie et al. 2017), θ by the simplex QP eq. 21
(an active-set search with Cholesky factorisations where the paper uses the augmented
Lagrangian eq. 23-28, kept as :func:`alm_simplex_qp`), V by the Sylvester equation eq. 30
(conjugate gradients on the sparse graph Laplacian) and B by eq. 32.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.feature_selection import SelectorMixin
from sklearn.neighbors import kneighbors_graph
from sklearn.utils import Tags

from dmlfe.compute import compute_one, is_dask, to_float_block, tree_reduce
from dmlfe.errors import InputError
from dmlfe.evaluation import as_features, check_labels, dense_block, from_store
from dmlfe.evaluation.metrics import squared_cosines
from dmlfe.labels import class_indicators
from dmlfe.params import Param, anything, interval, one_of, optional, validate
from dmlfe.stats.pass_ import compute_stats
from dmlfe.validation import checked_matrix

#: R's eigenvalues are raised to this fraction of its largest (see GRROOR's Notes).
_R_FLOOR = 1e-2
#: The polar factor goes through Z's Gram matrix above this eigenvalue ratio, else an SVD.
_POLAR_GRAM_FLOOR = 1e-4
#: Matrices up to this order get a dense eigenvalue routine instead of Lanczos.
_SMALL_EIG = 64
#: Default limits: the D x D and n x n float64 matrices held on the driver.
DEFAULT_MAX_FEATURES = 10_000
DEFAULT_MAX_SAMPLES = 10_000


_INT1 = interval(1, None, integer=True)
_NONNEG = interval(0, None)
#: GRROOR's parameters and their constraints (checked in ``fit``, before any pass).
PARAMS = (
    Param("n_features_to_select", 50, _INT1, "int"),
    Param("alpha", 1.0, interval(0, None, closed="neither"), "float"),
    Param("beta", 10.0, _NONNEG, "float"),
    Param("eta", 10.0, _NONNEG, "float"),
    Param("lam", 100.0, _NONNEG, "float"),
    Param("n_latent", None, optional(_INT1), "int or None"),
    Param("n_neighbors", 5, _INT1, "int"),
    Param("sigma2", 1.0, interval(0, None, closed="neither"), "float"),
    Param("max_iter", 50, _INT1, "int"),
    Param("tol", 1e-6, _NONNEG, "float"),
    Param("random_state", 0, interval(0, None, integer=True), "int"),
    Param("rank_unscored", "steepest", one_of("steepest", "gradient"),
          "'steepest' or 'gradient'"),
    Param("max_features", DEFAULT_MAX_FEATURES, _INT1, "int"),
    Param("max_samples", DEFAULT_MAX_SAMPLES, _INT1, "int"),
    Param("client", None, anything, "distributed.Client or None"),
)


# --------------------------------------------------------------------------- passes
def _xtv_block(xb: Any, vb: np.ndarray) -> np.ndarray:
    return np.asarray(to_float_block(xb).T @ vb, dtype=np.float64)


def _add(*parts: np.ndarray) -> np.ndarray:
    return np.sum(parts, axis=0)


def _xw_block(xb: Any, Z: np.ndarray) -> np.ndarray:
    return np.asarray(to_float_block(xb) @ Z, dtype=np.float64)


class _XProducts:
    """Products with the centred Xc = X - 1 mean^T, never forming Xc: in memory, or one
    distributed pass over the row blocks of a dask X each (counted in ``n_passes``)."""

    def __init__(self, X: Any, mean: np.ndarray, client: Any) -> None:
        self.X, self.mean, self.client = X, mean, client
        self.n_passes = 0
        self._blocks = X.to_delayed().ravel() if is_dask(X) else None
        if self._blocks is not None:
            self._bounds = np.concatenate([[0], np.cumsum(X.chunks[0])]).astype(int)

    def xt(self, V: np.ndarray) -> np.ndarray:
        """Xc^T V (D x c) for V (n x c)."""
        if self._blocks is None:
            out = np.asarray(self.X.T @ V, dtype=np.float64)
        else:
            self.n_passes += 1
            b = self._bounds
            parts = [dask.delayed(_xtv_block, pure=True)(xb, V[b[i]:b[i + 1]])
                     for i, xb in enumerate(self._blocks)]
            out = compute_one(tree_reduce(parts, _add), client=self.client)
        return out - np.outer(self.mean, V.sum(axis=0))

    def x(self, Z: np.ndarray) -> np.ndarray:
        """Xc Z (n x c) for Z (D x c)."""
        if self._blocks is None:
            out = np.asarray(self.X @ Z, dtype=np.float64)
        else:
            self.n_passes += 1
            zd = dask.delayed(Z, pure=True)
            parts = [dask.delayed(_xw_block, pure=True)(xb, zd) for xb in self._blocks]
            out = np.vstack(compute_one(dask.delayed(list)(parts), client=self.client))
        return out - (self.mean @ Z)[None, :]


# --------------------------------------------------------------------------- sub-solvers
def _inv_sqrt(G: np.ndarray) -> np.ndarray | None:
    """G^{-1/2} of the c x c Gram matrix G = Z^T Z, so that Z G^{-1/2} is Z's polar factor;
    None where G is so ill-conditioned that the Gram route would square the rounding."""
    s2, U = np.linalg.eigh(G)
    if not s2[0] > _POLAR_GRAM_FLOOR * s2[-1]:
        return None
    return (U / np.sqrt(s2)) @ U.T


def _polar(Z: np.ndarray) -> np.ndarray:
    """argmax_{W^T W = I} tr(W^T Z): Z (Z^T Z)^{-1/2}, the U V^T of Z's thin SVD.

    Through the c x c Gram matrix (O(D c²), where an SVD of the tall Z costs several times
    more); an ill-conditioned Z takes the SVD.
    """
    C = _inv_sqrt(Z.T @ Z)
    if C is None:
        Us, _, Vt = np.linalg.svd(Z, full_matrices=False)
        return Us @ Vt
    return Z @ C


def _top_eigenvalue(J: np.ndarray) -> float:
    """An estimate of λ_max of the symmetric PSD J from above (Lanczos, 1% margin); the
    exact eigenvalues for a small J."""
    m = J.shape[0]
    if m <= _SMALL_EIG:
        return float(np.linalg.eigvalsh(J)[-1]) if m else 0.0
    try:
        v0 = np.ones(m) / np.sqrt(m)  # deterministic start: the fit stays reproducible
        top = spla.eigsh(J, k=1, which="LA", tol=1e-4, v0=v0, return_eigenvectors=False)
    except spla.ArpackNoConvergence:
        return np.inf
    return float(top[0]) * 1.01


def gpi_stiefel(J: np.ndarray, M: np.ndarray, W: np.ndarray, max_iter: int = 200,
                tol: float = 1e-10) -> tuple[np.ndarray, int]:
    """min tr(W^T J W - 2 W^T M) s.t. W^T W = I (eq. 18) by generalized power iteration.

    With γ >= λ_max(J) (J PSD), Ã = γ I - J is PSD and the problem is max tr(W^T Ã W + 2 W^T M);
    each step W <- polar(2 Ã W + 2 M) does not decrease it (Nie, Zhang & Li 2017,
    Alg. 1). Stops on the relative change of the objective.

    The closer γ is to λ_max(J), the faster the iteration: γ is a Lanczos estimate of
    λ_max with a margin; a step that raises the objective (the estimate fell short) is
    undone and the iteration goes on with a certain bound (the trace or Gershgorin's).
    """
    # J = Θ S Θ and M = Θ X^T H V vanish off the support F of the sparse θ. Off F a step
    # only mixes the columns, W_O <- γ W_O C with C = (Z^T Z)^{-1/2}, and Z^T Z = Z_F^T Z_F
    # + γ² T^T (W_O^T W_O) T: the iteration runs on W_F (m x c) and the c x c product T
    # of the γ C, W_O T being formed at the end (or when T grows large)
    nz = (np.abs(J).sum(axis=1) > 0) | (np.abs(M).sum(axis=1) > 0)
    Jf, Mf = J[np.ix_(nz, nz)], M[nz]
    WF, WO, T = W[nz], W[~nz], np.eye(W.shape[1])
    GO = WO.T @ WO
    # the trace and the Gershgorin bound are λ_max bounds at O(D²) for the PSD J
    safe = min(float(np.trace(Jf)), float(np.abs(Jf).sum(axis=1).max(initial=0.0)))
    safe = max(safe, 0.0) * (1.0 + 1e-12) + 1e-300
    gamma = min(safe, _top_eigenvalue(Jf))
    JW = Jf @ WF
    f_old = float(np.sum(WF * JW) - 2.0 * np.sum(WF * Mf))
    it = 0
    while it < max_iter:
        it += 1
        ZF = gamma * WF - JW + Mf
        C = _inv_sqrt(ZF.T @ ZF + gamma**2 * (T.T @ GO @ T))
        if C is None:  # ill-conditioned: the full polar factor by an SVD
            Z = np.empty_like(W)
            Z[nz], Z[~nz] = ZF, gamma * (WO @ T)
            P = _polar(Z)
            WF_new, WO_new, T_new = P[nz], P[~nz], np.eye(T.shape[0])
            GO_new = WO_new.T @ WO_new
        else:
            WF_new, WO_new, T_new, GO_new = ZF @ C, WO, gamma * (T @ C), GO
        JW_new = Jf @ WF_new
        f = float(np.sum(WF_new * JW_new) - 2.0 * np.sum(WF_new * Mf))
        if f > f_old + 1e-12 * abs(f_old) and gamma < safe:
            gamma = safe  # the estimate was below λ_max: redo the step with the bound
            continue
        WF, WO, T, JW, GO = WF_new, WO_new, T_new, JW_new, GO_new
        if np.abs(T).max() > 1e6:  # T grows along W_O's null space (m > D - c): apply it
            WO, T = WO @ T, np.eye(T.shape[0])
            GO = WO.T @ WO
        if abs(f_old - f) <= tol * max(abs(f), 1e-300):
            break
        f_old = f
    W = np.empty_like(W)
    W[nz], W[~nz] = WF, WO @ T
    return W, it


def project_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection onto {θ >= 0, 1^T θ = 1} (sort-based)."""
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    ind = np.arange(1, v.size + 1)
    rho = np.nonzero(u - css / ind > 0)[0][-1]
    return np.maximum(v - css[rho] / (rho + 1.0), 0.0)


def _support_qp(Q: np.ndarray, s: np.ndarray, F: np.ndarray) -> tuple[np.ndarray, float] | None:
    """min θ_F^T Q_FF θ_F - s_F^T θ_F s.t. 1^T θ_F = 1 (signs free), by one Cholesky of
    2 Q_FF: θ_F = (2 Q_FF)^{-1} (s_F + ν 1), ν from 1^T θ_F = 1. None where Q_FF is singular."""
    try:
        cf = sla.cho_factor(2.0 * Q[np.ix_(F, F)], check_finite=False)
    except np.linalg.LinAlgError:
        return None
    ab = sla.cho_solve(cf, np.column_stack([s[F], np.ones(F.size)]), check_finite=False)
    den = float(ab[:, 1].sum())
    if not den > 0:
        return None
    nu = (1.0 - float(ab[:, 0].sum())) / den
    return ab[:, 0] + nu * ab[:, 1], nu


def active_set_qp(Q: np.ndarray, s: np.ndarray, support: np.ndarray,
                  max_iter: int = 50) -> np.ndarray | None:
    """The exact minimiser of θ^T Q θ - θ^T s on the simplex (eq. 21) by a primal-dual
    active-set search started at ``support`` (a boolean mask); None if it fails.

    On a support F the KKT system 2 Q_FF θ_F = s_F + ν 1, 1^T θ_F = 1 is solved (one
    Cholesky, :func:`_support_qp`); features with θ_F < 0 leave F and every feature off F
    whose gradient (2 Q θ - s)_j is below ν enters, until θ_F >= 0 and the gradient off F
    is at least ν (the KKT conditions). Started at the previous θ's support it usually
    ends in one or two solves. A repeated support (a cycle), a singular Q_FF or
    ``max_iter`` solves give None.
    """
    D = s.size
    inF = support.copy()
    seen: set[bytes] = set()
    for _ in range(max_iter):
        key = np.packbits(inF).tobytes()
        if not inF.any() or key in seen:
            return None
        seen.add(key)
        F = np.flatnonzero(inF)
        sol = _support_qp(Q, s, F)
        if sol is None:
            return None
        tF, nu = sol
        theta = np.zeros(D)
        theta[F] = tF
        grad = 2.0 * (Q[:, F] @ tF) - s
        scale = max(float(np.abs(grad).max()), abs(nu), 1e-300)
        neg = tF < -1e-12 * max(float(np.abs(tF).max()), 1e-300)
        enter = (grad - nu < -1e-10 * scale) & ~inF
        if not neg.any() and not enter.any():
            return np.maximum(theta, 0.0)
        inF[F[neg]] = False
        inF |= enter
    return None


def projected_gradient_qp(Q: np.ndarray, s: np.ndarray, theta0: np.ndarray,
                          max_iter: int = 500, tol: float = 1e-10) -> np.ndarray:
    """min θ^T Q θ - θ^T s on the simplex by accelerated projected gradient (FISTA with
    gradient restarts, O'Donoghue & Candès 2015) from ``theta0``: one Q-product a step.
    The fall-back of :func:`simplex_qp` where the active-set search fails."""
    lip = 2.0 * _top_eigenvalue(Q)
    if not np.isfinite(lip) or lip <= 0:
        lip = 2.0 * float(np.abs(Q).sum(axis=1).max())  # Gershgorin
    if lip <= 0:
        return theta0.copy()
    x = y = theta0.copy()
    t = 1.0
    for _ in range(max_iter):
        x_new = project_simplex(y - (2.0 * (Q @ y) - s) / lip)
        step = x_new - x
        if np.linalg.norm(step) <= tol * max(np.linalg.norm(x_new), 1e-300):
            return x_new
        if float((y - x_new) @ step) > 0:  # the momentum points uphill: restart it
            t, y = 1.0, x_new
        else:
            t_new = (1.0 + np.sqrt(1.0 + 4.0 * t * t)) / 2.0
            y = x_new + ((t - 1.0) / t_new) * step
            t = t_new
        x = x_new
    return x


def simplex_qp(Q: np.ndarray, s: np.ndarray, theta0: np.ndarray) -> np.ndarray:
    """The θ step (eq. 21): min θ^T Q θ - θ^T s s.t. θ >= 0, 1^T θ = 1.

    The paper's ALM (eq. 23-28, :func:`alm_simplex_qp`) needs an eigendecomposition of Q
    and hundreds of O(D²) iterations for every θ step; the active-set search
    (:func:`active_set_qp`) from the previous θ's support reaches the same KKT point with
    a Cholesky factorisation of Q on the support per active-set change, usually one.
    Where it fails, accelerated projected gradient finds a support to restart it from;
    if that fails too, the projected-gradient θ is returned.
    """
    theta = active_set_qp(Q, s, theta0 > 0)
    if theta is not None:
        return theta
    approx = projected_gradient_qp(Q, s, theta0)
    theta = active_set_qp(Q, s, approx > 0)
    return approx if theta is None else theta


def alm_simplex_qp(Q: np.ndarray, s: np.ndarray, theta0: np.ndarray, mu0: float,
                   rho: float = 1.1, max_iter: int = 1000, tol: float = 1e-12,
                   mu_max_factor: float = 1e4
                   ) -> tuple[np.ndarray, int]:
    """min θ^T Q θ - θ^T s on the simplex by the paper's augmented Lagrangian eq. 23-28
    (the reference for :func:`simplex_qp`, which ``fit`` uses).

    θ-step θ = E^{-1} f (eq. 25-26) with E = 2Q + μ I + μ 1 1^T: one eigendecomposition
    of Q serves every μ (the 1 1^T part by Sherman-Morrison); v-step eq. 28;
    multipliers δ1, δ2 and μ <- ρ μ as in Algorithm 1 (lines 11-13), μ capped. The result is
    projected onto the simplex (ALM is only feasible in the limit) and polished
    by :func:`active_set_qp` from its support.
    """
    d = Q.shape[0]
    lam, U = np.linalg.eigh(Q)
    one_u = U.T @ np.ones(d)
    theta, v = theta0.copy(), theta0.copy()
    delta1, delta2, mu = np.zeros(d), 0.0, mu0
    it = 0
    for _ in range(max_iter):
        it += 1
        f = mu * v + mu - delta2 - delta1 + s
        dinv = 1.0 / (2.0 * lam + mu)
        a = U @ (dinv * (U.T @ f))  # (2Q + μ I)^{-1} f
        b = U @ (dinv * one_u)  # (2Q + μ I)^{-1} 1
        theta = a - b * (mu * a.sum() / (1.0 + mu * b.sum()))
        v = np.maximum(theta + delta1 / mu, 0.0)
        delta1 = delta1 + mu * (theta - v)
        gap = float(theta.sum() - 1.0)
        delta2 = delta2 + mu * gap
        # μ stops growing at mu_max_factor μ0: beyond it E is so ill-conditioned that θ
        # only tracks v and the multipliers stop converging to the optimum
        mu = min(mu * rho, mu_max_factor * mu0)
        if np.linalg.norm(theta - v) <= tol and abs(gap) <= tol:
            break
    theta = project_simplex(theta)
    exact = active_set_qp(Q, s, theta > 1e-12 * theta.max(initial=0.0))
    return (theta if exact is None else exact), it


def sym_sylvester(K: tuple[np.ndarray, np.ndarray], N: np.ndarray, P: np.ndarray) -> np.ndarray:
    """Solve K V + V N = P for symmetric PSD K (given as eigh) and N (eq. 30, eq. 32).

    In the eigenbases V = U_K [(U_K^T P U_N) / (κ_i + ν_j)] U_N^T; where κ_i + ν_j = 0 the
    component is 0 (the minimum-norm minimiser: the right-hand side vanishes there).
    """
    kv, KU = K
    nv, NU = np.linalg.eigh(N)
    den = kv[:, None] + nv[None, :]
    cut = 1e-12 * max(float(np.abs(den).max(initial=0.0)), 1e-300)
    Pt = KU.T @ P @ NU
    Vt = np.divide(Pt, den, out=np.zeros_like(Pt), where=den > cut)
    return KU @ Vt @ NU.T


def shifted_cg(L: sp.spmatrix, eta: float, shifts: np.ndarray, P: np.ndarray, X0: np.ndarray,
               tol: float = 1e-10, max_iter: int = 1000) -> tuple[np.ndarray, int]:
    """Solve ((1 + ν_j) I + η L) x_j = p_j for every column j at once (the V step eq. 30 in
    the eigenbasis of α B B^T; ν = ``shifts``), by Jacobi-preconditioned conjugate
    gradients on the sparse Laplacian L, started at X0.

    Every system is symmetric positive definite; each CG iteration lowers its energy
    ½ x^T A x - p^T x, so a warm start from the previous V can only lower the objective,
    however early the iteration stops. Stops when every column's residual is at most
    ``tol`` times its right-hand side's norm.
    """
    diag = 1.0 + shifts
    dinv = 1.0 / (diag[None, :] + eta * L.diagonal()[:, None])

    def op(Z: np.ndarray) -> np.ndarray:
        return Z * diag[None, :] + eta * (L @ Z)

    X = X0.copy()
    R = P - op(X)
    Z = dinv * R
    D = Z.copy()
    rz = np.sum(R * Z, axis=0)
    goal = tol * np.maximum(np.linalg.norm(P, axis=0), 1e-300)
    it = 0
    while it < max_iter:
        live = np.linalg.norm(R, axis=0) > goal
        if not live.any():
            break
        it += 1
        AD = op(D)
        dad = np.sum(D * AD, axis=0)
        a = np.divide(rz, dad, out=np.zeros_like(rz), where=live & (dad > 0))
        X += a * D
        R -= a * AD
        Z = dinv * R
        rz_new = np.sum(R * Z, axis=0)
        b = np.divide(rz_new, rz, out=np.zeros_like(rz), where=live & (rz > 0))
        D = Z + b * D
        rz = rz_new
    return X, it


def heat_kernel_laplacian(X: Any, n_neighbors: int, sigma2: float) -> sp.csr_matrix:
    """L = G - S of eq. 9: S_ij = exp(-||x_i - x_j||² / σ²) when i is among j's p nearest
    neighbours or j among i's, else 0; G = diag(S 1). Sparse n x n (at most 2 p n
    off-diagonal entries), as the V step's conjugate gradients use it."""
    n = X.shape[0]
    p = min(int(n_neighbors), n - 1)
    if p < 1:
        return sp.csr_matrix((n, n))
    S = kneighbors_graph(X, p, mode="distance", include_self=False).tocsr()
    S.data = np.exp(-(S.data**2) / sigma2)
    S = S.maximum(S.T).tocsr()
    return (sp.diags(np.asarray(S.sum(axis=1)).ravel()) - S).tocsr()


@dataclass
class _Problem:
    """What a fit computes from the data before λ, η, β and c enter: the centred scatter
    S = X^T H X and the redundancy A (eq. 12-14, D x D), the sparse graph Laplacian L
    (eq. 9, for ``graph`` = (p, σ²)), the eigendecomposition of 1 1^T - Z (eq. 10), the
    ±1 labels and X's products. A parameter search builds it once for all its settings."""

    S: np.ndarray
    A: np.ndarray
    L: sp.csr_matrix
    R_eig: tuple[np.ndarray, np.ndarray]
    Ypm: np.ndarray
    prod: _XProducts
    n_passes: int
    graph: tuple[int, float]


def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.0f} MiB"


# --------------------------------------------------------------------------- estimator
class GRROOR(SelectorMixin, BaseEstimator):
    """Multi-label feature selection by GRROOR (eq. 16, Algorithm 1).

    Parameters
    ----------
    n_features_to_select : int, default 50
        Features kept by ``transform`` / ``get_support``: the largest scores θ.
    alpha : float, default 1.0
        α, weight of the latent-semantics fit ||Y - V B||² (the paper fixes α = 1).
    beta : float, default 10.0
        β, global label relevance tr(R B^T B) (eq. 10-11).
    eta : float, default 10.0
        η, local geometry tr(V^T L V) (eq. 8-9).
    lam : float, default 100.0
        λ, global feature redundancy θ^T A θ (eq. 15). Called ``lambda_`` in 0.1.0;
        renamed because scikit-learn takes a name ending in ``_`` for a fitted attribute.
        The defaults of λ, η, β and c are the setting that :func:`grroor_search` chose on
        yeast's training split (from the paper's grid) and that had the smallest ACR
        relative to the earlier defaults (λ = 10) over the validation splits of yeast,
        enron, medical, emotions and scene (``benchmarks/grroor_search.py --defaults``);
        for a given data set, :func:`grroor_search` does better.
    n_latent : int or None, default None
        c, the latent label dimension (columns of W and V); None: max(2, ceil(k / 2)), at most D.
    n_neighbors : int, default 5
        p of the heat-kernel graph (eq. 9; the paper's 5).
    sigma2 : float, default 1.0
        σ² of the heat kernel (eq. 9; the paper's 1).
    max_iter : int, default 50
        Outer iterations of Algorithm 1 at most; reaching it without meeting ``tol``
        warns (ConvergenceWarning) and leaves ``converged_`` False.
    tol : float, default 1e-6
        Stop when the relative change of the objective, ``|J_{t-1} - J_t| / |J_t|``, is at
        most ``tol`` (Algorithm 1's "until convergence").
    random_state : int, default 0
        Seed of the random initial W, V and B (Algorithm 1, line 1).
    rank_unscored : {"steepest", "gradient"}, default "steepest"
        The order of the features with θ = 0 after those with θ > 0 (the paper sorts by θ,
        section 4.5, and θ on the simplex is sparse: with small λ only a handful of
        features score). Both orders are reduced costs of the θ problem (eq. 21), the
        feature nearest to entering the support first -- what the paper's ALM (eq. 23-28),
        stopped short of the exact optimum, leaves in its small θ_j. "gradient": the θ
        problem's gradient 2 Q θ - s at the fitted W (the earlier order); but W's rows off θ's
        support do not enter the objective and stay at their random start, so this order
        is largely random. "steepest": the same slope with W_j the most favourable row a
        W with W^T W = I_c allows (||W_j|| <= 1), 2 λ (A θ)_j - 2 ||(X^T H (X Θ W - V))_j||:
        a feature's correlation with the latent residual, less its redundancy with the
        scoring features (``reduced_costs_``).
    max_features, max_samples : int, default 10,000 each
        Refuse (before reading the data) when D or n exceeds them; see Notes.
    client : distributed.Client, optional
        Run the passes over a dask X on this client.

    Attributes
    ----------
    scores_ : ndarray (D,)
        The feature scores θ (non-negative, summing to 1).
    ranking_ : ndarray (D,)
        Feature indices by decreasing score; θ is sparse, and features with θ = 0 follow
        by increasing ``reduced_costs_`` (see ``rank_unscored``), then by index.
    reduced_costs_ : ndarray (D,)
        The key that orders the features with θ = 0 (``rank_unscored``).
    objective_history_ : list of float
        The objective eq. 17 after initialisation and after every outer iteration;
        it does not increase.
    converged_ : bool
        Whether the fit stopped on ``tol`` (False: it ran out of ``max_iter``).
    W_, V_, B_ : ndarrays (D x c, n x c, c x k)
    n_iter_ : int
        Outer iterations run (``len(objective_history_) - 1``).
    n_passes_, n_features_in_ : int
    label_relevance_eigenvalues_ : ndarray (k,)
        Eigenvalues of R = 1 1^T - Z before clipping (see Notes): they sum to 0.

    Notes
    -----
    **What scales how.** The feature redundancy matrix A (eq. 12-14) and the θ
    subproblem's Q = (X^T H X) o (W W^T) + λ A (eq. 22) are dense D x D, and the W step
    needs J = Θ X^T H X Θ (D x D): about 5 · 8 D² bytes of driver memory. Per outer
    iteration the W step costs O(D² c) per power step on J's support (γ from a Lanczos
    estimate of λ_max(J), the polar factor from the c x c Gram matrix), and the θ step one
    Cholesky factorisation of Q on θ's support per active-set change (usually one; θ is
    sparse, so the support is small once the first steps have found it) instead of the
    paper's ALM with its eigendecomposition of Q and hundreds of O(D²) iterations. The
    graph Laplacian L (eq. 9) is sparse (at most 2 p n off-diagonal entries); the V step's
    Sylvester equation (eq. 30) splits, in the eigenbasis of α B B^T, into c sparse
    positive definite systems (1 + ν_j) I + η L, solved by conjugate gradients started at
    the previous V (O(p n c) per CG step, no n x n matrix). The data-only parts (X^T H X,
    A, L, R) are computed once per data set and shared by the settings of
    :func:`dmlfe.selection.grroor_search`. Above ``max_features`` / ``max_samples``
    ``fit`` raises with the memory figure instead of exhausting memory; GRROOR is for n
    and D in the thousands, not for the millions of the relation route.

    **Distributed passes.** For a dask X (row blocks) the centred scatter X^T H X comes
    from one distributed statistics pass (:func:`dmlfe.stats.pass_.compute_stats`), and
    every outer iteration makes two passes for X^T H V (D x c) and H X Θ W (n x c).
    The p-nearest-neighbour graph needs all rows at once: X is gathered to the driver
    once for it (n x D, sparse stays sparse). ``n_passes_`` counts the passes.

    **Deviations from the paper, and why.** R = 1 1^T - Z (eq. 10) has zero trace, so
    it is indefinite whenever it is not zero (the paper's "R is positive
    semi-definite" does not hold); with an indefinite R the B step eq. 32 can be a
    saddle and the objective unbounded below; even its PSD part leaves B free along
    R's null space, where V -> 0, B -> infinity lowers the objective without end (no
    minimiser, no convergence). R's eigenvalues are therefore raised to 1% of its
    largest: R keeps its eigenvectors and is positive definite, so every B step is a
    strictly convex problem; ``label_relevance_eigenvalues_`` shows what was changed.
    V is kept centred (1^T V = 0). The bias b of eq. 16 absorbs V's column means in the
    regression term, and H and L do not see them either, so they enter only
    α ||Y - V B||², where they act as an intercept: moving V's mean out along a fixed
    direction lets the matching rows of B shrink, which lowers β tr(R B^T B) for ever.
    The objective then has no minimiser, only an infimum approached as the mean of V
    grows without bound; the exact alternating steps of Algorithm 1 creep towards it
    and the relative change decays like a power of the iteration count (on yeast
    it was still 2.4e-4 after 40 iterations, with ``|mean V|`` growing from 0.06 to 3.9
    over 200) instead of reaching ``tol``. With 1^T V = 0 the other blocks' steps
    are the paper's, ||Y - V B||² differs from the fit of a centred Y (HY) only by the
    constant n ||mean(Y)||², and the V step eq. 30 is solved with its right-hand side
    centred (1 is the null vector of H + ηL, so the solution stays centred). The
    objective then converges linearly (yeast: relative change below 1e-6 after 18
    iterations; the paper reports convergence within 6 iterations on Image, under a
    criterion it does not state).
    Each θ step is the exact minimiser of eq. 21 (its KKT conditions hold); a candidate
    that would still raise the objective (rounding in a nearly singular Q) is not taken,
    and the V step's conjugate gradients start at the previous V, so that the history
    never increases.
    Z is the cosine similarity of the 0/1 label columns.

    Examples
    --------
    Selecting 3 of 12 features:

    >>> import numpy as np
    >>> import dmlfe
    >>> X = np.random.default_rng(0).random((60, 12))
    >>> Y = (X[:, :3] > 0.5).astype(int)  # three labels, determined by X
    >>> sel = dmlfe.GRROOR(n_features_to_select=3).fit(X, Y)
    >>> int(sel.get_support().sum()), sel.transform(X).shape
    (3, (60, 3))
    """

    def __init__(self, n_features_to_select: int = 50, alpha: float = 1.0, beta: float = 10.0,
                 eta: float = 10.0, lam: float = 100.0, n_latent: int | None = None,
                 n_neighbors: int = 5, sigma2: float = 1.0, max_iter: int = 50,
                 tol: float = 1e-6, random_state: int = 0, rank_unscored: str = "steepest",
                 max_features: int = DEFAULT_MAX_FEATURES,
                 max_samples: int = DEFAULT_MAX_SAMPLES, client: Any = None):
        self.n_features_to_select = n_features_to_select
        self.alpha = alpha
        self.beta = beta
        self.eta = eta
        self.lam = lam
        self.n_latent = n_latent
        self.n_neighbors = n_neighbors
        self.sigma2 = sigma2
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.rank_unscored = rank_unscored
        self.max_features = max_features
        self.max_samples = max_samples
        self.client = client

    # ------------------------------------------------------------------ checks
    def _inputs(self, X: Any, Y: Any) -> tuple[Any, np.ndarray]:
        """X as float64 (CSR stays CSR, a dask array keeps its row blocks) and Y as a 0/1
        documents x labels float matrix; records ``n_features_in_``."""
        if isinstance(X, (str, os.PathLike)) or hasattr(X, "fingerprint"):
            X, Y = from_store(X, Y, "GRROOR")
        if Y is None:
            raise ValueError("GRROOR requires y to be passed, but the target y is None: "
                             "fit(X, Y) needs the labels unless X is a store")
        if is_dask(X):
            X = as_features(X)
            self.n_features_in_ = X.shape[1]
            if hasattr(self, "feature_names_in_"):  # a data frame's, from an earlier fit
                del self.feature_names_in_
        else:  # scikit-learn's refusals (NaN, inf, no rows...) and n_features_in_
            X = as_features(checked_matrix(self, X, reset=True))
        n, D = X.shape
        if D > self.max_features:
            raise ValueError(
                f"GRROOR: X has D = {D:,} features; the D x D matrices (redundancy A, Q, J, "
                f"eq. 12-22) need about {_mib(5 * 8.0 * D * D)} of driver memory, above "
                f"max_features = {self.max_features:,}; select a candidate subset first "
                "(e.g. by a per-label filter score) or raise max_features")
        if n > self.max_samples:
            raise ValueError(
                f"GRROOR: X has n = {n:,} documents; the n x n graph Laplacian and the "
                f"Sylvester solve (eq. 9, 30) need about {_mib(3 * 8.0 * n * n)} of driver "
                f"memory, above max_samples = {self.max_samples:,}; subsample the documents "
                "or raise max_samples")
        if isinstance(Y, da.Array):
            Y = Y.compute()
        Y = dense_block(Y)
        if Y.ndim == 1:
            # class labels, one 0/1 column per class (two for a binary target, as
            # scikit-learn's chi2 does): a single column has no label relevance R (eq. 10)
            if Y.shape[0] != n:
                raise ValueError(f"GRROOR: y has {Y.shape[0]} entries but X has {n} rows; "
                                 "they must match")
            Y = class_indicators(Y, "GRROOR", every_class=True)[0]
        if Y.ndim != 2 or Y.shape[0] != n:
            raise ValueError(f"GRROOR: Y has shape {Y.shape} but X has {n} rows; Y must be "
                             "n x k 0/1 (or 1-D class labels)")
        return X, check_labels(Y).astype(np.float64)

    # ------------------------------------------------------------------ objective
    def _objective(self, S: np.ndarray, XtV: np.ndarray, W: np.ndarray, theta: np.ndarray,
                   V: np.ndarray, B: np.ndarray, Ypm: np.ndarray, L: sp.spmatrix,
                   A: np.ndarray, R: np.ndarray) -> float:
        """Eq. 17 at a centred V (H V = V)."""
        TW = theta[:, None] * W
        fit = float(np.sum(TW * (S @ TW)) - 2.0 * np.sum(TW * XtV) + np.sum(V * V))
        return (fit + self.alpha * float(np.sum((Ypm - V @ B) ** 2))
                + self.eta * float(np.sum(V * (L @ V)))
                + self.lam * float(theta @ A @ theta)
                + self.beta * float(np.sum(R * (B.T @ B))))

    # ------------------------------------------------------------------ fit
    def fit(self, X: Any, Y: Any = None) -> GRROOR:
        """Score the features by Algorithm 1.

        Parameters
        ----------
        X : ndarray, scipy.sparse, dask array of row blocks, store path or store
            Documents x features (n x D). In memory it goes through scikit-learn's
            checks: finite, at least one row and column (else :class:`~dmlfe.errors.InputError`).
        Y : array-like or dask array, shape (n, k), entries 0/1, or 1-D class labels
            1-D class labels become a 0/1 column per class (two for a binary target: a
            single label column has no label relevance R, eq. 10). Optional when X
            is a store.

        Returns
        -------
        self
        """
        validate(self.get_params(), PARAMS, "GRROOR")
        X, Y01 = self._inputs(X, Y)
        return self._fit_problem(self._problem(X, Y01))

    def _problem(self, X: Any, Y01: np.ndarray) -> _Problem:
        """Everything the fit needs that λ, η, β and c do not change (see :class:`_Problem`)."""
        k = Y01.shape[1]
        # one pass: n, means and the centred scatter X^T H X (D x D)
        st = compute_stats(X, Y01, need_xtx=True, max_dense_features=self.max_features,
                           client=self.client)
        S = st.centred_xtx()
        S = (S + S.T) / 2.0
        n_passes = 1
        Xg = X
        if is_dask(X):  # the graph needs every row at once (eq. 9)
            blocks = compute_one(dask.delayed(list)(list(X.to_delayed().ravel())),
                                 client=self.client)
            Xg = sp.vstack(blocks, format="csr") if sp.issparse(blocks[0]) else np.vstack(blocks)
            n_passes += 1
        # label relevance (eq. 10): Z cosine of the label columns, R = 1 1^T - Z
        nrm = np.linalg.norm(Y01, axis=0)
        outer = np.outer(nrm, nrm)
        Z = np.divide(Y01.T @ Y01, outer, out=np.zeros((k, k)), where=outer > 0)
        np.fill_diagonal(Z, 1.0)
        return _Problem(S=S, A=squared_cosines(S),  # eq. 12-14 on the centred features
                        L=heat_kernel_laplacian(Xg, self.n_neighbors, float(self.sigma2)),
                        R_eig=np.linalg.eigh(1.0 - Z), Ypm=2.0 * Y01 - 1.0,
                        prod=_XProducts(X, st.mean_x, self.client), n_passes=n_passes,
                        graph=(int(self.n_neighbors), float(self.sigma2)))

    def _fit_problem(self, pb: _Problem) -> GRROOR:
        """Algorithm 1 on a prepared problem (shared between the settings of a search)."""
        S, A, L, Ypm, prod = pb.S, pb.A, pb.L, pb.Ypm, pb.prod
        n, k = Ypm.shape
        D = S.shape[0]
        self.n_features_in_ = D
        # the default c must fit W^T W = I_c on narrow data; an explicit one is refused
        c = self.n_latent if self.n_latent is not None else min(D, max(2, int(np.ceil(k / 2))))
        if c > D:
            raise ValueError(f"GRROOR: n_latent = {c} exceeds the number of features: X has "
                             f"{D} feature(s) (W^T W = I_c needs c <= D); choose a smaller "
                             "n_latent")
        if self.n_features_to_select > D:
            raise ValueError(f"GRROOR: n_features_to_select={self.n_features_to_select} but "
                             f"X has {D} feature(s); choose at most {D}")
        a, b_, eta, lam = float(self.alpha), float(self.beta), float(self.eta), \
            float(self.lam)
        rv, rU = pb.R_eig
        self.label_relevance_eigenvalues_ = rv
        # R's PSD part with its eigenvalues raised to a floor (see Notes)
        R = (rU * np.maximum(rv, _R_FLOOR * max(float(rv.max()), 1e-12))) @ rU.T
        passes0 = prod.n_passes

        rng = np.random.default_rng(self.random_state)
        theta = np.full(D, 1.0 / D)
        W = _polar(rng.standard_normal((D, c)))
        V = rng.standard_normal((n, c))
        V -= V.mean(axis=0)
        B = rng.standard_normal((c, k))
        XtV = prod.xt(V)
        hist = [self._objective(S, XtV, W, theta, V, B, Ypm, L, A, R)]
        self.theta_steps_rejected_ = 0
        it, converged = 0, False
        for _ in range(self.max_iter):
            it += 1
            # W step (eq. 18): J = Θ X^T H X Θ, M = Θ X^T H V
            W, _ = gpi_stiefel(theta[:, None] * S * theta[None, :], theta[:, None] * XtV, W)
            # θ step (eq. 21-22): Q = (X^T H X) o (W W^T) + λ A, s = 2 diag(X^T H V W^T)
            Q = S * (W @ W.T) + lam * A
            Q = (Q + Q.T) / 2.0
            s = 2.0 * np.sum(XtV * W, axis=1)
            cand = simplex_qp(Q, s, theta)
            if cand @ Q @ cand - cand @ s <= theta @ Q @ theta - theta @ s:
                theta = cand
            else:  # rounding in a nearly singular Q: keep the better θ (monotone history)
                self.theta_steps_rejected_ += 1
            V = self._v_step(L, eta, a, B, prod.x(theta[:, None] * W) + a * Ypm @ B.T, V)
            # B step (eq. 32): (α V^T V) B + B (β R) = α V^T Y
            B = sym_sylvester(np.linalg.eigh(a * (V.T @ V)), b_ * R, a * (V.T @ Ypm))
            XtV = prod.xt(V)
            hist.append(self._objective(S, XtV, W, theta, V, B, Ypm, L, A, R))
            if abs(hist[-2] - hist[-1]) <= self.tol * max(abs(hist[-1]), 1e-300):
                converged = True
                break
        if not converged:
            rel = abs(hist[-2] - hist[-1]) / max(abs(hist[-1]), 1e-300)
            warnings.warn(f"GRROOR: stopped at max_iter = {self.max_iter} with the objective's "
                          f"relative change {rel:.2e} above tol = {self.tol:g}; raise max_iter "
                          "(or tol) for a converged fit", ConvergenceWarning, stacklevel=3)
        self.converged_ = converged
        self.scores_ = theta
        # θ is sparse (the simplex): features at 0 are ordered by their reduced cost (see
        # ``rank_unscored``), the nearest to entering first
        if self.rank_unscored == "gradient":
            cost = 2.0 * Q @ theta - s if it else np.zeros(D)
        else:
            cost = self._steepest_entry(S, A, theta, W, XtV, lam)
        self.reduced_costs_ = cost
        self.ranking_ = np.lexsort((np.arange(D), cost, -theta))
        self.objective_history_ = hist
        self.W_, self.V_, self.B_ = W, V, B
        self.n_iter_ = it
        self.n_passes_ = pb.n_passes + prod.n_passes - passes0
        return self

    @staticmethod
    def _steepest_entry(S: np.ndarray, A: np.ndarray, theta: np.ndarray, W: np.ndarray,
                        XtV: np.ndarray, lam: float) -> np.ndarray:
        """The steepest slope of eq. 17 along each θ_j that a feasible W allows:
        2 λ (A θ)_j - 2 ||r_j||, r = X^T H (X Θ W - V) (D x c).

        ∂J/∂θ_j = 2 W_j^T r_j + 2 λ (A θ)_j (the θ problem's gradient 2 Q θ - s, eq. 21);
        a row of W (W^T W = I_c) has norm at most 1, and W_j = r_j / ||r_j|| attains the
        minimum. Off θ's support W_j does not enter the objective, so the fitted W_j there
        is its random start mixed by the W steps; this bound replaces it by the most
        favourable direction: features whose column best explains the latent residual
        V - H X Θ W, less their redundancy with the selected ones, come first.
        """
        F = np.flatnonzero(theta)
        r = S[:, F] @ (theta[F, None] * W[F]) - XtV
        return 2.0 * lam * (A[:, F] @ theta[F]) - 2.0 * np.linalg.norm(r, axis=1)

    @staticmethod
    def _v_step(L: sp.spmatrix, eta: float, a: float, B: np.ndarray, P: np.ndarray,
                V: np.ndarray) -> np.ndarray:
        """The V step (eq. 30), (H + ηL) V + V (α B B^T) = H X Θ W + α Y B^T, on the
        centred V (1^T V = 0, see Notes).

        On centred matrices H is the identity, so in the eigenbasis α B B^T = U diag(ν) U^T
        the equation splits into the sparse systems ((1 + ν_j) I + η L) v_j = p_j, solved
        by :func:`shifted_cg` from the previous V; the right-hand side's column means are
        removed, and 1 (L 1 = 0) then gets no component.
        """
        nu, NU = np.linalg.eigh(a * (B @ B.T))
        Vr, _ = shifted_cg(L, eta, np.maximum(nu, 0.0), (P - P.mean(axis=0)) @ NU, V @ NU)
        V = Vr @ NU.T
        return V - V.mean(axis=0)  # the preconditioner's rounding off 1^T V = 0

    # ------------------------------------------------------------------ selection
    def _get_support_mask(self) -> np.ndarray:
        mask = np.zeros(self.n_features_in_, dtype=bool)
        mask[self.ranking_[: self.n_features_to_select]] = True
        return mask

    def transform(self, X: Any) -> Any:
        """The selected columns of X (in column order); dask arrays stay lazy."""
        if is_dask(X):
            if X.shape[1] != self.n_features_in_:
                raise ValueError(f"X has {X.shape[1]} features but GRROOR was fitted on "
                                 f"{self.n_features_in_}")
            return X[:, np.flatnonzero(self.get_support())]
        try:  # SelectorMixin validates X (and keeps its dtype); name the estimator
            return super().transform(X)
        except ValueError as exc:
            raise InputError(f"GRROOR: {exc}") from exc

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # CSR documents x terms is the native input
        tags.target_tags.required = True
        tags.target_tags.multi_output = True  # Y is documents x labels
        return tags
