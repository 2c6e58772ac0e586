"""Driver-side dense eigensolvers for the trace template (D small enough for D x D).

* ``eigh``: A P = P Lambda (B = I), scipy.linalg.eigh.
* ``eigh_generalized``: A P = B P Lambda, B symmetric positive definite, with a
  near-singular B regularised (and a warning saying by how much).
* ``thin_svd``: A = F F^T with B = I (MDDMp / PLS): the left singular vectors of
  the D x r matrix F, eigenvalues s^2; no D x D matrix is formed.

All paths return eigenvalues in descending order and components with a
deterministic sign (:func:`dmlfe.solvers.result.flip_signs`: the entry of largest
magnitude of each component is positive, as scikit-learn's ``svd_flip`` does), so
refits give identical models. :func:`solve_dense` returns the
:class:`~dmlfe.solvers.result.EigenResult` every solver returns.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import scipy.linalg as sla

from dmlfe.compute import one_blas_thread
from dmlfe.errors import InputError
from dmlfe.methods.template import TraceTemplate, symmetrize
from dmlfe.solvers.dimension import (
    DEFAULT_THRESHOLD,
    ROUNDOFF_RTOL,
    check_n_components,
    choose_dimension,
    n_genuine,
    threshold_cap,
    warn_null_components,
)
from dmlfe.solvers.leading import (
    FULL_SPECTRUM_LIMIT,
    KRYLOV_OVERSAMPLING,
    KRYLOV_TOL,
    block_krylov_eigh,
    cholesky_reduce,
    krylov_pays,
    leading_pairs,
    lowrank_generalized,
)
from dmlfe.solvers.result import EigenResult, expand_rows, flip_signs

#: B is "near-singular" when its smallest/largest eigenvalue ratio is below this.
COND_RTOL = 1e-10
#: Ridge added to a near-singular B, as a fraction of its mean eigenvalue trace(B)/D.
REG_EPS = 1e-8
#: B's extreme eigenvalues are computed (for the check, warning and ridge of
#: :func:`constraint_factor`) when LAPACK's estimate of B's reciprocal condition
#: number (:func:`reciprocal_condition`) is within this factor of ``cond_rtol``. The
#: estimate errs low -- the 1-norm condition number is at least the 2-norm one -- except
#: where LAPACK's estimate of ||B^{-1}||_1 falls short, which is rarely by more than a
#: factor of 3 (Higham, "Accuracy and Stability of Numerical Algorithms", section 15.3).
ESTIMATE_MARGIN = 1e2


def _descending(w: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(w, kind="stable")[::-1]
    return w[order], V[:, order]


def eigh(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All eigenpairs of a symmetric A, eigenvalues descending, signs fixed."""
    A = symmetrize(np.asarray(A, dtype=np.float64))
    w, V = sla.eigh(A, check_finite=True)
    w, V = _descending(w, V)
    return w, flip_signs(V)


def regularize_constraint(
    B: np.ndarray, what: str = "B", cond_rtol: float = COND_RTOL, eps: float = REG_EPS
) -> tuple[np.ndarray, float]:
    """Return (B + r I, r): r = 0 when B is well conditioned.

    B is near-singular when its smallest eigenvalue is below ``cond_rtol`` times
    its largest; then r = eps * trace(B) / D (plus -lambda_min if that is
    negative from round-off) is added and a warning says so. A B with a clearly
    negative eigenvalue is not a valid constraint and raises.
    """
    B = symmetrize(np.asarray(B, dtype=np.float64))
    ev = sla.eigvalsh(B)
    r = constraint_ridge(float(ev[0]), float(ev[-1]), float(np.trace(B)), B.shape[0], what,
                         cond_rtol, eps)
    if r == 0.0:
        return B, 0.0
    B = B.copy()
    B[np.diag_indices_from(B)] += r
    return B, r


