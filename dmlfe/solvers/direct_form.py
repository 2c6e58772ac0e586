"""DMLDA on the dual route without an n x n x n product: the pencil split at kappa.

DMLDA (mvmd eq. 45-47, :class:`~dmlfe.methods.mlda.DirectPencil`) has, in the n-space
of the documents (G = X X^T, X not centred),

    A = X^T M_a X,  M_a = diag(a) + F C F^T,  a = q - w,
    B = X^T W_b X + gamma I,  W_b = diag(w) - V V^T = S_w(Y),

with w the documents' label counts and F, V a few label columns. A has full rank (its
q X^T X term), so the pencil's leading pairs are not in a small subspace as MLDA's are;
and its spectrum is clustered: every document with the most common label count w_0
adds a_i / w_0 = q / w_0 - 1 =: kappa to the ratio p^T A p / p^T B p, so all but a few
eigenvalues crowd just below kappa (R10: nine above 9, then 8.979, 8.958, 8.944, ...),
where a Krylov method on B^{-1} A converges slowly. The shift by kappa removes that
crowd from the n-space matrix:

    E = A - kappa B = X^T N X - kappa gamma I,
    N = M_a - kappa W_b = diag(a - kappa w) + F C F^T + kappa V V^T = P Omega P^T,

P = [e_S, F, V], S the documents whose label count is not w_0 (a - kappa w is zero on
the others). Two operators, both self-adjoint in <p, p'> = p^T A p' = x^T M_a x' for
x = X p (:class:`~dmlfe.solvers.pencil.PencilSpace` holds x and M_a x), share the
pencil's eigenvectors:

1. K1 = B^{-1} A: x -> G (W_b G + gamma I)^{-1} M_a x, one Cholesky factor
   (:func:`~dmlfe.solvers.weighted.weighted_solver`); its leading eigenvalues are the
   pencil's above kappa, which stand apart from the crowd below it;
2. K2 = (kappa B - A)^{-1} A: x -> G (kappa gamma I - N G)^{-1} M_a x, by Woodbury on
   P (an |P| x |P| LU); its eigenvalues rho = lambda / (kappa - lambda) map the crowd
   just below kappa onto the largest and best separated values.

How many eigenvalues lie above kappa is known beforehand: by Sylvester's law of inertia
it is the number of positive eigenvalues of E, i.e. of eigenvalues of
C_P^{1/2} Omega C_P^{1/2} (C_P = P^T G P) above kappa gamma. K1 gives those (started
from their directions X^T P u), K2 the rest of the d pairs. In x = X p no vector has a
part that the inner product cannot see, except in M_a's null space (a few label
directions, known in closed form and projected out): a singular Gram -- equal or
linearly dependent documents -- costs nothing. The coefficients are
alpha = (W_b G + gamma I)^{-1} M_a x / sqrt(lambda) for K1's pairs and
(kappa gamma I - N G)^{-1} M_a x sqrt(lambda) / rho for K2's, p = X^T alpha
B-orthonormal (p^T A p = x^T M_a x = 1).

Every step is O(n^2) (two triangular solves, or one product with G); no n x n x n
product is made beyond the Gram and the Cholesky factor. :func:`direct_pairs` returns
None where this does not apply (:func:`~dmlfe.solvers.dual.solve_dual` then takes the
reduced form): a threshold for d, no documents with a label count below q, more
documents outside the most common count than :data:`MAX_OTHER_FRACTION` of n, more
documents than features, d past the positive pairs, a Lanczos run that does not
converge (with a warning).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import scipy.linalg as sla

from dmlfe.compute import numpy_blas_threads, symmetric_matmul
from dmlfe.linalg.krylov import ThickRestartLanczos
from dmlfe.methods.mlda import DirectPencil
from dmlfe.solvers.pencil import Breakdown, PencilSpace
from dmlfe.solvers.weighted import weighted_solver

#: Residual (relative to each pair's own eigenvalue) at which the Lanczos pairs are
#: converged: the eigenvalues are then exact to about its square (relative to the gap),
#: and the components to about it, as on the other Krylov routes
#: (:data:`dmlfe.linalg.krylov.TOL`).
OPERATOR_TOL = 1e-6
#: Most block steps of each Lanczos run before the problem goes to the reduced form.
OPERATOR_PASSES = 300
#: Block width of K2's Lanczos (K1's is the number of its pairs plus :data:`SPARE`).
OPERATOR_BLOCK = 8
#: Largest change of an eigenvalue (relative to the largest) by the final projection of
#: both runs' pairs together: beyond it something is wrong, and the reduced form solves.
RR_AGREE = 1e-6
#: Columns K1's block has beyond its pairs.
SPARE = 3
#: Documents outside the most common label count (rows of P's e_S part) above this
#: fraction of n make the Woodbury core as costly as an n x n factorisation: the reduced
#: form solves instead.
MAX_OTHER_FRACTION = 0.5
#: A singular value at most this fraction of the largest is zero (null spaces of M_a's
#: small system and of C_P).
NULL_RTOL = 1e-10


def middle_null_space(a: np.ndarray, F: np.ndarray, C: np.ndarray) -> np.ndarray:
    """An orthonormal basis of the null space of M_a = diag(a) + F C F^T (a >= 0).

    M_a z = 0 with t = C F^T z reads a_i z_i = -(F t)_i: z = -diag(a)^+ F t + E_Z y on
    the documents Z with a_i = 0 (all q labels), where (F t)_Z = 0, and t = C F^T z.
    So the null space is that of a small system in (t, y):
    [[I + C F^T diag(a)^+ F, -C F_Z^T], [F_Z, 0]].
    """
    Z = np.flatnonzero(a <= 0)
    inv = np.zeros_like(a, dtype=np.float64)
    np.divide(1.0, a, out=inv, where=a > 0)
    s = C.shape[0]
    Fz = F[Z]
    system = np.block([[np.eye(s) + C @ (F.T @ (inv[:, None] * F)), -C @ Fz.T],
                       [Fz, np.zeros((Z.size, Z.size))]])
    _, sv, vt = np.linalg.svd(system)
    scale = max(1.0, float(sv.max(initial=0.0)))
    ty = vt[sv <= NULL_RTOL * scale].T
    z = -inv[:, None] * (F @ ty[:s])
    z[Z] += ty[s:]
    return np.linalg.qr(z)[0] if z.shape[1] else z


def split_point(a: np.ndarray, w: np.ndarray) -> float:
    """kappa = a_i / w_0 = q / w_0 - 1 for w_0 the most common label count of the
    labelled documents (the smallest of equally common ones); 0 when no document is
    labelled."""
    counts = w[w > 0]
    if counts.size == 0:
        return 0.0
    values, times = np.unique(counts, return_counts=True)
    w0 = values[np.argmax(times)]
    return float(a[np.flatnonzero(w == w0)[0]]) / float(w0)


def _lanczos(space: PencilSpace, k: int, block: int, seed: int, what: str, method: str
             ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]] | None:
    """(eigenvalues, (x, M_a x)) of the k leading pairs of the space's operator, or None
    (with a warning) when the run breaks down or does not converge."""
    solver = ThickRestartLanczos(space, block=block, tol=OPERATOR_TOL,
                                 max_passes=OPERATOR_PASSES, seed=seed)
    try:
        res = solver.solve(k)
    except Breakdown as exc:
        warnings.warn(f"{method}: the dual route's operator form stopped ({what}: {exc}); "
                      "solving the reduced n x n problem instead (slower)",
                      RuntimeWarning, stacklevel=5)
        return None
    if not res.converged or res.eigenvalues.size < k:
        rel = res.residuals / np.maximum(np.abs(res.eigenvalues), np.finfo(float).tiny)
        warnings.warn(
            f"{method}: the dual route's operator form did not converge in "
            f"{OPERATOR_PASSES} block steps ({what}; largest relative residual "
            f"{float(np.max(rel, initial=np.inf)):.1e}); solving the reduced n x n "
            "problem instead (slower)", RuntimeWarning, stacklevel=5)
        return None
    return res.eigenvalues[:k], space.vectors(res.coefficients[:, :k])


def direct_pairs(pencil: DirectPencil, G: np.ndarray, n_features: int, k: int,
                 random_state: int = 0) -> tuple[np.ndarray, np.ndarray] | None:
    """The k leading pairs of DMLDA's pencil: (eigenvalues descending, alpha n x k) with
    p = X^T alpha B-orthonormal; None where the module docstring says. G is not
    changed.

    numpy's own BLAS runs on one thread meanwhile: every step alternates its small
    products with scipy's triangular solves, which its spinning threads would slow.
    """
    with numpy_blas_threads(1):
        return _direct_pairs(pencil, G, n_features, k, random_state)


def _direct_pairs(pencil: DirectPencil, G: np.ndarray, n_features: int, k: int,
                  random_state: int) -> tuple[np.ndarray, np.ndarray] | None:
    n = G.shape[0]
    w, gamma = np.asarray(pencil.w, dtype=np.float64), float(pencil.gamma)
    a, F, C = pencil.a_diag, pencil.a_factor, pencil.a_core
    V = np.asarray(pencil.V, dtype=np.float64).copy()
    V[w <= 0] = 0.0  # S_w(Y)'s rows of the unlabelled documents are zero
    kappa = split_point(a, w)
    if not 1 <= k < n or n > n_features or kappa <= 0.0:
        return None
    # zero on the documents with w_0 labels; kappa = a_i / w_0 times w_0 may miss a_i by
    # round-off (q = 26, w_0 = 11), which must not move them all into P
    diag_n = a - kappa * w
    diag_n[np.abs(diag_n) <= NULL_RTOL * max(1.0, float(np.abs(a).max()))] = 0.0
    other = np.flatnonzero(diag_n)
    if other.size > MAX_OTHER_FRACTION * n:
        return None
    null = middle_null_space(a, F, C)
    shift = kappa * gamma

    def middle(x: np.ndarray) -> np.ndarray:
        return a[:, None] * x + F @ (C @ (F.T @ x))

    def pair(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if null.shape[1]:
            x = x - null @ (null.T @ x)
        return x, middle(x)

    # N = P Omega P^T with P = [e_S, F, V]; G P and C_P = P^T G P
    FV = np.hstack([F, V])
    GP = np.hstack([G[:, other], symmetric_matmul(G, FV)])
    CP = np.vstack([GP[other], FV.T @ GP])
    CP = 0.5 * (CP + CP.T)
    omega = sla.block_diag(np.diag(diag_n[other]), C, kappa * np.eye(V.shape[1]))
    s, U = np.linalg.eigh(CP)
    live = s > NULL_RTOL * max(float(s.max(initial=0.0)), np.finfo(float).tiny)
    half = (U[:, live] * np.sqrt(s[live])) @ U[:, live].T
    theta, Th = np.linalg.eigh(half @ omega @ half)
    above = theta > shift
    k1 = min(k, int(above.sum()))

    def p_times(t: np.ndarray) -> np.ndarray:
        out = FV @ t[other.size:]
        out[other] += t[:other.size]
        return out

    def draw_from(first: np.ndarray):
        def draw(width: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
            X0 = symmetric_matmul(G, np.random.default_rng(seed).standard_normal((n, width)))
            if seed == random_state:  # the first block: the known directions first
                j = min(width, first.shape[1])
                X0[:, :j] = first[:, :j]
            return pair(X0)
        return draw

    values, alphas = [], []
    if k1:
        solve = weighted_solver(G, w, V, gamma)
        inv_half = (U[:, live] / np.sqrt(s[live])) @ U[:, live].T
        start = GP @ (inv_half @ Th[:, above][:, ::-1])  # x = X X^T P u, E's positive part
        space = PencilSpace(lambda x, r: pair(solve(r, image=True)[1]), draw_from(start),
                            pair, n, n)
        got = _lanczos(space, k1, k1 + SPARE, random_state, "B^{-1} A", pencil.method)
        if got is None:
            return None
        lam, (_, r) = got
        if float(lam[-1]) <= kappa:
            return None
        values.append(lam)
        alphas.append(solve(r) / np.sqrt(lam))
    if k > k1:
        core = sla.lu_factor(shift * np.eye(CP.shape[0]) - CP @ omega, check_finite=False)

        def shifted_inv(R: np.ndarray) -> np.ndarray:  # (kappa gamma I - N G)^{-1} R
            return (R + p_times(omega @ sla.lu_solve(core, GP.T @ R,
                                                     check_finite=False))) / shift

        space = PencilSpace(lambda x, r: pair(symmetric_matmul(G, shifted_inv(r))),
                            draw_from(np.zeros((n, 0))),
                            pair, n, n)
        got = _lanczos(space, k - k1, OPERATOR_BLOCK, random_state,
                       "(kappa B - A)^{-1} A", pencil.method)
        if got is None:
            return None
        rho, (_, r) = got
        if float(rho[-1]) <= 0.0:
            return None  # past the positive pairs: the D - n zeros of the feature space
        lam = kappa * rho / (1.0 + rho)
        values.append(lam)
        alphas.append(shifted_inv(r) * (np.sqrt(lam) / rho))
    values = np.concatenate(values)
    theta, alpha = _rayleigh_ritz(np.hstack(alphas), G, middle, w, V, gamma)
    if np.max(np.abs(theta - values)) > RR_AGREE * abs(float(values[0])):
        warnings.warn(f"{pencil.method}: the dual route's operator form's pairs do not agree "
                      "with their projected pencil; solving the reduced n x n problem "
                      "instead (slower)", RuntimeWarning, stacklevel=4)
        return None
    return theta, alpha


def _rayleigh_ritz(alpha: np.ndarray, G: np.ndarray, middle: Callable[[np.ndarray], np.ndarray],
                   w: np.ndarray, V: np.ndarray, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """Both runs' pairs made B-orthonormal together, to round-off: the pencil projected
    on p = X^T alpha (one product with G) and solved densely. Each run's vectors are
    B-orthogonal only to its residual's level, and those of different runs only through
    their eigenvalues' distance."""
    Ga = symmetric_matmul(G, alpha)
    VG = V.T @ Ga
    b = (w[:, None] * Ga).T @ Ga - VG.T @ VG + gamma * (alpha.T @ Ga)
    a = Ga.T @ middle(Ga)
    theta, Z = sla.eigh(0.5 * (a + a.T), 0.5 * (b + b.T))
    order = np.argsort(theta)[::-1]
    return theta[order], alpha @ Z[:, order]
