"""Exact solves in the n-dimensional row space of X (the dual route, n << D).

Every method of dmlfe has A = Xs^T (...) Xs (+ B of the same kind, + c I): its non-zero
eigenpairs lie in the row space of X, of dimension r = rank(X) <= n. With the Gram
G = X X^T (n x n, :func:`dmlfe.stats.gram.gram_matrix`) the D x D problem becomes an
n x n (or q x q) one, solved here on the driver; the components are P = X^T alpha for
coefficients alpha (n x d), mapped back by one pass
(:func:`dmlfe.stats.gram.transpose_product`). Same eigenvalues and same subspaces as
the feature route, at any D. Five forms:

1. **B = I, A = a Xs^T Xs + Xs^T Phi Phi^T Xs** (PCA, LSI, MVMD; Phi = Yc K with K the
   template's ``label_factor``): A = Xs^T C Xs with C = a I + Phi Phi^T, whose
   non-zero spectrum is that of the n x n matrix C^{1/2} Gs C^{1/2} (Gs = H G H, or G
   uncentred); for its eigenpair (lambda, u), alpha = C^{1/2} u / sqrt(lambda) gives
   unit-norm p = Xs^T alpha.
2. **A = F F^T, F = Xc^T Phi, B = b Xc^T Xc + c I** (CCA, OPLS, MDDMf: the template's
   ``constraint``): by Woodbury, B^{-1} F = Xc^T Psi with
   Psi = (Gc + (c/b) I)^{-1} Phi / b, so the q non-zero eigenvalues are those of the
   q x q matrix Phi^T Gc Psi, and alpha = Psi u / sqrt(lambda) (the q x q reduction
   p = B^{-1} F u / sqrt(lambda)); one Cholesky of an n x n matrix. A fixed d above
   the g non-zero eigenvalues is completed with d - g B-orthonormal vectors of the
   null space of A in the row space (eigenvalue 0, from a seeded random block: the
   dense route returns LAPACK's choice of that null space, equally arbitrary; both warn),
   one n x n x d product more -- not form 3, which would solve an n x n generalised
   problem completely (far slower and larger; ``benchmarks/scale.py``).
3. **A = a Xc^T Xc, B = Xc^T M^{-1} Xc + c I, M = a' Gc + b Yc Yc^T + g I** (MLSI: the
   template's ``inverse_constraint``), c > 0, for a fixed d: by Woodbury,
   B^{-1} Xc^T = Xc^T T^{-1} M with T = Gc + c M, so the non-zero eigenvalues are those
   of the symmetric n x n matrix N = a Gc T^{-1} M (that of Xc B^{-1} Xc^T), whose
   leading pairs block Krylov finds from products -- one Cholesky factor of T, no
   n x n product; for N u = lambda u, alpha = T^{-1} M u / sqrt(lambda / a) gives
   p = Xc^T alpha with p^T B p = 1. Pairs that do not converge within the operator
   budget, and thresholds (which need tr(N)), go to form 4.
4. **Anything else** (MLSI, MLDA and DMLDA where forms 2, 3 and 5 do not apply, e.g.
   thresholds): the pivoted Cholesky factor
   G[piv, piv] = Z Z^T gives reduced data Z (n x r, row i for document piv[i]) with
   X[piv] = Z U^T for an orthonormal D x r basis U of the row space, so every
   statistic of X is U (statistic of Z) U^T: the method is fitted on (Z, Y[piv])
   (r features) by the ordinary dense route and its r x d solution V maps back as
   P = U V = X^T alpha with alpha[piv[:r]] = Z_11^{-T} V.
5. **A = X^T M_a X, B = X^T (diag(w) - V V^T) X + c I** with M_a diagonal plus low rank
   (DMLDA: :class:`~dmlfe.methods.mlda.DirectPencil`; A has full rank, its q X^T X
   term), c > 0, for a fixed d: the pencil split at kappa = q / w_0 - 1 (w_0 the most
   common label count), where its eigenvalues crowd, and two thick-restart block
   Lanczos runs in the A-inner product on x = X p -- B^{-1} A (one Cholesky factor,
   :func:`~dmlfe.solvers.weighted.weighted_solver`, as form 2 for MLDA) for the pairs
   above kappa, (kappa B - A)^{-1} A (Woodbury on the documents outside w_0 and the
   label columns) for those below (:mod:`dmlfe.solvers.direct_form`). Every step is
   O(n^2), no n x n x n product is made beyond G's Cholesky factor, and a singular G
   costs nothing. Thresholds, and the cases that module lists, go to form 4.

Memory: G and one or two further n x n matrices on the driver (about 3 n^2 x 8 bytes);
none for form 1 started warm after an append (:func:`_identity_warm`), which applies the
cached Gram's strips, or X, as products (:class:`dmlfe.stats.gram.GramStrips`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import scipy.linalg as sla
from scipy.linalg.blas import dgemm

from dmlfe.compute import (
    blas_threads,
    idle_cpus,
    numpy_blas_threads,
    one_blas_thread,
    symmetric_matmul,
)
from dmlfe.methods.mlda import DirectPencil, WeightedPencil
from dmlfe.methods.template import TraceTemplate
from dmlfe.solvers.dense import REG_EPS, budgeted_krylov, solve_dense
from dmlfe.solvers.dimension import (
    choose_dimension,
    n_genuine,
    threshold_cap,
    warn_null_components,
)
from dmlfe.solvers.direct_form import direct_pairs
from dmlfe.solvers.leading import (
    KRYLOV_OVERSAMPLING,
    WARM_RANDOM,
    krylov_pays,
    leading_pairs,
    orthonormalize,
    small_pencil,
    wants_full_spectrum,
    warm_operator_pairs,
)
from dmlfe.solvers.weighted import weighted_solver
from dmlfe.stats.gram import GramStrips
from dmlfe.stats.sufficient import SufficientStats, held

#: Appended rows whose coordinate vectors join a warm start's first Rayleigh-Ritz step
#: (:func:`_identity_warm`); above this many the start alone begins the solve.
WARM_NEW_ROWS = 128


@dataclass
class DualSolution:
    """Coefficients of the components in the row space: P = X^T alpha.

    Attributes
    ----------
    alpha : ndarray (n, d)
    eigenvalues : ndarray
        The computed eigenvalues, descending (the non-zero part of the D-space spectrum).
    n_components, n_genuine : int
    solver : str
        "dual-identity", "dual-lowrank", "dual-inverse", "dual-operator" or
        "dual-reduced".
    regularization : float
    trace : float or None
        Sum of all eigenvalues when only the leading ones were computed.
    converged : bool
        False when the block Krylov solver stopped above its tolerance (a warning says so).
    ritz : ndarray (n, b) or None
        Form 1 on the block Krylov branch: the float64 Ritz block of its n x n matrix,
        the warm start (``start``) of a fit on the same documents and more.
    warm_start : bool
        Whether the solve started from ``start`` and converged from it.
    """

    alpha: np.ndarray
    eigenvalues: np.ndarray
    n_components: int
    n_genuine: int
    solver: str
    regularization: float = 0.0
    trace: float | None = None
    converged: bool = True
    ritz: np.ndarray | None = None
    warm_start: bool = False


def label_only(stats: SufficientStats) -> SufficientStats:
    """The statistics with zero features: what a builder needs for its label side.

    A builder run on these returns the template's n-space ingredients (``centred``,
    ``xx_coef``, ``label_factor``, ``constraint``), which do not depend on D.
    """
    q = stats.n_labels
    # held: reading stats.xtwx would first make compact statistics whole (D rows)
    return replace(stats, sum_x=np.zeros(0), xty=np.zeros((0, q)), xtx=np.zeros((0, 0)),
                   xtwx=None if held(stats, "xtwx") is None else np.zeros((0, 0)),
                   compact_rows=None)


def _lapack_view(G: np.ndarray) -> np.ndarray:
    """The symmetric G as LAPACK works in it without a copy: a C-ordered G's transpose
    (F-ordered; its lower triangle is G's upper one), an F-ordered G itself."""
    return G.T if G.flags.c_contiguous else G


#: Bytes of the rows :func:`centre_gram` updates at a time (they stay in cache for its
#: three updates, which then read and write G once instead of three times).
CENTRE_BLOCK_BYTES = 1 << 21


def centre_gram(G: np.ndarray) -> np.ndarray:
    """H G H in place (H = I - 11^T/n): the Gram of the centred rows, Xc Xc^T."""
    r = G.mean(axis=0)
    c = r.mean()
    step = max(1, CENTRE_BLOCK_BYTES // max(8 * G.shape[1], 1))
    for i in range(0, G.shape[0], step):
        rows = G[i:i + step]
        rows -= r[None, :]
        rows -= r[i:i + step, None]
        rows += c
    return G


def _identity(t: TraceTemplate, G: np.ndarray, Yc: np.ndarray, n_components: int | float,
              max_components: int | None, random_state: int,
              cap_note: str | None = None, start: np.ndarray | None = None) -> DualSolution:
    """Form 1: B = I, A = Xs^T (a I + Phi Phi^T) Xs; ``start`` as in :func:`solve_dual`."""
    a = float(t.xx_coef)
    M = G  # Gs, overwritten by C^{1/2} Gs C^{1/2}
    U, _, E = _label_root(t, Yc)
    if U is not None:
        # C^{1/2} Gs C^{1/2} = a Gs + s (MUE U^T + U MUE^T) + U inner U^T with s = sqrt(a),
        # MUE = Gs U E, inner = E U^T Gs U E: the update is L R^T with L = [s MUE, U] and
        # R = [U, s MUE + U inner], added by one GEMM into M's memory (beta = a) instead
        # of three n x n temporaries, each fresh memory
        MUE = (M @ U) * E
        inner = E[:, None] * (U.T @ MUE)
        s = np.sqrt(a)
        L = np.hstack([s * MUE, U])
        R = np.hstack([U, s * MUE + U @ inner])
        if not M.flags.c_contiguous:
            M = np.ascontiguousarray(M)
        # M^T is F-ordered, and (L R^T)^T = R L^T: a M + L R^T in place
        M = dgemm(1.0, R, L, beta=a, c=M.T, trans_b=True, overwrite_c=True).T
    else:
        M *= a
    m = M.shape[0]
    k = n_components if isinstance(n_components, int) else \
        threshold_cap(m, max_components)[0]
    if wants_full_spectrum(m, k, complete=False):
        k = min(max(k, m), m)  # the whole spectrum is computed anyway
    if k > m:
        raise ValueError(f"n_components={k} exceeds the n = {m} documents: the problem has "
                         f"at most {m} non-zero eigenvalues")
    total = float(np.trace(M))
    # the label directions lift up to rank(U) eigenvalues far above the rest; M's
    # leading part is about U E (U^T Gs U) E U^T, so span(U) is close to their space
    w, V, info = leading_pairs(M, n_components, k, total, random_state=random_state,
                               complete=False, dominant=0 if U is None else U.shape[1],
                               dominant_start=U, start=start)
    return _identity_solution(t, U, E, w, V, info, n_components, total, m, cap_note)


def _label_root(t: TraceTemplate, Yc: np.ndarray
                ) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """(U, s, E) of form 1's C = a I + Phi Phi^T: Phi = U diag(s) V^T (its non-zero part)
    and C^{1/2} = sqrt(a) I + U diag(E) U^T; (None, None, None) without a label part."""
    if t.lowrank is None or not t.lowrank.shape[1]:
        return None, None, None
    a = float(t.xx_coef)
    Uf, s, _ = np.linalg.svd(Yc @ t.label_factor, full_matrices=False)
    keep = s > 1e-12 * max(float(s.max(initial=0.0)), np.finfo(float).tiny)
    U, s = Uf[:, keep], s[keep]
    return U, s, np.sqrt(a + s * s) - np.sqrt(a)


def _identity_solution(t: TraceTemplate, U: np.ndarray | None, E: np.ndarray | None,
                       w: np.ndarray, V: np.ndarray, info: dict, n_components: int | float,
                       total: float, m: int, cap_note: str | None) -> DualSolution:
    """Form 1's coefficients alpha = C^{1/2} u / sqrt(lambda) from the pairs (w, V) of
    C^{1/2} Gs C^{1/2} (``total``: its trace, m: its size)."""
    a = float(t.xx_coef)
    d = choose_dimension(w, n_components, total=total if w.size < m else None,
                         cap_note=cap_note)
    warn_null_components(t.method, d, w)
    w_d = w[:d]
    alpha = np.sqrt(a) * V[:, :d]
    if U is not None:
        alpha += U @ (E[:, None] * (U.T @ V[:, :d]))
    scale = np.zeros(d)
    np.divide(1.0, np.sqrt(np.clip(w_d, 0.0, None)), out=scale, where=w_d > 0)
    alpha *= scale
    if t.centred:
        alpha -= alpha.mean(axis=0)
    return DualSolution(alpha, w, d, n_genuine(w), "dual-identity",
                        trace=total if w.size < m else None,
                        converged=bool(info.get("converged", True)), ritz=info.get("ritz"),
                        warm_start=bool(info.get("warm_start", False)))


def _lowrank(t: TraceTemplate, Gc: np.ndarray, Yc: np.ndarray, n_features: int,
             n_components: int | float, random_state: int) -> DualSolution:
    """Form 2: A = F F^T, B = b Xc^T Xc + c I, through the q x q reduction.

    A fixed d above the g genuine eigenpairs of the q x q problem is completed by
    :func:`_null_completion` (d - g components of eigenvalue 0), as the dense route
    completes it with eigenvectors of its null space.
    """
    b, c = t.constraint
    Phi = Yc @ t.label_factor
    reg = 0.0
    if c <= 0.0:
        # B = b Xc^T Xc is singular when D > n; the dense route adds REG_EPS tr(B)/D
        reg = REG_EPS * b * float(np.trace(Gc)) / n_features
        warnings.warn(
            f"the constraint matrix B of {t.method} is singular (rank <= n < D); added "
            f"{reg:.3e} * I to it ({REG_EPS:g} * trace/D) so that the generalised "
            "eigenproblem is well posed. Raise the method's regularisation parameter "
            "(e.g. gamma_x) to control this yourself.", RuntimeWarning, stacklevel=3)
        c = reg
    GcPhi = Gc @ Phi  # Phi^T Gc Psi = (Gc Phi)^T Psi: Gc may then be factorised in place
    d_fixed = n_components if isinstance(n_components, int) else 0
    # the products of the completion need Gc itself: made before it is factorised
    block = _null_candidates(Gc, GcPhi, b, c, d_fixed, random_state) \
        if d_fixed > np.linalg.matrix_rank(GcPhi) else None
    Gc[np.diag_indices_from(Gc)] += c / b
    # in place: a C-ordered Gc would first be copied (n^2 x 8 bytes of new pages)
    factor = sla.cho_factor(_lapack_view(Gc), lower=True, check_finite=False,
                            overwrite_a=True)
    Psi = sla.cho_solve(factor, Phi, check_finite=False) / b
    w, alpha = small_pencil(GcPhi.T @ Psi, Psi)  # the q x q problem Phi^T Gc Psi
    if block is not None and d_fixed > n_genuine(w):
        w, alpha = _null_completion(w, alpha, block, GcPhi, d_fixed)
    d = choose_dimension(w, n_components)
    warn_null_components(t.method, d, w)
    alpha = alpha[:, :d]
    alpha -= alpha.mean(axis=0)
    return DualSolution(alpha, w, d, n_genuine(w), "dual-lowrank", regularization=reg)


def _weighted_lowrank(pencil: WeightedPencil, G: np.ndarray, n_components: int | float,
                      random_state: int) -> DualSolution:
    """Form 2 for B = X^T Psi X + gamma I, Psi = diag(w) - V V^T, A = X^T Phi Phi^T X (MLDA;
    X not centred).

    B^{-1} X^T = X^T (Psi G + gamma I)^{-1}, so with Psi_ = (Psi G + gamma I)^{-1} Phi the
    non-zero eigenvalues are those of the q x q matrix Phi^T G Psi_ and alpha =
    Psi_ u / sqrt(lambda). Psi G + gamma I is not symmetric; it is solved through one
    Cholesky factor: the documents with w_i = 0 (no label: their rows of Psi are zero)
    have their rows of the solution at once, and on the others diag(w) G + gamma I =
    diag(w) (G + gamma diag(w)^{-1}) is symmetric positive definite up to the diagonal
    scale, the rank-q V V^T G part added by Woodbury. A fixed d above the genuine pairs
    is completed with B-orthonormal vectors of A's null space in the row space, as in
    :func:`_lowrank`.
    """
    phi, w, V, gamma = pencil.phi, pencil.w, pencil.V.copy(), pencil.gamma
    _positive_gamma(pencil.method, gamma)
    V[w <= 0] = 0.0  # Psi's rows (and columns) of the unlabelled documents are zero
    GPhi = G @ phi
    psi = weighted_solver(G, w, V, gamma)(phi)
    wv, alpha = small_pencil(GPhi.T @ psi, psi)
    d_fixed = n_components if isinstance(n_components, int) else 0
    if d_fixed > n_genuine(wv):
        def b_gram(beta: np.ndarray) -> np.ndarray:  # beta^T (G Psi G + gamma G) beta
            Gb = G @ beta
            return (w[:, None] * Gb).T @ Gb - (V.T @ Gb).T @ (V.T @ Gb) + gamma * (beta.T @ Gb)

        block = _null_block(GPhi, d_fixed, random_state, b_gram, centred=False)
        wv, alpha = _null_completion(wv, alpha, block, GPhi, d_fixed)
    d = choose_dimension(wv, n_components)
    warn_null_components(pencil.method, d, wv)
    return DualSolution(alpha[:, :d], wv, d, n_genuine(wv), "dual-lowrank")


def _positive_gamma(method: str, gamma: float) -> None:
    if gamma <= 0.0:
        raise ValueError(f"{method}: gamma_xy = 0 leaves B singular on the dual "
                         "route; use route='feature' or a positive gamma_xy")


def _direct_operator(pencil: DirectPencil, G: np.ndarray, n_features: int, k: int,
                     random_state: int) -> DualSolution | None:
    """Form 5 (:mod:`dmlfe.solvers.direct_form`); None when form 4 must solve. G is left
    as it was."""
    _positive_gamma(pencil.method, pencil.gamma)
    got = direct_pairs(pencil, G, n_features, k, random_state)
    if got is None:
        return None
    theta, alpha = got
    d = choose_dimension(theta, k)
    warn_null_components(pencil.method, d, theta)
    return DualSolution(alpha[:, :d], theta, d, n_genuine(theta), "dual-operator",
                        converged=True)


def _null_candidates(Gc: np.ndarray, W: np.ndarray, b: float, c: float, width: int,
                     random_state: int) -> tuple[np.ndarray, np.ndarray]:
    """(beta, M): ``width`` coefficient vectors with F^T p = 0 and their B-Gram.

    A seeded random block, centred, with the column space of W = Gc Phi projected out
    twice: p = Xc^T beta then has F^T p = Phi^T Gc beta = 0, so A p = 0, and p is
    B-orthogonal to every eigenvector of a non-zero eigenvalue (B p_i is in the span
    of F). M = beta^T Gc (b Gc + c I) beta = P^T B P.
    """
    def b_gram(beta: np.ndarray) -> np.ndarray:
        S = Gc @ beta
        return b * (S.T @ S) + c * (beta.T @ S)

    return _null_block(W, width, random_state, b_gram, centred=True)


def _null_block(W: np.ndarray, width: int, random_state: int,
                b_gram: Callable[[np.ndarray], np.ndarray], centred: bool
                ) -> tuple[np.ndarray, np.ndarray]:
    """A seeded random block (centred for a centred method) with W's column space
    projected out twice, and its B-Gram ``b_gram(beta)`` (see :func:`_null_candidates`)."""
    m = W.shape[0]
    most = m - 1 if centred else m
    if width > most:
        raise ValueError(f"n_components={width} exceeds the {'n - 1' if centred else 'n'} = "
                         f"{most} dimensions of the {'centred ' if centred else ''}documents' "
                         "row space, where the dual route solves")
    beta = np.random.default_rng(random_state).standard_normal((m, width))
    if centred:
        beta -= beta.mean(axis=0)
    Uw, sw, _ = np.linalg.svd(W, full_matrices=False)
    Qw = Uw[:, :int(np.count_nonzero(sw > m * np.finfo(float).eps * sw.max(initial=0.0)))]
    for _ in range(2):
        beta -= Qw @ (Qw.T @ beta)
    M = b_gram(beta)
    return beta, 0.5 * (M + M.T)


def _null_completion(w: np.ndarray, alpha: np.ndarray, block: tuple[np.ndarray, np.ndarray],
                     W: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """The g genuine pairs of the q x q problem and d - g B-orthonormal null vectors.

    The null vectors are the best-conditioned B-orthonormal combinations of the
    candidates (eigenvectors of their B-Gram M); their eigenvalues are the Rayleigh
    quotients p^T A p = ||Phi^T Gc beta||^2, zero up to round-off.
    """
    beta, M = block
    g = n_genuine(w)
    e = d - g
    mu, V = np.linalg.eigh(M)
    keep = np.flatnonzero(mu > 1e-10 * max(float(mu[-1]), np.finfo(float).tiny))[::-1][:e]
    if keep.size < e:
        raise ValueError(
            f"n_components={d}: beyond its {g} non-zero eigenvalues the problem has only "
            f"{g + keep.size} components in the documents' row space, where the dual route "
            "solves; ask for fewer components (or route='feature' where D allows)")
    null = beta @ (V[:, keep] / np.sqrt(mu[keep]))
    quotients = np.sum((W.T @ null) ** 2, axis=0)
    order = np.argsort(quotients, kind="stable")[::-1]
    w_null = quotients[order]
    if g:
        w_null = np.minimum(w_null, w[g - 1])
    return np.concatenate([w[:g], w_null]), np.hstack([alpha[:, :g], null[:, order]])


def reduced_data(G: np.ndarray, overwrite: bool = False
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Z, piv, L11): G[piv, piv] = Z Z^T by pivoted Cholesky; Z (n x r) is lower trapezoidal.

    Row i of Z belongs to document piv[i]: X[piv] = Z U^T for an orthonormal D x r
    basis U of the row space of X, r = rank(G) (LAPACK's default tolerance, n eps max
    diag). L11 = Z[:r] is triangular and non-singular. With ``overwrite`` the factor
    is computed in G's memory (Z is then a view of G).
    """
    # on G's F-ordered transpose: a C-ordered G would first be copied (n^2 x 8 bytes of
    # new pages, slower); Z is F-ordered
    L, piv, r, info = sla.lapack.dpstrf(_lapack_view(G), lower=1, overwrite_a=int(overwrite))
    if info < 0:
        raise ValueError(f"pivoted Cholesky of the Gram failed (LAPACK info {info})")
    for i in range(L.shape[0] - 1):  # LAPACK leaves the input in the strict upper part
        L[i, i + 1:] = 0.0
    Z = L[:, :r]
    return Z, np.asarray(piv) - 1, np.ascontiguousarray(Z[:r])  # LAPACK's pivots: 1-based


def _reduced(G: np.ndarray, build_reduced: Callable[[np.ndarray, np.ndarray], TraceTemplate],
             n_components: int | float, max_components: int | None, random_state: int,
             cap_note: str | None = None) -> DualSolution:
    """Form 4: the method on the reduced data Z by the dense route, mapped back."""
    Z, piv, L11 = reduced_data(G, overwrite=True)
    template = build_reduced(Z, piv)
    del Z
    res = solve_dense(template, n_components, max_components=max_components,
                      random_state=random_state, cap_note=cap_note)
    r = L11.shape[0]
    alpha = np.zeros((G.shape[0], res.n_components))
    alpha[piv[:r]] = sla.solve_triangular(L11, res.components, lower=True, trans="T",
                                          check_finite=False)
    return DualSolution(alpha, res.eigenvalues, res.n_components, res.n_genuine,
                        "dual-reduced", res.regularization, res.trace)


def solve_dual(label_side: TraceTemplate | None, G: np.ndarray | GramStrips, Y: np.ndarray,
               n_features: int, n_components: int | float, *,
               build_reduced: Callable[[np.ndarray, np.ndarray], TraceTemplate],
               max_components: int | None = None, cap_note: str | None = None,
               random_state: int = 0,
               weighted: WeightedPencil | DirectPencil | None = None,
               start: np.ndarray | None = None) -> DualSolution:
    """Solve a method's problem in the row space; see the module docstring.

    Parameters
    ----------
    label_side : TraceTemplate or None
        The method's template on :func:`label_only` statistics (its n-space parts);
        None: solve on the reduced data (form 3).
    G : ndarray (n, n) or GramStrips
        X X^T, uncentred; overwritten. As :class:`~dmlfe.stats.gram.GramStrips` (the
        cache's strips after an append) form 1 with a ``start`` is solved from its
        products (:func:`_identity_warm`), without an n x n array; the rest on
        its dense copy.
    Y : ndarray (n, q)
        The 0/1 labels of the same documents, in memory.
    n_features : int
        D (for the regularisation of a singular B, as the dense route does).
    n_components : int or float
    build_reduced : callable
        ``build_reduced(Z, order)`` -> the method's dense template on the reduced data Z,
        whose rows are the documents ``order`` (labels ``Y[order]``).
    max_components : int, optional
        Most eigenpairs computed for a threshold (None: as many as it needs); the
        caller's :func:`~dmlfe.solvers.dimension.threshold_cap`, whose note is
        ``cap_note``.
    random_state : int
        Seed of the block Krylov start.
    weighted : WeightedPencil or DirectPencil, optional
        The n-space factors of a method with a row-weighted B: MLDA's, form 2's
        reduction through one Cholesky factor (:func:`_weighted_lowrank`); DMLDA's,
        form 5 for a fixed d (:func:`_direct_operator`), else form 4.
    start : ndarray (n0, b), optional
        Form 1's warm start: :attr:`DualSolution.ritz` of a fit on the first n0 <= n of
        these documents, taken as zero on the rest
        (:func:`~dmlfe.solvers.leading.leading_eigh`'s ``start``); the other forms
        ignore it.
    """
    t = label_side
    if start is not None and not 0 < start.shape[0] <= G.shape[0]:
        start = None
    if isinstance(G, GramStrips):
        if t is not None and start is not None and _identity_form(t) and \
                _warm_pays(G.shape[0], n_components):
            sol = _identity_warm(t, G, _centred(Y), n_components, start, random_state,
                                 cap_note)
            if sol is not None:
                return sol
            start = None  # it did not converge from there: not tried again
        G = G.dense()
    if start is not None and start.shape[0] < G.shape[0]:
        start = np.vstack([start, np.zeros((G.shape[0] - start.shape[0], start.shape[1]))])
    if t is None and isinstance(weighted, DirectPencil):
        if isinstance(n_components, int):
            sol = _direct_operator(weighted, G, n_features, n_components, random_state)
            if sol is not None:
                return sol
        return _reduced(G, build_reduced, n_components, max_components, random_state,
                        cap_note)
    if t is None and weighted is not None:
        return _weighted_lowrank(weighted, G, n_components, random_state)
    if t is None:
        return _reduced(G, build_reduced, n_components, max_components, random_state,
                        cap_note)
    Yc = _centred(Y)
    if _identity_form(t):
        Gs = centre_gram(G) if t.centred else G
        return _identity(t, Gs, Yc, n_components, max_components, random_state, cap_note,
                         start)
    if t.operator_form and t.constraint is not None and t.xx_coef == 0 and \
            t.label_factor is not None and t.centred and t.constraint[0] > 0:
        return _lowrank(t, centre_gram(G), Yc, n_features, n_components, random_state)
    if t.inverse_constraint is not None and t.centred and t.operator_form and \
            t.lowrank is None and t.xx_coef > 0 and t.inverse_constraint[3] > 0 and \
            isinstance(n_components, int) and krylov_pays(G.shape[0], n_components):
        sol = _inverse_constraint(t, G, Yc, n_components, random_state)
        if sol is not None:
            return sol
    return _reduced(G, build_reduced, n_components, max_components, random_state, cap_note)


def _centred(Y: np.ndarray) -> np.ndarray:
    """The labels as float64, each column centred."""
    Yc = np.asarray(Y, dtype=np.float64)
    return Yc - Yc.mean(axis=0)


def _identity_form(t: TraceTemplate) -> bool:
    """Whether the template's problem is form 1 (module docstring)."""
    has_factor = t.lowrank is None or t.label_factor is not None
    return bool(t.operator_form and t.constraint is None and t.B is None and
                t.xx_coef > 0 and has_factor)


def _warm_pays(m: int, n_components: int | float) -> bool:
    """Whether :func:`_identity` would take block Krylov for these pairs of an m x m
    problem, where :func:`_identity_warm` replaces it (a fixed number of them)."""
    return isinstance(n_components, int) and 0 < n_components <= m and \
        krylov_pays(m, n_components) and not wants_full_spectrum(m, n_components, False)


def _identity_warm(t: TraceTemplate, G: GramStrips, Yc: np.ndarray, k: int,
                   start: np.ndarray, random_state: int, cap_note: str | None
                   ) -> DualSolution | None:
    """Form 1 from the Gram's strips and a warm ``start`` (n0 x c, the Ritz block of a
    fit on the first n0 documents): M = C^{1/2} H G H C^{1/2} is applied as products --
    C^{1/2} and H as their low-rank parts, G from the strips -- and never formed. None
    when the pairs do not converge from the start (:func:`warm_operator_pairs`).

    The first pass over G multiplies the start block and, in the same product, U and 1,
    which give M's trace and the images of the appended rows' coordinate vectors e_i
    (G e_i are columns of the appended rows' strip): Rayleigh-Ritz on the start and
    those vectors (up to :data:`WARM_NEW_ROWS` of them) fills in the rows the start
    lacks before the first Krylov step.
    """
    # the products with G alone take BLAS threads (none for X's sparse ones); the small
    # products around them are slower with several, the more so on a busy machine
    with one_blas_thread():
        return _identity_warm_pairs(t, G, Yc, k, start, random_state, cap_note)


def _identity_warm_pairs(t: TraceTemplate, G: GramStrips, Yc: np.ndarray, k: int,
                         start: np.ndarray, random_state: int, cap_note: str | None
                         ) -> DualSolution | None:
    """:func:`_identity_warm` in one BLAS thread but for G's products."""
    a = float(t.xx_coef)
    ra = np.sqrt(a)
    n = G.shape[0]
    old = int(start.shape[0])
    U, s, E = _label_root(t, Yc)

    def root(W: np.ndarray) -> np.ndarray:  # C^{1/2} W
        out = ra * W
        if U is not None:
            out += U @ (E[:, None] * (U.T @ W))
        return out

    def centre(W: np.ndarray) -> np.ndarray:  # H W
        return W - W.mean(axis=0) if t.centred else W

    threads = 1 if G.rows is not None else idle_cpus()

    def gram(W: np.ndarray) -> np.ndarray:
        with blas_threads(threads):
            return G @ W

    def matmat(W: np.ndarray) -> np.ndarray:  # M W: one product with G
        return root(centre(gram(centre(root(W)))))

    b = min(n, k + KRYLOV_OVERSAMPLING)
    c = min(b, k + WARM_RANDOM, start.shape[1])
    # as leading_eigh's warm start: some random columns, lest the start span an
    # invariant subspace; all zero on the appended rows, which the e_i cover
    V0 = np.zeros((n, b))
    V0[:old, :c] = start[:, :c]
    V0[:old, c:] = np.random.default_rng(random_state).standard_normal((old, b - c))
    V0 = orthonormalize(V0)
    r = 0 if U is None else U.shape[1]
    P = gram(np.hstack([centre(root(V0)), np.zeros((n, 0)) if U is None else U,
                        np.ones((n, int(t.centred)))]))
    GU = P[:, V0.shape[1]:V0.shape[1] + r]
    # tr(M) = tr(G H C H), C = a I + U diag(s^2) U^T, H U = U (Yc, hence U, is centred)
    total = a * float(G.diagonal().sum())
    if t.centred:
        G1 = P[:, -1]
        total -= a * float(G1.sum()) / n
    if U is not None:
        total += float(np.sum(s * s * np.einsum("ij,ij->j", U, GU)))
    Q, AQ = V0, root(centre(P[:, :V0.shape[1]]))
    added = n - old
    if 0 < added <= WARM_NEW_ROWS:
        # G H C^{1/2} [0; I] = ra G[:, old:] + G U C_U - G 1 (ra / n + mean(U) C_U), with
        # C^{1/2} [0; I] = ra [0; I] + U C_U and C_U = E U[old:]^T
        GZ = ra * G.columns_from(old)
        if U is not None:
            CU = E[:, None] * U[old:].T
            GZ += GU @ CU
        if t.centred:
            shift = np.full(added, ra / n)
            if U is not None:
                shift += U.mean(axis=0) @ CU
            GZ -= np.outer(G1, shift)
        Enew = np.zeros((n, added))
        Enew[old:] = np.eye(added)
        Q, AQ = np.hstack([Q, Enew]), np.hstack([AQ, root(centre(GZ))])
    first = P.shape[1]
    del P, GU
    if Q.shape[1] > b:  # Rayleigh-Ritz on span(Q): the b best vectors start the solve
        T = Q.T @ AQ
        _, Y = sla.eigh(0.5 * (T + T.T), subset_by_index=[T.shape[0] - b, T.shape[0] - 1],
                        check_finite=False)
        Y = Y[:, ::-1]
        Q, AQ = Q @ Y, AQ @ Y
    w, V, info = warm_operator_pairs(matmat, n, k, Q, AQ, threads=1)
    if not info["converged"] or w.size < k:
        return None
    info.update(products=info["products"] + first, warm_start=True, method="block-krylov")
    return _identity_solution(t, U, E, w, V, info, k, total, n, cap_note)


def _inverse_constraint(t: TraceTemplate, G: np.ndarray, Yc: np.ndarray, k: int,
                        random_state: int) -> DualSolution | None:
    """Form 3 (module docstring); None when the pairs do not converge within
    OPERATOR_BUDGET x n products. G (uncentred) is left as it was, for form 4."""
    a1, b, g, c = (float(v) for v in t.inverse_constraint)
    a = float(t.xx_coef)
    n = G.shape[0]

    def gc(V: np.ndarray) -> np.ndarray:  # H G H V, H = I - 11^T / n
        W = symmetric_matmul(G, V - V.mean(axis=0))
        return W - W.mean(axis=0)

    # T = (1 + c a1) Gc + c b Yc Yc^T + c g I, in one new n x n array (G is symmetric:
    # G^T is its F-ordered self, copied without a transposition)
    T = np.array(G.T, order="F")
    centre_gram(T)
    s = 1.0 + c * a1
    T *= s
    if b:
        dgemm(c * b, Yc, Yc, beta=1.0, c=T, trans_b=True, overwrite_c=True)
    T[np.diag_indices_from(T)] += c * g
    try:
        factor = sla.cho_factor(T, lower=True, check_finite=False, overwrite_a=True)
    except np.linalg.LinAlgError:
        return None
    del T

    def t_inv_m(V: np.ndarray) -> np.ndarray:
        # M = (a1 T + b Yc Yc^T + g I) / s: T^{-1} M V by one solve, no product with Gc
        rhs = (b / s) * (Yc @ (Yc.T @ V)) + (g / s) * V
        return (a1 / s) * V + sla.cho_solve(factor, rhs, check_finite=False)

    def apply(V: np.ndarray) -> np.ndarray:
        return a * gc(t_inv_m(V))

    with numpy_blas_threads(1):  # its small products beside scipy's solves
        pairs = budgeted_krylov(apply, n, k, random_state)
    if pairs is None or pairs[0][k - 1] <= 0.0:
        return None
    w, U = pairs
    d = choose_dimension(w, k)
    warn_null_components(t.method, d, w)
    alpha = t_inv_m(U[:, :d])
    alpha *= np.sqrt(a / w[:d])
    alpha -= alpha.mean(axis=0)
    return DualSolution(alpha, w, d, n_genuine(w), "dual-inverse")