def constraint_ridge(lo: float, hi: float, trace: float, D: int, what: str = "B",
                     cond_rtol: float = COND_RTOL, eps: float = REG_EPS,
                     stacklevel: int = 4) -> float:
    """The ridge r of :func:`regularize_constraint` from B's extreme eigenvalues ``lo``,
    ``hi`` and its trace: 0 for a well-conditioned B, else eps trace / D (+ -lo when
    lo < 0) with a warning; errors for a zero, negative or indefinite B."""
    if hi == 0.0:
        raise InputError(
            f"the constraint matrix {what} is zero: the training data have no variance in the "
            "features it is built from (e.g. every document's X row is zero); there is "
            "nothing to project")
    if hi < 0:
        raise ValueError(
            f"the constraint matrix {what} is not positive semi-definite (largest eigenvalue "
            f"{hi:.3e}); check the method's statistics and parameters"
        )
    if lo < -1e-8 * hi:
        raise ValueError(
            f"the constraint matrix {what} is indefinite (eigenvalues from {lo:.3e} to "
            f"{hi:.3e}); it must be positive semi-definite"
        )
    if lo >= cond_rtol * hi:
        return 0.0
    r = eps * trace / D + max(0.0, -lo)
    warnings.warn(
        f"the constraint matrix {what} is near-singular (smallest/largest eigenvalue = "
        f"{lo / hi:.3e} < {cond_rtol:g}); added {r:.3e} * I to it ({eps:g} * trace/D"
        f"{' + |smallest eigenvalue|' if lo < 0 else ''}) so that the generalised "
        "eigenproblem is well posed. Raise the method's regularisation parameter "
        "(e.g. gamma_x) to control this yourself.",
        RuntimeWarning,
        stacklevel=stacklevel,
    )
    return r


def reciprocal_condition(B: np.ndarray, L: np.ndarray) -> float:
    """LAPACK's estimate of 1 / (||B||_1 ||B^{-1}||_1) from B's lower Cholesky factor L.

    For the symmetric positive definite B this is at most lambda_min / lambda_max (the
    1-norms bound the extreme eigenvalues from above) up to the estimate of ||B^{-1}||_1
    (a lower bound, usually within a factor of 3). ``dpocon`` costs a few triangular
    solves with single vectors, an order of magnitude less than block power iteration
    on B and B^{-1} (two BLAS libraries, numpy's and scipy's, took turns there and each
    waited for the other's spinning threads; ``benchmarks/relation.py``).
    """
    # LAPACK's 1-norm of B read in place, with no |B| copy: a C-ordered B as its
    # F-ordered transpose, whose infinity norm is ||B||_1
    norm = sla.lapack.dlange("I", B.T) if B.flags.c_contiguous else sla.lapack.dlange("1", B)
    rcond, info = sla.lapack.dpocon(L, float(norm), uplo="L")
    if info != 0:
        raise np.linalg.LinAlgError(f"dpocon returned info={info}")
    return float(rcond)


def _exactly_symmetric(B: np.ndarray) -> bool:
    """Whether B == B^T bitwise, compared in tiles (no p x p temporary): the builders'
    constraints are (their products are mirrored), and then need no symmetrising copy."""
    m = B.shape[0]
    step = 256
    return all(np.array_equal(B[i:i + step, j:j + step], B[j:j + step, i:i + step].T)
               for i in range(0, m, step) for j in range(i, m, step))


