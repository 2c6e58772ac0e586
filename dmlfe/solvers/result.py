"""What every eigensolver returns, and the one sign rule its components follow.

The dense solvers (:mod:`dmlfe.solvers.dense`) and the matrix-free ones
(:mod:`dmlfe.solvers.matrix_free`) return the same :class:`EigenResult`, with
components made deterministic by :func:`flip_signs`, so refits (and the two
solver families) give identical models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


def flip_signs(V: np.ndarray) -> np.ndarray:
    """The sign rule: make the largest-|.| entry of every column positive.

    On ties the first (lowest row index) of the largest-magnitude entries decides,
    as scikit-learn's ``svd_flip`` does.

    Parameters
    ----------
    V : ndarray, shape (D, k)
        Eigenvectors as columns.

    Returns
    -------
    ndarray, shape (D, k)
        A new float64 array with every column multiplied by +1 or -1; ``V`` is
        not modified. An empty ``V`` gives an empty copy.
    """
    return flip_signs_inplace(np.array(V, dtype=np.float64))


def _column_extremes(V: np.ndarray, r0: int, r1: int, rows: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(largest |.| of each column of V[r0:r1], sign of its first occurrence there)."""
    k = V.shape[1]
    best, signs = np.full(k, -1.0), np.ones(k)
    for i in range(r0, r1, rows):
        slab = V[i:min(i + rows, r1)]
        # column maxima and minima reduce along contiguous rows; argmax down a column
        # of a C-ordered slab is several times slower
        hi, lo = slab.max(axis=0), slab.min(axis=0)
        mag = np.maximum(hi, -lo)
        better = mag > best
        if not better.any():
            continue
        s = np.where(hi >= -lo, 1.0, -1.0)
        tie = np.flatnonzero(better & (hi == -lo) & (hi > 0))
        if tie.size:  # +m and -m both occur: the first of them decides
            sub = slab[:, tie]
            s[tie] = np.sign(sub[np.argmax(np.abs(sub), axis=0), np.arange(tie.size)])
        best[better], signs[better] = mag[better], s[better]
    return best, signs


def expand_rows(kept: np.ndarray, rows: np.ndarray, n_rows: int) -> np.ndarray:
    """The (n_rows, d) C-ordered array, in ``kept``'s dtype, whose rows ``rows`` are
    ``kept`` (len(rows) x d) and whose other rows are zero: components kept on the used
    columns (:attr:`EigenResult.columns`) made whole."""
    full = np.zeros((int(n_rows), kept.shape[1]), dtype=kept.dtype)
    full[rows] = kept
    return full


def flip_signs_inplace(V: np.ndarray, rows: int = 1 << 13) -> np.ndarray:
    """:func:`flip_signs` of a D x k float64 V in place (0.8 GB at D = 2^20, k = 100).

    |V| is taken a slab of ``rows`` rows at a time, so no D x k temporary is made; the
    first entry of largest magnitude in each column wins. Large V is read by the
    driver's threads (:func:`dmlfe.compute.driver_threads`), a range of rows each
    (numpy's reductions release the GIL); the ranges are then compared in order, so
    the earliest of equal magnitudes still wins.
    """
    from dmlfe.compute import driver_threads, in_threads

    D = V.shape[0]
    threads = driver_threads() if D >= 4 * rows else 1
    bounds = np.linspace(0, D, threads + 1).astype(int)
    parts: list[tuple[np.ndarray, np.ndarray]] = [(np.empty(0), np.empty(0))] * threads

    def extremes(t: int) -> None:
        parts[t] = _column_extremes(V, int(bounds[t]), int(bounds[t + 1]), rows)

    in_threads(extremes, range(threads), threads=threads)
    best, signs = np.full(V.shape[1], -1.0), np.ones(V.shape[1])
    for b, s in parts:
        better = b > best
        best[better], signs[better] = b[better], s[better]

    def scale(t: int) -> None:
        V[bounds[t]:bounds[t + 1]] *= signs

    in_threads(scale, range(threads), threads=threads)
    return V


