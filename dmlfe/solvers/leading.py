"""Only the eigenpairs that are needed: the leading k of a symmetric (generalised) problem.

A fit keeps d components of an m x m problem (m = D, p or n), and d is usually far below
m; a full ``scipy.linalg.eigh`` costs O(m^3) whatever d is (most of it the tridiagonal
reduction). :func:`leading_eigh` computes the
k leading pairs only:

* m <= :data:`KRYLOV_MIN_SIZE` or k a large fraction of m: the dense LAPACK solver
  (the whole spectrum up to :data:`FULL_SPECTRUM_LIMIT`, so that ``eigenvalues_`` of
  small problems stay complete; ``subset_by_index`` otherwise);
* otherwise a restarted block Krylov method (:func:`block_krylov_eigh`): each restart
  builds the Krylov space [V, A V, ..., A^{s-1} V] of the current block V by matrix
  products (BLAS-3, near the machine's peak), Rayleigh-Ritz on it, and restarts from the
  best Ritz block -- whose image is already known, so a restart costs s - 1 products --
  until every wanted pair has a relative residual below ``tol``. A dense A is explored
  in float32 first (half the work of each product) and the resulting Ritz block is
  checked -- and if need be finished -- in float64, so the pairs returned are float64
  Rayleigh-Ritz pairs with float64-measured residuals.

A generalised problem A p = lambda B p (B symmetric positive definite) is reduced to the
standard one by the Cholesky factor B = L L^T, C = L^{-1} A L^{-T}, p = L^{-T} u.
When A = F F^T has rank q (CCA, OPLS, MDDMf: ``TraceTemplate.lowrank``),
:func:`lowrank_generalized` solves the q x q problem F^T B^{-1} F u = lambda u instead
and maps back p = B^{-1} F u / sqrt(lambda) (mddm eq. 16-17 has at most q non-zero
eigenvalues): one Cholesky of B, no m x m eigenproblem.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import scipy.linalg as sla
from scipy.linalg import blas

from dmlfe.compute import blas_threads, idle_cpus, one_blas_thread
from dmlfe.linalg.krylov import PAIR_FLOOR, pair_scales
from dmlfe.solvers.dimension import threshold_rounds
from dmlfe.solvers.result import flip_signs
from dmlfe.stats.outer import mirror_upper

#: Problems up to this size are solved completely (all m eigenpairs) by LAPACK.
FULL_SPECTRUM_LIMIT = 1_000
#: Above FULL_SPECTRUM_LIMIT, k > this fraction of m also goes to LAPACK (subset).
LAPACK_FRACTION = 0.2
#: A block Krylov space of (k + KRYLOV_OVERSAMPLING) x DENSE_KRYLOV_DEPTH columns above
#: this fraction of m goes to LAPACK's subset solver instead: the basis then spans most
#: of the space and its orthogonalisation (m x basis^2) costs more than LAPACK's
#: reduction; the fraction was set by timing both on the dual route's centred Gram
#: (benchmarks/scale.py).
KRYLOV_BASIS_FRACTION = 2 / 3
#: Up to this size LAPACK's subset solver beats block Krylov for any k (timed on the
#: dual route's centred Gram cut to several sizes; benchmarks/scale.py).
KRYLOV_MIN_SIZE = 2_500
#: Problems up to FULL_SPECTRUM_LIMIT but above this size, of which at most
#: LAPACK_FRACTION is wanted, take LAPACK's subset solver when the caller allows it
#: (``complete=False``): on a small dual problem the whole spectrum is most of the
#: fit (benchmarks/small_data.py).
SUBSET_MIN = 256
#: Relative residual ||A u - theta u|| / |theta| at which a Krylov pair is converged
#: (its eigenvalue is then accurate to about tol^2 theta^2 / gap). Relative to each
#: pair's own eigenvalue, not the largest: MVMD's label part puts theta_1 orders of
#: magnitude above its 100th eigenvalue on text, and a residual of tol x theta_1 left
#: those far off (see benchmarks/scale.py's exactness part).
KRYLOV_TOL = 1e-5
#: Blocks per Krylov space for a dense A held by the driver. Deeper spaces need fewer
#: products in all (fewer restarts) at the price of a basis and its image of
#: 2 x m x depth x (k + 25) x 8 bytes. At depth 12 the float32 exploration of a dual
#: Gram and of MVMD's matrix ends close enough that the float64 refinement is one
#: check, not two restarts (benchmarks/scale.py).
DENSE_KRYLOV_DEPTH = 12
#: Columns of a block Krylov block beyond the k pairs wanted. The depth does the rest:
#: a fixed 16 needed fewer products than k // 4 at depth 12 (benchmarks/scale.py).
KRYLOV_OVERSAMPLING = 16
#: A dense problem solved by block Krylov is first explored in float32 to this relative
#: residual (float32 reaches about 1e-6 on a text Gram), in at most FLOAT32_RESTARTS
#: restarts; the float64 check and any further restarts follow (:func:`leading_eigh`).
FLOAT32_TOL = 1e-5
FLOAT32_RESTARTS = 6
#: :func:`pair_scales`' floor in the float32 exploration: 1 measures every pair against
#: theta_1, as float32 products cannot resolve a residual far below that (lower floors
#: cost more products and saved no float64 restart).
FLOAT32_FLOOR = 1.0
#: Depth of the float64 restarts that refine a float32 Ritz block (it is close already:
#: shallow restarts from it are cheaper than a deep one).
REFINE_DEPTH = 3
#: Depth and most restarts of the float64 solve for :func:`leading_eigh`'s ``dominant``
#: pairs (well separated: MVMD's q label pairs take one or two restarts; a
#: guess that finds no gap stops there, and the float64 refinement finishes the job).
DOMINANT_DEPTH = 4
DOMINANT_RESTARTS = 4
#: Depth and most restarts of the float64 solve of :func:`leading_eigh` from a warm
#: ``start`` (the Ritz block of a fit before an append) before it gives up and solves
#: from scratch: from a start that close, one restart of depth 4 usually converges.
WARM_DEPTH = 4
WARM_RESTARTS = 4
#: A warm solve stops at this fraction of ``tol``: a cold one's float64 check of its
#: float32 Ritz block ends far below ``tol``, and a warm one stopping just under it
#: left the trailing pairs of MVMD on text (small gaps) looser than a fresh fit's
#: (``benchmarks/incremental.py`` compares the two).
WARM_TOL_FRACTION = 1e-2
#: Columns of a warm start's block beyond the k pairs taken from the start; the rest of
#: its KRYLOV_OVERSAMPLING are random (:func:`_warm_pairs`).
WARM_RANDOM = KRYLOV_OVERSAMPLING // 2

#: Relative column norm below which orthonormalize drops a column as round-off, in
#: float32 and in float64. Float32 keeps remainders down to 8 units of its precision:
#: at 500 units (as in float64) the Krylov space of MVMD's problem on text, whose
#: 100th eigenvalue is far below its first, lost every direction below the label part
#: and the float32 run stalled above FLOAT32_TOL.
DROP_RTOL = {np.dtype(np.float32): 1e-6, np.dtype(np.float64): 1e-13}

MatMat = Callable[[np.ndarray], np.ndarray]


def _descending(w: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(w, kind="stable")[::-1]
    return w[order], V[:, order]


def orthonormalize(W: np.ndarray, scale: float | None = None, rtol: float | None = None,
                   gram: np.ndarray | None = None, overwrite: bool = False,
                   work: np.ndarray | None = None) -> np.ndarray:
    """Orthonormal columns spanning span(W), with BLAS-3 work only (no Householder QR).

    Columns at round-off level (norm <= rtol x ``scale``, default the largest column
    norm; ``rtol`` defaults to :data:`DROP_RTOL` of W's precision) are dropped; the
    rest are scaled to unit norm -- a small remainder of a Krylov step is as
    informative as a large one -- and orthonormalised by CholeskyQR2 (twice
    W <- W R^{-1}, R^T R = W^T W). When the columns are nearly dependent (Cholesky
    fails or R is near singular) the eigendecomposition of W^T W keeps the
    well-determined directions instead. A Householder QR of a 2^20 x 110 block is far
    slower; this is a few D x w x w products. The big products run in W's
    dtype (float32 or float64); the small w x w factorisations always in float64.

    ``gram``, W^T W when the caller has it already (subspace iteration computes it for
    its residuals), saves the first round's product and the column norms: the scaling
    to unit columns is folded into the first w x w factor, so W itself is never copied
    or scaled (at D = 557,713, w = 110: two of its five D x w x w-sized steps).
    ``overwrite=True`` lets the result take W's memory when no column is dropped (W is
    then lost to the caller), and ``work``, a spare array of W's shape and dtype, holds
    the first round: no fresh D x w array at all, where each cost its page faults
    again (more than the product itself).
    """
    dtype = W.dtype
    if rtol is None:
        rtol = DROP_RTOL.get(np.dtype(dtype), DROP_RTOL[np.dtype(np.float64)])
    if gram is None:
        gram = (W.T @ W).astype(np.float64)
    norms = np.sqrt(np.clip(np.diag(gram), 0.0, None))
    ref = float(norms.max(initial=0.0)) if scale is None else float(scale)
    keep = norms > rtol * ref if ref > 0 else np.zeros(norms.shape, dtype=bool)
    # the last round may write over W: a C-ordered block with every column kept
    target = W if overwrite and W.flags.c_contiguous and keep.all() else None
    if not keep.all():
        W, gram, norms = W[:, keep], gram[np.ix_(keep, keep)], norms[keep]
    # round 1 on unit columns: diag(1/norms) W^T W diag(1/norms), the scaling kept in
    # the w x w factor that multiplies W
    unit = 1.0 / norms
    first: np.ndarray | None = gram * unit[:, None] * unit[None, :]
    for round_ in range(2):
        if W.shape[1] == 0:
            break
        if first is None:
            S = (W.T @ W).astype(np.float64)
            left = None
        else:
            S, left, first = first, unit, None
        S = 0.5 * (S + S.T)
        try:
            L = np.linalg.cholesky(S)
            d = np.abs(np.diag(L))
            if d.min() <= 1e-7 * d.max():
                raise np.linalg.LinAlgError("near-dependent columns")
        except np.linalg.LinAlgError:
            w, V = np.linalg.eigh(S)
            good = w > 1e-12 * max(float(w.max(initial=0.0)), np.finfo(float).tiny)
            factor = V[:, good] / np.sqrt(w[good])
        else:
            # numpy's LAPACK, not scipy's: the two wheels bring two OpenBLAS libraries,
            # and a call into one while the other's threads still spin after the last
            # big product waited for those threads at every call
            factor = np.linalg.inv(L.T)
        if left is not None:
            factor = left[:, None] * factor
        factor = factor.astype(dtype)
        into = target if round_ == 1 else work
        if into is not None and into.shape == (W.shape[0], factor.shape[1]) \
                and into.dtype == dtype and into.flags.c_contiguous \
                and not np.shares_memory(W, into):
            W = np.matmul(W, factor, out=into)
        else:
            W = W @ factor
    return W


def _extend_basis(Q: np.ndarray | None, W: np.ndarray, coef: np.ndarray | None = None
                  ) -> np.ndarray:
    """Orthonormal columns spanning W's part outside span(Q).

    Block Gram-Schmidt against Q, :func:`orthonormalize` (which drops only round-off:
    small but genuine remainders must stay -- dropping those at 1e-10 stalls convergence
    near 1e-6), and -- because normalising a small remainder magnifies its rounding
    errors along Q -- a second round (CGS2). ``coef``, an array of Q^T W's shape,
    receives the first round's coefficients Q^T W.
    """
    scale = float(np.linalg.norm(W, axis=0).max(initial=0.0))
    if coef is not None and Q is not None:
        np.matmul(Q.T, W, out=coef)
    if scale == 0.0:
        return W[:, :0]
    if Q is None or Q.shape[1] == 0:
        return orthonormalize(W, scale)
    W = W - Q @ (Q.T @ W if coef is None else coef)
    Qw = orthonormalize(W, scale)
    if Qw.shape[1]:
        Qw = orthonormalize(Qw - Q @ (Q.T @ Qw))
    return Qw


def _ritz_pairs(T: np.ndarray, b: int) -> tuple[np.ndarray, np.ndarray]:
    """The b leading eigenpairs of the Rayleigh-Ritz matrix T, descending (a restart
    keeps no more): LAPACK's subset solver once T is over twice b, where it is faster
    than the whole spectrum."""
    s = T.shape[0]
    if s <= 2 * b:
        return _descending(*np.linalg.eigh(T))
    return _descending(*sla.eigh(T, subset_by_index=[s - b, s - 1], driver="evx",
                                 check_finite=False))


def _ritz_step(Qb: np.ndarray, AQb: np.ndarray, Tb: np.ndarray, multiplied: int, b: int,
               k: int, floor: float, dtype: type
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """Rayleigh-Ritz on the first ``multiplied`` basis columns of :func:`block_krylov_eigh`
    (their image and the upper part of T = Q^T A Q known): (theta, U, A U of the b
    leading Ritz pairs, the residual norms of the first k, the largest relative one)."""
    Q, AQ = Qb[:, :multiplied], AQb[:, :multiplied]
    T = Tb[:multiplied, :multiplied]
    # in the product's precision: a float32 exploration's Ritz pairs need no more, and
    # LAPACK's float32 subset solver is the faster
    theta, Y = _ritz_pairs(np.triu(T) + np.triu(T, 1).T, b)
    theta = theta.astype(np.float64)
    keep = min(b, theta.size)
    Yk = Y[:, :keep].astype(dtype)
    U, AU = Q @ Yk, AQ @ Yk
    kk = min(k, keep)
    res = np.linalg.norm(AU[:, :kk] - U[:, :kk] * theta[:kk].astype(dtype), axis=0)
    return theta, U, AU, res, float(np.max(res / pair_scales(theta[:kk], floor), initial=0.0))


def block_krylov_eigh(matmat: MatMat, m: int, k: int, *, block: int | None = None,
                      depth: int = 6, tol: float = KRYLOV_TOL, max_restarts: int = 60,
                      random_state: int = 0, dtype: type = np.float64,
                      v0: np.ndarray | None = None, first_depth: int | None = None,
                      floor: float = PAIR_FLOOR, av0: np.ndarray | None = None,
                      check_each: bool = False) -> tuple[np.ndarray, np.ndarray, dict]:
    """The k leading eigenpairs of a symmetric m x m operator given by its products.

    Parameters
    ----------
    matmat : callable
        ``matmat(V)`` = A V for an m x b block (returned in ``dtype``).
    k : int
        Pairs wanted.
    block : int, optional
        Block width b (default k + :data:`KRYLOV_OVERSAMPLING`, or the width of ``v0``).
    depth : int
        Blocks per Krylov space (products per restart).
    tol : float
        Converged when ||A u_i - theta_i u_i|| <= tol * theta_1 for every i < k.
    max_restarts : int
    random_state : int
        Seed of the starting block.
    dtype : numpy float dtype
        Precision of the basis and of the products (float32 halves the work of the
        big products; the small b x b and Rayleigh-Ritz problems stay float64).
    v0 : ndarray (m, b), optional
        Starting block instead of a random one (e.g. Ritz vectors of a float32 run).
    first_depth : int, optional
        Depth of the first restart (default ``depth``); 1 checks the Rayleigh-Ritz
        pairs of span(v0) itself before any Krylov step.
    av0 : ndarray (m, b), optional
        A v0, for a ``v0`` with orthonormal columns: the first restart starts from this
        image, and with ``first_depth=1`` checks span(v0) without a product.
    floor : float
        Pair i is converged when ||A u_i - theta_i u_i|| <= tol x max(|theta_i|,
        floor x |theta_1|) (:func:`pair_scales`); 1 measures every pair against theta_1
        (a float32 exploration cannot resolve more).
    check_each : bool
        Check the Rayleigh-Ritz pairs after every product, not only at the end of a
        restart, and stop as soon as they converge: for a start already close to the
        pairs (a warm start), where each product is a pass over a large operator and
        the check costs only products with the basis.

    Returns
    -------
    (eigenvalues descending (k,), eigenvectors (m, k) orthonormal, info)
        ``info``: products, restarts, converged, max_residual (relative to theta_1),
        residuals (||A u_i - theta_i u_i|| of the k pairs), ritz (all b Ritz vectors
        of the last restart) and ritz_image (A ritz).
    """
    if v0 is None:
        b = min(m, block or k + KRYLOV_OVERSAMPLING)
        start_block = np.random.default_rng(random_state).standard_normal((m, b))
    else:
        start_block = np.asarray(v0)
        b = min(m, block or start_block.shape[1])
    # A V of a restart block: the Ritz vectors' images (or the caller's of v0)
    AV_known: np.ndarray | None = None
    if av0 is None:
        V = _extend_basis(None, start_block.astype(dtype, copy=False))
    else:
        V, AV_known = start_block.astype(dtype, copy=False), np.asarray(av0, dtype=dtype)
    b = max(b, V.shape[1])
    products, converged, worst = 0, False, np.inf
    theta, U = np.zeros(0), np.zeros((m, 0), dtype=dtype)
    restarts = 0
    # The Krylov basis and its image, block after block, in two buffers (F order, so a
    # block of columns is contiguous): growing them by np.hstack copied the basis at
    # every step. No block is wider than b.
    Qb = np.empty((m, depth * b), dtype=dtype, order="F")
    AQb = np.empty((m, depth * b), dtype=dtype, order="F")
    # The Rayleigh-Ritz matrix T = Q^T A Q, block column by block column: the first
    # Gram-Schmidt round of step j computes Q_{<=j}^T (A Q_j), its upper part, and
    # symmetry gives the rest -- instead of one (depth b)^2 x m product at the end, a
    # sizeable share of the exploration's flops
    Tb = np.empty((depth * b, depth * b), dtype=dtype, order="F")
    while restarts < max_restarts:
        restarts += 1
        steps = depth if restarts > 1 or first_depth is None else min(first_depth, depth)
        start, used = 0, V.shape[1]
        Qb[:, :used] = V
        step = None  # the Rayleigh-Ritz pairs, when a check within the restart converged
        for j in range(steps):
            if j == 0 and AV_known is not None:
                AQb[:, :used] = AV_known  # thick restart: A U is known, no product needed
            else:
                AQb[:, start:used] = matmat(Qb[:, start:used])
                products += used - start
            multiplied, pending = used, start  # the block whose column of T is due
            if j == steps - 1 or used >= m:
                break
            new = _extend_basis(Qb[:, :used], AQb[:, start:used],
                                coef=Tb[:used, start:used])
            pending = None
            if new.shape[1] == 0:  # the space is invariant: Rayleigh-Ritz is exact
                break
            start, used = used, used + new.shape[1]
            Qb[:, start:used] = new
            if check_each:  # T of the multiplied part is complete: its pairs may do
                step = _ritz_step(Qb, AQb, Tb, multiplied, b, k, floor, dtype)
                if step[4] <= tol:
                    break
                step = None
        # A Q is known for the blocks that were multiplied; the last new block (if any)
        # was never multiplied, so the Ritz space is the multiplied part
        if step is None and pending is not None:  # the last multiplied block: not extended
            np.matmul(Qb[:, :multiplied].T, AQb[:, pending:multiplied],
                      out=Tb[:multiplied, pending:multiplied])
        theta, U, AU, res, worst = step or _ritz_step(Qb, AQb, Tb, multiplied, b, k, floor,
                                                      dtype)
        if worst <= tol or multiplied >= m:
            converged = True
            break
        V, AV_known = U, AU  # U = Q Y is orthonormal: restart from it and its image
    info = {"products": products, "restarts": restarts, "converged": converged,
            "max_residual": worst, "residuals": res, "block": b, "depth": depth, "tol": tol,
            "ritz": U, "ritz_image": AU}
    return theta[:k].copy(), U[:, :k], info


def wants_full_spectrum(m: int, k: int, complete: bool = True) -> bool:
    """Whether :func:`leading_eigh` computes all m eigenvalues of an m x m problem."""
    return m <= FULL_SPECTRUM_LIMIT and (complete or m <= SUBSET_MIN
                                         or k > LAPACK_FRACTION * m)


def _float32_copy(A: np.ndarray, locked: np.ndarray | None = None) -> np.ndarray:
    """A float32 copy of A, or of P A P (P = I - V V^T) for orthonormal float64 ``locked`` V.

    The projected copy is formed in float64, a block of rows at a time (no m x m float64
    temporary): P A P = A - V W^T - W V^T with W = A V - V (V^T A V) / 2. It has the
    spectrum of A outside span(V) and annihilates V, so its rounding scales with the rest
    of the spectrum, not with the eigenvalues in V (and an inexact V leaves a second
    order remainder only).
    """
    if locked is None:
        return A.astype(np.float32)
    V = locked
    AV = A @ V
    W = AV - 0.5 * V @ (V.T @ AV)
    left, right = np.hstack([V, W]), np.hstack([W, V])  # P A P = A - left right^T
    out = np.empty(A.shape, dtype=np.float32)
    m = A.shape[0]
    step = max(1, 2**22 // max(m, 1))
    # one product per slab into a reused buffer, subtracted straight into the float32
    # copy (three slab temporaries each time were fresh memory per slab)
    buf = np.empty((min(step, m), m))
    for r in range(0, m, step):
        b = buf[:min(step, m - r)]
        np.matmul(left[r:r + step], right.T, out=b)
        np.subtract(A[r:r + step], b, out=out[r:r + step], casting="same_kind")
    return out


def _float32_ritz_block(A: np.ndarray, k: int, tol: float, random_state: int,
                        locked: np.ndarray | None = None) -> dict:
    """:func:`block_krylov_eigh` on a float32 copy of A (freed on return); its info.

    ``locked``: orthonormal float64 eigenvectors of A already known (:func:`leading_eigh`'s
    ``dominant`` pairs), deflated from the copy (:func:`_float32_copy`): the k pairs
    sought are then those after them.
    """
    A32 = _float32_copy(A, locked)
    return block_krylov_eigh(A32.__matmul__, A.shape[0], k, depth=DENSE_KRYLOV_DEPTH,
                             tol=max(tol, FLOAT32_TOL), random_state=random_state,
                             dtype=np.float32, max_restarts=FLOAT32_RESTARTS,
                             floor=FLOAT32_FLOOR)[2]


def rayleigh_ritz(A: np.ndarray, V: np.ndarray, k: int, tol: float,
                  floor: float = PAIR_FLOOR) -> tuple[np.ndarray, np.ndarray, dict] | None:
    """The k leading float64 Rayleigh-Ritz pairs of the symmetric A on span(V), checked.

    One CholeskyQR of V (float32 eigenvectors, perhaps after float64 locked ones: their
    columns are orthonormal to float32 precision, so one round leaves them orthonormal
    to float64 precision), one product A Q, the eigenpairs of Q^T A Q, and each pair's
    residual ||A u - theta u|| against :func:`pair_scales`; ``info["converged"]`` when
    every one is below ``tol``. None when V's columns are not clearly independent.

    The same step as :func:`block_krylov_eigh` with ``first_depth=1`` and one restart,
    but in scipy's BLAS and LAPACK only: it follows scipy's subset solver, whose
    OpenBLAS threads still spin for a while after it returns, and numpy's (another
    OpenBLAS library) then waited for them at every call (``benchmarks/relation.py``).
    """
    V = np.asarray(V, dtype=np.float64, order="F")
    try:
        R = sla.cholesky(blas.dsyrk(1.0, V, trans=1), lower=False, check_finite=False)
    except np.linalg.LinAlgError:
        return None
    d = np.abs(np.diag(R))
    if d.size == 0 or d.min() <= 1e-7 * d.max():
        return None
    Q = blas.dtrsm(1.0, R, V, side=1)  # V R^{-1}, F-ordered
    AQ = blas.dgemm(1.0, A.T, Q)  # A = A^T: its transpose is F-ordered, not copied
    T = blas.dgemm(1.0, Q, AQ, trans_a=True)
    theta, Y = sla.eigh(0.5 * (T + T.T), check_finite=False)
    theta, Y = theta[::-1][:k], np.asfortranarray(Y[:, ::-1][:, :k])
    U, AU = blas.dgemm(1.0, Q, Y), blas.dgemm(1.0, AQ, Y)
    res = np.sqrt(np.square(AU - U * theta).sum(axis=0))
    worst = float(np.max(res / pair_scales(theta, floor), initial=0.0))
    return theta, U, {"products": V.shape[1], "restarts": 1, "converged": worst <= tol,
                      "max_residual": worst, "residuals": res, "tol": tol}


def _float32_subset(A: np.ndarray, k: int, tol: float, locked: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray, dict] | None:
    """LAPACK's subset solver on a float32 copy of A, checked in float64; None if it fails.

    The float32 eigenvectors span the leading subspace to float32 precision; one float64
    product and Rayleigh-Ritz on their span (:func:`rayleigh_ritz`) gives float64 pairs
    whose residuals are measured in float64, faster than the float64 subset solver with
    eigenvalues equal to round-off (``benchmarks/scale.py``'s exactness part). A
    residual above ``tol`` returns None: the caller then solves in float64.
    ``locked`` as in :func:`_float32_ritz_block`: the copy is deflated and the check
    starts from both.
    """
    m = A.shape[0]
    g = 0 if locked is None else locked.shape[1]
    # the copy's transpose is F-ordered: LAPACK works in it, without another copy (its
    # lower triangle is the copy's upper one: the same matrix to float32 round-off)
    _, V32 = sla.eigh(_float32_copy(A, locked).T, subset_by_index=[m - k + g, m - 1],
                      check_finite=False, overwrite_a=True)
    checked = rayleigh_ritz(A, _after_locked(locked, V32[:, ::-1]), k, tol)
    if checked is None or not checked[2]["converged"] or checked[1].shape[1] < k:
        return None
    checked[2]["method"] = "lapack-subset-float32"
    return checked


def _dominant_block(A: np.ndarray, k: int, dominant: int, tol: float, random_state: int,
                    start: np.ndarray | None = None) -> tuple[np.ndarray | None, int]:
    """(V, products): float64 eigenvectors of the ``dominant`` leading pairs, or None.

    ``start``: columns that span those eigenvectors approximately, the start block
    instead of a random one of g + :data:`KRYLOV_OVERSAMPLING` columns (MVMD's label
    directions: fewer products than from a random block).
    """
    g = min(max(int(dominant), 0), k - 1)
    if not g:
        return None, 0
    if start is not None:
        start = np.asarray(start, dtype=np.float64)[:, :g]
        if start.shape[1] < g:  # too narrow: random columns make up the width
            fill = np.random.default_rng(random_state).standard_normal(
                (A.shape[0], g - start.shape[1]))
            start = np.hstack([start, fill])
    _, V, info = block_krylov_eigh(lambda X: A @ X, A.shape[0], g, depth=DOMINANT_DEPTH,
                                   tol=tol, random_state=random_state,
                                   max_restarts=DOMINANT_RESTARTS, v0=start)
    return V, info["products"]


def _after_locked(locked: np.ndarray | None, V: np.ndarray) -> np.ndarray:
    """The float64 start of a check or refinement: the locked vectors (if any), then V."""
    V = V.astype(np.float64)
    return V if locked is None else np.hstack([locked, V])


def krylov_pays(m: int, k: int) -> bool:
    """Whether :func:`leading_eigh` takes block Krylov for k pairs of an m x m problem
    (else LAPACK): m above KRYLOV_MIN_SIZE, k at most LAPACK_FRACTION of it, and a basis
    within KRYLOV_BASIS_FRACTION of the space."""
    return m > KRYLOV_MIN_SIZE and k <= LAPACK_FRACTION * m and \
        (k + KRYLOV_OVERSAMPLING) * DENSE_KRYLOV_DEPTH <= KRYLOV_BASIS_FRACTION * m


def _warm_pairs(A: np.ndarray, k: int, tol: float, start: np.ndarray, random_state: int
                ) -> tuple[np.ndarray, np.ndarray, dict]:
    """:func:`block_krylov_eigh` in float64 from ``start`` (m x c), to
    ``tol`` x :data:`WARM_TOL_FRACTION`; at most :data:`WARM_RESTARTS` restarts
    (``info["converged"]`` says whether they sufficed).

    The block is the first k + :data:`WARM_RANDOM` columns of ``start`` and seeded
    random ones up to k + :data:`KRYLOV_OVERSAMPLING`: a start that spans an invariant
    subspace of A (exactly orthogonal to a leading eigenvector: the appended rows brought
    a new direction of their own) would otherwise converge at once to the wrong pairs.
    """
    m = A.shape[0]
    b = min(m, k + KRYLOV_OVERSAMPLING)
    start = np.asarray(start, dtype=np.float64)[:, :min(b, k + WARM_RANDOM)]
    if start.shape[1] < b:
        fill = np.random.default_rng(random_state).standard_normal((m, b - start.shape[1]))
        start = np.hstack([start, fill])
    return warm_operator_pairs(lambda X: A @ X, m, k, start, tol=tol)


def warm_operator_pairs(matmat: MatMat, m: int, k: int, v0: np.ndarray,
                        av0: np.ndarray | None = None, *, tol: float = KRYLOV_TOL,
                        threads: int | None = None) -> tuple[np.ndarray, np.ndarray, dict]:
    """The k leading pairs of a symmetric m x m operator (``matmat(V)`` = A V) from a
    start ``v0`` close to them (and its image ``av0``, for orthonormal columns): float64
    block Krylov, checked after every product, to ``tol`` x :data:`WARM_TOL_FRACTION`,
    at most :data:`WARM_RESTARTS` restarts of depth :data:`WARM_DEPTH`
    (``info["converged"]`` says whether they sufficed). ``threads``: BLAS threads of the
    products (default: the idle CPUs)."""
    # the basis algebra is on m x (a few b) blocks, far too small for BLAS threads, which
    # cost more waking and waiting than they save (the more so on a busy machine); only
    # the m x m products use them
    wide = idle_cpus() if threads is None else threads  # leading_eigh's rule

    def product(X: np.ndarray) -> np.ndarray:
        with blas_threads(wide):
            return matmat(X)

    with one_blas_thread():
        return block_krylov_eigh(product, m, k, depth=WARM_DEPTH,
                                 tol=tol * WARM_TOL_FRACTION, v0=v0, av0=av0,
                                 max_restarts=WARM_RESTARTS, check_each=True)


def leading_eigh(A: np.ndarray, k: int, *, random_state: int = 0,
                 tol: float = KRYLOV_TOL, complete: bool = True, dominant: int = 0,
                 dominant_start: np.ndarray | None = None, start: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray, dict]:
    """:func:`_leading_eigh` with as many BLAS threads as the machine has idle CPUs
    (:func:`dmlfe.compute.idle_cpus`): on a busy machine the threads of each product
    and factorisation would wait for CPUs the other processes hold."""
    with blas_threads(idle_cpus()):
        return _leading_eigh(A, k, random_state=random_state, tol=tol, complete=complete,
                             dominant=dominant, dominant_start=dominant_start, start=start)


def _leading_eigh(A: np.ndarray, k: int, *, random_state: int = 0,
                  tol: float = KRYLOV_TOL, complete: bool = True, dominant: int = 0,
                  dominant_start: np.ndarray | None = None, start: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray, dict]:
    """Leading k eigenpairs of a dense symmetric A (descending, signs not yet fixed).

    Small problems (m <= FULL_SPECTRUM_LIMIT) return the whole spectrum (all m values,
    k vectors) unless ``complete=False`` and k is a small part of an m above
    SUBSET_MIN; LAPACK's subset solver takes the rest up to KRYLOV_MIN_SIZE and a k
    whose Krylov basis would fill most of the space (:data:`KRYLOV_BASIS_FRACTION`);
    block Krylov the others.

    ``dominant``: how many leading eigenvalues may stand orders of magnitude above the
    rest (MVMD's label directions on text). A float32
    copy of A cannot resolve the rest below them, so on the block Krylov branch these
    pairs are computed first in float64 (a narrow block: their gap makes that a few
    products) and deflated from the float32 copy (:func:`_float32_copy`) that the
    block Krylov exploration or LAPACK's float32 subset solver works on; the float64
    check or refinement then starts from both blocks. A wrong guess costs only that
    narrow solve: the result is checked in float64 all the same. ``dominant_start``
    (m x g, optional): columns spanning those pairs' eigenvectors approximately (MVMD:
    its label factor), the start of their solve instead of a random block.

    ``start`` (m x c, optional): columns close to the leading eigenvectors (the Ritz
    block of a fit on the problem before an append, zero on the appended rows). On the
    block Krylov branch the pairs are then sought in float64 from it, without the
    dominant solve and the float32 exploration, to a tighter residual
    (:data:`WARM_TOL_FRACTION`); a start that
    does not converge within :data:`WARM_RESTARTS` restarts is dropped (the products it
    cost are counted) and the pairs are computed as without it. ``info["warm_start"]``
    says whether it was used.
    """
    m = A.shape[0]
    k = min(int(k), m)
    if wants_full_spectrum(m, k, complete):
        w, V = _descending(*sla.eigh(A, check_finite=False))
        return w, V[:, :k], {"method": "lapack-full"}
    wasted = 0
    if start is not None and np.shape(start)[0] == m and krylov_pays(m, k):
        w, V, info = _warm_pairs(A, k, tol, start, random_state)
        if info["converged"] and w.size == k:  # not a start spanning fewer than k columns
            info.update(method="block-krylov", warm_start=True, dominant=0)
            return w, V, info
        wasted = info["products"]
    # both float32 branches below (m > FULL_SPECTRUM_LIMIT) deflate the dominant pairs
    locked, products64 = _dominant_block(A, k, dominant, tol, random_state, dominant_start) \
        if m > FULL_SPECTRUM_LIMIT else (None, 0)
    if not krylov_pays(m, k):
        if m > FULL_SPECTRUM_LIMIT:
            checked = _float32_subset(A, k, tol, locked)
            if checked is not None:
                checked[2]["products"] += products64
                checked[2]["dominant"] = 0 if locked is None else locked.shape[1]
                return checked
        w, V = sla.eigh(A, subset_by_index=[m - k, m - 1], check_finite=False)
        w, V = _descending(w, V)
        return w, V, {"method": "lapack-subset"}
    # Mixed precision: the Krylov space is explored in float32 (half the work of every
    # big product), then its Ritz block is checked in float64 -- one product and a
    # Rayleigh-Ritz step, more restarts in float64 only if the float64 residuals are
    # not below tol. The eigenpairs returned are float64 Rayleigh-Ritz pairs whose
    # residuals were measured in float64, so the accuracy is that of a float64 run in
    # less time (benchmarks/scale.py); the price is a float32 copy of A (m^2 x 4 bytes).
    g = 0 if locked is None else locked.shape[1]
    rough = _float32_ritz_block(A, k - g, tol, random_state, locked)
    v0 = _after_locked(locked, rough["ritz"])
    w, V, info = block_krylov_eigh(lambda X: A @ X, m, k, depth=REFINE_DEPTH, tol=tol,
                                   v0=v0, first_depth=1)
    info["products"] += rough["products"] + products64 + wasted
    info["float32_products"] = rough["products"]
    info["dominant"] = g
    info["method"] = "block-krylov"
    info["warm_start"] = False
    if not info["converged"]:
        warnings.warn(
            f"the block Krylov eigensolver stopped after {info['restarts']} restarts with a "
            f"relative residual of {info['max_residual']:.1e}, above tol = {tol:g}: the "
            f"{k} leading eigenpairs of this {m} x {m} problem are approximate (raise tol, "
            "or ask for fewer components)", RuntimeWarning, stacklevel=2)
    return w, V, info


def leading_eigh_threshold(A: np.ndarray, t: float, total: float, max_k: int,
                           **kw: object) -> tuple[np.ndarray, np.ndarray, dict]:
    """Leading pairs of A until their eigenvalues sum to ``t`` x ``total``, at most ``max_k``.

    For a threshold n_components (mvmd eq. 15, mddm eq. 9): rounds of
    :func:`leading_eigh` (keyword arguments ``kw``) as
    :func:`~dmlfe.solvers.dimension.threshold_rounds` grows them: a threshold that 32
    pairs reach costs one small round instead of a large solve, one that they do not
    reach takes a larger round next. ``info["rounds"]`` lists the k of each round.
    """
    m = A.shape[0]
    max_k = min(int(max_k), m)
    if wants_full_spectrum(m, max_k, bool(kw.get("complete", True))):
        # every eigenvalue is computed anyway: one round, all max_k vectors
        w, V, info = leading_eigh(A, max_k, **kw)
        info["rounds"] = [max_k]
        return w, V, info

    def solve(k: int) -> tuple[np.ndarray, float, tuple[np.ndarray, np.ndarray, dict]]:
        w, V, info = leading_eigh(A, k, **kw)
        return w, total, (w, V, info)

    (w, V, info), rounds = threshold_rounds(solve, t, max_k)
    info["rounds"] = rounds
    return w, V, info


def leading_pairs(A: np.ndarray, n_components: int | float, k: int, total: float,
                  **kw: object) -> tuple[np.ndarray, np.ndarray, dict]:
    """The pairs a fit needs: k of them for a fixed d (an int ``n_components``), for a
    threshold only as many as it needs, at most k (:func:`leading_eigh_threshold`, with
    ``total`` = tr(A)). Keyword arguments go to :func:`leading_eigh`."""
    if isinstance(n_components, int):
        return leading_eigh(A, k, **kw)
    return leading_eigh_threshold(A, float(n_components), total, k, **kw)


def cholesky_reduce(A: np.ndarray, B: np.ndarray, L: np.ndarray | None = None,
                    overwrite_a: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(C, L): B = L L^T and C = L^{-1} A L^{-T}, so A p = lambda B p <=> C u = lambda u.

    LAPACK's ``dsygst`` forms C from one triangle of the symmetric A (its upper one, as
    stored in C order) at about half the flops of two triangular solves with m
    right-hand sides, and in A's memory, without three m x m temporaries (MLSI, MLDA,
    DMLDA on the dual route). C comes back C-ordered and exactly symmetric.

    ``L``, B's lower Cholesky factor when the caller has it, is not computed again.
    ``overwrite_a``: A (C-ordered float64) may hold C on return (no copy of it).
    """
    if L is None:
        L = sla.cholesky(B, lower=True, check_finite=False)
    C = np.array(A, dtype=np.float64, order="C", copy=not overwrite_a)
    # C^T is F-ordered: LAPACK's lower triangle of it is C's upper one, reduced in place
    _, info = sla.lapack.dsygst(C.T, L, itype=1, lower=1, overwrite_a=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"LAPACK dsygst failed (info {info})")
    return mirror_upper(C), L


def small_pencil(S: np.ndarray, G: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lambda, G U / sqrt(lambda)) for the eigenpairs (lambda, U) of the small symmetric S.

    The last step of every q x q reduction: S = F^T B^{-1} F and G = B^{-1} F (or their
    n-space forms). Eigenvalues descending and clipped at 0; columns of zero
    eigenvalues are zero. Signs are not fixed here.
    """
    w, U = np.linalg.eigh(0.5 * (S + S.T))
    order = np.argsort(w, kind="stable")[::-1]
    w = np.clip(w[order], 0.0, None)
    scale = np.zeros_like(w)
    np.divide(1.0, np.sqrt(w), out=scale, where=w > 0)
    return w, (G @ U[:, order]) * scale


def lowrank_generalized(F: np.ndarray, solve_B: Callable[[np.ndarray], np.ndarray]
                        ) -> tuple[np.ndarray, np.ndarray]:
    """All non-zero eigenpairs of F F^T p = lambda B p from a q x q problem.

    With G = B^{-1} F (``solve_B(F)``), the non-zero eigenvalues are those of the
    symmetric q x q matrix F^T G, and for F^T G u = lambda u the vector
    p = G u / sqrt(lambda) satisfies F F^T p = lambda B p and p^T B p = 1.

    Returns
    -------
    (eigenvalues descending (q,), P (m, q) with B-orthonormal columns; columns of zero
    eigenvalues are zero), signs fixed.
    """
    G = solve_B(F)
    w, P = small_pencil(F.T @ G, G)
    return w, flip_signs(P)