def constraint_factor(
    B: np.ndarray, what: str = "B", cond_rtol: float = COND_RTOL, eps: float = REG_EPS
) -> tuple[np.ndarray, float, np.ndarray]:
    """:func:`regularize_constraint` for a large B, without B's whole spectrum.

    Returns (B + r I, r, L) with L the lower Cholesky factor of B + r I (the solvers
    need it anyway). When B's Cholesky factorisation succeeds and LAPACK's estimate of
    its reciprocal condition number (:func:`reciprocal_condition`) is above
    ``ESTIMATE_MARGIN * cond_rtol``, B is well conditioned and r = 0. Otherwise B's
    extreme eigenvalues decide, by the same rule (:func:`constraint_ridge`): the
    largest from block Krylov on products with B, the smallest from the largest of
    (B + s I)^{-1}, applied by triangular solves with a Cholesky factor the solve may
    keep (:func:`smallest_eigenvalue`): B's own (s = 0), else that of B + eps tr(B)/m I
    -- the ridge itself when B has no negative eigenvalue -- else of
    B + 1e-8 lambda_max I, the rule's limit of a round-off eigenvalue. Only a B with a
    clearly negative eigenvalue (the rule's error) has its whole spectrum computed.
    """
    B = np.asarray(B, dtype=np.float64)
    if not _exactly_symmetric(B):
        B = symmetrize(B)
    m = B.shape[0]
    L = _cholesky_or_none(B)
    if L is not None and reciprocal_condition(B, L) >= ESTIMATE_MARGIN * cond_rtol:
        return B, 0.0, L
    hi = largest_eigenvalue(lambda V: B @ V, m)
    trace = float(np.trace(B))
    shifts = [0.0] if L is not None else \
        [s for s in (eps * trace / m, 1e-8 * hi) if s > 0 and hi > 0]
    for shift in shifts:
        Ls = L if shift == 0.0 else _cholesky_or_none(_shifted(B, shift))
        if Ls is None:
            continue
        lo = smallest_eigenvalue(Ls, shift)
        r = constraint_ridge(lo, hi, trace, m, what, cond_rtol, eps)
        if shift <= r <= (1.0 + SHIFT_RTOL) * shift:
            # B + r I is the matrix just factorised, up to a round-off -lo far below the
            # estimate's own accuracy
            return (B if shift == 0.0 else _shifted(B, shift)), shift, Ls
        Breg = _shifted(B, r)
        return Breg, r, sla.cholesky(Breg, lower=True, check_finite=False)
    # no Cholesky factor even 1e-8 lambda_max above B (or B is zero): the exact check's
    # error, with its figures
    Breg, r = regularize_constraint(B, what, cond_rtol, eps)
    return Breg, r, sla.cholesky(Breg, lower=True, check_finite=False)


#: A ridge within this fraction above a shift already factorised is that shift.
SHIFT_RTOL = 1e-3


def _shifted(B: np.ndarray, shift: float) -> np.ndarray:
    S = B.copy()
    S[np.diag_indices_from(S)] += shift
    return S


def is_psd(C: np.ndarray, rtol: float = ROUNDOFF_RTOL) -> bool:
    """Whether the symmetric C has no eigenvalue below -``rtol`` ||C||_F, round-off aside.

    A Cholesky factorisation of C + rtol ||C||_F I succeeds exactly then (up to the
    factorisation's own round-off, far below that shift): a third of the flops of a
    tridiagonal reduction, and no spectrum. A threshold's denominator is the trace of a
    positive semi-definite C, and the sum of the positive eigenvalues otherwise.
    """
    shifted = _shifted(C, rtol * float(np.linalg.norm(C)))
    return _cholesky_or_none(shifted, overwrite=True) is not None


def _cholesky_or_none(B: np.ndarray, overwrite: bool = False) -> np.ndarray | None:
    """B's lower Cholesky factor, None when B is not (numerically) positive definite;
    ``overwrite``: B is scratch the factorisation may use."""
    try:
        L = sla.cholesky(B, lower=True, overwrite_a=overwrite, check_finite=False)
    except np.linalg.LinAlgError:
        return None
    return L if np.all(np.isfinite(np.diag(L))) else None


#: Block width, depth and most restarts of the Krylov spaces of
#: :func:`largest_eigenvalue`: an extreme Ritz value converges far sooner than its
#: vector (to a cluster of eigenvalues at once), and the decision it serves has
#: ESTIMATE_MARGIN's room; each product with an inverse reads its factor twice.
EXTREME_BLOCK, EXTREME_DEPTH, EXTREME_RESTARTS = 8, 6, 2