@dataclass
class EigenResult:
    """Solution of a trace template (or the leading eigenpairs of an operator).

    Attributes
    ----------
    components : ndarray, shape (D, d)
        Projection P: the first d eigenvectors as columns (orthonormal, or
        B-orthonormal for a generalised problem), signs fixed by
        :func:`flip_signs`.
    eigenvalues : ndarray
        Every computed eigenvalue, descending: D of them for a dense solve, r on
        the thin-SVD path, k for a matrix-free solve of the k leading pairs.
    n_components : int
        d, the number of columns of ``components``.
    n_genuine : int
        How many of ``eigenvalues`` are above round-off
        (:func:`dmlfe.solvers.dimension.n_genuine`).
    solver : str
        Which solver produced it: "eigh", "eigh_generalized", "thin_svd",
        "randomized-subspace", "block-krylov", "lanczos-arpack", "eigh-partial",
        "eigh-generalized-partial", "lowrank-generalized" or a "dual-*" solver.
    regularization : float
        Multiple of I added to the constraint matrix B (0.0 when none was needed).
    n_passes : int
        Distributed passes over X that the solver made, not counting the
        statistics pass (0 for the dense solvers).
    converged : bool
        Whether the solver met its convergence criterion (always True for the
        dense solvers).
    residuals : ndarray or None
        ||A u_i - lambda_i u_i|| of each computed pair, when measured.
    trace : float or None
        tr(A), the sum of all eigenvalues, when only the leading eigenpairs were
        computed (it is the denominator of a threshold n_components then).
    info : dict
        Solver details (block width, tolerance, seed, ...).
    columns : ndarray or None
        None: ``components`` has all D rows. Otherwise the sorted columns of X (of D)
        that its rows are; the components are exactly zero on the others (columns no
        document of the fit uses: the dual and matrix-free routes and the thin SVD leave
        them out).
    ritz : ndarray or None
        The randomized matrix-free solver's last block of Ritz vectors (D x (k +
        oversampling), on the rows ``columns`` names), when asked for: the warm start of
        a later solve on more documents (:func:`dmlfe.solvers.matrix_free.randomized_eigsh`);
        on the dual route, the n x b Ritz block of its row-space problem
        (:attr:`dmlfe.solvers.dual.DualSolution.ritz`).
    ritz_image : ndarray or None
        With ``ritz``: its image under the solver's operator, A ritz (the randomized
        solver), or -- after :func:`dmlfe.solvers.matrix_free.solve_matrix_free` -- the
        scatter part X^T X ritz of it (uncentred, unscaled): a later solve on more
        documents adds the new rows' part and starts without a pass.
    """

    components: np.ndarray
    eigenvalues: np.ndarray
    n_components: int
    n_genuine: int
    solver: str
    regularization: float = 0.0
    n_passes: int = 0
    converged: bool = True
    residuals: np.ndarray | None = None
    trace: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    columns: np.ndarray | None = None
    ritz: np.ndarray | None = None
    ritz_image: np.ndarray | None = None

    def max_own_residual(self) -> float | None:
        """max ||A p_i - lambda_i p_i|| / |lambda_i| over the n_components kept, where
        ``residuals`` were measured (the matrix-free solvers); None otherwise.

        The matrix-free ``tol`` is relative to lambda_1 (each iteration is a pass), so
        pairs far below it -- MVMD's tail under its label part -- can be ``converged``
        and still loose against their own eigenvalue: this says how loose. Pairs of a
        zero eigenvalue have no relative residual and are left out.
        """
        if self.residuals is None:
            return None
        d = min(int(self.n_components), self.residuals.size)
        w = np.abs(np.asarray(self.eigenvalues[:d], dtype=np.float64))
        r = np.asarray(self.residuals[:d], dtype=np.float64)
        positive = w > 0
        return float(np.max(r[positive] / w[positive])) if positive.any() else None
