"""A Krylov space for an operator K that is self-adjoint in a semi-definite inner
product <x, x'> = x^T W x', for :class:`~dmlfe.linalg.krylov.ThickRestartLanczos`.

A vector is held as a pair of blocks of rows, (x, r) with r = W x: the inner product
is x^T r' (:meth:`PencilSpace.inner`), ``apply`` maps a block to the pair of its image
under K, ``draw`` makes a start block and ``refresh`` makes r again from x
(and may replace x by another vector of the same class modulo W's null space, which no
inner product and no image sees). The dual route's operator form
(:func:`dmlfe.solvers.dual.solve_dual`, DMLDA) has x = X p, the n-space image of a
feature-space vector p, and W = M_a, the n-space middle matrix of the pencil's
A = X^T M_a X: <x, x'> = p^T A p', in which both of its operators (B^{-1} A and
(kappa B - A)^{-1} A) are self-adjoint.

Orthonormalisation, step by step (the Euclidean one of
:class:`~dmlfe.linalg.krylov.ArraySpace` takes Householder QR, which has no W-form):

1. two classical Gram-Schmidt rounds of w = K v against the basis and v;
2. a W-orthonormal basis of what is left by the eigenvectors of its column-scaled Gram
   matrix (SVQB, Stathopoulos & Wu, SIAM J. Sci. Comput. 23, 2002), directions at
   round-off level dropped;
3. one more Gram-Schmidt round and :func:`~dmlfe.linalg.krylov.unit_factor` on the
   block's Gram matrix;
4. ``refresh``: r of the new block made again from x, so that the two parts never
   drift apart through the projections' linear combinations.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dmlfe.linalg.krylov import unit_factor

#: A column of w whose B-norm after its projections is at most this fraction of the
#: largest column of K v is round-off (the Krylov space is exhausted there): dropped.
DROP = 1e-13
#: Eigenvalues of the column-scaled Gram matrix at most this fraction of its largest
#: are directions the block does not resolve in float64 (their B-inner products would
#: be round-off): dropped.
SVQB_DROP = 1e-12

#: Largest departure of a refreshed block from W-orthonormality (to the basis and
#: within itself) that a step accepts; above it the step raises :class:`Breakdown`.
ORTH_LIMIT = 1e-8

Pair = tuple[np.ndarray, np.ndarray]


class Breakdown(ArithmeticError):
    """The refreshed block is no longer W-orthonormal (a safeguard: with r made again
    from x at every step the parts cannot drift apart)."""


class PencilSpace:
    """A :class:`~dmlfe.linalg.krylov.KrylovSpace` of K in the W-inner product, its
    vectors pairs (x, r) of ``rows`` rows each (see the module docstring), in this
    process.

    Parameters
    ----------
    apply : callable
        ``apply(x, r)`` -> the pair of K x for a block x (r = W x).
    draw : callable
        ``draw(width, seed)`` -> the pair of a block of ``width`` start vectors.
    refresh : callable
        ``refresh(x)`` -> the pair of x (r made again from x).
    rows : int
        Rows of each part.
    dim : int
        Dimension of the space K acts on (at most this many pairs).
    """

    def __init__(self, apply: Callable[[np.ndarray, np.ndarray], Pair],
                 draw: Callable[[int, int], Pair], refresh: Callable[[np.ndarray], Pair],
                 rows: int, dim: int) -> None:
        self.apply, self.draw, self.refresh = apply, draw, refresh
        self.rows, self.dim = int(rows), int(dim)
        self.n_passes = 0
        empty = np.zeros((self.rows, 0))
        self.basis: Pair = (empty, empty)
        self.v: Pair = (empty, empty)

    @staticmethod
    def inner(U: Pair, W: Pair) -> np.ndarray:
        """<U, W> = x_U^T r_W."""
        return U[0].T @ W[1]

    def vectors(self, Y: np.ndarray) -> Pair:
        """The pair of the vectors basis @ Y."""
        return self.basis[0] @ Y, self.basis[1] @ Y

    @staticmethod
    def _scale(w: Pair) -> float:
        diag = np.einsum("ij,ij->j", w[0], w[1])
        return float(np.sqrt(max(float(diag.max(initial=0.0)), 0.0)))

    @staticmethod
    def _minus(w: Pair, V: Pair, C: np.ndarray) -> Pair:
        return w[0] - V[0] @ C, w[1] - V[1] @ C

    def _orthonormalise(self, w: Pair, C1: np.ndarray, scale: float
                        ) -> tuple[np.ndarray, np.ndarray]:
        V = (np.hstack([self.basis[0], self.v[0]]), np.hstack([self.basis[1], self.v[1]]))
        if V[0].shape[1]:
            w = self._minus(w, V, C1)
            again = self.inner(V, w)
            w = self._minus(w, V, again)
            C1 = C1 + again
        gram = self.inner(w, w)
        gram = 0.5 * (gram + gram.T)
        norms = np.sqrt(np.clip(np.diag(gram), 0.0, None))
        live = norms > DROP * max(scale, np.finfo(float).tiny)
        inv = np.zeros_like(norms)
        np.divide(1.0, norms, out=inv, where=live)
        lam, U = np.linalg.eigh(inv[:, None] * gram * inv[None, :])
        keep = lam > SVQB_DROP * max(float(lam.max(initial=0.0)), np.finfo(float).tiny)
        lam, U = lam[keep][::-1], U[:, keep][:, ::-1]
        root = np.sqrt(lam)
        mix = inv[:, None] * U / root
        q = (w[0] @ mix, w[1] @ mix)
        R1 = (root[:, None] * U.T) * norms[None, :]  # w = q R1 on the kept directions
        C2 = self.inner(V, q)
        q = self._minus(q, V, C2)
        X, R2 = unit_factor(self.inner(q, q))
        v = self.refresh(q[0] @ X)
        loss = max(float(np.abs(self.inner(V, v)).max(initial=0.0)),
                   float(np.abs(self.inner(v, v) - np.eye(v[0].shape[1])).max(initial=0.0)))
        if loss > ORTH_LIMIT:
            raise Breakdown(f"a refreshed block departs from W-orthonormality by {loss:.1e}")
        self.basis, self.v = V, v
        return C1 + C2 @ R1, R2 @ R1

    def start(self, width: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        w = self.draw(width, seed)
        m = self.basis[0].shape[1] + self.v[0].shape[1]
        return self._orthonormalise(w, np.zeros((m, w[0].shape[1])), self._scale(w))

    def step(self, ahead: int = 0) -> tuple[np.ndarray, np.ndarray]:
        self.n_passes += 1
        w = self.apply(*self.v)
        C1 = np.vstack([self.inner(self.basis, w), self.inner(self.v, w)])
        return self._orthonormalise(w, C1, self._scale(w))

    def settle(self) -> None:
        return None

    def restart(self, Y: np.ndarray) -> None:
        self.basis = self.vectors(Y)