def largest_eigenvalue(matmat: Callable[[np.ndarray], np.ndarray], m: int) -> float:
    """The largest eigenvalue of a symmetric m x m operator, by a short block Krylov run."""
    w, _, _ = block_krylov_eigh(matmat, m, 1, block=min(EXTREME_BLOCK, m),
                                depth=EXTREME_DEPTH, max_restarts=EXTREME_RESTARTS, tol=1e-8)
    return float(w[0])


def smallest_eigenvalue(L: np.ndarray, shift: float = 0.0) -> float:
    """lambda_min(B) from the Cholesky factor L of B + ``shift`` I: 1 / theta - shift, theta
    the largest eigenvalue of (B + shift I)^{-1}."""
    factor = (L, True)
    theta = largest_eigenvalue(lambda V: sla.cho_solve(factor, V, check_finite=False),
                               L.shape[0])
    return 1.0 / theta - shift


def eigh_generalized(
    A: np.ndarray, B: np.ndarray, what: str = "B"
) -> tuple[np.ndarray, np.ndarray, float]:
    """All eigenpairs of A p = lambda B p (the generalised eigenvalues themselves).

    Returns eigenvalues descending, B-orthonormal eigenvectors with fixed signs,
    and the ridge added to B (see :func:`regularize_constraint`).
    """
    A = symmetrize(np.asarray(A, dtype=np.float64))
    Breg, r = regularize_constraint(B, what)
    w, V = sla.eigh(A, Breg, check_finite=True)
    w, V = _descending(w, V)
    return w, flip_signs(V), r


