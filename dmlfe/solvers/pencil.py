"""A Krylov space for the pencil A p = lambda B p whose vectors are known only through
their coefficients and two images, for :class:`~dmlfe.solvers.krylov.ThickRestartLanczos`.

K = B^{-1} A is self-adjoint in the B-inner product <p, p'> = p^T B p'; thick-restart
block Lanczos on K with that inner product gives the pencil's leading pairs. Here a
vector is held as a stack of three blocks of rows, [c; x; r], whose meaning the caller
gives: the inner product is <u, u'> = x^T r' (:meth:`PencilSpace.inner`), ``apply``
maps a block to its image under K, ``draw`` makes a random start block and ``refresh``
recomputes x and r of a block from its coefficients c. The dual route's operator form
(:func:`dmlfe.solvers.dual.solve_dual`) has p = X^T c, x = G c (G = X X^T) and r the
n-space image of B p (B p = X^T r).

Orthonormalisation, step by step (the Euclidean one of
:class:`~dmlfe.solvers.krylov.ArraySpace` takes Householder QR, which has no B-form):

1. two classical Gram-Schmidt rounds of w = K v against the basis and v;
2. a B-orthonormal basis of what is left by the eigenvectors of its column-scaled Gram
   matrix (SVQB, Stathopoulos & Wu, SIAM J. Sci. Comput. 23, 2002), directions at
   round-off level dropped;
3. one more Gram-Schmidt round and :func:`~dmlfe.solvers.krylov.unit_factor` on the
   block's Gram matrix;
4. ``refresh``: x and r of the new block made again from c. The three parts are only
   linear combinations of each other's images, and a block made from the basis carries
   the basis's mismatch between them, times the projection's coefficients: without the
   refresh that mismatch grows from block to block and the inner product stops being
   symmetric.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dmlfe.solvers.krylov import unit_factor

#: A column of w whose B-norm after its projections is at most this fraction of the
#: largest column of K v is round-off (the Krylov space is exhausted there): dropped.
DROP = 1e-13
#: Eigenvalues of the column-scaled Gram matrix at most this fraction of its largest
#: are directions the block does not resolve in float64 (their B-inner products would
#: be round-off): dropped.
SVQB_DROP = 1e-12

#: Largest departure of a refreshed block from B-orthonormality (to the basis and
#: within itself) that a step accepts; above it the step raises :class:`Breakdown`.
ORTH_LIMIT = 1e-8

Block = Callable[[np.ndarray], np.ndarray]


class Breakdown(ArithmeticError):
    """The refreshed block is no longer B-orthonormal: the coefficients c carry a part
    that x and r do not see (for the dual route, the null space of a singular Gram),
    grown by the normalisations until its round-off in x = G c is no longer small."""


class PencilSpace:
    """A :class:`~dmlfe.solvers.krylov.KrylovSpace` of K = B^{-1} A in the B-inner
    product, its vectors stacks [c; x; r] of ``rows`` rows each (see the module
    docstring), in this process.

    Parameters
    ----------
    apply : callable
        ``apply(V)`` -> the stack of K V for a stack V.
    draw : callable
        ``draw(width, seed)`` -> a stack of ``width`` random vectors.
    refresh : callable
        ``refresh(V)`` -> V with x and r made again from c.
    rows : int
        Rows of each part.
    dim : int
        Dimension of the space K acts on (at most this many pairs).
    """

    def __init__(self, apply: Block, draw: Callable[[int, int], np.ndarray],
                 refresh: Block, rows: int, dim: int) -> None:
        self.apply, self.draw, self.refresh = apply, draw, refresh
        self.rows, self.dim = int(rows), int(dim)
        self.n_passes = 0
        self.basis = np.zeros((3 * self.rows, 0))
        self.v = np.zeros((3 * self.rows, 0))

    def inner(self, U: np.ndarray, W: np.ndarray) -> np.ndarray:
        """<U, W> = x_U^T r_W."""
        n = self.rows
        return U[n:2 * n].T @ W[2 * n:]

    def coefficients(self, Y: np.ndarray) -> np.ndarray:
        """c of the vectors basis @ Y."""
        return self.basis[:self.rows] @ Y

    def _scale(self, w: np.ndarray) -> float:
        diag = np.einsum("ij,ij->j", w[self.rows:2 * self.rows], w[2 * self.rows:])
        return float(np.sqrt(max(float(diag.max(initial=0.0)), 0.0)))

    def _orthonormalise(self, w: np.ndarray, C1: np.ndarray, scale: float
                        ) -> tuple[np.ndarray, np.ndarray]:
        V = np.hstack([self.basis, self.v])
        if V.shape[1]:
            w = w - V @ C1
            again = self.inner(V, w)
            w -= V @ again
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
        q = w @ (inv[:, None] * U / root)
        R1 = (root[:, None] * U.T) * norms[None, :]  # w = q R1 on the kept directions
        C2 = self.inner(V, q)
        q -= V @ C2
        X, R2 = unit_factor(self.inner(q, q))
        v = self.refresh(q @ X)
        loss = max(float(np.abs(self.inner(V, v)).max(initial=0.0)),
                   float(np.abs(self.inner(v, v) - np.eye(v.shape[1])).max(initial=0.0)))
        if loss > ORTH_LIMIT:
            raise Breakdown(f"a refreshed block departs from B-orthonormality by {loss:.1e}")
        self.basis, self.v = V, v
        return C1 + C2 @ R1, R2 @ R1

    def start(self, width: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        w = self.draw(width, seed)
        m = self.basis.shape[1] + self.v.shape[1]
        return self._orthonormalise(w, np.zeros((m, w.shape[1])), self._scale(w))

    def step(self, ahead: int = 0) -> tuple[np.ndarray, np.ndarray]:
        self.n_passes += 1
        w = self.apply(self.v)
        C1 = self.inner(np.hstack([self.basis, self.v]), w)
        return self._orthonormalise(w, C1, self._scale(w))

    def settle(self) -> None:
        return None

    def restart(self, Y: np.ndarray) -> None:
        self.basis = self.basis @ Y