def thin_svd(F: np.ndarray, compact: bool = False, rows: np.ndarray | None = None,
             n_rows: int | None = None
             ) -> tuple[np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eigenpairs of F F^T from the thin SVD of F (D x r): U, s^2. Never forms D x D.

    A zero row of F (a feature no document uses: hashed text leaves most of 2^20 empty)
    is a zero row of U, exactly; the SVD is taken of the other rows when they are at most
    half of D (and at least r, so that r pairs come out either way). ``compact``: return
    (s^2, U on those rows, the rows) instead -- rows None when all D are kept -- so that
    no D x r array is made (:attr:`EigenResult.columns`). ``rows``: F holds only these
    rows (sorted) of an ``n_rows`` x r matrix whose other rows are zero
    (:meth:`~dmlfe.methods.template.TraceTemplate.lowrank_part`); the result is that of
    the whole matrix.
    """
    F = np.asarray(F, dtype=np.float64)
    D = F.shape[0] if rows is None else int(n_rows if n_rows is not None else F.shape[0])
    nonzero = np.any(F != 0, axis=1)
    used = np.flatnonzero(nonzero) if rows is None else rows[nonzero]
    # an SVD of a few columns is a chain of small BLAS calls: the driver's BLAS threads
    # only wait for each other there (more so on a busy machine)
    with one_blas_thread():
        if used.size > D // 2 or used.size < F.shape[1]:
            whole = F if rows is None or F.shape[0] == D else expand_rows(F, rows, D)
            U, s, _ = sla.svd(whole, full_matrices=False, check_finite=True)
            w, U = _descending(s * s, U)
            return (w, flip_signs(U), None) if compact else (w, flip_signs(U))
        Us, s, _ = sla.svd(F[nonzero], full_matrices=False, check_finite=True)
    # the order and the sign rule on the used rows alone: the zero rows neither hold a
    # column's largest entry nor move the first of equal ones
    w, Us = _descending(s * s, Us)
    Us = flip_signs(Us)
    return (w, Us, used) if compact else (w, expand_rows(Us, used, D))


def _leading(template: TraceTemplate, n_components: int | float, k: int, random_state: int
             ) -> tuple[np.ndarray, np.ndarray, float, str, float | None]:
    """(eigenvalues, vectors, ridge, solver, total) of a problem above FULL_SPECTRUM_LIMIT.

    Only k pairs are computed -- for a threshold, only as many of them as it needs
    (:func:`~dmlfe.solvers.leading.leading_pairs`); ``total`` is the sum of all
    eigenvalues (the trace of A, or of B^{-1} A), the denominator of a threshold. That
    holds for a positive semi-definite A only: a threshold on an indefinite A (graph
    methods' X^T L X forms) needs the sum of its positive eigenvalues, so the whole
    spectrum is computed (``total`` None).
    """
    A, B, method = template.A, template.B, template.method
    threshold = not isinstance(n_components, int)
    if is_operator(A) and (threshold or not krylov_pays(A.shape[0], k)):
        A = np.asarray(A)  # every entry is needed: LAPACK, or a threshold's float32 rounds
    if B is None and is_operator(A):
        # a negative trace: the leading pairs may be the zero end of -M (M PSD), which
        # the products alone do not resolve; they are found below from A's entries
        pairs = _operator_leading(A, k, random_state) if A.trace() > 0 else None
        if pairs is not None and not _interior(pairs[0], k):
            return pairs[0], pairs[1], 0.0, "eigh-operator", None
        A = np.asarray(A)
    if B is None and not threshold and np.trace(A) < 0:
        pairs = _shift_invert_leading(A, k, random_state)
        if pairs is not None:
            return pairs[0], pairs[1], 0.0, "eigh-shift-invert", None
    if B is None:
        # A = a S + F F^T (MVMD): the label part F may lift q eigenvalues far above the rest
        if threshold and not _known_psd(template) and not is_psd(A):
            w, V = eigh(A)
            return w, V, 0.0, "eigh", None
        dominant = 0 if template.lowrank is None else int(template.lowrank.shape[1])
        total = float(np.trace(A))
        w, V, _ = leading_pairs(A, n_components, k, total, random_state=random_state,
                                dominant=dominant, dominant_start=template.lowrank)
        if not threshold and _interior(w, k):
            w, V = _descending(*sla.eigh(A, subset_by_index=[A.shape[0] - k, A.shape[0] - 1],
                                         check_finite=False))
            return w, flip_signs(V), 0.0, "eigh-subset", None
        return w, flip_signs(V), 0.0, "eigh-partial", total
    Breg, reg, L = constraint_factor(B, what=f"B of {method}")
    F = template.lowrank
    if template.operator_form and template.xx_coef == 0.0 and F is not None and \
            k <= F.shape[1]:
        # A = F F^T has rank q: the q x q reduction (B's Cholesky factor only)
        w, V = lowrank_generalized(
            F, lambda R: sla.cho_solve((L, True), R, check_finite=False))
        return w, V, reg, "lowrank-generalized", float(w.sum())
    if not threshold and krylov_pays(A.shape[0], k):
        pairs = _generalized_operator(A, L, k, random_state)
        if pairs is not None:
            return pairs[0], pairs[1], reg, "eigh-generalized-operator", None
    C, L = cholesky_reduce(np.asarray(A), Breg, L)  # a copy of A (its upper triangle is read)
    if threshold and not _known_psd(template) and not is_psd(C):
        w, U = _descending(*sla.eigh(C, overwrite_a=True, check_finite=False))
        d = choose_dimension(w, n_components)  # only the kept vectors are mapped back
        V = sla.solve_triangular(L, U[:, :d], lower=True, trans="T", check_finite=False)
        return w, flip_signs(V), reg, "eigh-generalized", None
    total = float(np.trace(C))
    w, U, _ = leading_pairs(C, n_components, k, total, random_state=random_state)
    V = sla.solve_triangular(L, U, lower=True, trans="T", check_finite=False)
    return w, flip_signs(V), reg, "eigh-generalized-partial", total


#: Most single-vector products the operator form of :func:`_generalized_operator` may
#: take, as a fraction of m: each costs three m^2 passes (two triangular solves and a
#: product), against LAPACK's m^3 reduction and products with the reduced matrix in
#: float32. A pencil whose pairs converge slowly (DMLDA's reduced problem on text) is
#: reduced after all, and the budget bounds what the attempt wasted
#: (``benchmarks/scale.py --parts all``).
OPERATOR_BUDGET = 1 / 16
#: Blocks per Krylov space of the operator form (its products cost three passes each,
#: so shallow spaces and restarts from the best Ritz block).
OPERATOR_DEPTH = 6


def _generalized_operator(A: np.ndarray, L: np.ndarray, k: int, random_state: int
                          ) -> tuple[np.ndarray, np.ndarray] | None:
    """k leading pairs of A p = lambda B p (B = L L^T) by block Krylov on the operator
    C = L^{-1} A L^{-T}, applied by two triangular solves and a product with A: C itself
    (LAPACK's ``dsygst``, m^3 flops and an m x m copy) is never formed. p = L^{-T} u.
    None when the pairs have not converged within OPERATOR_BUDGET x m products (the
    caller reduces the pencil instead)."""
    def apply(U: np.ndarray) -> np.ndarray:
        W = sla.solve_triangular(L, U, lower=True, trans="T", check_finite=False)
        return sla.solve_triangular(L, A @ W, lower=True, check_finite=False)

    pairs = budgeted_krylov(apply, A.shape[0], k, random_state)
    if pairs is None:
        return None
    V = sla.solve_triangular(L, pairs[1], lower=True, trans="T", check_finite=False)
    return pairs[0], flip_signs(V)


def budgeted_krylov(matmat: Callable[[np.ndarray], np.ndarray], m: int, k: int,
                    random_state: int) -> tuple[np.ndarray, np.ndarray] | None:
    """k leading pairs of a symmetric m x m operator by float64 block Krylov (blocks of
    k + KRYLOV_OVERSAMPLING, OPERATOR_DEPTH deep) within OPERATOR_BUDGET x m products;
    None when they have not converged there (the caller then forms the matrix). Signs
    are not fixed."""
    block = k + KRYLOV_OVERSAMPLING
    restarts = max(1, int(OPERATOR_BUDGET * m) // (block * OPERATOR_DEPTH))
    w, U, info = block_krylov_eigh(matmat, m, k, block=block, depth=OPERATOR_DEPTH,
                                   tol=KRYLOV_TOL, max_restarts=restarts,
                                   random_state=random_state)
    return (w, U) if info["converged"] else None


def is_operator(A: object) -> bool:
    """Whether the template's A is an operator (``A @ V``, ``shape``, ``np.asarray(A)``
    forms it) rather than an ndarray: R^T A R of a graph method kept unformed
    (:class:`dmlfe.graph.products.ProjectedOperator`)."""
    return A is not None and not isinstance(A, np.ndarray)


def _operator_leading(A: object, k: int, random_state: int
                      ) -> tuple[np.ndarray, np.ndarray] | None:
    """k leading pairs of a symmetric operator A by float64 block Krylov on its products
    (a dense A's float32 exploration needs its entries), signs fixed; None when they have
    not converged within OPERATOR_BUDGET x m products -- leading eigenvalues clustered
    against the spread of the rest, as OLPP's -R^T L R has them at zero -- and the
    caller forms A instead."""
    pairs = budgeted_krylov(lambda X: A @ X, A.shape[0], k, random_state)
    return None if pairs is None else (pairs[0], flip_signs(pairs[1]))


def _shift_invert_leading(A: np.ndarray, k: int, random_state: int
                          ) -> tuple[np.ndarray, np.ndarray] | None:
    """k leading pairs of an A = -M with M positive semi-definite (OLPP's -X^T L X, whose
    leading eigenvalues are M's smallest, clustered at zero against M's spread: Krylov
    on A itself does not converge). Block Krylov on (M + s I)^{-1}, s = ROUNDOFF_RTOL
    ||M||_F, applied by triangular solves with one Cholesky factor; a Rayleigh-Ritz step
    on A gives the eigenvalues. None when M + s I has no Cholesky factor (A has an
    eigenvalue above round-off: not this case)."""
    m = A.shape[0]
    C = np.negative(A)
    C[np.diag_indices_from(C)] += ROUNDOFF_RTOL * float(np.linalg.norm(A))
    L = _cholesky_or_none(C, overwrite=True)
    if L is None:
        return None
    factor = (L, True)
    _, U, info = block_krylov_eigh(lambda V: sla.cho_solve(factor, V, check_finite=False),
                                   m, k, depth=OPERATOR_DEPTH, tol=KRYLOV_TOL,
                                   random_state=random_state)
    if not info["converged"]:
        return None
    H = U.T @ (A @ U)
    w, Q = _descending(*np.linalg.eigh(0.5 * (H + H.T)))
    return w, flip_signs(U @ Q)


def _interior(w: np.ndarray, k: int) -> bool:
    """Whether Krylov pairs reach a non-positive eigenvalue: an indefinite A's wanted
    pairs then lie inside its spectrum (SSMOPE's -L part below its labelled pairs),
    where a small residual does not show that a pair between them was missed; LAPACK
    solves those."""
    return w.size >= k and w[k - 1] <= 0.0


def _known_psd(template: TraceTemplate) -> bool:
    """A = c Xs^T Xs + F F^T with c >= 0 is positive semi-definite by construction."""
    return bool(template.operator_form and template.xx_coef >= 0.0)


def solve_dense(
    template: TraceTemplate, n_components: int | float = DEFAULT_THRESHOLD, *,
    max_components: int | None = None, random_state: int = 0, cap_note: str | None = None,
    compact: bool = False,
) -> EigenResult:
    """Solve a trace template on the driver and choose d.

    The thin-SVD path is taken whenever A = F F^T and B = I (no D x D is
    formed even when the template also carries a dense A). Otherwise problems up to
    :data:`~dmlfe.solvers.leading.FULL_SPECTRUM_LIMIT` are solved completely (every
    eigenvalue in ``eigenvalues``); larger ones compute only the leading pairs
    (:mod:`dmlfe.solvers.leading`): d of them for an int ``n_components``; for a
    threshold as many as it needs (all m at most, ``max_components`` when given), whose
    denominator is then the trace -- or the whole spectrum when A is indefinite.
    ``compact``: the thin SVD's components on the rows where F is not zero only, named by
    the result's ``columns`` (a fit's stored components; D x d otherwise).

    Raises
    ------
    ValueError
        If the template carries only an operator form that needs the data
        (xx_coef != 0 and no dense A): use the matrix-free solver.
    """
    reg = 0.0
    total = None
    columns = None
    nc = check_n_components(n_components)
    if template.is_pure_lowrank:
        # the components on the used features only (hashed text: a few percent of D)
        F, rows = template.lowrank_part()
        n_rows = F.shape[0] if rows is None else template.n_features
        w, V, columns = thin_svd(F, compact=True, rows=rows, n_rows=n_rows)
        if not compact and columns is not None:
            V = expand_rows(V, columns, n_rows)
            columns = None
        solver = "thin_svd"
    elif template.A is None:
        raise ValueError(
            f"the {template.method} template has no dense A (it was built with dense=False) "
            "and A involves the data scatter; solve it with the matrix-free solver or build "
            "it with dense=True from statistics that include X^T X"
        )
    elif template.A.shape[0] > FULL_SPECTRUM_LIMIT:
        m = template.A.shape[0]
        k = nc if isinstance(nc, int) else threshold_cap(m, max_components)[0]
        if k > m:
            raise ValueError(f"n_components={k} must lie between 1 and the problem size {m}")
        w, V, reg, solver, total = _leading(template, nc, k, random_state)
    elif template.B is None:
        w, V = eigh(np.asarray(template.A))
        solver = "eigh"
    else:
        w, V, reg = eigh_generalized(np.asarray(template.A), template.B,
                                     what=f"B of {template.method}")
        solver = "eigh_generalized"
    k = n_genuine(w, ROUNDOFF_RTOL)
    d = choose_dimension(w, nc, total=total, cap_note=cap_note)
    warn_null_components(template.method, d, w)
    return EigenResult(
        components=np.ascontiguousarray(V[:, :d]),
        eigenvalues=w,
        n_components=d,
        n_genuine=k,
        solver=solver,
        regularization=reg,
        n_passes=0,
        converged=True,
        trace=total,
        columns=columns,
    )
